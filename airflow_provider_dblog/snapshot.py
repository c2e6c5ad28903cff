"""Reading one chunk inside its watermark window and writing its output and report.

Pure I/O orchestration over a ``DataSourceDialect``: the same function runs in a Spark executor,
in tests, and in the CLI.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.normalize import last_images
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.dialects.base import DataSourceDialect, TableMeta
from airflow_provider_dblog.lake import python_values_to_arrow, snapshot_file, snapshot_rows, write_atomic
from airflow_provider_dblog.state import StateDir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChunkRead:
    rows: pa.Table          # the chunk's rows at HW, source columns only
    lw: BinlogPosition
    hw: BinlogPosition
    window_events: int
    selected: int


def read_chunk(dialect: DataSourceDialect, meta: TableMeta, chunk: ChunkRange, strategy: str) -> ChunkRead:
    """The chunk's exact rows at its high watermark (DBLog's watermark window + normalize)."""
    mark = dialect.watermark(strategy, meta)
    mark.low()
    selected = dialect.read_snapshot(meta, chunk)
    mark.high()
    lw, hw, events = mark.window(meta)
    rows = merge_selected(dialect, meta, chunk, selected, events)
    return ChunkRead(rows, lw, hw, len(events), selected.num_rows)


def merge_selected(dialect: DataSourceDialect, meta: TableMeta, chunk: ChunkRange, selected: pa.Table,
                   events: list[ChangeEvent]) -> pa.Table:
    if not events:
        return selected
    with python_values_to_arrow():
        return _merge_selected(dialect, meta, chunk, selected, events)


def _merge_selected(dialect: DataSourceDialect, meta: TableMeta, chunk: ChunkRange, selected: pa.Table,
                    events: list[ChangeEvent]) -> pa.Table:
    keys = [e.key for e in events]
    bounds = [b for b in (chunk.lo, chunk.hi) if b is not None]
    sorted_keys = dialect.sort_keys(meta, keys + bounds)
    event_sk, bound_sk = sorted_keys[:len(keys)], sorted_keys[len(keys):]
    lo_sk = bound_sk[0] if chunk.lo is not None else None
    hi_sk = bound_sk[-1] if chunk.hi is not None else None
    inside = {k for k, sk in zip(keys, event_sk)
              if (lo_sk is None or sk >= lo_sk) and (hi_sk is None or sk < hi_sk)}
    touched = last_images(events, lambda k: k in inside)
    if not touched:
        return selected
    schema = selected.schema
    survivors = pa.Table.from_pylist([r for r in touched.values() if r is not None], schema=schema)
    return pa.concat_tables([selected.filter(pc.invert(rows_with_keys(selected, meta.key_columns, touched))),
                             survivors])


def rows_with_keys(table: pa.Table, key_columns, keys) -> pa.Array:
    """Which rows of ``table`` have one of ``keys`` (tuples of Python values, compared exactly). A chunk
    holds up to millions of rows and a window touches a few: the first key column is matched in Arrow
    where Arrow's equality is Python's (integers, text, bytes), and only its candidates in Python."""
    first = table.column(key_columns[0])
    candidates = None
    if pa.types.is_integer(first.type) or pa.types.is_string(first.type) or pa.types.is_binary(first.type):
        try:
            candidates = pc.is_in(first, value_set=pa.array({k[0] for k in keys}, first.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # a value the column cannot hold
            candidates = None
        if candidates is not None and len(key_columns) == 1:
            return candidates
    index = pc.indices_nonzero(candidates) if candidates is not None else pa.array(range(table.num_rows), pa.int64())
    found = [tuple(vals) in keys for vals in zip(*(table.column(c).take(index).to_pylist() for c in key_columns))]
    mask = [False] * table.num_rows
    for row, hit in zip(index.to_pylist(), found):
        mask[row] = hit
    return pa.array(mask, pa.bool_())


def run_chunk(state: StateDir, sink: str, table: str, chunk_id: int, dialect: DataSourceDialect) -> dict:
    """Read one chunk, replace its output file, then write its report (the report last: a chunk
    with a report always has its output)."""
    plan = state.table(table)
    chunk = plan.chunk(chunk_id)
    started = time.time()
    read = read_chunk(dialect, plan.meta, chunk, plan.strategy)
    schema = dialect.arrow_schema(plan.meta)
    path = snapshot_file(sink, table, chunk_id)
    write_atomic(snapshot_rows(read.rows, read.hw.as_snapshot().encode(), chunk_id, int(time.time() * 1000), schema),
                 path)
    report = {"table": table, "chunk": chunk_id, "lo": chunk.to_dict()["lo"], "hi": chunk.to_dict()["hi"],
              "lw": read.lw.to_dict(), "hw": read.hw.to_dict(), "hw_encoded": read.hw.as_snapshot().encode(),
              "rows": read.rows.num_rows, "selected": read.selected, "window_events": read.window_events,
              "strategy": plan.strategy, "path": str(path), "seconds": round(time.time() - started, 3),
              "finished_at": time.time()}
    state.write_report(table, chunk_id, report)
    log.info("chunk %s/%d %s: %d rows, window %s..%s with %d events, %.2fs", table, chunk_id, chunk.describe(),
             report["rows"], read.lw, read.hw, read.window_events, report["seconds"])
    return report

