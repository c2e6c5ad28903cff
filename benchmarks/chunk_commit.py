"""A chunk's first-read commit to the lake, alone: the shared file (`LakeTables.commit_chunk`: delta-rs
writes the changelog's file, `current` adds a copy) against its baseline beside it, the two delta-rs
writes it replaced (changelog append, then `current`'s append), and the bare Parquet write of the
same rows (what the former Parquet snapshot wrote). No database, no Spark: synthetic `orders`-like
rows on a local path.

    .venv/bin/python benchmarks/chunk_commit.py [--rows 94000] [--repeat 7]

Prints the best time of each, alternating the sides, and the ratios.
"""
from __future__ import annotations

import argparse
import datetime as dt
import random
import shutil
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_dblog.core.positions import SourcePosition  # noqa: E402
from airflow_provider_dblog.store.atomic import write_parquet  # noqa: E402
from airflow_provider_dblog.store.lake import snapshot_rows  # noqa: E402
from airflow_provider_dblog.store.lake_tables import LakeTables  # noqa: E402


def orders_like(n: int, seed: int = 1) -> pa.Table:
    rnd = random.Random(seed)
    words = ["carefully", "final", "deposits", "ironic", "pending", "accounts", "foo", "bar"]
    return pa.table({
        "o_orderkey": pa.array(range(n), pa.int32()),
        "o_custkey": pa.array([rnd.randrange(150_000) for _ in range(n)], pa.int32()),
        "o_orderstatus": pa.array([rnd.choice("OFP") for _ in range(n)]),
        "o_totalprice": pa.array([Decimal(rnd.randrange(10**7)) / 100 for _ in range(n)], pa.decimal128(15, 2)),
        "o_orderdate": pa.array([dt.date(1992, 1, 1) + dt.timedelta(days=rnd.randrange(2400)) for _ in range(n)]),
        "o_orderpriority": pa.array([rnd.choice(["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"])
                                     for _ in range(n)]),
        "o_clerk": pa.array([f"Clerk#{rnd.randrange(1000):09d}" for _ in range(n)]),
        "o_shippriority": pa.array([0] * n, pa.int32()),
        "o_comment": pa.array([" ".join(rnd.choice(words) for _ in range(6)) for _ in range(n)]),
    })


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=94_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    source = orders_like(args.rows)
    hw = SourcePosition.at("mysql-bin.000001", 1000)
    pos = hw.as_snapshot().encode()
    work = Path(tempfile.mkdtemp(prefix="dblog-chunk-commit-"))
    try:
        shared = LakeTables(str(work / "shared"), "db.t", source.schema, ["o_orderkey"])
        twice = LakeTables(str(work / "twice"), "db.t", source.schema, ["o_orderkey"])

        def shared_commit(i: int) -> None:
            assert shared.commit_chunk(i, hw, snapshot_rows(source, pos, i, 0, source.schema))

        def two_writes(i: int) -> None:  # the code before the shared file: append, then replace (a plain append)
            rows = snapshot_rows(source, pos, i, 0, source.schema)
            twice._append(rows)
            assert twice._replace_chunk(i, hw, rows)

        def parquet(i: int) -> None:
            write_parquet(source, work / "parquet" / f"chunk-{i}.parquet")

        sides = {"shared file": shared_commit, "two delta-rs writes": two_writes, "Parquet file only": parquet}
        best = {name: float("inf") for name in sides}
        for i in range(args.repeat):
            for name, run in sides.items():
                started = time.perf_counter()
                run(i)
                best[name] = min(best[name], time.perf_counter() - started)
        for name, seconds in best.items():
            print(f"{name:22s} {seconds * 1000:7.1f} ms (best of {args.repeat}, {args.rows:,} rows)")
        print(f"shared file / two writes: {best['shared file'] / best['two delta-rs writes']:.2f}; "
              f"shared file / Parquet only: {best['shared file'] / best['Parquet file only']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
