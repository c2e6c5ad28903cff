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


def test_n_tables_changes_sampler_and_targets(tmp_path, bench_server):
    """benchmarks/n_tables.py without Spark: the changes are spread exactly, a tail past its time limit is
    stopped with its children, the targets and the table render."""
    import common
    import n_tables

    bench_server.sql("CREATE DATABASE IF NOT EXISTS bench", "CREATE DATABASE IF NOT EXISTS nt")
    tables = [f"nt.t{i}" for i in range(3)]
    for table in tables:
        bench_server.sql(f"DROP TABLE IF EXISTS {table}")
        common.create_synthetic_table(bench_server, table, 150)
    written = n_tables.write_changes(bench_server, tables, 150, 1000)
    changed = [int(bench_server.sql(f"SELECT SUM(a - id) FROM {t}")[0][0]) for t in tables]
    assert sum(changed) == 1000 and max(changed) - min(changed) <= 1 and written["statements"] >= 12

    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
             "time.sleep(60)"
    result = n_tables.timed_tail([common.PYTHON, "-c", script], tmp_path / "slow.log", timeout=2, max_rss=2**40)
    assert "over 2 s" in result["not_finished"] and result["peak_processes"] >= 2 and result["peak_rss_mb"] > 0
    assert result["seconds"] < 30
    done = n_tables.timed_tail([common.PYTHON, "-c", "print('{\"rows\": {\"a\": 3, \"b\": 4}}')"], tmp_path / "ok.log",
                               timeout=60, max_rss=2**40)
    assert done["rows"] == 7 and "not_finished" not in done

    def run(n, tail_s, apps, finished=True):
        tail = {"seconds": tail_s, "peak_processes": 3, "peak_python_processes": 2, "peak_rss_mb": 900,
                "load1_before": 1.0}
        tail.update({"rows": 100, "ms_per_change": tail_s * 10} if finished else {"not_finished": "stopped"})
        return {"rows_per_table": 1000 // n, "snapshot": {"seconds": 20.0, "spark_applications": apps,
                                                          "load1_before": 1.0}, "tail": tail}

    results = {1: run(1, 10.0, 1), 50: run(50, 12.0, 2), 200: run(200, 0, 5, finished=False)}
    results[50]["tail"]["startup_s"] = 6.5
    results[50]["tail_driver"] = {"seconds": 3.25, "rows": 100}
    checks = n_tables.targets(results)
    assert checks["tail_50_vs_1"] == {"ratio": 1.2, "target": 1.3, "met": True}
    assert "tail_200_vs_1" not in checks  # N = 200 did not finish: no ratio
    assert checks["snapshot_200_tables_apps"]["met"] is False
    text = n_tables.table_text(results, checks)
    assert "| 50 | 20 | 20.0 s | 2 | 12.0 s | 6.5 s | 120.00 ms | 3.2 s |" in text, text
    assert "| 1 | 1,000 | 20.0 s | 1 | 10.0 s | - | 100.00 ms | - |" in text and "not finished (stopped)" in text

    log = tmp_path / "tail.log"  # Spark's progress bar may precede a log line
    log.write_text("2026-11-26 09:08:40,000 dblog INFO capturing 1 tables: a.t\n"
                   "[Stage 0:>   (0 + 2) / 2]2026-11-26 09:08:52,034 dblog INFO tail: micro-batch 0 to f:1: 1 of 1 "
                   "tables changed; read 1.8s, changelog commits 0.1s, current 0.3s\n")
    assert n_tables.startup_seconds(log) == 9.83


def test_cluster_s3_counts_and_costs(tmp_path):
    """benchmarks/cluster_s3.py without a cluster: log lines, a checkpoint's micro-batches and the per-chunk and
    per-micro-batch costs."""
    import os

    import cluster_s3

    run_log = ("2026-01-01 00:00:01,000 dblog INFO snapshot batch 0: 4/4 chunks of 1 tables, 100 rows in 2.5s (40 "
               "rows/s)\n2026-01-01 00:00:02,000 dblog INFO snapshot batch 1: 4/4 chunks of 1 tables, 100 rows in "
               "1.5s (66 rows/s)\n")
    assert cluster_s3.snapshot_job_seconds(run_log) == 4.0 and cluster_s3.snapshot_job_seconds("") is None
    tail_log = ("x dblog INFO tail: {'bench.t': 10} rows in 3.0s; lag {}\n"
                "x dblog INFO tail: {'bench.t': 20} rows in 7.5s; lag {}")
    assert cluster_s3.tail_query_seconds(tail_log) == 7.5
    assert cluster_s3.max_events_for(1800, 20) == 90 and cluster_s3.max_events_for(5, 20) == 1

    query = tmp_path / "tail"
    for kind in ("offsets", "commits"):
        (query / kind).mkdir(parents=True)
    for n in range(4):
        for kind, at in (("offsets", 100 + 10 * n), ("commits", 102 + 10 * n + n)):
            path = query / kind / str(n)
            path.write_text("v1")
            os.utime(path, (at, at))
    (query / "commits" / ".3.crc").write_text("")
    (query / "offsets" / "4").write_text("v1")  # planned, never committed
    assert cluster_s3.batch_ids(query) == [0, 1, 2, 3] and cluster_s3.batch_ids(tmp_path / "none") == []
    assert cluster_s3.batch_seconds(query) == [2.0, 3.0, 4.0, 5.0]
    assert cluster_s3.batch_seconds(query, after=1) == [4.0, 5.0]

    def result(setup, run, job, chunk, tail, query_s, first, median):
        return {"setup": setup, "chunks": 8, "run_seconds": run, "snapshot_job_seconds": job,
                "chunk_seconds_mean": chunk, "tail_seconds": tail, "tail_query_seconds": query_s,
                "micro_batches": 20, "max_events": 90, "first_batch_seconds": first, "batch_seconds_median": median}

    out = cluster_s3.costs([result(cluster_s3.LOCAL, 20.0, 4.0, 0.9, 14.0, 10.0, 1.0, 0.4),
                            result(cluster_s3.LOCAL, 5.0, 3.2, 0.8, 16.0, 11.0, 1.2, 0.5),
                            result(cluster_s3.CLUSTER, 13.0, 8.0, 1.8, 24.0, 20.0, 3.0, 0.9)])
    local, extra = out["best"][cluster_s3.LOCAL], out["cluster_s3_extra"]
    assert local["run_seconds"] == 5.0 and local["per_chunk"] == {"run": 0.625, "snapshot_job": 0.4,
                                                                   "chunk_read_and_commit": 0.8}
    assert local["per_micro_batch"] == {"tail": 0.7, "tail_query": 0.5, "micro_batch_median": 0.4}
    assert extra["run_seconds"] == 8.0 and extra["per_chunk"] == {"run": 1.0, "snapshot_job": 0.6,
                                                                  "chunk_read_and_commit": 1.0}
    assert extra["per_micro_batch"] == {"tail": 0.5, "tail_query": 0.5, "micro_batch_median": 0.5}
    assert extra["first_batch_seconds"] == 2.0


def test_replay_tail_reads_the_commit_phases_each_path_logs():
    """benchmarks/replay_tail.py takes its per-phase figures from the tail's own log lines: a line it cannot
    read gives no figure rather than a wrong one."""
    import replay_tail

    driver = ("2026-11-27 07:43:27,100 dblog INFO tail: 200 tables caught up in the driver: 20000 rows (0 decoded "
              "column by column) from 1,129,800 bytes of binlog [a, b) in 3.1s (read 0.5s, commits 2.6s; a streaming "
              "tail continues from there)")
    spark = ("2026-11-27 07:43:45,100 dblog INFO tail: micro-batch 0 to mysql-bin.000001:6837388: 200 of 200 tables "
             "changed; read 1.6s in 2 pieces, changelog commits 0.6s, current 1.8s")
    assert replay_tail.phases("driver", driver) == {"caught_up_s": 3.1, "read_s": 0.5, "commits_s": 2.6}
    assert replay_tail.phases("spark", spark) == {"read_s": 1.6, "changelog_s": 0.6, "current_s": 1.8}
    assert replay_tail.phases("spark", driver) == {} and replay_tail.phases("driver", "no such line") == {}
