"""Where a dblog snapshot spends its time, chunk by chunk, in one process without Spark.

    python benchmarks/profile_snapshot.py --source mysql://root@127.0.0.1:PORT --table tpch.orders \
        --chunk-size 187500 [--watermark consistent_snapshot] [--out DIR]

For every chunk of the plan it runs the same steps as ``airflow_provider_dblog.readers.chunk_reader.run_chunk``
(watermark low, connectorx SELECT, casts, watermark high, window read, output build, pyarrow write),
timing each, and also times a plain ``SELECT *`` of the same range with connectorx (no exactness
casts) to show what the casts cost. Chunks run one after another; with local[2] the ideal Spark
time is about half the sum. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def import_seconds() -> float:
    """What a fresh Python worker pays to import what a snapshot task imports."""
    import subprocess

    code = ("import time; t=time.perf_counter(); import pyarrow, pyarrow.parquet, connectorx, pymysql, "
            "pymysqlreplication, airflow_provider_dblog.readers, airflow_provider_dblog.source.mysql; "
            "print(time.perf_counter()-t)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--chunk-size", type=int, required=True)
    parser.add_argument("--watermark", default="consistent_snapshot")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    t = time.perf_counter()
    import pandas  # noqa: F401 - pyarrow imports it on first use; a worker pays it once, not per chunk
    pandas_import_s = time.perf_counter() - t
    import connectorx as cx
    import pyarrow as pa

    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.source.mysql.dialect import MySqlDialect
    from airflow_provider_dblog.source.mysql.types import cast_snapshot_column, quote_ident
    from airflow_provider_dblog.core.window import merge_window
    from airflow_provider_dblog.source.mysql.sql import range_condition, snapshot_sql
    from airflow_provider_dblog.store.atomic import write_parquet
    from airflow_provider_dblog.store.lake import snapshot_rows

    config = SourceConfig.parse(args.source)
    dialect = MySqlDialect(config)
    meta = dialect.describe_table(args.table)
    strategy = dialect.resolve_strategy(args.watermark, meta)
    started = time.perf_counter()
    chunks = dialect.split_chunks(meta, args.chunk_size)
    plan_s = time.perf_counter() - started
    schema = dialect.arrow_schema(meta)
    uri = f"mysql://{config.user}@{config.host}:{config.port}/{meta.database}"
    out = Path(args.out or tempfile.mkdtemp(prefix="dblog-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = defaultdict(float)
    rows = 0
    for chunk in chunks:
        t = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal t
            now = time.perf_counter()
            phases[name] += now - t
            t = now

        mark = dialect.watermark(strategy, meta)
        mark.low()
        lap("watermark_low")
        raw = cx.read_sql(uri, snapshot_sql(meta, chunk), return_type="arrow")
        lap("connectorx_select_with_casts")
        selected = pa.table([cast_snapshot_column(raw.column(f.name), meta.column(f.name), f.type) for f in schema],
                            schema=schema) if raw.num_rows else schema.empty_table()
        lap("arrow_casts")
        mark.high()
        lap("watermark_high")
        lw, hw, events = mark.window()
        lap("window_read")
        merged = merge_window(selected, meta.key_columns, chunk, events, lambda keys: dialect.sort_keys(meta, keys))
        lap("merge")
        table = snapshot_rows(merged, hw.as_snapshot().encode(), chunk.id, 0, schema)
        lap("build_output")
        write_parquet(table, out / f"chunk-{chunk.id}.parquet")
        lap("parquet_write")
        rows += merged.num_rows
        plain_sql = (f"SELECT * FROM {quote_ident(meta.database)}.{quote_ident(meta.name)} "
                     f"WHERE {range_condition(meta, chunk.lo, chunk.hi)}")
        cx.read_sql(uri, plain_sql, return_type="arrow")
        lap("reference_connectorx_plain_select")
    dialect.close()
    shutil.rmtree(out, ignore_errors=True)
    total = sum(v for k, v in phases.items() if not k.startswith("reference"))
    print(json.dumps({"table": args.table, "rows": rows, "chunks": len(chunks), "watermark": strategy,
                      "plan_s": round(plan_s, 3), "sequential_s": round(total, 3),
                      "sequential_rows_per_s": round(rows / total, 1),
                      "phases_s": {k: round(v, 3) for k, v in phases.items()},
                      "worker_import_s": round(import_seconds(), 3),
                      "pandas_import_s": round(pandas_import_s, 3), "cpu_count": os.cpu_count()}))


if __name__ == "__main__":
    main()
