"""Secrets never reach an error, a log line or a command line, and bad input gets one line naming the fix:
the holes an audit found (odd source URIs, a Spark connection of type yarn, S3 over plain http, non-ASCII and
IPv6 sources)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.cli import dblog, one_error_line
from tests.support.local_mariadb import LocalMariaDB


@pytest.mark.parametrize("uri, piece", [
    ("mysql://app:s3cret@PW9#tail@127.0.0.1:9/s", "pw9"),  # was "cannot connect to pw9:3306" (after a DNS lookup)
    ("mysql://app:s3cret@PW9/tail@127.0.0.1:9/s", "pw9"),
    ("postgresql://app:s3cret@PW9?tail@127.0.0.1:9/db", "pw9"),  # was "a postgresql:// source names its database"
    ("postgresql://app:s3cret#PW9@127.0.0.1:9/db", "pw9"),
])
def test_a_password_with_unencoded_uri_characters_is_refused_without_a_piece_of_it(uri, piece, tmp_path):
    code, out, err = dblog("plan", "--source", uri, "--table", "s.t", "--state", str(tmp_path / "state"))
    line = one_error_line(err)
    assert code == 2 and "percent-encode" in line and "DBLOG_SOURCE_PASSWORD" in line
    assert piece not in (out + err).lower() and "tail" not in line and not (tmp_path / "state").exists()


def test_the_spark_operator_keeps_secrets_off_a_yarn_command_line(tmp_path, monkeypatch):
    """A Spark connection of type ``yarn`` (``yarn://HOST``): the provider's master is ``yarn://HOST`` and it turns
    env_vars into ``--conf spark.yarn.appMasterEnv.*`` arguments; the operator looked at the host only and passed
    the source password and the S3 secret key to it."""
    from airflow_provider_dblog.airflow.operators import DblogSparkSubmitOperator

    password, secret = "Yarn-Pa55word", "yarn-S3-secret-key-0123"
    argv_file = tmp_path / "argv"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "spark-submit"  # records its command line, runs nothing
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {argv_file}\nenv > {tmp_path / 'env'}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_DBLOG_SOURCE", json.dumps({
        "conn_type": "mysql", "host": "127.0.0.1", "port": 9, "login": "dblog", "password": password}))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({
        "conn_type": "aws", "login": "AKIDYARN", "password": secret, "extra": {"endpoint_url": "http://127.0.0.1:9"}}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "yarn", "host": "rm.example"}))
    operator = DblogSparkSubmitOperator(task_id="snapshot", conn_id="spark_yarn", dblog_conn_id="dblog_source",
                                        aws_conn_id="lake_s3", application_args=[
                                            "snapshot", "--state", str(tmp_path / "state"), "--batch", "0",
                                            "--sink", str(tmp_path / "lake")])
    operator.execute({})
    argv = argv_file.read_text()
    assert "yarn://rm.example" in argv
    assert password not in argv and secret not in argv and "DBLOG_SOURCE_PASSWORD" not in argv


def test_s3_over_plain_http_without_aws_allow_http_is_one_line_naming_it(mariadb, db, tmp_path):
    """pyarrow (the state, the location check) spoke http and passed; delta-rs then refused the lake's first
    write with "OSError: Kernel error -> Generic S3 error"."""
    from tests.support.seaweedfs import SeaweedS3

    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1)")
    with SeaweedS3(tmp_path / "s3") as s3:
        env = {**s3.env(), "AWS_ALLOW_HTTP": ""}
        code, out, err = dblog("run", "--source", mariadb.uri(), "--table", f"{db}.t", "--state",
                               str(tmp_path / "state"), "--sink", "s3://lake/http", env=env)
    line = one_error_line(err)
    assert code == 2 and "AWS_ALLOW_HTTP=true" in line and s3.endpoint in line
    assert s3.env()["AWS_SECRET_ACCESS_KEY"] not in out + err


def test_a_non_ascii_mysql_password_logs_in(mariadb, db, tmp_path):
    """pymysql sends a str password as latin-1: a UTF-8 password was "access denied" (connectorx took it)."""
    password = "pässwörd-€ 9"
    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1), (2)",
                f"CREATE USER 'utf'@'%' IDENTIFIED BY '{password}'", "GRANT ALL PRIVILEGES ON *.* TO 'utf'@'%'")
    try:
        code, out, err = dblog("run", "--source", mariadb.uri("utf", quote(password, safe=""), db), "--table",
                               f"{db}.t", "--state", str(tmp_path / "state"), "--sink", str(tmp_path / "lake"))
        assert code == 0, err
        assert password not in out + err
    finally:
        mariadb.sql("DROP USER 'utf'@'%'")


def test_an_ipv6_source_is_captured_and_its_state_read_again(tmp_path):
    """``mysql://USER@[::1]:PORT``: the state's URI and connectorx's were written without brackets, so every step
    after the plan failed with "bad --source: expected mysql://..." (and a Spark worker's traceback)."""
    server = LocalMariaDB(tmp_path / "v6", server_id=6, extra_flags=("--bind-address=127.0.0.1,::1",)).start()
    try:
        server.sql("CREATE USER 'v6'@'%' IDENTIFIED BY 'V6-pa55'", "GRANT ALL PRIVILEGES ON *.* TO 'v6'@'%'",
                   "CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)", "INSERT INTO s.t VALUES (1), (2)")
        state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
        code, out, err = dblog("run", "--source", f"mysql://v6:V6-pa55@[::1]:{server.port}/s", "--table", "s.t",
                               "--state", state, "--sink", sink, "--driver-threads", "1")
        assert code == 0, err
        assert json.loads((tmp_path / "state" / "plan.json").read_text())["source"] == f"mysql://v6@[::1]:{server.port}/s"
        code, out, err = dblog("status", "--state", state, "--sink", sink, "--json")
        assert code == 0, err
        assert "V6-pa55" not in out + err
    finally:
        server.stop()


def test_a_driver_reader_that_cannot_open_the_source_leaves_no_traceback(monkeypatch, caplog):
    """``dblog run``'s reader threads opened the source outside their ``try``: a failure there (the IPv6 state
    above) printed a thread's traceback on stderr; now a warning, and Spark's pass reads the chunk (one line)."""
    import threading

    from airflow_provider_dblog.core.errors import DblogError
    from airflow_provider_dblog.local import chunk_readers

    class UnreadableState:
        def __init__(self, state_dir):
            pass

        def source(self):
            raise DblogError("bad --source: expected mysql://...")

    uncaught = []
    monkeypatch.setattr(chunk_readers, "StateDir", UnreadableState)
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    reader = chunk_readers.DriverChunkReader("state", "sink", [("s.t", 0)], threads=1)
    reader.start()
    reader.join(30)
    assert uncaught == [] and reader.stop() == set()
    assert "in the driver failed (Spark reads it instead): bad --source" in caplog.text
