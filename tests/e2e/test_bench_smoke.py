"""Smoke test of the benchmark harness's helpers at a tiny scale (no Spark, well under a minute).

It checks that the pieces `make bench` relies on work, never how fast anything is: the benchmark
measures ratios within one run; tests never assert timings.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench_server(tmp_path_factory):
    import common

    server = common.start_server(tmp_path_factory.mktemp("bench-mariadb"),
                                 flags=("--local-infile=1", "--innodb-buffer-pool-size=128M"))
    yield server
    server.stop()


def test_generate_load_and_limits(tmp_path, bench_server):
    import common

    files = common.generate(0.001, tmp_path / "tpch")
    assert [p.suffix for p in files["orders"]] == [".tbl"] and files["lineitem"]
    stats = common.load_tpch(bench_server, files)
    assert stats["orders"]["rows"] == 1500 and stats["lineitem"]["rows"] > 5000
    assert common.load_tpch(bench_server, files)["orders"]["cached"]  # a second load is skipped
    # lineitem's composite key and exact decimals survived the load
    assert bench_server.sql("SELECT COUNT(DISTINCT l_orderkey, l_linenumber) = COUNT(*), "
                            "SUM(l_quantity) = ROUND(SUM(l_quantity), 2) FROM tpch.lineitem")[0] == (1, 1)

    quick = common.mariadb_quick(bench_server, "orders")
    assert quick.returncode == 0 and quick.seconds > 0
    for parts in (1, 2):
        out = tmp_path / f"orders-{parts}.parquet"
        timed = common.cx_scan(bench_server, "lineitem", out, parts)
        assert timed.json()["rows"] == stats["lineitem"]["rows"] == common.parquet_rows(out)


def test_writer_decode_and_watcher(tmp_path, bench_server):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import common

    bench_server.sql("CREATE DATABASE IF NOT EXISTS bench", "DROP TABLE IF EXISTS bench.w",
                     "CREATE TABLE bench.w (id INT PRIMARY KEY, token BIGINT NULL)",
                     "INSERT INTO bench.w SELECT seq, NULL FROM bench.seq_1_to_1000")
    file, pos = common.binlog_position(bench_server)
    commits: dict[int, float] = {}
    writer = common.PacedWriter(bench_server, "bench.w", 400, list(range(1, 1001)), ("id",), "token = %s",
                                tick=0.01, on_commit=lambda tok, ts, n: commits.__setitem__(tok, ts))
    writer.start()
    time.sleep(1.0)
    stats = writer.stop()
    assert stats["transactions"] == len(commits) > 10 and stats["rows"] == 4 * stats["transactions"]

    decoded = common.run_timed([common.PYTHON, str(common.HERE / "decode_rate.py"), "--port",
                                str(bench_server.port), "--file", file, "--pos", str(pos), "--table", "bench.w"])
    assert decoded.json()["rows"] == stats["rows"]

    # a Delta table: the watcher sees tokens only once a committed version adds their file
    from deltalake import write_deltalake

    table = tmp_path / "changelog"
    write_deltalake(str(table), pa.table({"token": pa.array([], pa.int64())}))
    watcher = common.LakeWatcher(table, poll=0.01)
    watcher.start()
    time.sleep(0.1)
    assert not watcher.visible and watcher.batches == 0
    write_deltalake(str(table), pa.table({"token": list(commits)}), mode="append")
    time.sleep(0.3)
    watcher.stop()
    assert set(watcher.visible) == set(commits) and watcher.batches == 1
    assert common.percentile([1.0, 2.0, 3.0], 0.5) == 2.0


def test_report_renders(tmp_path):
    import report

    def e(rate, **details):
        return {"seconds": 1.0, "rows": 100, "rows_per_s": rate, "load1_before": 0.5, "details": details}

    results = {
        "meta": {"date": "today", "command": "make bench", "scale": 0.001, "spark_master": "local[2]",
                 "machine": {"cpu": "cpu", "cores": 2, "memory_gb": 1, "os": "linux", "python": "3.11",
                             "java": "java", "pyspark": "4.3", "connectorx": "x", "pyarrow": "y",
                             "mysql-replication": "z"}, "server": {"version": "10.11",
                                                                   "innodb_buffer_pool_size": "134217728"}},
        "snapshot": {"orders": {"rows": 100, "a_mariadb_quick": e(900.0), "a_cx_parquet_1": e(600.0),
                                "b_spark_jdbc": e(100.0), "b_jdbc_runs": [e(100.0)], "c_dblog": e(300.0),
                                "c_runs": [e(300.0, chunk_size=10)], "d_dblog_writer": e(250.0, writer={})}},
        "tail": {"changes": 100, "transactions": 1, "start": "f:4",
                 "decode_pymysqlreplication": {**e(10.0), "loop_s": 1.0, "loop_rows_per_s": 12.0},
                 "decode_mariadb_binlog": e(300.0), "dblog_tail": {**e(30.0), "query_s": 0.1, "in_driver": True,
                                                                   "query_rows_per_s": 1000.0},
                 "dblog_tail_spark": {**e(8.0), "query_s": 2.0, "query_rows_per_s": 50.0, "in_driver": False}},
        "latency": {"trigger_seconds": 1.0, "poll_s": 0.02, "tick_s": 0.01, "runs": {
            "500": {"writer": {"achieved_rate": 500}, "transactions": 10, "missing": 0, "p50_s": 1.0,
                    "p90_s": 1.5, "p99_s": 1.8, "max_s": 2.0}}},
    }
    ratios = report.snapshot_ratios(results["snapshot"]["orders"])
    assert ratios["c_vs_b"] == 3.0 and ratios["c_vs_a"] == 0.33 and ratios["d_vs_c"] == 0.83
    text = report.table_text(results)
    assert "MISSED" in text and "met" in text
    report.write_docs(results, tmp_path)
    assert (tmp_path / "benchmarks.png").stat().st_size > 1000
    doc = (tmp_path / "benchmarks.md").read_text()
    assert "| latency p99 at 500 changes/s | 1.80 s | ≤ 2 s | met |" in doc
    assert "read in the driver" in doc and "forced onto Spark's streaming query (whole process) / decode | 0.67×" in doc
