"""A real Spark standalone cluster (master + worker processes on loopback) whose executors cannot see the
driver's disk (the worker runs in its own mount namespace with a tmpfs over the driver's directory), state
and lake on S3 (SeaweedFS): the snapshot and the tail reach the lake only through S3, and the chunk
reports through the driver."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.lakecheck import SEED_SQL, TYPES_DDL, compare_rows, typed_mutation, typed_row
from tests.support.seaweedfs import SeaweedS3
from tests.support.spark_cluster import SparkCluster
from tests.support.workload import Writer

pytestmark = pytest.mark.slow
DBLOG = str(Path(sys.executable).parent / "dblog")


def _lake_rows(s3, sink, table):
    from deltalake import DeltaTable

    options = {"AWS_ACCESS_KEY_ID": s3.env()["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": s3.env()["AWS_SECRET_ACCESS_KEY"],
               "AWS_ENDPOINT_URL": s3.endpoint, "AWS_REGION": s3.env()["AWS_REGION"], "AWS_ALLOW_HTTP": "true"}
    return DeltaTable(f"{sink}/{table}/current", storage_options=options).to_pyarrow_dataset().to_table()


def test_snapshot_and_tail_on_a_cluster_whose_executors_share_no_disk(mariadb, db, tmp_path):
    driver = tmp_path / "driver"  # the driver's own files: hidden from the worker
    driver.mkdir()
    (driver / "marker").write_text("only the driver sees this")
    table = f"{db}.c"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {table} {SEED_SQL.format(n=4000)}", db=db)
    with SeaweedS3(tmp_path / "s3") as s3, \
            SparkCluster(tmp_path / "cluster", hidden=driver, env=s3.env()) as cluster:  # as on worker nodes
        worker = cluster.processes[-1]
        assert not Path(f"/proc/{worker.pid}/root{driver}/marker").exists()  # the worker cannot see it
        env = {**os.environ, **s3.env(), "DBLOG_SPARK_MASTER": cluster.master}
        state, sink, checkpoint = "s3://lake/cl/state", "s3://lake/cl/lake", str(driver / "checkpoint")
        writer = Writer(mariadb.port, table, 5000, typed_row, typed_mutation, seed=31, pause=0.003)
        writer.start()
        try:
            writer.wait_started()
            run = subprocess.run([DBLOG, "run", "--source", mariadb.uri(), "--table", table, "--state", state,
                                  "--sink", sink, "--checkpoint", checkpoint, "--chunk-size", "800",
                                  "--driver-threads", "0"], capture_output=True, text=True, env=env, cwd=driver,
                                 timeout=900)
            assert run.returncode == 0, run.stderr[-4000:]
            snapshot = json.loads(run.stdout)["snapshot"]
            assert snapshot["on_spark"] == snapshot["chunks_read"] >= 5
            time.sleep(1)
        finally:
            writer.stop()
        tail = subprocess.run([DBLOG, "tail", "--state", state, "--sink", sink, "--checkpoint", checkpoint,
                               "--available-now", "--driver-catch-up-mb", "0"], capture_output=True, text=True,
                              env=env, cwd=driver, timeout=900)
        assert tail.returncode == 0, tail.stderr[-4000:]
        assert "app-" in (tmp_path / "cluster" / "logs" / "master.out").read_text()  # the cluster ran them
        problems = compare_rows(_lake_rows(s3, sink, table), mariadb.port, table)
        assert not problems, problems[:5]
