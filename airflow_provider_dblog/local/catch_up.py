"""A small cold catch-up read in this process instead of a streaming query (local CLI runs only).

On a small binlog range the start of Spark and of a streaming query (JVM, Python data source workers,
the first micro-batch: ≈6 s here) costs more than the reading itself (≈40k changes/s on one core,
≈200 bytes per change of a 9-column row). The same reader as the streaming source (emit rule, chunk of
each key) commits the range to the lake like a micro-batch ending at ``now``; then ``[FROM, now)`` is
recorded as caught up, so a later streaming tail starts at ``now``.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import pyarrow as pa

from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.core.schema_events import SchemaChange
from airflow_provider_dblog.readers.binlog_reader import ChangeReader, TableStream
from airflow_provider_dblog.readers.change_committer import ChangeCommitter
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
DRIVER_CATCH_UP_BYTES = 64 * 1024 * 1024


def catch_up_in_driver(state: StateDir, sink: str, dialect: DataSourceDialect, table: str, offsets: TableOffsets,
                       now: BinlogPosition, limit_bytes: int = DRIVER_CATCH_UP_BYTES,
                       schema_changes: str = "evolve", gtid: Callable[[], str | None] = lambda: None) -> int | None:
    """Read ``[resume position, now)`` of ``table`` here if it is at most ``limit_bytes`` of binlog; returns
    the rows written, or None (the range is Spark's). ``gtid()``: the server's GTID state at ``now``."""
    if limit_bytes <= 0:
        return None
    start = state.resume_position(table, offsets.min_hw)
    size = dialect.range_bytes(start, now)
    if size is None or size > limit_bytes or now <= start:
        return None
    started = time.time()
    meta = state.table(table).meta
    schema = dialect.arrow_schema(meta)
    items = [item for _, item in ChangeReader({table: TableStream(meta, offsets, start)}, dialect).batches(now)]
    parts = [i for i in items if isinstance(i, pa.RecordBatch)]
    ddl = [i for i in items if isinstance(i, SchemaChange)]
    lake = LakeTables(sink, table, schema, meta.key_columns)
    ChangeCommitter(state, lake, dialect, schema_changes, sink=sink).commit(parts, ddl, now)
    rows = sum(p.num_rows for p in parts)
    state.write_caught_up(table, start, now, gtid())
    state.record_tail_positions({table: now}, gtid())
    log.info("tail: %s caught up in the driver: %d rows from %s bytes of binlog [%s, %s) in %.1fs "
             "(a streaming tail continues from there)", table, rows, f"{size:,}", start, now, time.time() - started)
    return rows
