"""pytest fixtures for a private PostgreSQL: ``postgres`` (one cluster per session) and ``pg_db`` (a fresh
database per test). Use them from a test module with ``from tests.support.postgres_fixtures import postgres,
pg_db`` (or for the whole suite: ``pytest_plugins = ["tests.support.postgres_fixtures"]`` in tests/conftest.py).

The cluster's defaults are deliberately unlike the ones dblog reads with (``values.SESSION_SETTINGS``):
a non-UTC ``TimeZone``, ``DateStyle`` SQL/DMY, ``bytea_output`` escape, ``IntervalStyle`` sql_standard and
``extra_float_digits`` 0, so a connection that forgets to set its session settings shows up in the tests.
"""
from __future__ import annotations

import itertools
import os

import pytest

from tests.support.local_postgres import LocalPostgres

UNFRIENDLY_DEFAULTS = (
    "TimeZone=America/New_York",
    "DateStyle=SQL, DMY",
    "bytea_output=escape",
    "IntervalStyle=sql_standard",
    "extra_float_digits=0",
)

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    server = LocalPostgres(tmp_path_factory.mktemp("postgres"),
                           settings=(*UNFRIENDLY_DEFAULTS, "max_prepared_transactions=10")).start()  # 2PC tests
    yield server
    server.stop()


@pytest.fixture
def pg_db(postgres):
    """A fresh database per test (slots and publications are per database). Its replication slots that no
    process holds are dropped afterwards: the cluster has a few (``max_replication_slots``), and a slot left
    behind would also keep WAL for the rest of the run."""
    name = f"t{os.getpid()}_{next(_names)}"
    postgres.sql(f"CREATE DATABASE {name}")
    yield name
    postgres.sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 f"WHERE database = '{name}' AND NOT active")
