"""Mirror (the table's current state as Parquet, read from the lake's ``current`` Delta table) and
verify (the lake against the live source, row by row and column by column)."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pyarrow as pa

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.exact import exact_key
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.atomic import write_parquet
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.object_store import check_sink
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
MIRROR_METADATA = ("_pos", "_op", "_ts_ms")


def current_rows(state_dir: str, sink: str, table: str) -> pa.Table:
    """The table's live rows as the lake holds them: its current columns plus ``_pos``, ``_op``, ``_ts_ms``."""
    check_sink(sink)
    state = StateDir(state_dir)
    meta = state.meta_in_force(table)
    schema = open_dialect(state.source(), state.options()).arrow_schema(meta)
    lake = LakeTables(sink, table, schema, meta.key_columns)
    lake.current()  # the lake's columns: the source's as of the last schema change the tail followed
    rows = lake.read_current([*lake.source.names, *MIRROR_METADATA])
    # nullable whatever the source declares: a zero date of a NOT NULL column is NULL in the lake
    return rows.cast(pa.schema([*(f.with_nullable(True) for f in lake.source),
                                *(rows.schema.field(n) for n in MIRROR_METADATA)]))


def mirror(state_dir: str, sink: str, table: str, out: str) -> dict:
    """Write the table's current state to ``out`` (a directory, replaced) as one Parquet file."""
    rows = current_rows(state_dir, sink, table)
    target = Path(out)
    if target.exists():
        shutil.rmtree(target)
    write_parquet(rows, target / "current.parquet")
    log.info("mirror of %s: %d rows in %s", table, rows.num_rows, out)
    return {"table": table, "rows": rows.num_rows, "out": str(target)}


def compare(state_dir: str, lake_rows: pa.Table, table: str, examples: int = 5) -> dict:
    """Compare the lake's rows of ``table`` with a fresh read of the live source: missing, extra and
    different rows, every column of the source compared."""
    state = StateDir(state_dir)
    planned = state.table(table).meta
    dialect = open_dialect(state.source(), state.options())
    try:  # the source's columns now, keyed as planned
        meta = dialect.describe_table(table, planned.chunk_key)
        source = dialect.read_snapshot(meta, ChunkRange(0, None, None))
    finally:
        dialect.close()
    missing_columns = [n for n in meta.column_names if n not in lake_rows.column_names]
    if missing_columns:
        raise DblogError(f"the lake's {table} lacks the source's columns {', '.join(missing_columns)}: run a tail "
                         f"(schema changes are followed from the binlog)")
    mirrored = lake_rows.select(list(meta.column_names)).cast(pa.schema([f.with_nullable(True) for f in source.schema]))
    keys = list(meta.key_columns)

    def same(value):  # a float NaN is kept as NaN (PostgreSQL has them): equal to itself here
        return "NaN" if isinstance(value, float) and value != value else value

    shown: dict[tuple, tuple] = {}  # a key as ``core.exact`` matches it -> its values, for the examples

    def by_key(t):
        out = {}
        for r in t.to_pylist():
            values = tuple(r[k] for k in keys)
            out[key := exact_key(values)] = {c: same(v) for c, v in r.items()}
            shown.setdefault(key, values)
        return out

    want, have = by_key(source), by_key(mirrored)
    doubled = mirrored.num_rows - len(have)  # a key the lake holds twice (a dict keeps one of them)
    missing = [shown[k] for k in want if k not in have]
    extra = [shown[k] for k in have if k not in want]
    different = [k for k in want if k in have and want[k] != have[k]]
    result = {"table": table, "source_rows": len(want), "lake_rows": mirrored.num_rows, "missing": len(missing),
              "extra": len(extra), "different": len(different), "doubled": doubled,
              "equal": not (missing or extra or different or doubled),
              "examples": {"missing": missing[:examples], "extra": extra[:examples], "different": [
                  {"key": shown[k], "columns": [c for c in want[k] if want[k][c] != have[k][c]]}
                  for k in different[:examples]]}}
    log.info("verify %s: source %d rows, lake %d rows, %d missing, %d extra, %d different", table, len(want),
             len(have), len(missing), len(extra), len(different))
    return result


def compare_with_source(state_dir: str, mirror_dir: str, table: str, examples: int = 5) -> dict:
    """``compare`` for a mirror written by ``mirror``."""
    import pyarrow.parquet as pq

    return compare(state_dir, pq.read_table(mirror_dir), table, examples)


def verify(state_dir: str, sink: str, table: str, out: str | None = None) -> dict:
    """The lake's ``current`` against the source; raises one line (after logging the details) when they
    differ. ``out``: also write the mirror there."""
    if out:
        mirror(state_dir, sink, table, out)
    result = compare(state_dir, current_rows(state_dir, sink, table), table)
    if not result["equal"]:
        log.error("verify %s: %s", table, result)
        raise DblogError(f"the lake's {table} differs from the source: {result['missing']} missing, "
                         f"{result['extra']} extra, {result['different']} different rows"
                         + (f", {result['doubled']} rows of keys it holds twice" if result["doubled"] else ""))
    return result
