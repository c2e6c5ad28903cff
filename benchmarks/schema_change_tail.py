"""Tail throughput with a schema change every 10,000 row events, against the same workload without.

    python benchmarks/schema_change_tail.py [--rows 100000] [--events 200000] [--every 10000] [--rounds 2]

A private MariaDB; per round two identical tables are captured with ``dblog run``, then both get the
same row changes (UPDATEs of 1,000 rows each), and one of them also an ALTER TABLE every ``--every``
row events (alternately ADD COLUMN with a DEFAULT and DROP COLUMN of the previous one). Each table's
``dblog tail --available-now`` (the streaming Spark path: ``--driver-catch-up-mb 0``) then reads the
same binlog range, one after the other, alternating which goes first; throughput is row changes per
second of the tail process. Prints JSON; docs/benchmarks.md records it.
"""
from __future__ import annotations

import argparse
import json
import time

import common


def workload(server, table: str, events: int, every: int, ddl: bool, step: int = 1000) -> int:
    """Row changes (and DDL statements when ``ddl``) on ``table``, ``step`` rows per statement (each its own
    transaction); returns the DDL statements written."""
    conn = common.connect(server)
    statements = 0
    with conn.cursor() as cur:
        rows = int(server.sql(f"SELECT COUNT(*) FROM {table}")[0][0])
        for n, lo in enumerate(range(0, events, step)):
            start = lo % rows
            cur.execute(f"UPDATE {table} SET a = a + 1 WHERE id > %s AND id <= %s", (start, start + step))
            if ddl and (lo + step) % every == 0:
                k = (lo + step) // every
                if k % 2:
                    cur.execute(f"ALTER TABLE {table} ADD COLUMN x{k} INT DEFAULT {k}")
                else:
                    cur.execute(f"ALTER TABLE {table} DROP COLUMN x{k - 1}")
                statements += 1
    conn.close()
    return statements


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work, server = common.fresh_server("schema-change-tail")
    results = []
    try:
        for r in range(args.rounds):
            tables = {kind: f"bench.{kind}_{r}" for kind in ("plain", "ddl")}
            for table in tables.values():
                common.create_synthetic_table(server, table, args.rows)
                common.dblog_run(server, table, work / f"state-{table}", work / "sink", 25_000,
                                 log_path=work / f"run-{table}.log")
            workload(server, tables["plain"], args.events, args.every, ddl=False)
            ddl = workload(server, tables["ddl"], args.events, args.every, ddl=True)
            order = ["plain", "ddl"] if r % 2 == 0 else ["ddl", "plain"]
            for kind in order:
                table = tables[kind]
                timed = common.dblog(["tail", "--state", str(work / f"state-{table}"), "--sink", str(work / "sink"),
                                      "--available-now", "--driver-catch-up-mb", "0"],
                                     log_path=work / f"tail-{table}.log")
                rows = timed.json()["rows"][table]
                results.append({"round": r, "kind": kind, "seconds": round(timed.seconds, 2), "rows": rows,
                                "rows_per_s": round(rows / timed.seconds), "ddl_statements": ddl if kind == "ddl" else 0})
                common.log(f"round {r} {kind}: {rows} rows in {timed.seconds:.1f}s")
    finally:
        server.stop()
    best = {kind: max(x["rows_per_s"] for x in results if x["kind"] == kind) for kind in ("plain", "ddl")}
    print(json.dumps({"results": results, "best_rows_per_s": best,
                      "ratio_ddl_to_plain": round(best["ddl"] / best["plain"], 3), "target": 0.9,
                      "machine": common.machine_info(), "code": common.code_version()}, indent=1))


if __name__ == "__main__":
    main()
