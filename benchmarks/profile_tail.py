"""Where the binlog tail spends its time, step by step, in one process without Spark.

    python benchmarks/profile_tail.py --state STATE --table bench.tail --start mysql-bin.000001:1234

Runs, over the same binlog range [start, current end):
1. python-mysql-replication's event stream with dblog's compiled row-image decoder
   (``MySqlDialect.binlog_items``, ``dialects/mysql_rows.py``);
2. + change events (``read_changes``);
3. the streaming source's ``read()`` of each partition it plans for the range, one after another:
   what the Spark tasks run (decode, conversion, emit rule, Python -> Arrow) before Spark converts
   and writes the batches.
Prints one JSON object with rows and seconds per step.
"""
from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--start", required=True, help="FILE:POS")
    args = parser.parse_args()

    from airflow_provider_dblog.core.positions import SourcePosition
    from airflow_provider_dblog.readers.change_reader import TableStream
    from airflow_provider_dblog.source import open_dialect
    from airflow_provider_dblog.spark.change_source import BinlogRange, BinlogStreamReader
    from airflow_provider_dblog.store.state import StateDir

    state = StateDir(args.state)
    plan = state.table(args.table)
    offsets = state.offsets()[args.table]
    dialect = open_dialect(state.source(), state.options())
    file, pos = args.start.rsplit(":", 1)
    start = SourcePosition.at(file, int(pos))
    end = dialect.current_position()
    out = {"start": str(start), "end": str(end)}

    t = time.perf_counter()
    n = sum(1 for kind, _, _ in dialect.stream.items(start, end, [plan.meta]) if kind == "row")
    out["1_binlog_items"] = {"rows": n, "seconds": round(time.perf_counter() - t, 3)}

    t = time.perf_counter()
    events = list(dialect.read_changes(start, end, [plan.meta]))
    out["2_read_changes"] = {"rows": len(events), "seconds": round(time.perf_counter() - t, 3)}

    reader = BinlogStreamReader(state, "", args.table, 0)
    # every partition the source plans for [start, end), one after another (a Spark task each)
    streams = {args.table: TableStream(plan.meta, offsets, start)}
    parts = [BinlogRange(end.to_dict(), streams)]
    per_part = []
    for part in parts:
        t = time.perf_counter()
        n = sum(b.num_rows for b in reader.read(part))
        per_part.append({"rows": n, "seconds": round(time.perf_counter() - t, 3)})
    out["3_source_read"] = {"rows": sum(p["rows"] for p in per_part),
                            "seconds": round(sum(p["seconds"] for p in per_part), 3), "partitions": per_part}
    for key in ("1_binlog_items", "2_read_changes", "3_source_read"):
        step = out[key]
        step["rows_per_s"] = round(step["rows"] / step["seconds"], 1) if step["seconds"] else None
    dialect.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
