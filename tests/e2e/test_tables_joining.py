"""Tables added while a continuous tail runs (real MariaDB, Spark local[2]): a table planned, snapshotted
and reported later (a wider pattern) joins the running tail without stopping it; the first table's
stream goes on meanwhile, and a dropped table stops being written while its lake tables stay."""
from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.steps.mirror import current_rows
from airflow_provider_dblog.steps.plan import plan_tables
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.store.state import StateDir
from tests.support.lakecheck import compare_rows

pytestmark = pytest.mark.slow


def _snapshot_new(state, sink, spark, done: set) -> None:
    for batch in StateDir(state).batches():
        if batch.index not in done:
            snapshot_batch(state, batch.index, sink, spark=spark)
            done.add(batch.index)


def _wait_equal(mariadb, state, sink, table, seconds=90) -> list[str]:
    problems = ["not checked"]
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            problems = compare_rows(current_rows(state, sink, table), mariadb.port, table)
        except Exception as exc:  # noqa: BLE001 - the table's lake may not exist yet
            problems = [str(exc)]
        if not problems:
            return []
        time.sleep(1)
    return problems


def test_a_table_reported_later_joins_the_running_tail(mariadb, db, spark, tmp_path):
    for name in ("a", "b", "gone"):
        mariadb.sql(f"CREATE TABLE {db}.{name} (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO {db}.{name} SELECT seq, seq FROM {db}.seq_1_to_300")
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    source = SourceConfig.parse(mariadb.uri())
    plan_tables(source, [f"{db}.a", f"{db}.gone"], state, chunk_size=100)
    batches: set = set()
    _snapshot_new(state, sink, spark, batches)
    build_offsets(state)
    stop = threading.Event()
    result: dict = {}
    tail = threading.Thread(target=lambda: result.update(run_tail(
        state, sink, available_now=False, trigger_seconds=0.5, spark=spark, stop_event=stop, table_scan_seconds=1)))
    tail.start()
    try:
        mariadb.sql(f"UPDATE {db}.a SET v = -v WHERE id < 100", f"DROP TABLE {db}.gone")
        assert not _wait_equal(mariadb, state, sink, f"{db}.a")
        # the pattern widened: b is planned, snapshotted and reported while the tail runs
        plan_tables(source, [f"{db}.a", f"{db}.b"], state, chunk_size=100)
        _snapshot_new(state, sink, spark, batches)
        mariadb.sql(f"UPDATE {db}.b SET v = 0 WHERE id % 3 = 0")
        build_offsets(state)
        mariadb.sql(f"UPDATE {db}.b SET v = 7 WHERE id % 5 = 0", f"UPDATE {db}.a SET v = 1 WHERE id > 250",
                    f"DELETE FROM {db}.b WHERE id < 10")
        assert not _wait_equal(mariadb, state, sink, f"{db}.b")
        assert not _wait_equal(mariadb, state, sink, f"{db}.a")
        assert tail.is_alive()  # never stopped
    finally:
        stop.set()
        tail.join(timeout=120)
    assert set(result["rows"]) == {f"{db}.a", f"{db}.b", f"{db}.gone"}
    assert current_rows(state, sink, f"{db}.gone").num_rows == 300  # dropped at the source: its lake stays
