"""`dblog run` of one table, code at a git revision (A) against the working tree (B), alternating.

    python benchmarks/ab_run.py --table tpch.lineitem --chunk-size 375076 --rev 52bfdbe --pairs 3

Uses the benchmark's private MariaDB (`make bench` or `benchmarks/run.py --prepare-only` loads it).
Alternating A and B in one script cancels most of this machine's drift between runs; prints each
run's whole-process seconds and phases, then min and mean per side.
"""
from __future__ import annotations

import argparse
import shutil

import common


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--chunk-size", type=int, required=True)
    parser.add_argument("--rev", required=True, help="the A side (git revision)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--watermark", default="consistent_snapshot")
    parser.add_argument("--scale-tag", default="sf1")
    args = parser.parse_args()

    server = common.start_server(common.BENCH_DIR / f"mariadb-{args.scale_tag}")
    work = common.BENCH_DIR / "ab"
    shutil.rmtree(work, ignore_errors=True)
    _, revision_dir = common.export_revision(args.rev)
    seconds: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for i in range(args.pairs):
            for side in ("A", "B"):
                common.CODE["pythonpath"] = str(revision_dir) if side == "A" else None
                run_dir = work / f"{side}{i}"
                run = common.dblog_run(server, args.table, run_dir / "state", run_dir / "sink", args.chunk_size,
                                       args.watermark, log_path=run_dir / "log")
                if run.returncode != 0:
                    raise SystemExit(f"{side} run {i} failed: see {run_dir / 'log'}")
                seconds[side].append(run.seconds)
                common.log(f"{side} {i}: {run.seconds:.2f}s {run.extra.get('phases')}")
                shutil.rmtree(run_dir / "sink")
    finally:
        server.stop()
    for side, values in seconds.items():
        common.log(f"{side}: min {min(values):.2f}s, mean {sum(values) / len(values):.2f}s")


if __name__ == "__main__":
    main()
