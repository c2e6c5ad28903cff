"""One worker against two on a Spark standalone cluster (issue 27: "scaling with executors"), state and lake on
S3, in the same run.

    python benchmarks/cluster_workers.py [--rows 400000] [--changes 200000] [--rounds 2]

A private MariaDB, a SeaweedFS S3 server and a standalone master with one or two workers of ONE core each
(``tests/support/spark_cluster.SparkCluster(workers=, cores=1)``), all on this machine's cores; the order of the
two setups alternates between rounds. Per round and setup: ``dblog run`` of a fresh synthetic table (snapshot on
Spark: ``--driver-threads 0``, chunks of ``--chunk-size``), then ``--changes`` row changes (statements of 1,000
rows) and a timed ``dblog tail --available-now --driver-catch-up-mb 0`` (the streaming query: a binlog range is
split into interleaved shares decoded by as many tasks as the cluster has cores). Prints JSON: per setup the whole
``dblog run``, its Spark snapshot job, the whole tail and its query.

What it can show here: whether the work spreads over executors (1 task slot against 2). What it cannot: scaling
past this machine's two cores, which the driver, MariaDB and the S3 server share with the executors.
"""
from __future__ import annotations

import argparse
import json

import common
from cluster_s3 import snapshot_job_seconds, tail_query_seconds

from tests.support.seaweedfs import SeaweedS3
from tests.support.spark_cluster import SparkCluster


def one_setup(work, server, s3, workers: int, table: str, args) -> dict:
    with SparkCluster(work / f"cluster-{table}", hidden=work / "driver", env=s3.env(), cores=1,
                      workers=workers) as cluster:
        env = {**s3.env(), "DBLOG_SPARK_MASTER": cluster.master}
        state, sink, checkpoint = f"s3://lake/state-{table}", "s3://lake/lake", work / "driver" / f"checkpoint-{table}"
        common.create_synthetic_table(server, table, args.rows)
        run = common.run_timed([common.DBLOG, "run", "--source", server.uri(), "--table", table, "--state", state,
                                "--sink", sink, "--checkpoint", str(checkpoint), "--chunk-size", str(args.chunk_size),
                                "--driver-threads", "0"], work / f"run-{table}.log", env=common.bench_env(env))
        conn = common.connect(server)
        with conn.cursor() as cur:
            for lo in range(0, args.changes, 1000):
                start = lo % args.rows
                cur.execute(f"UPDATE {table} SET a = a + 1 WHERE id > %s AND id <= %s", (start, start + 1000))
        conn.close()
        tail = common.run_timed([common.DBLOG, "tail", "--state", state, "--sink", sink, "--checkpoint",
                                 str(checkpoint), "--available-now", "--driver-catch-up-mb", "0"],
                                work / f"tail-{table}.log", env=common.bench_env(env))
        run_log = (work / f"run-{table}.log").read_text(errors="replace")
        tail_log = (work / f"tail-{table}.log").read_text(errors="replace")
        return {"workers": workers, "cores_each": 1, "run_seconds": round(run.seconds, 2),
                "snapshot_job_seconds": snapshot_job_seconds(run_log), "chunks": run.json()["plan"]["chunks"],
                "tail_seconds": round(tail.seconds, 2), "tail_query_seconds": tail_query_seconds(tail_log),
                "tail_rows": tail.json()["rows"][table]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work, server = common.fresh_server("cluster-workers")
    (work / "driver").mkdir()
    results = []
    try:
        with SeaweedS3(work / "s3") as s3:
            for r in range(args.rounds):
                for workers in ((1, 2) if r % 2 == 0 else (2, 1)):
                    got = one_setup(work, server, s3, workers, f"bench.w{workers}_{r}", args)
                    results.append({"round": r, **got})
                    common.log(f"round {r}, {workers} worker(s): {json.dumps(got)}")
    finally:
        server.stop()
    best = {w: {k: min(x[k] for x in results if x["workers"] == w and x[k] is not None)
                for k in ("run_seconds", "snapshot_job_seconds", "tail_seconds", "tail_query_seconds")}
            for w in (1, 2)}
    print(json.dumps({"results": results, "best": best,
                      "two_over_one": {k: round(best[1][k] / best[2][k], 2) for k in best[1]},
                      "machine": common.machine_info(), "code": common.code_version()}, indent=1))


if __name__ == "__main__":
    main()
