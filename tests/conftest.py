"""Shared real infrastructure: one private MariaDB (ROW/FULL binlog) and one local SparkSession."""
from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("DBLOG_CREDENTIALS", str(ROOT / ".pytest-credentials.json"))
# no class-data-sharing archive in the suite (the session's JVM would dump it, slower, for the whole run);
# tests/test_session.py turns it on for its own drivers
os.environ.setdefault("DBLOG_SPARK_CDS", "0")
os.environ.setdefault("DBLOG_SPARK_CDS_DIR", str(ROOT / ".pytest-cds"))  # never the user's ~/.cache

from hypothesis import settings  # noqa: E402

from tests.support.local_mariadb import LocalMariaDB  # noqa: E402

# timings on this machine are noisy: no per-example deadline, a fixed seed for reproducible CI
settings.register_profile("dblog", deadline=None, derandomize=True, database=None)
settings.load_profile("dblog")

_names = itertools.count()


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    server = LocalMariaDB(tmp_path_factory.mktemp("mariadb"), server_id=1,
                          extra_flags=("--thread-stack=4M",)).start()  # the exact-cover checks build long SQL
    server.sql("CREATE USER 'dblog'@'%' IDENTIFIED BY 's3cret-Pa55'",
               "GRANT ALL PRIVILEGES ON *.* TO 'dblog'@'%'")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def source_uri(mariadb) -> str:
    """A URI with a password, so tests also prove the password never leaks into state or logs."""
    return mariadb.uri("dblog", "s3cret-Pa55")


@pytest.fixture
def db(mariadb):
    """A fresh database per test, so tests sharing the server never see each other's tables."""
    name = f"t{os.getpid()}_{next(_names)}"
    mariadb.sql(f"CREATE DATABASE {name}")
    return name


@pytest.fixture(scope="session")
def spark():
    from airflow_provider_dblog.local.session import local_session

    session = local_session("dblog-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session", autouse=True)
def _quiet_py4j_shutdown():
    """py4j logs at INFO while the interpreter tears down (after pytest closed its streams)."""
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)
