"""The lake and the state on object storage: a real S3 server (SeaweedFS from PyPI,
tests/support/seaweedfs.py), real MariaDB, Spark local[2] through the CLI (every process gets the
standard AWS_* variables, as a deployment would)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.lakecheck import SEED_SQL, TYPES_DDL, compare_rows, typed_mutation, typed_row
from tests.support.seaweedfs import SeaweedS3
from tests.support.workload import Writer

pytestmark = pytest.mark.slow
DBLOG = str(Path(sys.executable).parent / "dblog")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with SeaweedS3(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


def _dblog(env, *args, timeout=600):
    return subprocess.run([DBLOG, *args], capture_output=True, text=True, env=env, timeout=timeout)


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("dblog: error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def _lake_rows(s3, sink, table):
    from deltalake import DeltaTable

    return DeltaTable(f"{sink}/{table}/current", storage_options={
        "AWS_ACCESS_KEY_ID": s3.env()["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": s3.env()["AWS_SECRET_ACCESS_KEY"],
        "AWS_ENDPOINT_URL": s3.endpoint, "AWS_REGION": s3.env()["AWS_REGION"], "AWS_ALLOW_HTTP": "true"}
    ).to_pyarrow_table()


def test_snapshot_and_tail_on_spark_into_s3_then_an_outage(mariadb, db, s3, tmp_path):
    table = f"{db}.e"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {table} {SEED_SQL.format(n=6000)}", db=db)
    env = {**os.environ, **s3.env(), "DBLOG_SPARK_MASTER": "local[2]"}
    state, sink = str(tmp_path / "state"), "s3://lake/e2e"
    run = _dblog(env, "run", "--source", mariadb.uri(), "--table", table, "--state", state, "--sink", sink,
                 "--chunk-size", "1000", "--driver-threads", "0")  # Spark's executors commit every chunk to S3
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["snapshot"]["on_spark"] == 6
    # each chunk's first read is one file on S3, copied server-side from the changelog into current's partition
    # (the files each table's log holds: a write whose commit failed and was retried leaves an unused object)
    from deltalake import DeltaTable

    changelog = DeltaTable(f"{sink}/{table}/changelog", storage_options=s3.env())
    in_changelog = {f.rsplit("/", 1)[1] for f in changelog.file_uris()}
    in_current = {f.rsplit("/", 1)[1] for f in DeltaTable(f"{sink}/{table}/current", storage_options=s3.env()).file_uris()}
    assert len(in_changelog) == 6 and in_current == in_changelog
    objects = [o for o in _objects(s3, f"e2e/{table}") if o.endswith(".parquet")]
    assert in_current <= {o.rsplit("/", 1)[1] for o in objects if o.startswith("current/_chunk=")}
    snapshot = changelog.to_pyarrow_table()
    assert sorted(snapshot["id"].to_pylist()) == list(range(1, 6001)), "a snapshot row was written twice or lost"
    mariadb.sql(f"UPDATE {table} SET n_v = -id WHERE id % 5 = 0", f"DELETE FROM {table} WHERE id % 7 = 0",
                f"UPDATE {table} SET id = id + 100000 WHERE id BETWEEN 10 AND 19")
    tail = _dblog(env, "tail", "--state", state, "--sink", sink, "--available-now", "--driver-catch-up-mb", "0")
    assert tail.returncode == 0, tail.stderr[-3000:]
    assert not compare_rows(_lake_rows(s3, sink, table), mariadb.port, table)
    assert _dblog(env, "verify", "--state", state, "--sink", sink, "--table", table).returncode == 0

    # the object store stops answering for 20 s in the middle of a continuous tail
    proc = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--continuous", "--trigger-seconds",
                             "0.5"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        time.sleep(12)
        mariadb.sql(f"UPDATE {table} SET txt_v = 'before the outage' WHERE id <= 300")
        time.sleep(3)
        s3.pause()
        mariadb.sql(f"UPDATE {table} SET txt_v = 'during the outage' WHERE id <= 600",
                    f"DELETE FROM {table} WHERE id BETWEEN 700 AND 720")
        time.sleep(20)
        s3.resume()
        time.sleep(5)
    finally:
        s3.resume()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    if proc.returncode not in (0, -signal.SIGTERM):  # it may fail, but with one line
        assert _one_line(err.decode())
    restarted = _dblog(env, "tail", "--state", state, "--sink", sink, "--available-now")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert not compare_rows(_lake_rows(s3, sink, table), mariadb.port, table)
    log = DeltaTable(f"{sink}/{table}/changelog", storage_options={**s3.env()}).to_pyarrow_table().to_pylist()
    changes = [r["_pos"] for r in log if r["_op"] != "r"]
    assert len(changes) == len(set(changes)), "a change was written twice"


def test_bad_object_store_settings_are_one_line_each_and_write_nothing(mariadb, db, s3, tmp_path):
    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1), (2)")
    base = {**os.environ, **s3.env()}
    cases = [
        ({"AWS_SECRET_ACCESS_KEY": "wrong"}, "s3://lake/bad", "refused the S3 credentials"),
        ({}, "s3://no-such-bucket/x", "bucket no-such-bucket does not exist"),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "s3://lake/bad", "cannot reach the object store"),
        ({"AWS_ACCESS_KEY_ID": ""}, "s3://lake/bad", "no S3 credentials"),
    ]
    for number, (override, sink, message) in enumerate(cases):
        state = tmp_path / f"state{number}"
        result = _dblog({**base, **override}, "run", "--source", mariadb.uri(), "--table", f"{db}.t", "--state",
                        str(state), "--sink", sink)
        line = _one_line(result.stderr)
        assert result.returncode != 0 and message in line, line
        assert "dblog-test-secret" not in result.stderr + result.stdout and "wrong" not in line
        assert not state.exists()


def _objects(s3, prefix: str) -> list[str]:
    """The object names under ``s3://lake/PREFIX`` (none if absent)."""
    import pyarrow.fs as pafs

    env = s3.env()
    fs = pafs.S3FileSystem(access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
                           region=env["AWS_REGION"], scheme="http", endpoint_override=s3.endpoint.split("://")[1])
    selector = pafs.FileSelector(f"lake/{prefix}", recursive=True, allow_not_found=True)
    return sorted(i.path[len(f"lake/{prefix}/"):] for i in fs.get_file_info(selector) if i.type == pafs.FileType.File)


def test_state_and_lake_on_s3_with_a_writer_running(mariadb, db, s3, tmp_path):
    """`dblog run` with --state and --sink on S3 while a writer changes the table, then an available-now
    tail after it stops: ``current`` equals the source row by row. Plan, reports, offsets and catch-up
    records are objects in the bucket; only the Spark checkpoint (--checkpoint) is on the local disk."""
    table = f"{db}.s"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {table} {SEED_SQL.format(n=5000)}", db=db)
    env = {**os.environ, **s3.env(), "DBLOG_SPARK_MASTER": "local[2]"}
    state, sink, checkpoint = "s3://lake/st17/state", "s3://lake/st17/lake", str(tmp_path / "checkpoint")
    writer = Writer(mariadb.port, table, 6000, typed_row, typed_mutation, seed=17, pause=0.002)
    writer.start()
    try:
        writer.wait_started()
        run = _dblog(env, "run", "--source", mariadb.uri(), "--table", table, "--state", state, "--sink", sink,
                     "--checkpoint", checkpoint, "--chunk-size", "1000", "--batch-size", "2", "--driver-threads", "0")
        assert run.returncode == 0, run.stderr[-3000:]
        snapshot = json.loads(run.stdout)["snapshot"]
        assert snapshot["on_spark"] == snapshot["chunks_read"] >= 5  # executors' reports persisted by the driver
        time.sleep(1)
    finally:
        writer.stop()
    tail = _dblog(env, "tail", "--state", state, "--sink", sink, "--checkpoint", checkpoint, "--available-now",
                  "--driver-catch-up-mb", "0")
    assert tail.returncode == 0, tail.stderr[-3000:]
    assert not compare_rows(_lake_rows(s3, sink, table), mariadb.port, table)
    objects = _objects(s3, "st17/state")
    chunks = json.loads(run.stdout)["report"]["chunks"]
    assert {"plan.json", "offsets.json", "tail_positions.json"} <= set(objects) and "tail.lock" not in objects
    assert len([o for o in objects if o.startswith(f"reports/{table}/chunk-")]) == chunks
    assert (tmp_path / "checkpoint" / "tail" / "commits").is_dir() and (tmp_path / "checkpoint" / "tail.lock").exists()
    verify = _dblog(env, "verify", "--state", state, "--sink", sink, "--table", table)
    assert verify.returncode == 0, verify.stderr[-3000:]
    assert "dblog-test-secret" not in run.stderr + tail.stderr + verify.stderr + json.dumps(objects)


def test_bad_state_settings_are_one_line_each_and_write_nothing(mariadb, db, s3, tmp_path):
    mariadb.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY)", f"INSERT INTO {db}.u VALUES (1), (2)")
    base = {**os.environ, **s3.env()}
    checkpoint = ["--checkpoint", str(tmp_path / "checkpoint")]
    cases = [
        ({"AWS_SECRET_ACCESS_KEY": "wrong"}, "s3://lake/badstate", checkpoint, "refused the S3 credentials"),
        ({}, "s3://no-such-bucket/state", checkpoint, "bucket no-such-bucket does not exist at"),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "s3://lake/badstate", checkpoint, "cannot reach the object store"),
        ({}, "s3://lake/badstate", [], "--checkpoint DIR"),
        ({}, "gs://lake/badstate", checkpoint, "local path or s3://BUCKET/PREFIX only"),
    ]
    for number, (override, state, extra, message) in enumerate(cases):
        sink = tmp_path / f"sink{number}"
        result = _dblog({**base, **override}, "run", "--source", mariadb.uri(), "--table", f"{db}.u", "--state",
                        state, "--sink", str(sink), *extra)
        line = _one_line(result.stderr)
        assert result.returncode != 0 and message in line, line
        assert "dblog-test-secret" not in result.stderr + result.stdout and "wrong" not in line
        assert not sink.exists() and not (tmp_path / "checkpoint").exists()
    assert _objects(s3, "badstate") == []


def _changelog_positions(s3, sink, table) -> list[str]:
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    log = DeltaTable(f"{sink}/{table}/changelog", storage_options={
        "AWS_ACCESS_KEY_ID": s3.env()["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": s3.env()["AWS_SECRET_ACCESS_KEY"],
        "AWS_ENDPOINT_URL": s3.endpoint, "AWS_REGION": s3.env()["AWS_REGION"], "AWS_ALLOW_HTTP": "true"}
    ).to_pyarrow_dataset().to_table(columns=["_op", "_pos"])
    return log.filter(pc.not_equal(log["_op"], "r"))["_pos"].to_pylist()


def test_two_tails_of_one_capture_on_two_hosts_never_both_commit_a_batch(mariadb, db, s3, tmp_path):
    """Two continuous tails of one capture, as on two hosts: state and lake on S3, each with its own
    checkpoint on its own disk (so no lock file is shared). The lake fences them: of two commits of one
    micro-batch one wins and the other adds nothing, so every change is in the changelog once and
    ``current`` equals the source."""
    table = f"{db}.two"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {table} {SEED_SQL.format(n=2000)}", db=db)
    env = {**os.environ, **s3.env(), "DBLOG_SPARK_MASTER": "local[1]"}
    state, sink = "s3://lake/two/state", "s3://lake/two/lake"
    run = _dblog(env, "run", "--source", mariadb.uri(), "--table", table, "--state", state, "--sink", sink,
                 "--checkpoint", str(tmp_path / "first"), "--chunk-size", "500")
    assert run.returncode == 0, run.stderr[-3000:]
    tails = [subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--continuous", "--trigger-seconds",
                               "0.5", "--checkpoint", str(tmp_path / host)], env=env, stdout=subprocess.PIPE,
                              stderr=open(tmp_path / f"{host}.log", "w"), text=True, start_new_session=True)
             for host in ("host-a", "host-b")]
    writer = Writer(mariadb.port, table, 3000, typed_row, typed_mutation, seed=23, pause=0.005)
    writer.start()
    try:
        time.sleep(25)
    finally:
        writer.stop()
    time.sleep(8)  # both tails catch up with the last changes
    for tail in tails:
        os.killpg(tail.pid, signal.SIGTERM)
    for tail in tails:
        tail.wait(timeout=120)
    logs = [(tmp_path / f"{host}.log").read_text() for host in ("host-a", "host-b")]
    assert all("Traceback" not in log or "DblogError" not in log for log in logs), logs[0][-2000:] + logs[1][-2000:]
    final = _dblog(env, "tail", "--state", state, "--sink", sink, "--checkpoint", str(tmp_path / "host-a"),
                   "--available-now")
    assert final.returncode == 0, final.stderr[-3000:]
    positions = _changelog_positions(s3, sink, table)
    assert positions and len(positions) == len(set(positions)), "a change was committed twice"
    assert not compare_rows(_lake_rows(s3, sink, table), mariadb.port, table)


def test_opened_tables_on_s3_see_another_holders_commits_by_one_head_request(s3, tmp_path, monkeypatch):
    """A held table on S3 learns of a commit made since by asking for the next log entry (``Files.has_file``:
    one HEAD, no listing); what another holder committed is read, nothing is missed."""
    import gc

    from airflow_provider_dblog.store.files import Files
    from airflow_provider_dblog.store.lake_tables import LakeTables
    from tests.unit.test_opened_tables import _expected, _snapshot
    from tests.unit.test_tail_fence import SOURCE, _batch, _pos

    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    sink = f"s3://{s3.bucket}/held-{tmp_path.name}"
    lake = LakeTables(sink, "db.t", SOURCE, ["id"])
    _snapshot(lake)
    lake.commit_stream(_batch(200, 400), _pos(400))
    files = Files(lake.changelog_uri, "--sink")
    assert files.has_file("_delta_log/00000000000000000001.json")
    assert not files.has_file("_delta_log/00000000000000000099.json") and not files.has_file("_delta_log")
    other = LakeTables(sink, "db.t", SOURCE, ["id"])  # held beside ``lake``: its own objects
    other.commit_stream(_batch(400, 600), _pos(600))
    del other
    gc.collect()
    assert lake.tail_position() == _pos(600).boundary() and lake.current_behind() is None
    assert {r["id"]: r["v"] for r in lake.read_current(["id", "v"]).to_pylist()} == _expected([(200, 400), (400, 600)])
