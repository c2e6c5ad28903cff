"""Reading one chunk: watermark window -> SELECT -> merge, then its lake file and its report.

Engine-neutral I/O orchestration over a ``DataSourceDialect`` and the store: the same function runs in
a Spark task, in the local driver's reader threads, and in tests.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.errors import DblogError, SchemaChangedError
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.core.window import merge_window
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.store.lake import snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir, TablePlan

log = logging.getLogger(__name__)


READ_ATTEMPTS = 3


@dataclass(frozen=True)
class ChunkRead:
    rows: pa.Table          # the chunk's rows at HW, source columns only
    lw: BinlogPosition
    hw: BinlogPosition
    window_events: int
    selected: int
    meta: TableMeta         # the columns it was read with


def read_chunk(dialect: DataSourceDialect, meta: TableMeta, chunk: ChunkRange, strategy: str) -> ChunkRead:
    """The chunk's exact rows at its high watermark (DBLog's watermark window + normalize), read with the
    table's columns in force: if they changed since ``meta`` (a failed SELECT, a DDL statement inside the
    window), the chunk is read again with the columns the source has now."""
    for attempt in range(1, READ_ATTEMPTS + 1):
        try:
            return _read_once(dialect, meta, chunk, strategy)
        except DblogError as exc:
            live = dialect.describe_table(meta.qualified, meta.key_columns if meta.key_source == "chunk_key" else None)
            if attempt == READ_ATTEMPTS or (live == meta and not isinstance(exc, SchemaChangedError)):
                raise
            log.info("chunk %s/%d: %s; reading it with columns %s", meta.qualified, chunk.id, exc,
                     ", ".join(live.column_names))
            meta = live
    raise AssertionError("unreachable")


def _read_once(dialect: DataSourceDialect, meta: TableMeta, chunk: ChunkRange, strategy: str) -> ChunkRead:
    mark = dialect.watermark(strategy, meta)
    mark.low()
    selected = dialect.read_snapshot(meta, chunk)
    mark.high()
    lw, hw, events = mark.window()
    rows = merge_window(selected, meta.key_columns, chunk, events, lambda keys: dialect.sort_keys(meta, keys))
    return ChunkRead(rows, lw, hw, len(events), selected.num_rows, meta)


def run_chunk(state: StateDir, sink: str, plan: TablePlan, chunk_id: int, dialect: DataSourceDialect) -> dict:
    """Read one chunk, commit it to the lake (changelog rows + its range in ``current``), then write its
    report (the report last: a chunk with a report is always in the lake)."""
    table = plan.meta.qualified
    chunk = plan.chunk(chunk_id)
    started = time.time()
    read = read_chunk(dialect, plan.meta, chunk, plan.strategy)
    schema = dialect.arrow_schema(read.meta)
    hw_encoded = read.hw.as_snapshot().encode()
    lake = LakeTables(sink, table, schema, plan.meta.key_columns)
    applied = lake.commit_chunk(chunk_id, read.hw, snapshot_rows(read.rows, hw_encoded, chunk_id,
                                                                  int(time.time() * 1000), schema))
    bounds = chunk.to_dict()
    report = {"table": table, "chunk": chunk_id, "lo": bounds["lo"], "hi": bounds["hi"],
              "lw": read.lw.to_dict(), "hw": read.hw.to_dict(), "hw_encoded": hw_encoded,
              "rows": read.rows.num_rows, "selected": read.selected, "window_events": read.window_events,
              "strategy": plan.strategy, "applied": applied, "seconds": round(time.time() - started, 3),
              "finished_at": time.time()}
    state.write_report(table, chunk_id, report)
    log.info("chunk %s/%d %s: %d rows, window %s..%s with %d events, %.2fs", table, chunk_id, chunk.describe(),
             report["rows"], read.lw, read.hw, read.window_events, report["seconds"])
    return report
