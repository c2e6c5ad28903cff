"""A/B of the plain tail (no schema change): one revision against the working tree, same binlog.

    python benchmarks/tail_ab.py --rev 306c40b [--rows 100000] [--events 200000] [--rounds 2] [--path driver]
        [--rows-per-statement 1000]

A private MariaDB; per round and side a fresh table captured with that side's ``dblog run``, then the
same row changes on both tables (UPDATEs of 1,000 rows), then each side's ``dblog tail --available-now
--driver-catch-up-mb 0`` (the streaming path, one process; ``--path driver``: ``--driver-catch-up-mb 100000``,
the in-driver catch-up) over the same binlog range, the order alternating. Prints JSON with the best rows/s per side and their ratio (B / A).
"""
from __future__ import annotations

import argparse
import json

import common
from schema_change_tail import workload


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rev", required=True, help="side A: this git revision (side B: the working tree)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--path", choices=("spark", "driver"), default="spark")
    parser.add_argument("--rows-per-statement", type=int, default=1000,
                        help="rows each UPDATE (its own transaction) changes: 1 is the most events per row")
    args = parser.parse_args()
    revision = str(common.export_revision(args.rev)[1])
    common.CODE["pythonpath"] = None
    work, server = common.fresh_server("tail-ab")
    results = []
    try:
        for r in range(args.rounds):
            tables = {side: f"bench.{side}_{r}" for side in ("A", "B")}
            for side, table in tables.items():
                common.CODE["pythonpath"] = revision if side == "A" else None
                common.create_synthetic_table(server, table, args.rows)
                common.dblog_run(server, table, work / f"state-{table}", work / f"sink-{side}", 25_000,
                                 log_path=work / f"run-{table}.log")
            for table in tables.values():
                workload(server, table, args.events, 10_000, ddl=False, step=args.rows_per_statement)
            for side in (["A", "B"] if r % 2 == 0 else ["B", "A"]):
                common.CODE["pythonpath"] = revision if side == "A" else None
                table = tables[side]
                timed = common.dblog(["tail", "--state", str(work / f"state-{table}"), "--sink",
                                      str(work / f"sink-{side}"), "--available-now", "--driver-catch-up-mb",
                                      "0" if args.path == "spark" else "100000"],
                                     log_path=work / f"tail-{table}.log")
                rows = timed.json()["rows"][table]
                results.append({"round": r, "side": side, "seconds": round(timed.seconds, 2), "rows": rows,
                                "rows_per_s": round(rows / timed.seconds)})
                common.log(f"round {r} {side}: {rows} rows in {timed.seconds:.1f}s")
    finally:
        common.CODE["pythonpath"] = None
        server.stop()
    best = {side: max(x["rows_per_s"] for x in results if x["side"] == side) for side in ("A", "B")}
    print(json.dumps({"rev_a": args.rev, "path": args.path, "events": args.events, "rows": args.rows,
                      "rows_per_statement": args.rows_per_statement, "results": results, "best_rows_per_s": best,
                      "ratio_b_to_a": round(best["B"] / best["A"], 3), "machine": common.machine_info(),
                      "code": common.code_version()}, indent=1))


if __name__ == "__main__":
    main()
