"""(a) the columnar limit: connectorx -> Arrow -> pyarrow Parquet, a whole process.

    python benchmarks/cx_scan.py --uri mysql://root@127.0.0.1:PORT/tpch --table orders --key o_orderkey \
        --partitions 2 --out /tmp/orders.parquet

Prints {"rows", "read_s", "write_s"} as JSON. With --partitions N > 1 connectorx splits the scan
on --key into N ranges read by N threads (its own partitioning; the Parquet write is one file).
"""
from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import connectorx as cx
    import pyarrow.parquet as pq

    started = time.perf_counter()
    query = f"SELECT * FROM {args.table}"
    if args.partitions > 1:
        table = cx.read_sql(args.uri, query, return_type="arrow", partition_on=args.key,
                            partition_num=args.partitions)
    else:
        table = cx.read_sql(args.uri, query, return_type="arrow")
    read_s = time.perf_counter() - started
    pq.write_table(table, args.out, compression="snappy")
    write_s = time.perf_counter() - started - read_s
    print(json.dumps({"rows": table.num_rows, "read_s": round(read_s, 3), "write_s": round(write_s, 3)}))


if __name__ == "__main__":
    main()
