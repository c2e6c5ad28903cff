"""A small cold catch-up read in this process instead of a streaming query (local CLI runs only).

On a small binlog range the start of Spark and of a streaming query (JVM, Python data source workers,
the first micro-batch: ≈6 s here) costs more than the reading itself (≈40k changes/s on one core,
≈200 bytes per change of a 9-column row). The same reader as the streaming source (emit rule, chunk of
each key) commits the range to the lake like a micro-batch ending at ``now``; then ``now`` is recorded as
every table's tail position, so a later streaming tail starts there.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import pyarrow as pa

from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.parallel import for_each_table
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.schema_events import SchemaChange
from airflow_provider_dblog.readers.change_reader import ChangeReader, TableStream
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.store.object_store import table_threads
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
DRIVER_CATCH_UP_BYTES = 64 * 1024 * 1024


def catch_up_tables_in_driver(state: StateDir, sink: str, dialect: DataSourceDialect, tables: dict[str, TableOffsets],
                              now: SourcePosition, limit_bytes: int, committers: Callable,
                              gtid: Callable[[], str | None] = lambda: None) -> dict[str, int] | None:
    """Read each table's ``[resume position, now)`` here, in one read of the binlog from the smallest of them,
    if that is at most ``limit_bytes`` of binlog, and commit each table's part through ``committers(dialect,
    table)``; returns the rows written per table, or None (the range is Spark's). ``gtid()``: the server's
    GTID state at ``now``."""
    if limit_bytes <= 0 or not tables:
        return None
    recorded = state.tail_positions()  # read once: per table it is a parse of every table's record
    plans = state.tables()
    floors = {name: state.resume_position(name, offsets.min_hw, recorded, plans) for name, offsets in tables.items()}
    start = min(floors.values())
    size = dialect.range_bytes(start, now)
    if size is None or size > limit_bytes or now <= start:
        return None
    started = time.time()
    plans = state.tables()  # read once: on object storage each read of the plan is a request
    metas = {name: state.table_of(plans, name).meta for name in tables}
    resnapshots = state.resnapshots()
    streams = {name: TableStream(metas[name], tables[name], floors[name], resnapshots.get(name)) for name in tables}
    parts: dict[str, list[pa.RecordBatch]] = {name: [] for name in tables}
    ddl: dict[str, list[SchemaChange]] = {name: [] for name in tables}
    reader = ChangeReader(streams, dialect)
    for name, item in reader.batches(now):
        (ddl if isinstance(item, SchemaChange) else parts)[name].append(item)
    read = time.time()
    at_now = gtid()

    def commit(name: str) -> None:
        committers(dialect, name).commit(parts[name], ddl[name], now)

    for_each_table(commit, sorted(tables), "tail: the driver's catch-up committed", table_threads(sink))
    rows = {name: sum(p.num_rows for p in parts[name]) for name in tables}
    committed = time.time()
    # one record for every table, after every commit (not a caught-up file per table: three requests each on
    # object storage): a crash before it reads the range again, and each table's lake takes only what it lacks
    state.record_tail_positions(dict.fromkeys(tables, now), at_now)
    log.info("tail: %d tables caught up in the driver: %d rows (%d decoded column by column) from %s bytes of "
             "binlog [%s, %s) in %.1fs (read %.1fs, commits %.1fs; a streaming tail continues from there)",
             len(tables), sum(rows.values()), reader.rows_in_blocks, f"{size:,}", start, now, time.time() - started,
             read - started, committed - read)
    return rows
