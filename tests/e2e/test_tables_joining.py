"""Tables added while a continuous tail runs (real MariaDB, Spark local[2]): a table planned, snapshotted
and reported later (a wider pattern), or created at the source under the capture's pattern, joins the
running tail without stopping it; the other streams go on meanwhile, and a dropped table stops being
written while its lake tables stay."""
from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.steps.mirror import current_rows
from airflow_provider_dblog.steps.plan import capture_options, plan_tables
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.store.state import StateDir
from airflow_provider_dblog.spark.executor import SparkExecutor
from tests.support.lakecheck import compare_rows

pytestmark = pytest.mark.slow


def _snapshot_new(state, sink, spark, done: set) -> None:
    for batch in StateDir(state).batches():
        if batch.index not in done:
            snapshot_batch(state, batch.index, sink, executor=SparkExecutor(spark))
            done.add(batch.index)


def _continuous_tail(state, sink, spark) -> tuple[threading.Thread, threading.Event, dict]:
    """A continuous tail of every planned table in a thread: (thread, its stop event, its summary once done)."""
    stop = threading.Event()
    result: dict = {}
    tail = threading.Thread(target=lambda: result.update(run_tail(
        state, sink, available_now=False, trigger_seconds=0.5, executor=SparkExecutor(spark), stop_event=stop, table_scan_seconds=1)))
    tail.start()
    return tail, stop, result


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
    tail, stop, result = _continuous_tail(state, sink, spark)
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
    assert result["query_restarts"] == 0  # b joined the running query: a's stream never stopped
    assert current_rows(state, sink, f"{db}.gone").num_rows == 300  # dropped at the source: its lake stays


def test_a_table_created_while_the_tail_runs_is_captured(mariadb, db, spark, tmp_path):
    """A capture by pattern: a table created at the source while the continuous tail runs is planned,
    read and streamed by the tail itself; a created table without a key is left out with a log line."""
    mariadb.sql(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {db}.a SELECT seq, seq FROM {db}.seq_1_to_200")
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    source = SourceConfig.parse(mariadb.uri())
    plan_tables(source, [f"{db}.a"], state, chunk_size=100, options=capture_options(f"{db}.*", None, 100))
    _snapshot_new(state, sink, spark, set())
    build_offsets(state)
    tail, stop, result = _continuous_tail(state, sink, spark)
    try:
        mariadb.sql(f"CREATE TABLE {db}.created (id INT PRIMARY KEY, v VARCHAR(10))",
                    f"INSERT INTO {db}.created SELECT seq, CONCAT('v', seq) FROM {db}.seq_1_to_350",
                    f"CREATE TABLE {db}.nokey (v INT)", f"INSERT INTO {db}.nokey VALUES (1)")
        time.sleep(2)
        mariadb.sql(f"UPDATE {db}.created SET v = 'late' WHERE id % 7 = 0", f"UPDATE {db}.a SET v = 0 WHERE id < 20")
        assert not _wait_equal(mariadb, state, sink, f"{db}.created")
        assert not _wait_equal(mariadb, state, sink, f"{db}.a")
        assert tail.is_alive()
    finally:
        stop.set()
        tail.join(timeout=120)
    assert f"{db}.created" in result["rows"] and f"{db}.nokey" not in StateDir(state).tables()
    assert result["query_restarts"] == 0
    # a scheduled available-now tail (the dblog_tail DAG) captures a table created since, too
    mariadb.sql(f"CREATE TABLE {db}.later (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {db}.later SELECT seq, seq FROM {db}.seq_1_to_120", f"UPDATE {db}.a SET v = 5 WHERE id = 1")
    summary = run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert f"{db}.later" in summary["rows"]
    assert not _wait_equal(mariadb, state, sink, f"{db}.later", seconds=1)
    assert not _wait_equal(mariadb, state, sink, f"{db}.a", seconds=1)
