"""Mirror (the table's current state as Parquet) and verify (that mirror against the live source)."""
from __future__ import annotations

import logging
import tempfile

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.spark.mirror import write_mirror
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


def mirror(state_dir: str, sink: str, table: str, out: str, spark=None) -> dict:
    return write_mirror(state_dir, sink, table, out, spark)


def compare_with_source(state_dir: str, mirror_dir: str, table: str, examples: int = 5) -> dict:
    """Compare a mirror with a fresh read of the live source: missing, extra and different rows."""
    import pyarrow.parquet as pq

    state = StateDir(state_dir)
    meta = state.table(table).meta
    dialect = open_dialect(state.source(), state.options())
    try:
        source = dialect.read_snapshot(meta, ChunkRange(0, None, None))
    finally:
        dialect.close()
    mirrored = pq.read_table(mirror_dir, columns=list(meta.column_names)).cast(source.schema)
    keys = list(meta.key_columns)

    def by_key(t):
        return {tuple(r[k] for k in keys): r for r in t.to_pylist()}

    want, have = by_key(source), by_key(mirrored)
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    different = [k for k in want if k in have and want[k] != have[k]]
    result = {"table": table, "source_rows": len(want), "mirror_rows": len(have), "missing": len(missing),
              "extra": len(extra), "different": len(different), "equal": not (missing or extra or different),
              "examples": {"missing": missing[:examples], "extra": extra[:examples], "different": [
                  {"key": k, "columns": [c for c in want[k] if want[k][c] != have[k][c]]} for k in different[:examples]]}}
    log.info("verify %s: source %d rows, mirror %d rows, %d missing, %d extra, %d different", table, len(want),
             len(have), len(missing), len(extra), len(different))
    return result


def verify(state_dir: str, sink: str, table: str, out: str | None = None, spark=None) -> dict:
    """Mirror the table and compare it with the source; raises one line (after logging the details)
    when they differ."""
    out = out or tempfile.mkdtemp(prefix="dblog-mirror-")
    write_mirror(state_dir, sink, table, out, spark)
    result = compare_with_source(state_dir, out, table)
    if not result["equal"]:
        log.error("verify %s: %s", table, result)
        raise DblogError(f"mirror of {table} differs from the source: {result['missing']} missing, "
                         f"{result['extra']} extra, {result['different']} different rows")
    return result
