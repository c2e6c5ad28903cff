"""An available-now catch-up is skipped only when the binlog provably holds nothing of the table since
the tail's position, and the lake still converges (real MariaDB, real Spark local[2])."""
from __future__ import annotations

import time

import pytest

from airflow_provider_dblog.steps.health import check_tail_health, tail_progress
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.source.mysql.dialect import MySqlDialect
from airflow_provider_dblog.source.mysql.binlog import scan_table_events
from airflow_provider_dblog.steps.mirror import mirror
from airflow_provider_dblog.steps.plan import plan_table
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.store.state import StateDir
from airflow_provider_dblog.spark.executor import SparkExecutor
from airflow_provider_dblog.local.executor import LocalExecutor
from tests.support.lakecheck import assert_each_change_once, compare_mirror, lake_changes


def _position(mariadb) -> SourcePosition:
    file, pos = mariadb.sql("SHOW MASTER STATUS")[0][:2]
    return SourcePosition.at(file, pos)


def _flush_binary_logs(mariadb) -> None:
    """Rotate, then wait for the Binlog_checkpoint event MariaDB writes into the new file on its own
    once the old file's commits are durable: until then the server position may still move without
    any statement, and a test comparing positions afterwards would race with it."""
    mariadb.sql("FLUSH BINARY LOGS")
    file = mariadb.sql("SHOW MASTER STATUS")[0][0]
    deadline = time.time() + 30
    while not any(kind == "Binlog_checkpoint" and info == file
                  for _, _, kind, _, _, info in mariadb.sql(f"SHOW BINLOG EVENTS IN '{file}'")):
        assert time.time() < deadline, f"no Binlog_checkpoint for {file} after 30 s"
        time.sleep(0.05)


def test_scan_sees_only_row_events_and_ddl_of_the_asked_table(mariadb, db):
    mariadb.sql(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v INT)", f"CREATE TABLE {db}.`a.b` (id INT PRIMARY KEY)",
                f"CREATE TABLE {db}.ab (id INT PRIMARY KEY)")
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    try:
        start = _position(mariadb)
        mariadb.sql(f"INSERT INTO {db}.`a.b` VALUES (1)", f"INSERT INTO {db}.ab VALUES (1)",
                    f"ALTER TABLE {db}.ab ADD COLUMN w INT")  # DDL of another table
        middle = _position(mariadb)
        mariadb.sql(f"ALTER TABLE {db}.a ADD COLUMN w INT")  # no row event, but the tail must follow it
        altered = _position(mariadb)
        scan = scan_table_events(dialect.client, middle, altered, [f"{db}.a"])
        assert not scan.clean and "DDL statement" in scan.reason
        mariadb.sql(f"INSERT INTO {db}.a VALUES (1, 1, 1)")
        end = _position(mariadb)
        mariadb.sql(f"UPDATE {db}.ab SET id = 2")
        scan = scan_table_events(dialect.client, start, middle, [f"{db}.a"])
        assert scan.clean and scan.events > 0
        scan = scan_table_events(dialect.client, altered, end, [f"{db}.a"])
        assert not scan.clean and f"{db}.a at " in scan.reason
        assert scan_table_events(dialect.client, altered, end, [f"{db}.A"]).clean is False  # case-insensitive
        assert scan_table_events(dialect.client, end, _position(mariadb), [f"{db}.a"]).clean
        assert scan_table_events(dialect.client, end, end, [f"{db}.a"]).clean
        # the bound: past max_events the scan gives up (the caller then runs the query)
        scan = scan_table_events(dialect.client, start, middle, [f"{db}.a"], max_events=3, page=2)
        assert not scan.clean and "more than 3" in scan.reason
        # across a rotation: a later file is scanned too
        mariadb.sql("FLUSH BINARY LOGS")
        mariadb.sql(f"DELETE FROM {db}.a")
        after = _position(mariadb)
        assert after.seq > end.seq
        assert not scan_table_events(dialect.client, end, after, [f"{db}.a"]).clean
        assert scan_table_events(dialect.client, end, after, [f"{db}.zz"]).clean
        # every table in one pass, each from its own floor: a change before a table's floor is not its
        scans = dialect.scan_each({f"{db}.a": start, f"{db}.ab": start, f"{db}.a.b": middle, f"{db}.zz": start,
                                   f"{db}.late": after}, after)
        assert not scans[f"{db}.a"].clean and "DDL statement" in scans[f"{db}.a"].reason
        assert not scans[f"{db}.ab"].clean and f"{db}.ab at " in scans[f"{db}.ab"].reason
        assert scans[f"{db}.a.b"].clean and scans[f"{db}.zz"].clean and scans[f"{db}.late"].clean
        assert not dialect.scan_each({f"{db}.ab": middle}, after)[f"{db}.ab"].clean  # the UPDATE after end
    finally:
        dialect.close()


def _loaded(mariadb, db, spark, tmp_path, rows=3_000):
    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
                f"CREATE TABLE {db}.other (id INT PRIMARY KEY, v INT)")
    mariadb.sql(f"INSERT INTO {db}.t SELECT seq, CONCAT('r', seq), seq FROM seq_1_to_{rows}", db=db)
    table, state, sink = f"{db}.t", str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=1_000, batch_size=10)
    for batch in StateDir(state).batches():
        snapshot_batch(state, batch.index, sink, executor=SparkExecutor(spark))
    build_offsets(state)
    return table, state, sink


def _assert_converged(spark, state, sink, table, port, out):
    mirror(state, sink, table, str(out))
    problems = compare_mirror(str(out), port, table)
    assert not problems, problems[:5]


@pytest.mark.slow
def test_skip_without_checkpoint_then_tail_converges(mariadb, db, spark, tmp_path):
    """(a) nothing since the snapshot: no query, no stream directory, the mirror still works; a change
    of ANOTHER table is skipped too, a change of the table is read, from where the check ended."""
    table, state, sink = _loaded(mariadb, db, spark, tmp_path)
    min_hw = StateDir(state).offsets()[table].min_hw
    summary = run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert summary["rows"] == {table: 0} and table in summary["skipped"]
    assert summary["lag"][table]["offset"] == summary["skipped"][table]
    assert len(lake_changes(sink, table)) == 0 and StateDir(state).checkpoint() == ("none", None)
    _assert_converged(spark, state, sink, table, mariadb.port, tmp_path / "m0")

    # (b) changes of another table only: still skipped, and the recorded position moves on
    mariadb.sql(f"INSERT INTO {db}.other VALUES (1, 1)")
    _flush_binary_logs(mariadb)
    mariadb.sql(f"UPDATE {db}.other SET v = 2")
    summary = run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert table in summary["skipped"]
    resume = StateDir(state).resume_position(table, min_hw)
    assert resume > min_hw and resume.seq > min_hw.seq  # an idle table does not pin the old binlog file
    health = check_tail_health(state, _position(mariadb), max_stall_seconds=1, tables=[table])
    assert health[table]["behind"] is False and "catch-up check" in health[table]["from"]

    # (b) a change of this table: the query runs, from the recorded position, and the lake converges
    mariadb.sql(f"UPDATE {table} SET v = 'changed' WHERE id <= 5", f"DELETE FROM {table} WHERE id > 2990",
                f"INSERT INTO {table} VALUES (5000, 'new', 1)")
    summary = run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert "skipped" not in summary and summary["rows"][table] == 5 + 10 + 1
    kind, position = StateDir(state).checkpoint()
    assert kind == "committed" and position == _position(mariadb)
    assert StateDir(state).tail_positions()[table][0] == _position(mariadb)
    stream = lake_changes(sink, table)
    assert len(stream) == 16 and min(stream["_pos"].to_pylist()) > resume.encode()
    _assert_converged(spark, state, sink, table, mariadb.port, tmp_path / "m1")


@pytest.mark.slow
def test_an_idle_table_is_skipped_across_rotations_whatever_the_checkpoint_holds(mariadb, db, spark, tmp_path):
    """(c) with a checkpoint: nothing new of the table -> skipped, in the current binlog file or after a
    rotation (the checkpoint keeps its old offset); the next query reads the table from where the check
    ended, not from the checkpoint's offset, and the lake converges."""
    table, state, sink = _loaded(mariadb, db, spark, tmp_path)
    mariadb.sql(f"UPDATE {table} SET n = -n WHERE id <= 3")
    assert "skipped" not in run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    _, checkpoint = StateDir(state).checkpoint()

    mariadb.sql(f"INSERT INTO {db}.other VALUES (7, 7)")
    summary = run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert table in summary["skipped"] and summary["rows"] == {table: 0}
    assert StateDir(state).checkpoint() == ("committed", checkpoint)
    progress, _, origin = tail_progress(state, table)
    assert progress == _position(mariadb) and "catch-up check" in origin

    _flush_binary_logs(mariadb)
    summary = run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert table in summary["skipped"] and StateDir(state).checkpoint() == ("committed", checkpoint)
    rotated = _position(mariadb)
    assert rotated.seq > checkpoint.seq and tail_progress(state, table)[0] == rotated

    mariadb.sql(f"DELETE FROM {table} WHERE id = 1")
    summary = run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert "skipped" not in summary and summary["rows"] == {table: 1}
    kind, moved = StateDir(state).checkpoint()
    assert kind == "committed" and moved == _position(mariadb)
    assert sum(p > rotated.encode() for p in lake_changes(sink, table)["_pos"].to_pylist()) == 1
    assert table in run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))["skipped"]
    _assert_converged(spark, state, sink, table, mariadb.port, tmp_path / "m")


@pytest.mark.slow
def test_small_cold_catch_ups_run_in_the_driver_then_the_stream_continues(mariadb, db, spark, tmp_path):
    """Without a checkpoint, a catch-up within the byte limit is read in the driver and committed to the
    lake; a second one continues from where it ended; a crash before the record reruns without adding a
    second copy; the streaming query then starts where they ended. The mirror equals the source after
    each step, and no change is written twice."""
    table, state, sink = _loaded(mariadb, db, spark, tmp_path)
    min_hw = StateDir(state).offsets()[table].min_hw
    positions = StateDir(state).files
    before = positions.read_json(StateDir.TAIL_POSITIONS) if positions.exists(StateDir.TAIL_POSITIONS) else None
    mariadb.sql(f"UPDATE {table} SET v = 'one' WHERE id <= 100", f"DELETE FROM {table} WHERE id BETWEEN 500 AND 509")
    summary = run_tail(state, sink, available_now=True, executor=LocalExecutor("dblog-test", 1 << 20, spark=spark))
    assert table in summary["caught_up_in_driver"] and summary["rows"][table] == 110
    assert StateDir(state).checkpoint() == ("none", None) and assert_each_change_once(sink, table) == 110
    _assert_converged(spark, state, sink, table, mariadb.port, tmp_path / "m1")

    # killed after the lake commit, before the record: the rerun adds no second copy
    if before is None:
        positions.delete(StateDir.TAIL_POSITIONS)
    else:
        positions.write_json(StateDir.TAIL_POSITIONS, before)
    assert StateDir(state).resume_position(table, min_hw) < _position(mariadb), "the record was not undone"
    run_tail(state, sink, available_now=True, executor=LocalExecutor("dblog-test", 1 << 20, spark=spark))
    assert assert_each_change_once(sink, table) == 110

    # a second small catch-up continues from the recorded position
    mariadb.sql(f"UPDATE {table} SET n = -n WHERE id BETWEEN 50 AND 149", f"INSERT INTO {table} VALUES (7000, 'x', 7)")
    summary = run_tail(state, sink, available_now=True, executor=LocalExecutor("dblog-test", 1 << 20, spark=spark))
    assert summary["rows"][table] == 101
    assert StateDir(state).resume_position(table, min_hw) == _position(mariadb)  # the next read starts at now
    assert assert_each_change_once(sink, table) == 211

    # a limit below the range size leaves it to the streaming query, which starts after the catch-ups
    mariadb.sql(f"UPDATE {table} SET v = 'three' WHERE id <= 30")
    summary = run_tail(state, sink, available_now=True, executor=LocalExecutor("dblog-test", 10, spark=spark))
    assert "caught_up_in_driver" not in summary and summary["rows"][table] == 30
    assert assert_each_change_once(sink, table) == 241
    _assert_converged(spark, state, sink, table, mariadb.port, tmp_path / "m2")
