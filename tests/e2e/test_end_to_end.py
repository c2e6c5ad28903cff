"""Full + incremental on real MariaDB and Spark local[2]: the lake converges to the source, row by
row and column by column, under concurrent writes, tail crashes, chunk reruns and binlog purges."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from tests.support.local_mariadb import LocalMariaDB
from airflow_provider_dblog.local.catch_up import DRIVER_CATCH_UP_BYTES
from airflow_provider_dblog.local.chunk_readers import snapshot_table
from airflow_provider_dblog.local.session import BackgroundSession
from airflow_provider_dblog.steps.mirror import mirror
from airflow_provider_dblog.steps.plan import plan_table
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.store.state import StateDir
from airflow_provider_dblog.spark.executor import SparkExecutor
from airflow_provider_dblog.local.executor import LocalExecutor
from tests.support.lakecheck import assert_each_change_once, compare_rows, duckdb_current, SEED_SQL, TYPES_DDL, compare_mirror, typed_mutation, typed_row
from tests.support.workload import Writer

pytestmark = pytest.mark.slow
DBLOG = str(Path(sys.executable).parent / "dblog")


def load_table(mariadb, db, rows):
    mariadb.sql(f"CREATE TABLE {db}.e {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {db}.e {SEED_SQL.format(n=rows)}", db=db)
    return f"{db}.e"


def snapshot_all(state, sink, spark, table):
    for batch in StateDir(state).batches():
        if table in batch.tables:
            snapshot_batch(state, batch.index, sink, executor=SparkExecutor(spark), table=table)


def assert_mirror_equals_source(spark, state, sink, table, port, tmp_path, name="mirror"):
    out = tmp_path / name
    mirror(state, sink, table, str(out))
    problems = compare_mirror(str(out), port, table)
    assert not problems, f"{len(problems)} differences, e.g. {problems[:5]}"


def assert_unique_stream_positions(spark, sink, table):
    assert_each_change_once(sink, table)


@pytest.mark.parametrize("strategy", ["consistent_snapshot", "watermark_table", "position"])
def test_lake_converges_under_concurrent_writes(mariadb, db, spark, tmp_path, strategy):
    table = load_table(mariadb, db, 100_000)
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    writer = Writer(mariadb.port, table, 120_000, typed_row, typed_mutation, seed=hash(strategy) % 1000)
    writer.start()  # before the plan, until after the snapshot
    try:
        time.sleep(0.5)
        plan = plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=12_000, batch_size=3,
                          watermark=strategy)
        assert plan["tables"][table]["watermark"] == strategy
        snapshot_all(state, sink, spark, table)
        summary = build_offsets(state)
        assert summary["chunks"] == plan["tables"][table]["chunks"] >= 9
        # consistent_snapshot: the first catch-up reads in the driver, then the streaming
        # query continues from where it ended; the other strategies stream from the start
        first = run_tail(state, sink, available_now=True, executor=LocalExecutor(
            "dblog-test", DRIVER_CATCH_UP_BYTES if strategy == "consistent_snapshot" else 0, spark=spark))
        assert ("caught_up_in_driver" in first) == (strategy == "consistent_snapshot")
    finally:
        counts = writer.stop()
    assert counts.get("update_key", 0) > 0 and counts.get("rollback", 0) > 0
    assert "caught_up_in_driver" not in run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)
    assert_unique_stream_positions(spark, sink, table)
    # a plain read of `current` by DuckDB (no dblog code) equals the source column by column
    assert not compare_rows(duckdb_current(sink, table, str(tmp_path / "duckdb")), mariadb.port, table)


def test_cli_run_then_tail_and_mirror(mariadb, db, source_uri, tmp_path):
    """The contract: `dblog run`, then `dblog tail --available-now`, `dblog mirror`; no password leaks."""
    table = load_table(mariadb, db, 5_000)
    state, sink, out = tmp_path / "state", tmp_path / "sink", tmp_path / "out"
    env = {**os.environ, "DBLOG_SPARK_MASTER": "local[2]"}
    run = subprocess.run([DBLOG, "run", "--source", source_uri, "--table", table, "--state", str(state),
                          "--sink", str(sink), "--chunk-size", "1000", "--batch-size", "2"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    # under local[2] the process's two reader threads read every chunk and no JVM starts
    assert json.loads(run.stdout)["snapshot"] == {"chunks_read": 5, "on_spark": 0, "in_driver": 5}, run.stdout
    assert "Stage 0" not in run.stderr and "SparkContext" not in run.stderr
    # nothing changed since the snapshot: the catch-up query is skipped, the summary keeps its shape
    tail = json.loads(run.stdout)["tail"]
    assert tail["rows"] == {table: 0} and table in tail["skipped"] and table in tail["lag"], tail
    assert f"tail: {table} has no changes in [" in run.stderr and "): skipped" in run.stderr
    mariadb.sql(f"UPDATE {table} SET txt_v = 'after run' WHERE id <= 10", f"DELETE FROM {table} WHERE id > 4990")
    for args in (["tail", "--state", str(state), "--sink", str(sink), "--available-now"],
                 ["mirror", "--state", str(state), "--sink", str(sink), "--table", table, "--out", str(out)]):
        step = subprocess.run([DBLOG, *args], capture_output=True, text=True, env=env, timeout=600)
        assert step.returncode == 0, step.stderr[-3000:]
    assert not compare_mirror(str(out), mariadb.port, table)
    password = SourceConfig.parse(source_uri).password
    for path in state.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path
    assert password not in run.stderr + run.stdout


def test_cli_run_on_spark_only_and_on_a_spark_with_more_slots_than_threads(mariadb, db, source_uri, tmp_path):
    """`--driver-threads 0`: Spark reads every chunk; a master with more task slots than the driver's
    threads starts Spark while the driver reads."""
    table = load_table(mariadb, db, 4_000)
    for label, args, master in (("spark-only", ["--driver-threads", "0"], "local[2]"),
                                ("more-slots", ["--driver-threads", "1"], "local[2]")):
        state, sink, out = tmp_path / label / "state", tmp_path / label / "sink", tmp_path / label / "out"
        env = {**os.environ, "DBLOG_SPARK_MASTER": master}
        run = subprocess.run([DBLOG, "run", "--source", source_uri, "--table", table, "--state", str(state),
                              "--sink", str(sink), "--chunk-size", "500", *args],
                             capture_output=True, text=True, env=env, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        snapshot = json.loads(run.stdout)["snapshot"]
        assert snapshot["chunks_read"] == 8 and snapshot["on_spark"] + snapshot["in_driver"] == 8, snapshot
        if label == "spark-only":
            assert snapshot["on_spark"] == 8, snapshot
        else:
            assert "while Spark started" in run.stderr, run.stderr[-3000:]
        step = subprocess.run([DBLOG, "mirror", "--state", str(state), "--sink", str(sink), "--table", table,
                               "--out", str(out)], capture_output=True, text=True, env=env, timeout=600)
        assert step.returncode == 0, step.stderr[-3000:]
        assert not compare_mirror(str(out), mariadb.port, table)
    bad = subprocess.run([DBLOG, "run", "--source", source_uri, "--table", table, "--state", str(tmp_path / "bad"),
                          "--sink", str(tmp_path / "bad-sink"), "--driver-threads", "-1"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--driver-threads must be 0" in bad.stderr and not (tmp_path / "bad").exists()


def _start_tail(state, sink, max_events=200):
    return subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--continuous", "--max-events",
                             str(max_events), "--trigger-seconds", "0.2"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def _prepared(mariadb, db, spark, tmp_path, rows=20_000, chunk_size=2_500):
    table = load_table(mariadb, db, rows)
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=chunk_size, batch_size=4)
    snapshot_all(state, sink, spark, table)
    build_offsets(state)
    return table, state, sink


def test_tail_survives_sigkill_mid_batch_and_a_lost_checkpoint(mariadb, db, spark, tmp_path):
    """SIGKILL of a continuous tail at random moments (x3; the random walk kills more), then its Spark
    checkpoint deleted: the lake's ``current`` equals the source (read by DuckDB too) and the changelog
    holds each change once."""
    table, state, sink = _prepared(mariadb, db, spark, tmp_path)
    writer = Writer(mariadb.port, table, 24_000, typed_row, typed_mutation, seed=11, pause=0.001)
    writer.start()
    rnd = random.Random(5)
    commits = StateDir(state).checkpoint_dir() / "commits"
    committed = lambda: len(list(commits.glob("[0-9]*"))) if commits.exists() else 0  # noqa: E731
    try:
        for _ in range(3):
            before = committed()
            tail = _start_tail(state, sink)
            deadline = time.time() + 120
            while committed() < before + 2 and time.time() < deadline and tail.poll() is None:
                time.sleep(0.1)
            assert committed() >= before + 2, tail.stderr.read().decode()[-2000:] if tail.poll() is not None else ""
            time.sleep(rnd.uniform(0.05, 0.6))  # micro-batches of 200 events follow each other: die mid-batch
            os.killpg(tail.pid, signal.SIGKILL)
            tail.wait()
    finally:
        writer.stop()
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)
    changes = assert_each_change_once(sink, table)
    # the checkpoint and the state's progress record lost: the tail resumes from the position the lake
    # recorded, nothing doubled
    shutil.rmtree(StateDir(state).checkpoint_dir())
    StateDir(state).files.delete(StateDir.TAIL_POSITIONS)
    updated = mariadb.sql(f"SELECT COUNT(*) FROM {table} WHERE id <= 7")[0][0]
    mariadb.sql(f"UPDATE {table} SET txt_v = 'after the checkpoint' WHERE id <= 7")
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert assert_each_change_once(sink, table) == changes + updated
    assert not compare_rows(duckdb_current(sink, table, str(tmp_path / "duckdb")), mariadb.port, table)


def test_a_snapshot_batch_killed_mid_commit_is_rerun_without_loss_or_doubles(mariadb, db, spark, tmp_path):
    """SIGKILL of `dblog snapshot` while its chunks commit: the driver persists reports after the job, so
    the rerun reads every chunk again (a chunk committed but not reported is read and committed again,
    replacing its range), and the lake equals the source."""
    table = load_table(mariadb, db, 30_000)
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=1_000, batch_size=100)
    log = Path(sink) / table / "current" / "_delta_log"
    commits = lambda: len(list(log.glob("*.json"))) if log.exists() else 0  # noqa: E731
    proc = subprocess.Popen([DBLOG, "snapshot", "--state", state, "--batch", "0", "--sink", sink],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and commits() < 6:  # the table's creation + 5 chunks
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 6 <= commits() < 31 and not StateDir(state).reports(table), f"{commits()} commits before the kill"
    rest = snapshot_batch(state, 0, sink, executor=SparkExecutor(spark))
    assert len(rest) == 30
    mariadb.sql(f"DELETE FROM {table} WHERE id % 97 = 0", f"UPDATE {table} SET n_v = -id WHERE id % 13 = 0")
    build_offsets(state)
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)
    assert not compare_rows(duckdb_current(sink, table, str(tmp_path / "duckdb")), mariadb.port, table)


def test_forced_chunk_reruns_while_the_tail_runs(mariadb, db, spark, tmp_path):
    table, state, sink = _prepared(mariadb, db, spark, tmp_path)
    writer = Writer(mariadb.port, table, 24_000, typed_row, typed_mutation, seed=12, pause=0.001)
    writer.start()
    tail = _start_tail(state, sink, max_events=0)
    rnd = random.Random(9)
    try:
        time.sleep(8)
        batches = StateDir(state).batches()
        for _ in range(3):
            batch = rnd.choice(batches)
            ids = batch.chunk_ids(table)
            chunks = rnd.sample(list(ids), k=rnd.randint(1, len(ids)))
            reports = snapshot_batch(state, batch.index, sink, force=True, executor=SparkExecutor(spark), chunk_ids=chunks)
            assert sorted(r["chunk"] for r in reports) == sorted(chunks)
            time.sleep(1)
    finally:
        writer.stop()
        time.sleep(3)
        os.killpg(tail.pid, signal.SIGTERM)
        tail.wait(60)
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)
    assert_each_change_once(sink, table)


def test_a_purged_table_is_read_again_alone_while_the_others_stream(tmp_path):
    """Issue 25 class 7: the binlog one table still needs is purged; another table's floor is past the
    purge. ``--on-purge fail`` stops with one line naming the table; the default re-reads that table's
    chunks alone and streams the other: both end equal to the source."""
    with LocalMariaDB(tmp_path / "db", server_id=4) as server:
        server.sql("CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY, v INT)",
                   "CREATE TABLE p.u (id INT PRIMARY KEY, v INT)")
        server.sql("INSERT INTO p.t SELECT seq, seq FROM seq_1_to_1000", "INSERT INTO p.u SELECT seq, seq FROM seq_1_to_500",
                   db="p")
        state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
        ok = subprocess.run([DBLOG, "run", "--source", server.uri(), "--tables", "p.*", "--state", state, "--sink",
                             sink, "--chunk-size", "400"], capture_output=True, text=True, timeout=300)
        assert ok.returncode == 0, ok.stderr[-2000:]
        server.sql("UPDATE p.t SET v = v + 1", "DELETE FROM p.t WHERE id > 900", "UPDATE p.u SET v = -v")
        first = server.sql("SHOW BINARY LOGS")[0][0]
        server.sql("FLUSH BINARY LOGS")
        kept = server.sql("SHOW MASTER STATUS")[0][0]
        ok = subprocess.run([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now", "--table", "p.u"],
                            capture_output=True, text=True, timeout=300)  # p.u's floor moves into the new file
        assert ok.returncode == 0, ok.stderr[-2000:]
        deadline = time.time() + 60  # MariaDB keeps a file until InnoDB's binlog checkpoint passes it
        while server.sql("SHOW BINARY LOGS")[0][0] == first and time.time() < deadline:
            server.sql(f"PURGE BINARY LOGS TO '{kept}'")
            time.sleep(0.5)
        assert server.sql("SHOW BINARY LOGS")[0][0] == kept
        server.sql("UPDATE p.t SET v = 0 WHERE id < 10", "UPDATE p.u SET v = 7 WHERE id < 10")
        result = subprocess.run([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now", "--on-purge",
                                 "fail"], capture_output=True, text=True, timeout=300)
        assert result.returncode != 0
        errors = [line for line in result.stderr.splitlines() if line.startswith("dblog: error:")]
        assert len(errors) == 1 and "purged" in errors[0] and "tables: p.t;" in errors[0], result.stderr[-2000:]
        result = subprocess.run([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now"],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "p.t needs from" in result.stderr and "p.u needs from" not in result.stderr
        for table in ("p.t", "p.u"):
            check = subprocess.run([DBLOG, "verify", "--state", state, "--sink", sink, "--table", table, "--rows"],
                                   capture_output=True, text=True, timeout=300)
            assert check.returncode == 0 and json.loads(check.stdout)["equal"], check.stdout + check.stderr[-2000:]


def test_case_insensitive_keys_are_located_in_database_order(mariadb, db, spark, tmp_path):
    """In utf8mb4_general_ci 'a' and 'c' sort before 'D' (Python: after). With the boundary 'D', chunk 0
    [-∞, 'D') is read first, then 'a' and 'c' change, then chunk 1 ['D', ∞) is read: those changes are
    after chunk 0's HW and must be emitted; locating the keys in Python's order would put them in
    chunk 1, whose later HW would drop them."""
    mariadb.sql(f"CREATE TABLE {db}.ci (k VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
                f"INSERT INTO {db}.ci VALUES ('a', 0), ('B', 0), ('c', 0), ('D', 0), ('e', 0), ('F', 0)")
    table = f"{db}.ci"
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=3, batch_size=1)
    assert [c.hi for c in StateDir(state).table(table).chunks] == [("D",), None]
    snapshot_batch(state, 0, sink, executor=SparkExecutor(spark))
    mariadb.sql(f"UPDATE {table} SET v = 1 WHERE k = 'a'", f"UPDATE {table} SET k = 'zz' WHERE k = 'c'")
    snapshot_batch(state, 1, sink, executor=SparkExecutor(spark))
    build_offsets(state)
    mariadb.sql(f"UPDATE {table} SET v = 2 WHERE k = 'B'")
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    out = tmp_path / "mirror"
    mirror(state, sink, table, str(out))
    import pyarrow.parquet as pq

    rows = sorted((r["k"], r["v"]) for r in pq.read_table(out).to_pylist())
    assert rows == sorted(mariadb.sql(f"SELECT k, v FROM {table}")) == [
        ("B", 2), ("D", 0), ("F", 0), ("a", 1), ("e", 0), ("zz", 0)]


def test_chunk_rerun_repairs_changes_the_lake_never_saw(mariadb, db, spark, tmp_path):
    """Changes written with the binlog off for their session never reach the tail: the lake keeps a
    deleted row (whose insert is in the stream) and an old value. Re-reading the chunks holding them
    repairs the lake: the new snapshot supersedes every older stream row of its range."""
    table, state, sink = _prepared(mariadb, db, spark, tmp_path, rows=5_000, chunk_size=1_000)
    mariadb.sql(f"INSERT INTO {table} (id, txt_v) VALUES (6001, 'seen by the tail')",
                f"UPDATE {table} SET txt_v = 'seen' WHERE id = 10")
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    mariadb.sql("SET sql_log_bin = 0", f"DELETE FROM {table} WHERE id IN (10, 6001)",
                f"UPDATE {table} SET n_v = -1 WHERE id = 2500", f"INSERT INTO {table} (id) VALUES (3333333)")
    out = tmp_path / "before"
    mirror(state, sink, table, str(out))
    assert len(compare_mirror(str(out), mariadb.port, table)) == 4
    chunks = StateDir(state).table(table).chunks
    holding = {c.id for c in chunks for key in (10, 6001, 2500, 3333333)
               if (c.lo is None or key >= c.lo[0]) and (c.hi is None or key < c.hi[0])}
    for batch in StateDir(state).batches():
        todo = sorted(holding & set(batch.chunk_ids(table)))
        if todo:
            snapshot_batch(state, batch.index, sink, force=True, executor=SparkExecutor(spark), chunk_ids=todo)
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)


class SlowStart(BackgroundSession):
    """The suite's running session, 'starting' until the driver reported ``count`` chunks (``None``:
    never): Spark's start-up made deterministic. ``get`` counts its callers."""

    def __init__(self, spark, state, table, count):
        self.spark, self.state, self.table, self.count, self.gets = spark, state, table, count, 0

    def ready(self):
        return self.count is not None and len(StateDir(self.state).reports(self.table)) >= self.count

    def get(self):
        self.gets += 1
        deadline = time.time() + 120
        while not self.ready():
            assert self.count is not None, "Spark was waited for although the driver could read every chunk"
            assert time.time() < deadline, "the driver read no chunk while Spark started"
            time.sleep(0.05)
        return self.spark


def on_spark(state, sink, spark):
    """What `dblog run` gives ``snapshot_table``: a batch's chunks read on ``spark``."""
    return lambda batch, groups: snapshot_batch(state, batch, sink, only=groups, executor=SparkExecutor(spark))


def _planned(mariadb, db, tmp_path, rows):
    table = load_table(mariadb, db, rows)
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=2_500, batch_size=4)
    return table, state, sink, sorted(c.id for c in StateDir(state).table(table).chunks)


def test_the_driver_reads_the_last_chunks_while_spark_starts(mariadb, db, spark, tmp_path):
    table, state, sink, chunk_ids = _planned(mariadb, db, tmp_path, 20_000)
    slow = SlowStart(spark, state, table, 3)
    by_spark = {r["chunk"] for r in snapshot_table(state, sink, table, on_spark(state, sink, slow), slow)}
    by_driver = set(chunk_ids) - by_spark
    assert len(by_driver) >= 3 and by_driver == set(chunk_ids[-len(by_driver):]), (by_driver, by_spark)
    assert set(StateDir(state).reports(table)) == set(chunk_ids)
    build_offsets(state)
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)


def test_a_table_the_driver_reads_before_spark_is_up_never_waits_for_spark(mariadb, db, spark, tmp_path):
    table, state, sink, chunk_ids = _planned(mariadb, db, tmp_path, 10_000)
    never = SlowStart(spark, state, table, None)
    assert snapshot_table(state, sink, table, on_spark(state, sink, never), never) == [] and never.gets == 0
    assert set(StateDir(state).reports(table)) == set(chunk_ids)
    build_offsets(state)
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)


def test_a_chunk_the_driver_failed_to_read_is_read_by_spark(mariadb, db, spark, tmp_path, monkeypatch):
    import threading

    from airflow_provider_dblog.local import chunk_readers

    table, state, sink, chunk_ids = _planned(mariadb, db, tmp_path, 10_000)
    failed = []

    def run_chunk_failing_in_the_driver_injected(sink_, plan_, chunk_id, dialect):
        if threading.current_thread().name == "dblog-driver-chunks":
            failed.append(chunk_id)
            raise ConnectionError("injected: connection lost")
        raise AssertionError("Spark's executors never call the driver's patched function")

    monkeypatch.setattr(chunk_readers, "run_chunk", run_chunk_failing_in_the_driver_injected)
    slow = SlowStart(spark, state, table, None)
    slow.ready = lambda: bool(failed)  # Spark is up once the driver's first read failed
    reports = snapshot_table(state, sink, table, on_spark(state, sink, slow), slow)
    assert 1 <= len(failed) <= 2 and sorted(failed) == chunk_ids[-len(failed):]  # the last, one per reader thread
    assert sorted(r["chunk"] for r in reports) == chunk_ids  # Spark read all, the failed one in its own pass
    build_offsets(state)
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)


def test_two_tables_tail_in_one_application(mariadb, db, spark, tmp_path):
    """Two captured tables: two streaming queries in one Spark application commit their micro-batches
    (one at a time: concurrent foreachBatch collections broke task serialization under spark-submit);
    both lakes equal their sources and each change is in its changelog once."""
    mariadb.sql(f"CREATE TABLE {db}.a {TYPES_DDL}", f"CREATE TABLE {db}.b {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {db}.a {SEED_SQL.format(n=3000)}", f"INSERT INTO {db}.b {SEED_SQL.format(n=2000)}", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    tables = [f"{db}.a", f"{db}.b"]
    for table in tables:
        plan_table(SourceConfig.parse(mariadb.uri()), table, state, chunk_size=700, batch_size=8)
        snapshot_all(state, sink, spark, table)
    build_offsets(state)
    writer_a = Writer(mariadb.port, tables[0], 4000, typed_row, typed_mutation, seed=21, pause=0.005)
    writer_b = Writer(mariadb.port, tables[1], 3000, typed_row, typed_mutation, seed=22, pause=0.005)
    for writer in (writer_a, writer_b):
        writer.start()
    time.sleep(3)
    for writer in (writer_a, writer_b):
        writer.stop()
    summary = run_tail(state, sink, available_now=True, executor=SparkExecutor(spark), max_events=400)
    assert set(summary["rows"]) == set(tables) and all(summary["rows"].values())
    for table in tables:
        assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path, name=f"mirror-{table}")
        assert_each_change_once(sink, table)


def test_one_transaction_larger_than_the_batch_memory_is_committed_whole_once(mariadb, db, spark, tmp_path, caplog):
    """One transaction (an UPDATE of every row, deletes and inserts) far larger than ``--batch-memory-mb``:
    the decoding tasks stage it as files, the changelog adds them in one commit, ``current`` is brought up
    chunk by chunk. A tail SIGKILLed after staging and a rerun leave each change once, the lake row-equal
    to the source and the changelog's replay equal to ``current``."""
    from deltalake import DeltaTable

    from tests.support.lakecheck import assert_replay_equals_current

    table, state, sink = _prepared(mariadb, db, spark, tmp_path, rows=8_000, chunk_size=2_000)
    mariadb.sql(f"UPDATE {table} SET txt_v = 'before' WHERE id <= 10")  # a small batch first
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    mariadb.sql("START TRANSACTION", f"UPDATE {table} SET txt_v = CONCAT('huge ', id), n_v = COALESCE(n_v, 0) + 1",
                f"DELETE FROM {table} WHERE id % 97 = 0",
                f"INSERT INTO {table} (id, txt_v) SELECT seq, 'new' FROM seq_8001_to_9000", "COMMIT", db=db)
    changelog = Path(sink) / table / "changelog"
    version = DeltaTable(str(changelog)).version()
    tail = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now",
                             "--driver-catch-up-mb", "0", "--batch-memory-mb", "0.05"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 180
    while not list(changelog.glob("part-dblog-*")) and time.time() < deadline and tail.poll() is None:
        time.sleep(0.05)
    assert list(changelog.glob("part-dblog-*")), tail.stderr.read().decode()[-2000:] if tail.poll() else "no file staged"
    os.killpg(tail.pid, signal.SIGKILL)  # files staged, the commit not made yet (or just made)
    tail.wait()
    caplog.set_level("INFO", logger="dblog")
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark), batch_memory_bytes=50 * 1024)

    log = DeltaTable(str(changelog)).history()
    added = [v["version"] for v in log if v["version"] > version and v.get("operation") == "WRITE"]
    assert len(added) == 1, f"the transaction took {len(added)} changelog commits"
    assert any("chunk by chunk" in r.getMessage() for r in caplog.records), "current was not updated chunk by chunk"
    assert_mirror_equals_source(spark, state, sink, table, mariadb.port, tmp_path)
    assert_unique_stream_positions(spark, sink, table)
    assert_replay_equals_current(sink, table)
