"""Reading one chunk inside its watermark window and writing its output and report.

Pure I/O orchestration over a ``DataSourceDialect``: the same function runs in a Spark executor,
in tests, and in the CLI.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.normalize import last_images
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.dialects.base import DataSourceDialect, TableMeta
from airflow_provider_dblog.lake import snapshot_file, snapshot_rows, write_atomic
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
    key_lists = [selected.column(c).to_pylist() for c in meta.key_columns]
    keep = [tuple(vals) not in touched for vals in zip(*key_lists)]
    schema = selected.schema
    survivors = pa.Table.from_pylist([r for r in touched.values() if r is not None], schema=schema)
    return pa.concat_tables([selected.filter(pa.array(keep, pa.bool_())), survivors])


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

