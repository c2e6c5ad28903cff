"""Reading a table's binlog changes: ``[start, end)`` -> decoded events -> the emit rule -> lake rows.

Engine-neutral: Spark's streaming source runs it in executor tasks, the local catch-up in the driver.
An event is emitted only after the high watermark of its key's chunk (Flink CDC's binlog split rule),
and past the largest HW everything is; keys are located among chunk boundaries in the database's own
order (``DataSourceDialect.sort_keys``), so case-insensitive and composite keys land in the right chunk.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa

from airflow_provider_dblog.core.chunks import locate
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.core.schema_events import SchemaChange, SchemaVersion
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.store.lake import event_rows

LOOKUP_BATCH = 2000  # events located among chunk boundaries per sort_keys call


class TableChangeReader:
    """One table's changelog rows from the binlog, with its offset map's emit rule."""

    def __init__(self, meta: TableMeta, offsets: TableOffsets, dialect: DataSourceDialect):
        self.meta, self.offsets, self.dialect = meta, offsets, dialect
        self._boundary_sort_keys = None

    def chunks_of(self, keys: Sequence[tuple]) -> list[int]:
        if self._boundary_sort_keys is None:
            self._boundary_sort_keys = self.dialect.sort_keys(self.meta, list(self.offsets.boundaries))
        return [locate(sk, self._boundary_sort_keys) for sk in self.dialect.sort_keys(self.meta, keys)]

    def emitted(self, events: Sequence[ChangeEvent]) -> tuple[list[ChangeEvent], list[int]]:
        """The events to write and each one's chunk (every stream row carries its key's chunk, so that
        a later rerun of that chunk supersedes it)."""
        chunks = self.chunks_of([e.key for e in events])
        kept = [(e, c) for e, c in zip(events, chunks) if self.offsets.should_emit(e.pos, c)]
        return [e for e, _ in kept], [c for _, c in kept]

    def batches(self, start: BinlogPosition, end: BinlogPosition, share: tuple[int, int] = (0, 1)
                ) -> Iterator[pa.RecordBatch | SchemaChange]:
        """The range's changelog rows, each batch in the columns its rows were decoded with (a schema
        change starts new batches), and the DDL statements naming the table, in binlog order."""
        schema = self.dialect.arrow_schema(self.meta)
        pending: list[ChangeEvent] = []
        other_key = False  # rows of a version keyed otherwise than the plan: the driver plans the table again
        try:
            for item in self.dialect.read_changes(start, end, [self.meta], share=share):
                if isinstance(item, ChangeEvent):
                    if not other_key:
                        pending.append(item)
                    if len(pending) < LOOKUP_BATCH:
                        continue
                if pending:  # a full batch, or the last rows of a schema version
                    yield from event_rows(*self.emitted(pending), schema).to_batches()
                    pending = []
                if isinstance(item, SchemaVersion):
                    other_key = tuple(item.meta.key_columns) != tuple(self.meta.key_columns)
                    schema = self.dialect.arrow_schema(item.meta)
                elif isinstance(item, SchemaChange):
                    yield item
            if pending:
                yield from event_rows(*self.emitted(pending), schema).to_batches()
        finally:
            self.dialect.close()
