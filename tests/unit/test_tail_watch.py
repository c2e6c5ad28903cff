"""The tail's watch loop when Spark's JVM goes away (killed with the tail's process group by a SIGTERM,
or out of memory): a stop that was asked for ends cleanly, any other is one line."""
from __future__ import annotations

import pytest

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.spark.tail_queries import JVM_GONE, watch


class GoneQuery:
    """A streaming query whose JVM is gone after ``alive`` polls: every call then fails as Py4J does."""

    def __init__(self, alive: int):
        self.alive = alive
        self.stopped = False

    def _check(self):
        if self.alive <= 0:
            raise ConnectionRefusedError(111, "Connection refused")

    def exception(self):
        self._check()
        return None

    @property
    def isActive(self):
        self._check()
        self.alive -= 1
        return True

    def stop(self):
        self._check()
        self.stopped = True


def test_a_jvm_gone_after_a_requested_stop_is_a_clean_stop():
    stop = {"asked": False}

    def tick():
        stop["asked"] = True  # the SIGTERM handler sets the stop event; the JVM dies at the same moment

    query = GoneQuery(alive=1)
    assert watch(query, lambda: stop["asked"], tick) is query


def test_a_jvm_gone_without_a_stop_is_one_line():
    with pytest.raises(DblogError) as raised:
        watch(GoneQuery(alive=2), lambda: False, lambda: None)
    assert str(raised.value) == JVM_GONE and "\n" not in JVM_GONE


def test_a_running_query_is_stopped_when_asked():
    query = GoneQuery(alive=100)
    watch(query, lambda: True, lambda: None)
    assert query.stopped
