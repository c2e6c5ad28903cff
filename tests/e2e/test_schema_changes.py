"""Schema changes and TRUNCATE while the capture runs (real MariaDB, Spark local[2]): after a tail, the
lake's ``current`` equals the source on the source's current columns, values included (defaults for
rows that existed before a column was added)."""
from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.local.catch_up import DRIVER_CATCH_UP_BYTES
from airflow_provider_dblog.steps import change_committer
from airflow_provider_dblog.steps.mirror import current_rows, verify
from airflow_provider_dblog.steps.plan import plan_table
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.store.state import StateDir
from airflow_provider_dblog.spark.executor import SparkExecutor
from airflow_provider_dblog.local.executor import LocalExecutor
from tests.support.lakecheck import (
    SEED_SQL, TYPES_DDL, assert_each_change_once, assert_replay_equals_current, compare_rows, duckdb_current, typed_mutation,
    typed_row,
)
from tests.support.workload import Writer

pytestmark = pytest.mark.slow


def start_capture(mariadb, db, spark, tmp_path, rows=600, chunk_size=150):
    table = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, a INT, b VARCHAR(20), c DECIMAL(10,2))")
    mariadb.sql(f"INSERT INTO {table} SELECT seq, seq * 2, CONCAT('b', seq), seq / 4 FROM {db}.seq_1_to_{rows}")
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=chunk_size, batch_size=2)
    for batch in StateDir(state).batches():
        snapshot_batch(state, batch.index, sink, executor=SparkExecutor(spark))
    build_offsets(state)
    return table, state, sink


def tail(state, sink, spark, path, **kwargs):
    return run_tail(state, sink, available_now=True, **kwargs, executor=LocalExecutor(
        "dblog-test", DRIVER_CATCH_UP_BYTES if path == "driver" else 0, spark=spark))


def assert_lake_equals_source(mariadb, state, sink, table):
    problems = compare_rows(current_rows(state, sink, table), mariadb.port, table)
    assert not problems, f"{len(problems)} differences, e.g. {problems[:5]}"


@pytest.mark.parametrize("path", ["stream", "driver"])
def test_every_schema_change_is_followed(mariadb, db, spark, tmp_path, path):
    table, state, sink = start_capture(mariadb, db, spark, tmp_path)
    tail(state, sink, spark, path)
    mariadb.sql(f"ALTER TABLE {table} ADD COLUMN d VARCHAR(10) DEFAULT 'dflt'",
                f"UPDATE {table} SET d = 'x', a = a + 1 WHERE id % 7 = 0",
                f"INSERT INTO {table} (id, a, b, c) VALUES (1001, 1, 'new', 1.5)",
                f"ALTER TABLE {table} ADD COLUMN e INT NOT NULL DEFAULT 7 AFTER a",
                f"UPDATE {table} SET e = 8 WHERE id % 5 = 0",
                f"ALTER TABLE {table} MODIFY a BIGINT, MODIFY b VARCHAR(200), MODIFY c DECIMAL(14,2)",
                f"UPDATE {table} SET a = 1099511627776, b = REPEAT('w', 150), c = 123456789012.25 WHERE id % 11 = 0")
    first = tail(state, sink, spark, path)
    assert first["rows"][table] > 0
    assert_lake_equals_source(mariadb, state, sink, table)
    assert {"d", "e"} <= set(current_rows(state, sink, table).column_names)

    mariadb.sql(f"ALTER TABLE {table} DROP COLUMN b",
                f"UPDATE {table} SET c = c + 1 WHERE id % 3 = 0",
                f"ALTER TABLE {table} RENAME COLUMN c TO c2",
                f"UPDATE {table} SET c2 = 0.5 WHERE id % 13 = 0",
                f"DELETE FROM {table} WHERE id % 17 = 0")
    tail(state, sink, spark, path)
    assert_lake_equals_source(mariadb, state, sink, table)
    lake = current_rows(state, sink, table)
    assert "b" not in lake.column_names and "c" not in lake.column_names and "c2" in lake.column_names

    mariadb.sql(f"TRUNCATE TABLE {table}", f"INSERT INTO {table} (id, a, c2) VALUES (5, 5, 5.5), (700, 7, 7.5)")
    tail(state, sink, spark, path)
    assert_lake_equals_source(mariadb, state, sink, table)
    assert sorted(current_rows(state, sink, table)["id"].to_pylist()) == [5, 700]

    # a table swap (gh-ost, pt-online-schema-change): RENAME TABLE onto the captured name
    mariadb.sql(f"CREATE TABLE {db}.t_new LIKE {table}", f"ALTER TABLE {db}.t_new ADD COLUMN f TEXT",
                f"INSERT INTO {db}.t_new (id, a, e, c2, f) SELECT seq, seq, 1, seq, 'swapped' FROM {db}.seq_1_to_50",
                f"RENAME TABLE {table} TO {db}.t_old, {db}.t_new TO {table}",
                f"UPDATE {table} SET f = 'after' WHERE id < 10")
    tail(state, sink, spark, path)
    assert_lake_equals_source(mariadb, state, sink, table)
    # the lake is a table any engine reads; the changelog still holds each change once
    assert sorted(duckdb_current(sink, table, str(tmp_path / "ext")).read_all()["id"].to_pylist()) == list(range(1, 51))
    assert_each_change_once(sink, table)
    history = StateDir(state).schema_history(table)
    assert [c["kind"] for c in history["changes"]][:3] == ["alter", "alter", "alter"]
    assert "rename" in [c["kind"] for c in history["changes"]] and "truncate" in [c["kind"] for c in history["changes"]]


def test_fail_stops_before_the_ddl_and_evolve_resumes(mariadb, db, spark, tmp_path):
    table, state, sink = start_capture(mariadb, db, spark, tmp_path)
    mariadb.sql(f"UPDATE {table} SET a = -1 WHERE id = 1",
                f"ALTER TABLE {table} ADD COLUMN d INT DEFAULT 42",
                f"UPDATE {table} SET a = -2, d = 1 WHERE id = 2")
    with pytest.raises(DblogError) as failure:
        tail(state, sink, spark, "stream", schema_changes="fail")
    message = str(failure.value)
    assert "ALTER of " + table in message and "ADD COLUMN d" in message and "--schema-changes evolve" in message
    assert "\n" not in message
    lake = {r["id"]: r for r in current_rows(state, sink, table).to_pylist()}
    assert lake[1]["a"] == -1 and lake[2]["a"] == 4 and "d" not in lake[1]  # before it: all; after: nothing
    with pytest.raises(DblogError):  # still stopped there
        tail(state, sink, spark, "stream", schema_changes="fail")
    tail(state, sink, spark, "stream", schema_changes="evolve")
    assert_lake_equals_source(mariadb, state, sink, table)


def test_freeze_keeps_the_planned_columns(mariadb, db, spark, tmp_path):
    table, state, sink = start_capture(mariadb, db, spark, tmp_path)
    mariadb.sql(f"ALTER TABLE {table} ADD COLUMN d INT DEFAULT 42", f"UPDATE {table} SET a = 0, d = 1 WHERE id < 5")
    tail(state, sink, spark, "stream", schema_changes="freeze")
    lake = current_rows(state, sink, table)
    assert "d" not in lake.column_names
    lake = {r["id"]: r for r in lake.to_pylist()}
    assert [lake[i]["a"] for i in range(1, 5)] == [0, 0, 0, 0]
    # a TRUNCATE under freeze reads the table again: in the lake's columns still
    mariadb.sql(f"TRUNCATE {table}", f"INSERT INTO {table} (id, a, d) VALUES (1, 7, 9), (2, 8, 9)")
    tail(state, sink, spark, "stream", schema_changes="freeze")
    lake = current_rows(state, sink, table)
    assert "d" not in lake.column_names
    assert {r["id"]: r["a"] for r in lake.to_pylist()} == {1: 7, 2: 8}


@pytest.mark.parametrize("later_batch", [False, True])
def test_freeze_refuses_a_value_its_kept_type_cannot_hold_and_evolve_then_follows(mariadb, db, spark, tmp_path,
                                                                                   later_batch):
    """Under freeze the lake keeps a column's type; a value of the source's new type that it cannot hold (INT made
    BIGINT, then 2^40; VARCHAR made VARBINARY, then bytes that are no text) stops the tail in one line, nothing of
    the batch written (before: the whole column of the batch was written null, and a repair read null again).
    The same when the change was ignored in an earlier batch. Restarted under evolve, the lake follows."""
    table, state, sink = start_capture(mariadb, db, spark, tmp_path)
    mariadb.sql(f"ALTER TABLE {table} MODIFY a BIGINT, MODIFY b VARBINARY(20)",
                f"UPDATE {table} SET a = a + 1, b = 'fits' WHERE id < 5")
    if later_batch:
        tail(state, sink, spark, "driver", schema_changes="freeze")
        assert {r["id"]: r["a"] for r in current_rows(state, sink, table).to_pylist()}[1] == 3
    mariadb.sql(f"UPDATE {table} SET a = 1099511627776 WHERE id = 7",
                f"UPDATE {table} SET b = UNHEX('FF00FE') WHERE id = 8", f"UPDATE {table} SET a = -3 WHERE id = 9")
    before = current_rows(state, sink, table).to_pylist()
    for _ in range(2):  # a second run stops the same way
        with pytest.raises(DblogError) as failure:
            tail(state, sink, spark, "driver", schema_changes="freeze")
        message = str(failure.value)
        assert "\n" not in message and table in message and "--schema-changes evolve" in message, message
        assert "column a" in message or "column b" in message, message
    assert current_rows(state, sink, table).to_pylist() == before
    tail(state, sink, spark, "driver", schema_changes="evolve")
    assert_lake_equals_source(mariadb, state, sink, table)
    lake = {r["id"]: r for r in current_rows(state, sink, table).to_pylist()}
    assert lake[7]["a"] == 1099511627776 and lake[9]["a"] == -3 and lake[8]["b"] == bytes.fromhex("FF00FE")


def test_a_crash_between_the_ddl_commit_and_the_reread_converges(mariadb, db, spark, tmp_path, monkeypatch):
    table, state, sink = start_capture(mariadb, db, spark, tmp_path)
    mariadb.sql(f"ALTER TABLE {table} ADD COLUMN d VARCHAR(5) DEFAULT 'dd'", f"UPDATE {table} SET d = 'u' WHERE id = 3")
    real = change_committer.ChangeCommitter.follow
    crashed = []

    def crash_once(self, changes, *rest):
        if not crashed:
            crashed.append(changes)
            raise DblogError("simulated crash after the changelog commit")
        return real(self, changes, *rest)

    monkeypatch.setattr(change_committer.ChangeCommitter, "follow", crash_once)
    with pytest.raises(DblogError, match="simulated crash"):
        tail(state, sink, spark, "stream")
    tail(state, sink, spark, "stream")
    assert crashed
    assert_lake_equals_source(mariadb, state, sink, table)
    verify(state, sink, table)


def test_schema_changes_during_the_snapshot(mariadb, db, spark, tmp_path):
    """DDL between two batches (a dropped column the plan still names) and, from a second connection,
    inside chunks' watermark windows."""
    table = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, a INT, b VARCHAR(20), c DECIMAL(10,2))")
    mariadb.sql(f"INSERT INTO {table} SELECT seq, seq * 2, CONCAT('b', seq), seq / 4 FROM {db}.seq_1_to_3000")
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=200, batch_size=5,
               watermark="position")
    batches = StateDir(state).batches()
    snapshot_batch(state, batches[0].index, sink, executor=SparkExecutor(spark))
    mariadb.sql(f"ALTER TABLE {table} DROP COLUMN b", f"ALTER TABLE {table} ADD COLUMN d INT DEFAULT 3")
    stop = threading.Event()

    def churn():
        n = 0
        while not stop.is_set():
            n += 1
            column = f"x{n % 2}"
            mariadb.sql(f"ALTER TABLE {table} ADD COLUMN {column} INT DEFAULT {n}",
                        f"UPDATE {table} SET a = a + 1 WHERE id % 50 = {n % 50}",
                        f"ALTER TABLE {table} DROP COLUMN {column}")
            time.sleep(0.05)

    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    try:
        for batch in batches[1:]:
            snapshot_batch(state, batch.index, sink, executor=SparkExecutor(spark))
    finally:
        stop.set()
        writer.join()
    mariadb.sql(f"UPDATE {table} SET d = 9 WHERE id % 9 = 0")
    build_offsets(state)
    tail(state, sink, spark, "stream")
    assert_lake_equals_source(mariadb, state, sink, table)


def test_a_tail_without_ddl_sees_no_schema_change_for_any_type(mariadb, db, spark, tmp_path):
    """Every type's table-map columns match the planned ones: no spurious schema change (which would read
    every chunk again), and the lake equals the source after a writer."""
    table = f"{db}.e"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {table} {SEED_SQL.format(n=400)}", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=100, batch_size=4)
    for batch in StateDir(state).batches():
        snapshot_batch(state, batch.index, sink, executor=SparkExecutor(spark))
    build_offsets(state)
    writer = Writer(mariadb.port, table, 500, typed_row, typed_mutation, seed=5)
    writer.start()
    time.sleep(3)
    writer.stop()
    for path in ("stream", "driver"):
        tail(state, sink, spark, path)
    assert StateDir(state).schema_changes(table) == []
    assert_lake_equals_source(mariadb, state, sink, table)


def test_a_new_primary_key_plans_the_table_again(mariadb, db, spark, tmp_path):
    """The plan's chunks no longer apply: the table is planned again with its new key and read again, its
    stream starts again with the new plan (several micro-batches: the one after the change restarts)."""
    table, state, sink = start_capture(mariadb, db, spark, tmp_path)
    mariadb.sql(f"UPDATE {table} SET a = -a WHERE id < 50",
                f"ALTER TABLE {table} DROP PRIMARY KEY, ADD PRIMARY KEY (b)",
                f"UPDATE {table} SET c = 1 WHERE id % 4 = 0", f"DELETE FROM {table} WHERE id % 9 = 0")
    for n in range(5):
        mariadb.sql(f"UPDATE {table} SET a = a + 1 WHERE id % 5 = {n}")
    summary = tail(state, sink, spark, "stream", max_events=5)
    assert StateDir(state).table(table).meta.key_columns == ("b",) and summary["query_restarts"] == 1
    assert_lake_equals_source(mariadb, state, sink, table)
    mariadb.sql(f"UPDATE {table} SET b = CONCAT(b, 'x') WHERE id % 6 = 0", f"INSERT INTO {table} VALUES (9000, 1, 'new', 2)")
    tail(state, sink, spark, "stream")
    assert_lake_equals_source(mariadb, state, sink, table)
    assert_replay_equals_current(sink, table, ("b",))  # the old plan's history is closed at the new key


@pytest.mark.parametrize("killed_in", ["replace_table_offsets", "replace_table_plan"])
def test_a_tail_killed_inside_a_replan_finishes_it(mariadb, db, spark, tmp_path, monkeypatch, killed_in):
    """Issue 25 class 8: a new primary key, the tail killed inside the re-plan: after the new plan was saved
    and before the table's new offsets were (the next tail sees offsets of the old chunks, reads the new chunks
    again and streams with new offsets, not old offsets paired with new chunks), or after ``current`` started
    anew and before the new plan was saved (the next tail plans the table again). The streaming query's path
    (the start-up check is the same for the in-driver catch-up)."""
    path = "stream"
    table, state, sink = start_capture(mariadb, db, spark, tmp_path)
    mariadb.sql(f"ALTER TABLE {table} DROP PRIMARY KEY, ADD PRIMARY KEY (b)",
                f"UPDATE {table} SET a = 0 WHERE id % 4 = 0", f"DELETE FROM {table} WHERE id % 9 = 0")

    def killed(self, *args):  # the process dies here (an error: Spark's callback thread must return)
        raise RuntimeError("killed inside the re-plan")

    with monkeypatch.context() as patched:
        patched.setattr(StateDir, killed_in, killed)
        with pytest.raises(Exception, match="killed inside the re-plan"):
            tail(state, sink, spark, path)
    assert StateDir(state).table(table).meta.key_columns == (("b",) if killed_in != "replace_table_plan" else ("id",))
    mariadb.sql(f"UPDATE {table} SET c = 2 WHERE id % 5 = 0", f"INSERT INTO {table} VALUES (9000, 1, 'new', 2)")
    tail(state, sink, spark, path)
    assert StateDir(state).table(table).meta.key_columns == ("b",)
    assert_lake_equals_source(mariadb, state, sink, table)
    assert_replay_equals_current(sink, table, ("b",))
    offsets = StateDir(state).offsets()[table]
    assert len(offsets.high_watermarks) == len(StateDir(state).table(table).chunks)


def test_a_tail_killed_right_after_a_ddl_event_converges(mariadb, db, spark, tmp_path):
    """SIGKILL of a continuous `dblog tail` the moment it has recorded a DDL statement (before or while it
    follows it), then a restart: the lake equals the source, each change once."""
    import json
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    table, state, sink = start_capture(mariadb, db, spark, tmp_path)
    dblog = str(Path(sys.executable).parent / "dblog")
    env = {**os.environ, "DBLOG_SPARK_MASTER": "local[1]"}
    schemas = Path(state) / "schemas" / f"{table}.json"
    for round_ in range(2):
        process = subprocess.Popen([dblog, "tail", "--state", state, "--sink", sink, "--continuous",
                                 "--trigger-seconds", "0.5"], env=env, stdout=subprocess.DEVNULL,
                                stderr=open(tmp_path / f"tail{round_}.log", "w"), start_new_session=True,
                                cwd=tmp_path)
        try:
            time.sleep(12 if round_ == 0 else 6)  # the JVM and the first micro-batch
            before = len(json.loads(schemas.read_text())["changes"]) if schemas.exists() else 0
            mariadb.sql(f"UPDATE {table} SET a = a + 1 WHERE id % 4 = {round_}",
                        f"ALTER TABLE {table} ADD COLUMN k{round_} INT DEFAULT {round_ + 10}",
                        f"UPDATE {table} SET k{round_} = 1 WHERE id % 9 = 0")
            deadline = time.time() + 60
            while time.time() < deadline:
                if schemas.exists() and len(json.loads(schemas.read_text())["changes"]) > before:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError((tmp_path / f"tail{round_}.log").read_text()[-3000:])
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    tail(state, sink, spark, "stream")
    assert_lake_equals_source(mariadb, state, sink, table)
    assert_each_change_once(sink, table)


def test_an_enum_label_changed_after_a_space_or_holding_a_backslash_is_followed(mariadb, db, spark, tmp_path):
    """A label's change is a new column type however it is spelled: ``enum('x y','z')`` to ``enum('x w','z')``
    differs after the first space, ``'b\\\\s'`` is quoted twice over in COLUMN_TYPE. The lake holds the
    labels the source holds, before and after the ALTER."""
    table = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, e ENUM('x y','z','b\\\\s'), s SET('p q','r''s'))",
                f"INSERT INTO {table} VALUES (1, 'z', 'p q'), (2, 'z', ''), (3, 'b\\\\s', 'r''s')")
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=10, batch_size=2)
    for batch in StateDir(state).batches():
        snapshot_batch(state, batch.index, sink, executor=SparkExecutor(spark))
    build_offsets(state)
    mariadb.sql(f"UPDATE {table} SET e = 'x y', s = 'p q,r''s' WHERE id = 1",
                f"INSERT INTO {table} VALUES (4, 'b\\\\s', 'r''s')")
    tail(state, sink, spark, "driver")
    assert_lake_equals_source(mariadb, state, sink, table)
    assert {r["id"]: r["e"] for r in current_rows(state, sink, table).to_pylist()}[4] == "b\\s"
    mariadb.sql(f"UPDATE {table} SET e = 'z', s = 'r''s' WHERE id = 1",
                f"ALTER TABLE {table} MODIFY e ENUM('x w','z','b\\\\s'), MODIFY s SET('p w','r''s')",
                f"UPDATE {table} SET e = 'x w', s = 'p w' WHERE id IN (1, 3)",
                f"INSERT INTO {table} VALUES (5, 'x w', 'p w,r''s')")
    tail(state, sink, spark, "driver")
    assert_lake_equals_source(mariadb, state, sink, table)
    lake = {r["id"]: (r["e"], r["s"]) for r in current_rows(state, sink, table).to_pylist()}
    assert lake[1] == lake[3] == ("x w", "p w") and lake[5] == ("x w", "p w,r's")
