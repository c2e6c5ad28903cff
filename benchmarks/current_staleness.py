"""Staleness of the lake's ``current`` table on a big table under a steady writer.

    python benchmarks/current_staleness.py --table lineitem --rate 2000 --merge-interval 30 --seconds 180

Loads nothing: uses the benchmark's private MariaDB (`benchmarks/run.py --prepare-only` loads TPC-H).
Snapshots the table with `dblog run`, starts `dblog tail --continuous --merge-interval M`, and while a
paced writer changes ``--rate`` rows/s it samples the source's binlog position (0.2 s) and the
position ``current`` records (its Delta app transaction ``dblog-tail``, 0.5 s). Staleness at a sample
is how long ago the source was where ``current`` is now; prints p50/p99/max and whether the tail kept
up (the last samples' staleness does not keep growing).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import threading
import time

import common

from airflow_provider_dblog.core.positions import SourcePosition


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", default="lineitem")
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--merge-interval", type=float, default=30)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--chunk-size", type=int, default=375_076)
    parser.add_argument("--scale-tag", default="sf1")
    args = parser.parse_args()
    from deltalake import DeltaTable

    server = common.start_server(common.BENCH_DIR / f"mariadb-{args.scale_tag}")
    work = common.BENCH_DIR / "staleness"
    shutil.rmtree(work, ignore_errors=True)
    state, sink, name = work / "state", work / "sink", f"tpch.{args.table}"
    tail = writer = None
    try:
        common.dblog_run(server, name, state, sink, args.chunk_size, "consistent_snapshot", log_path=work / "run.log")
        tail = subprocess.Popen([common.DBLOG, "tail", "--state", str(state), "--sink", str(sink), "--continuous",
                                 "--merge-interval", str(args.merge_interval), "--trigger-seconds", "1"],
                                env=common.bench_env(), stdout=subprocess.DEVNULL,
                                stderr=open(work / "tail.log", "w"), start_new_session=True, cwd=common.BENCH_DIR)
        source: list[tuple[float, SourcePosition]] = []
        stop = threading.Event()

        def sample_source():
            while not stop.is_set():
                file, pos = server.sql("SHOW MASTER STATUS")[0][:2]
                source.append((time.time(), SourcePosition.at(file, pos)))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample_source, daemon=True)
        sampler.start()
        time.sleep(20)  # the tail's JVM and first micro-batches
        keys = common.sample_keys(server, args.table, 50_000)
        column = common.WRITER_COLUMN[args.table]
        writer = common.PacedWriter(server, name, args.rate, keys, common.KEYS[args.table],
                                    f"{column} = {column} + 1", tick=0.05)
        writer.start()
        staleness: list[tuple[float, float]] = []
        started = time.time()
        current_uri = str(sink / name / "current")
        while time.time() - started < args.seconds:
            time.sleep(0.5)
            version = DeltaTable(current_uri).transaction_version("dblog-tail")
            if version is None:
                continue
            at = SourcePosition.from_version(version)
            now = time.time()
            passed = [t for t, p in source if p > at]
            staleness.append((now - started, now - passed[0] if passed else 0.0))
        wstats = writer.stop()
        writer = None
        stop.set()
        values = sorted(s for _, s in staleness)
        tail_third = [s for t, s in staleness if t > args.seconds * 2 / 3]
        first_third = [s for t, s in staleness if t < args.seconds / 3]
        result = {"table": name, "rows_per_s_asked": args.rate, "writer": wstats, "merge_interval_s": args.merge_interval,
                  "seconds": args.seconds, "samples": len(values),
                  "p50_s": round(common.percentile(values, 0.5), 2), "p99_s": round(common.percentile(values, 0.99), 2),
                  "max_s": round(max(values), 2) if values else None,
                  "kept_up": bool(tail_third and first_third and max(tail_third) <= max(first_third) + args.merge_interval)}
        print(json.dumps(result))
    finally:
        if writer:
            writer.stop()
        if tail and tail.poll() is None:
            import os
            import signal

            os.killpg(tail.pid, signal.SIGTERM)
            tail.wait(120)
        server.stop()


if __name__ == "__main__":
    main()
