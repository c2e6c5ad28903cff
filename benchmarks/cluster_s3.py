"""Snapshot and tail on a Spark standalone cluster with state and lake on S3, against local[2] with local
paths, in the same run.

    python benchmarks/cluster_s3.py [--rows 200000] [--changes 100000] [--rounds 2] [--tail-batches 20]

A private MariaDB, a SeaweedFS S3 server and a standalone master + worker (2 cores; the worker in its
own mount namespace, as in tests/e2e/test_cluster.py), all on this machine's 2 cores. Per round and
setup: ``dblog run`` (plan, snapshot on Spark with ``--driver-threads 0``, report, tail) of a fresh
copy of the table, then ``--changes`` row changes (statements of 1,000 rows) and a timed
``dblog tail --available-now`` whose ``--max-events`` is set from the binlog events the changes wrote so
that it runs about ``--tail-batches`` micro-batches. Prints JSON: per setup the seconds, the chunks and
micro-batches counted (chunk reports in the state; the tail query's ``commits/`` in its checkpoint), the
seconds per chunk and per micro-batch, and what the cluster with object storage adds to each.

Per chunk: the whole ``dblog run`` process, the Spark snapshot job (the driver's log line), and a chunk's
own read + lake commits (``seconds`` of its report, timed on the executor). Per micro-batch: the whole
``dblog tail`` process, the query (the driver's log line, from the query's start to its end), and a
micro-batch itself (its ``offsets/N`` to its ``commits/N`` in the checkpoint: decode, changelog commit,
MERGE into ``current``, progress recorded).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
from pathlib import Path

import common

from tests.support.seaweedfs import SeaweedS3
from tests.support.spark_cluster import SparkCluster

LOCAL, CLUSTER = "local[2], local paths", "cluster, S3"


# ---- what a run left behind (pure: tests/e2e/test_bench_smoke.py) ----------------------------------
def snapshot_job_seconds(log_text: str) -> float | None:
    """The Spark snapshot jobs of a ``dblog run`` log (``snapshot LABEL: a/b chunks of n tables, R rows in Ss``)."""
    found = re.findall(r"snapshot .*?: \d+/\d+ chunks of \d+ tables, \d+ rows in ([\d.]+)s", log_text)
    return round(sum(float(s) for s in found), 2) if found else None


def tail_query_seconds(log_text: str) -> float | None:
    """The tail's own time from its last ``tail: {...} rows in Ss`` line (query start to end)."""
    found = re.findall(r"tail: \{[^}]*\} rows in ([\d.]+)s", log_text)
    return float(found[-1]) if found else None


def batch_ids(checkpoint_dir: Path, kind: str = "commits") -> list[int]:
    """The micro-batches a streaming query's checkpoint holds (``commits/N``: finished; ``offsets/N``: planned)."""
    folder = Path(checkpoint_dir) / kind
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def batch_seconds(checkpoint_dir: Path, after: int = -1) -> list[float]:
    """Per micro-batch committed after batch ``after``: its ``offsets/N`` (written when the batch is planned)
    to its ``commits/N`` (written once its sink committed), by the files' times."""
    root = Path(checkpoint_dir)
    out = []
    for n in batch_ids(root):
        offsets = root / "offsets" / str(n)
        if n > after and offsets.exists():
            out.append(round((root / "commits" / str(n)).stat().st_mtime - offsets.stat().st_mtime, 3))
    return out


def max_events_for(events: int, batches: int) -> int:
    """``--max-events`` for about ``batches`` micro-batches over ``events`` binlog events (a batch ends at a
    transaction boundary within the limit, so batches hold whole transactions)."""
    return max(1, math.ceil(events / max(1, batches)))


def costs(results: list[dict]) -> dict:
    """Per setup the best (least) of each figure over the rounds, per chunk and per micro-batch, and what
    the cluster with S3 adds to each (its figure minus local[2]'s)."""
    best: dict = {}
    for name in sorted({r["setup"] for r in results}):
        rows = [r for r in results if r["setup"] == name]

        def least(key):
            values = [r[key] for r in rows if r.get(key) is not None]
            return min(values) if values else None

        chunks, batches = rows[0]["chunks"], least("micro_batches")
        b = {"chunks": chunks, "micro_batches": batches, "max_events": rows[0].get("max_events")}
        for key in ("run_seconds", "snapshot_job_seconds", "chunk_seconds_mean", "tail_seconds", "tail_query_seconds",
                    "first_batch_seconds", "batch_seconds_median"):
            b[key] = least(key)
        per = lambda total, n: round(total / n, 3) if total is not None and n else None  # noqa: E731
        b["per_chunk"] = {"run": per(b["run_seconds"], chunks), "snapshot_job": per(b["snapshot_job_seconds"], chunks),
                          "chunk_read_and_commit": b["chunk_seconds_mean"]}
        b["per_micro_batch"] = {"tail": per(b["tail_seconds"], batches),
                                "tail_query": per(b["tail_query_seconds"], batches),
                                "micro_batch_median": b["batch_seconds_median"]}
        best[name] = b
    out: dict = {"best": best}
    if LOCAL in best and CLUSTER in best:
        local, cluster = best[LOCAL], best[CLUSTER]

        def diff(a, b):
            return round(a - b, 3) if a is not None and b is not None else None

        out["cluster_s3_extra"] = {
            "run_seconds": diff(cluster["run_seconds"], local["run_seconds"]),
            "tail_seconds": diff(cluster["tail_seconds"], local["tail_seconds"]),
            "first_batch_seconds": diff(cluster["first_batch_seconds"], local["first_batch_seconds"]),
            "per_chunk": {k: diff(cluster["per_chunk"][k], local["per_chunk"][k]) for k in local["per_chunk"]},
            "per_micro_batch": {k: diff(cluster["per_micro_batch"][k], local["per_micro_batch"][k])
                                for k in local["per_micro_batch"]},
        }
    return out


def binlog_events(server, start: tuple[str, int], end: tuple[str, int]) -> int:
    """Binlog events from ``start`` up to ``end`` (both in one file: the bench's binlog never rotates)."""
    if start[0] != end[0]:
        raise RuntimeError(f"the binlog rotated during the changes ({start} .. {end})")
    rows = server.sql(f"SHOW BINLOG EVENTS IN '{start[0]}' FROM {int(start[1])}")
    return sum(1 for row in rows if int(row[1]) < end[1])


def chunk_seconds(state_dir: str, table: str, env: dict) -> list[float]:
    """Each chunk's own read + lake commits, from its report in the state (local or on S3)."""
    from airflow_provider_dblog.store.state import StateDir

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return [float(r["seconds"]) for _, r in sorted(StateDir(state_dir).reports(table).items())]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--chunk-size", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tail-batches", type=int, default=20,
                        help="micro-batches the timed tail should take (sets --max-events from the changes' events)")
    args = parser.parse_args()
    work, server = common.fresh_server("cluster-s3")
    (work / "driver").mkdir()
    results = []
    try:
        with SeaweedS3(work / "s3") as s3, SparkCluster(work / "cluster", hidden=work / "driver", env=s3.env()) as cluster:
            setups = {
                LOCAL: ({"DBLOG_SPARK_MASTER": "local[2]"}, str(work / "driver" / "state-{}"),
                        str(work / "driver" / "lake")),
                CLUSTER: ({**s3.env(), "DBLOG_SPARK_MASTER": cluster.master}, "s3://lake/state-{}", "s3://lake/lake"),
            }
            for r in range(args.rounds):
                for name, (env, state, sink) in (setups.items() if r % 2 == 0 else reversed(setups.items())):
                    table = f"bench.t_{r}_{len(results)}"
                    common.create_synthetic_table(server, table, args.rows)
                    state_dir = state.format(table)
                    checkpoint = work / "driver" / f"checkpoint-{table}"
                    run = common.run_timed([common.DBLOG, "run", "--source", server.uri(), "--table", table,
                                            "--state", state_dir, "--sink", sink, "--checkpoint", str(checkpoint),
                                            "--chunk-size", str(args.chunk_size), "--driver-threads", "0"],
                                           work / f"run-{table}.log", env=common.bench_env(env))
                    before = common.binlog_position(server)
                    conn = common.connect(server)
                    with conn.cursor() as cur:
                        for lo in range(0, args.changes, 1000):
                            start = lo % args.rows
                            cur.execute(f"UPDATE {table} SET a = a + 1 WHERE id > %s AND id <= %s",
                                        (start, start + 1000))
                    conn.close()
                    events = binlog_events(server, before, common.binlog_position(server))
                    max_events = max_events_for(events, args.tail_batches)
                    query_dir = checkpoint / "tail"  # the tail's one streaming query (every table)
                    done_before = batch_ids(query_dir)
                    last_before = done_before[-1] if done_before else -1
                    tail = common.run_timed([common.DBLOG, "tail", "--state", state_dir, "--sink", sink,
                                             "--checkpoint", str(checkpoint), "--available-now",
                                             "--driver-catch-up-mb", "0", "--max-events", str(max_events)],
                                            work / f"tail-{table}.log", env=common.bench_env(env))
                    batches = batch_seconds(query_dir, after=last_before)
                    chunk_s = chunk_seconds(state_dir, table, env)
                    chunks = run.json()["plan"]["chunks"]
                    run_log = (work / f"run-{table}.log").read_text(errors="replace")
                    tail_log = (work / f"tail-{table}.log").read_text(errors="replace")
                    results.append({
                        "round": r, "setup": name, "run_seconds": round(run.seconds, 2), "chunks": chunks,
                        "snapshot_job_seconds": snapshot_job_seconds(run_log),
                        "chunk_seconds": chunk_s,
                        "chunk_seconds_mean": round(statistics.fmean(chunk_s), 3) if chunk_s else None,
                        "tail_seconds": round(tail.seconds, 2), "tail_query_seconds": tail_query_seconds(tail_log),
                        "tail_rows": tail.json()["rows"][table], "binlog_events": events, "max_events": max_events,
                        "micro_batches": len(batches), "batch_seconds": batches,
                        "first_batch_seconds": batches[0] if batches else None,
                        "batch_seconds_median": (round(statistics.median(batches[1:] or batches), 3)
                                                 if batches else None),
                    })
                    common.log(f"round {r} {name}: run {run.seconds:.1f}s ({chunks} chunks, job "
                               f"{results[-1]['snapshot_job_seconds']}s), tail {tail.seconds:.1f}s "
                               f"({len(batches)} micro-batches of <= {max_events} events)")
    finally:
        server.stop()
    print(json.dumps({"results": results, **costs(results), "machine": common.machine_info(),
                      "code": common.code_version()}, indent=1))


if __name__ == "__main__":
    main()
