"""Packed batches and startup modes on real MariaDB and Spark local[2]: many small tables in a few
Spark jobs, a big table over several; captures that start at `latest`, a binlog position or a
timestamp hold exactly the rows changed since; bad startup input is one line and writes nothing."""
from __future__ import annotations

import json
import logging
import time

import pytest
from deltalake import DeltaTable

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.steps.plan import plan_tables, resolve_tables
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.store.state import StateDir
from airflow_provider_dblog.spark.executor import SparkExecutor
from tests.support.lakecheck import SEED_SQL, TYPES_DDL, compare_rows
from tests.support.cli import dblog, one_error_line

pytestmark = pytest.mark.slow
SMALL_DDL = "(id INT PRIMARY KEY, name VARCHAR(40) CHARACTER SET utf8mb4, amount DECIMAL(12,2), seen DATETIME(6))"


def current(sink, table):
    return DeltaTable(f"{sink}/{table}/current").to_pyarrow_table()


def small_table(mariadb, table, rows):
    mariadb.sql(f"CREATE TABLE {table} {SMALL_DDL}",
                f"INSERT INTO {table} SELECT seq, CONCAT('n ', seq, ' é'), seq * 1.25, '2024-01-01 00:00:00.000001' "
                f"+ INTERVAL seq SECOND FROM seq_1_to_{rows}", db=table.split(".")[0])


def test_small_tables_of_two_databases_share_batches_and_a_big_table_spreads(mariadb, db, spark, tmp_path, caplog):
    other = f"{db}_crm"
    mariadb.sql(f"CREATE DATABASE {other}")
    big = f"{db}.big"
    mariadb.sql(f"CREATE TABLE {big} {TYPES_DDL}", f"INSERT INTO {big} {SEED_SQL.format(n=5000)}", db=db)
    smalls = [f"{db}.s{i:02d}" for i in range(7)] + [f"{other}.c{i:02d}" for i in range(5)]
    for i, table in enumerate(smalls):
        small_table(mariadb, table, 20 + 15 * i)
    mariadb.sql(f"CREATE TABLE {other}.c_empty {SMALL_DDL}")  # an empty table packs too
    source = SourceConfig.parse(mariadb.uri())
    tables = resolve_tables(source, patterns=f"{db}.*,{other}.*")
    assert len(tables) == 14
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan = plan_tables(source, tables, state, chunk_size=1000, batch_rows=2500)
    batches = plan["batches"]
    assert plan["tables"][big]["chunks"] >= 5 and plan["tables"][big]["rows"] == 5000
    assert len(batches) < len(tables) / 2, batches
    assert sum(big in b["tables"] for b in batches) >= 2  # the big table spreads
    assert max(len(b["tables"]) for b in batches) >= 10  # the small ones share
    assert all(b["rows"] <= 2500 for b in batches)
    assert sorted((t, c) for b in batches for g in b["groups"] for c in g["chunks"] for t in [g["table"]]) == sorted(
        (t, c) for t in tables for c in range(plan["tables"][t]["chunks"]))
    assert any(b["label"].startswith(f"{len(b['tables'])} tables, ") for b in batches if len(b["tables"]) > 1)

    mariadb.sql(f"UPDATE {smalls[0]} SET amount = -1 WHERE id = 3", f"DELETE FROM {smalls[8]} WHERE id = 2",
                f"INSERT INTO {other}.c_empty VALUES (1, 'late', 1, NOW(6))")  # during the snapshot, in effect
    caplog.set_level(logging.INFO, logger="dblog")
    for batch in batches:
        snapshot_batch(state, batch["batch"], sink, executor=SparkExecutor(spark))
    assert any(f"snapshot: {big}: " in r.getMessage() and " chunks (all tables: " in r.getMessage()
               for r in caplog.records), "no per-table progress line"
    build_offsets(state)
    mariadb.sql(f"UPDATE {smalls[1]} SET name = 'after' WHERE id < 5", f"DELETE FROM {big} WHERE id % 50 = 0",
                f"INSERT INTO {smalls[11]} VALUES (9999, 'new', 2, NOW(6))")
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    for table in tables:
        problems = compare_rows(current(sink, table), mariadb.port, table)
        assert not problems, f"{table}: {problems[:5]}"


def _changes_after_start(mariadb, table):
    """Rows changed after the capture's start: two updates, an insert, a row inserted and deleted, and a
    delete of a row the lake never had. Returns the ids the lake must hold."""
    mariadb.sql(f"UPDATE {table} SET amount = amount + 100 WHERE id IN (5, 6)",
                f"INSERT INTO {table} VALUES (1000, 'new', 7, NOW(6)), (1001, 'gone', 8, NOW(6))",
                f"DELETE FROM {table} WHERE id IN (7, 1001)")
    return {5, 6, 1000}


def assert_holds_only(sink, mariadb, table, ids):
    lake = current(sink, table)
    assert set(lake["id"].to_pylist()) == ids
    expected_missing = {f"missing id {k}" for k in set(r[0] for r in mariadb.sql(f"SELECT id FROM {table}")) - ids}
    problems = compare_rows(lake, mariadb.port, table)
    assert set(problems) == expected_missing, [p for p in problems if p not in expected_missing][:5]


def test_latest_streams_only_the_changes_after_the_plan(mariadb, db, spark, tmp_path):
    table = f"{db}.t"
    small_table(mariadb, table, 50)
    mariadb.sql(f"UPDATE {table} SET name = 'before' WHERE id = 4")  # before the start: not in the lake
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("plan", "--source", mariadb.uri(), "--table", table, "--state", state, "--startup", "latest")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["batches"] == [] and plan["tables"][table]["startup"] == "latest"
    assert plan["tables"][table]["start_at"].startswith("mysql-bin.")
    ids = _changes_after_start(mariadb, table)
    report = build_offsets(state)
    assert report["tables"][table]["min_hw"] == plan["tables"][table]["start_at"]
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))  # a Spark streaming query
    assert_holds_only(sink, mariadb, table, ids)
    mariadb.sql(f"UPDATE {table} SET name = 'later' WHERE id = 9")
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert_holds_only(sink, mariadb, table, ids | {9})


def test_an_idle_latest_table_gets_empty_lake_tables(mariadb, db, tmp_path):
    table = f"{db}.idle"
    small_table(mariadb, table, 5)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", mariadb.uri(), "--table", table, "--state", state, "--sink", sink,
                           "--startup", "latest")
    assert code == 0, err
    assert json.loads(out)["snapshot"]["chunks_read"] == 0
    lake = current(sink, table)
    assert lake.num_rows == 0 and {"id", "name", "amount", "seen"} <= set(lake.column_names)


def _position(mariadb):
    file, pos = mariadb.sql("SHOW MASTER STATUS")[0][:2]
    return f"{file}:{pos}"


def _start(mariadb, mode):
    if mode == "position":
        return _position(mariadb)
    if mode == "gtid":
        return mariadb.sql("SELECT @@gtid_binlog_pos")[0][0]
    return str(int(time.time() * 1000))


@pytest.mark.parametrize("mode", ["position", "timestamp", "gtid"])
def test_a_capture_from_a_past_position_or_timestamp_holds_the_rows_changed_since(mariadb, db, tmp_path, mode):
    table = f"{db}.t"
    small_table(mariadb, table, 40)
    mariadb.sql(f"UPDATE {table} SET name = 'before' WHERE id = 3")
    time.sleep(1.1)  # the binlog stamps events to the second
    start = _start(mariadb, mode)
    time.sleep(1.1)
    ids = _changes_after_start(mariadb, table)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", mariadb.uri(), "--table", table, "--state", state, "--sink", sink,
                           "--startup", f"{mode}:{start}")
    assert code == 0, err
    plan = StateDir(state).table(table)
    assert str(plan.startup) == f"{mode}:{start}" and plan.start_at is not None
    if mode == "position":
        assert str(plan.start_at) == start
    assert_holds_only(sink, mariadb, table, ids)


def test_snapshot_only_reads_the_tables_and_does_not_tail(mariadb, db, tmp_path):
    table = f"{db}.t"
    small_table(mariadb, table, 30)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", mariadb.uri(), "--table", table, "--state", state, "--sink", sink,
                           "--startup", "snapshot-only")
    assert code == 0, err
    assert "snapshot-only" in json.loads(out)["tail"]["skipped"]
    mariadb.sql(f"DELETE FROM {table} WHERE id = 1")
    problems = compare_rows(current(sink, table), mariadb.port, table)
    assert problems == ["extra id 1"]


def test_bad_startup_modes_are_one_line_and_write_nothing(mariadb, db, tmp_path):
    table = f"{db}.t"
    small_table(mariadb, table, 3)
    file, pos = mariadb.sql("SHOW MASTER STATUS")[0][:2]
    base = file.rsplit(".", 1)[0]
    inside = next(p for _f, p, kind, *_ in mariadb.sql(f"SHOW BINLOG EVENTS IN '{file}'") if kind == "Table_map")
    future_ms = int(time.time() * 1000) + 3_600_000
    cases = {
        "bogus": "unknown startup mode 'bogus'",
        "position:nonsense": "bad startup mode 'position:nonsense'",
        f"position:{base}.000000:4": "was purged from",
        f"position:{file}:{pos + 10_000_000}": "is past the end of",
        f"position:{file}:{inside}": "is inside a transaction (a Table_map event)",
        f"timestamp:{future_ms}": "is in the future",
        "timestamp:1000": "is before the oldest binlog",
        "gtid:0-1-1,1-1-1": "is not supported",
        "gtid:0-1-999999999": "is in the future",
    }
    for mode, message in cases.items():
        state = tmp_path / mode.replace(":", "_")
        code, _, err = dblog("plan", "--source", mariadb.uri(), "--table", table, "--state", str(state),
                             "--startup", mode)
        assert code != 0 and message in one_error_line(err), (mode, err)
        assert not (state / "plan.json").exists(), mode
