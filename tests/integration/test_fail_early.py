"""Fail early (issue 28): a setting only a later step needs (the tail's checkpoint, the sink, spark-submit, the
watermark table's grants) is refused by the plan in one line naming the fix, before anything is written,
and without losing what an earlier plan wrote."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cli import dblog, one_error_line

NO_AWS = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_ENDPOINT_URL": "", "AWS_SESSION_TOKEN": ""}
PASSWORD = "s3cret-Pa55"  # the shared fixture's (tests/conftest.py): never in an error


def _plan(source_uri, state, *extra, env=None):
    return dblog("plan", "--source", source_uri, *extra, "--state", str(state), "--chunk-size", "10", env=env)


def _tables(mariadb, db) -> set[str]:
    return {row[0] for row in mariadb.sql(f"SHOW TABLES FROM {db}")}


def test_an_object_store_state_without_the_tails_checkpoint_fails_at_plan(mariadb, db, source_uri, tmp_path):
    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1), (2)")
    sink = tmp_path / "lake"
    code, out, err = _plan(source_uri, "s3://lake/st", "--table", f"{db}.t", "--sink", str(sink),
                           "--watermark", "watermark_table", env=NO_AWS)
    line = one_error_line(err)
    assert code != 0 and out == ""
    assert "s3://lake/st is on object storage" in line and "--checkpoint DIR" in line and "DBLOG_CHECKPOINT" in line
    # before the source was touched (no watermark table) and before anything was written
    assert _tables(mariadb, db) == {"t"} and not sink.exists() and PASSWORD not in err
    # the rule is the tail's: a startup mode without a tail needs no checkpoint (the next check, the state's
    # credentials, speaks instead)
    code, _, err = _plan(source_uri, "s3://lake/st", "--table", f"{db}.t", "--startup", "snapshot-only", env=NO_AWS)
    assert code != 0 and "no S3 credentials for s3://lake/st" in one_error_line(err)
    # with --checkpoint the checkpoint passes and its own folder is checked: a file in its way is named
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    code, _, err = _plan(source_uri, "s3://lake/st", "--table", f"{db}.t", "--checkpoint", str(blocker / "cp"),
                         env=NO_AWS)
    line = one_error_line(err)
    assert code != 0 and "--checkpoint" in line and "is a file, not a directory" in line


def test_a_sink_the_later_steps_cannot_write_fails_at_plan_and_keeps_the_earlier_plan(mariadb, db, source_uri,
                                                                                       tmp_path):
    mariadb.sql(f"CREATE TABLE {db}.a (id INT PRIMARY KEY)", f"INSERT INTO {db}.a VALUES (1), (2), (3)",
                f"CREATE TABLE {db}.b (id INT PRIMARY KEY)", f"INSERT INTO {db}.b VALUES (1)")
    state, good_sink = tmp_path / "state", tmp_path / "lake"
    code, _, err = _plan(source_uri, state, "--table", f"{db}.a", "--sink", str(good_sink))
    assert code == 0, err
    assert not good_sink.exists()  # checked, not created
    before = (state / "plan.json").read_bytes()

    # object store without credentials: named, with the variables to set; no secret echoed
    code, _, err = _plan(source_uri, state, "--tables", f"{db}.*", "--sink", "s3://lake/x",
                         env={**NO_AWS, "AWS_SECRET_ACCESS_KEY": "not-echoed-Secret"})
    line = one_error_line(err)
    assert code != 0 and "no S3 credentials for s3://lake/x" in line and "AWS_ACCESS_KEY_ID" in line
    assert "not-echoed-Secret" not in err and PASSWORD not in err

    # a local sink whose folder is a file
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    code, _, err = _plan(source_uri, state, "--tables", f"{db}.*", "--sink", str(blocker / "lake"))
    line = one_error_line(err)
    assert code != 0 and f"--sink {blocker / 'lake'}" in line and "is a file, not a directory" in line

    # nothing already written is lost: the first plan is intact and b was not planned
    assert (state / "plan.json").read_bytes() == before
    assert set(json.loads(before)["tables"]) == {f"{db}.a"}


def test_a_watermark_table_without_the_update_grant_fails_at_plan(mariadb, db, tmp_path):
    user = f"wm_{db}"
    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1), (2)",
                f"CREATE USER '{user}'@'%' IDENTIFIED BY 'Wm-pa55'",
                f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'",
                f"GRANT CREATE, INSERT ON {db}._dblog_watermark TO '{user}'@'%'")  # no UPDATE: each window needs it
    try:
        state = tmp_path / "state"
        code, _, err = _plan(mariadb.uri(user, "Wm-pa55"), state, "--table", f"{db}.t", "--watermark",
                             "watermark_table")
        line = one_error_line(err)
        assert code != 0 and f"cannot write the watermark table {db}._dblog_watermark" in line
        assert "grant CREATE, INSERT, UPDATE" in line and "Wm-pa55" not in err
        assert not (state / "plan.json").exists()
        # with the grant the same plan passes
        mariadb.sql(f"GRANT UPDATE ON {db}._dblog_watermark TO '{user}'@'%'")
        code, out, err = _plan(mariadb.uri(user, "Wm-pa55"), state, "--table", f"{db}.t", "--watermark",
                               "watermark_table")
        assert code == 0, err
        assert json.loads(out)["tables"][f"{db}.t"]["watermark"] == "watermark_table"
    finally:
        mariadb.sql(f"DROP USER '{user}'@'%'")


@pytest.fixture
def airflow_source(mariadb, monkeypatch):
    """The shared server as the DAGs' ``dblog_source`` connection (from the environment, as Airflow reads it)."""
    monkeypatch.setenv("AIRFLOW_CONN_DBLOG_SOURCE", json.dumps({
        "conn_type": "mysql", "host": "127.0.0.1", "port": mariadb.port, "login": "dblog", "password": PASSWORD}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))


def test_spark_submit_missing_from_path_fails_at_plan_and_at_the_operator(mariadb, db, tmp_path, airflow_source,
                                                                          monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dblog.airflow.operators import ChunkPlannerOperator, DblogSparkSubmitOperator

    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1), (2)")
    state, sink = tmp_path / "state", tmp_path / "lake"
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))  # a worker without Spark's launcher
    venv_bin = Path(sys.executable).parent

    plan = ChunkPlannerOperator(task_id="plan", tables=f"{db}.t", state_dir=str(state), sink=str(sink),
                                chunk_size=10)
    with pytest.raises(AirflowFailException) as failed:
        plan.execute({})
    message = str(failed.value)
    assert "spark-submit is not on this worker's PATH" in message and f"add {venv_bin}" in message
    assert "\n" not in message and not (state / "plan.json").exists() and not sink.exists()

    # the Spark task itself: one line before the provider runs anything (its raw FileNotFoundError otherwise)
    snapshot = DblogSparkSubmitOperator(task_id="snapshot", conn_id="spark_default", dblog_conn_id="dblog_source",
                                        application_args=["snapshot", "--state", str(state), "--batch", "0",
                                                          "--sink", str(sink)])
    with pytest.raises(AirflowFailException) as failed:
        snapshot.execute({})
    assert "spark-submit is not on this worker's PATH" in str(failed.value) and PASSWORD not in str(failed.value)
    assert not sink.exists()

    # the checkpoint the DAG hands the planner: an s3:// state without one fails at plan too
    monkeypatch.setenv("PATH", f"{venv_bin}")
    plan = ChunkPlannerOperator(task_id="plan", tables=f"{db}.t", state_dir="s3://lake/st", sink=str(sink),
                                checkpoint="")
    with pytest.raises(AirflowFailException) as failed:
        plan.execute({})
    assert "--checkpoint DIR" in str(failed.value) and "DBLOG_CHECKPOINT" in str(failed.value)

    # with spark-submit on PATH the plan goes through
    plan = ChunkPlannerOperator(task_id="plan", tables=f"{db}.t", state_dir=str(state), sink=str(sink),
                                chunk_size=10, checkpoint="")
    batches = plan.execute({})
    assert batches and (state / "plan.json").exists()
