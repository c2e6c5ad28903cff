"""Snapshot and tail on a Spark standalone cluster with state and lake on S3, against local[2] with local
paths, in the same run.

    python benchmarks/cluster_s3.py [--rows 200000] [--changes 100000] [--rounds 2]

A private MariaDB, a SeaweedFS S3 server and a standalone master + worker (2 cores; the worker in its
own mount namespace, as in tests/e2e/test_cluster.py), all on this machine's 2 cores. Per round and
setup: ``dblog run`` (plan, snapshot on Spark with ``--driver-threads 0``, report, tail) of a fresh
copy of the table, then ``--changes`` row changes and a timed ``dblog tail --available-now``. Prints
JSON: seconds per setup and what object storage and the cluster cost per chunk and per micro-batch.
"""
from __future__ import annotations

import argparse
import json

import common

from tests.support.seaweedfs import SeaweedS3
from tests.support.spark_cluster import SparkCluster


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--chunk-size", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work, server = common.fresh_server("cluster-s3")
    (work / "driver").mkdir()
    results = []
    try:
        with SeaweedS3(work / "s3") as s3, SparkCluster(work / "cluster", hidden=work / "driver", env=s3.env()) as cluster:
            setups = {
                "local[2], local paths": ({"DBLOG_SPARK_MASTER": "local[2]"}, str(work / "driver" / "state-{}"),
                                          str(work / "driver" / "lake")),
                "cluster, S3": ({**s3.env(), "DBLOG_SPARK_MASTER": cluster.master}, "s3://lake/state-{}", "s3://lake/lake"),
            }
            for r in range(args.rounds):
                for name, (env, state, sink) in (setups.items() if r % 2 == 0 else reversed(setups.items())):
                    table = f"bench.t_{r}_{len(results)}"
                    common.create_synthetic_table(server, table, args.rows)
                    state_dir = state.format(table)
                    checkpoint = str(work / "driver" / f"checkpoint-{table}")
                    run = common.run_timed([common.DBLOG, "run", "--source", server.uri(), "--table", table,
                                            "--state", state_dir, "--sink", sink, "--checkpoint", checkpoint,
                                            "--chunk-size", str(args.chunk_size), "--driver-threads", "0"],
                                           work / f"run-{table}.log", env=common.bench_env(env))
                    conn = common.connect(server)
                    with conn.cursor() as cur:
                        for lo in range(0, args.changes, 1000):
                            start = lo % args.rows
                            cur.execute(f"UPDATE {table} SET a = a + 1 WHERE id > %s AND id <= %s",
                                        (start, start + 1000))
                    conn.close()
                    tail = common.run_timed([common.DBLOG, "tail", "--state", state_dir, "--sink", sink,
                                             "--checkpoint", checkpoint, "--available-now", "--driver-catch-up-mb",
                                             "0"], work / f"tail-{table}.log", env=common.bench_env(env))
                    chunks = run.json()["plan"]["chunks"]
                    results.append({"round": r, "setup": name, "run_seconds": round(run.seconds, 2),
                                    "tail_seconds": round(tail.seconds, 2), "chunks": chunks,
                                    "tail_rows": tail.json()["rows"][table]})
                    common.log(f"round {r} {name}: run {run.seconds:.1f}s ({chunks} chunks), tail {tail.seconds:.1f}s")
    finally:
        server.stop()
    best = {name: {k: min(x[k] for x in results if x["setup"] == name) for k in ("run_seconds", "tail_seconds")}
            for name in {x["setup"] for x in results}}
    print(json.dumps({"results": results, "best": best, "machine": common.machine_info(),
                      "code": common.code_version()}, indent=1))


if __name__ == "__main__":
    main()
