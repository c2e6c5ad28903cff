"""Bounding what one read of a binlog range hands over in memory.

A read's rows travel to the committing process (a Spark executor's rows are collected by the driver).
Up to ``inline_bytes`` of them go as they are; past that, the read writes each table's further rows as
uncommitted Parquet files into its changelog (``store.staged``) and hands over only their descriptions,
which the commit adds in one Delta version. So one transaction of any size is committed whole, exactly
once, in memory bounded by ``inline_bytes`` plus one file per table being written.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa

from airflow_provider_dblog.store.lake import changelog_uri
from airflow_provider_dblog.store.staged import StagedFile, stage

INLINE_BYTES = 64 * 1024 * 1024  # per read: rows handed over in memory before staging starts
FILE_BYTES = 128 * 1024 * 1024  # Arrow bytes per staged file (about a quarter of that in Parquet)


class ChangeStager:
    """Passes a read's items through, turning row batches into staged files once ``inline_bytes`` went."""

    def __init__(self, sink: str, inline_bytes: int = INLINE_BYTES, file_bytes: int = FILE_BYTES):
        self.sink, self.inline_bytes, self.file_bytes = sink, inline_bytes, max(1, file_bytes)
        self.inline, self.staging = 0, False
        self.buffers: dict[str, list[pa.RecordBatch]] = {}

    def items(self, source: Iterable[tuple[str, object]]) -> Iterator[tuple[str, object]]:
        """``source``'s (table, item) with row batches past the inline budget as (table, ``StagedFile``)."""
        for table, item in source:
            if not isinstance(item, pa.RecordBatch):  # a DDL statement: the rows before it are written first
                yield from self._flush(table)
                yield table, item
                continue
            if not self.staging and self.inline + item.nbytes <= self.inline_bytes:
                self.inline += item.nbytes
                yield table, item
                continue
            self.staging = True
            buffer = self.buffers.setdefault(table, [])
            if buffer and buffer[0].schema != item.schema:  # a new schema version: a file per version
                yield from self._flush(table)
                buffer = self.buffers.setdefault(table, [])
            buffer.append(item)
            if sum(b.nbytes for b in buffer) >= self.file_bytes:
                yield from self._flush(table)
            elif sum(b.nbytes for batches in self.buffers.values() for b in batches) >= 2 * self.file_bytes:
                yield from self._flush(max(self.buffers, key=lambda t: sum(b.nbytes for b in self.buffers[t])))
        for table in list(self.buffers):
            yield from self._flush(table)

    def _flush(self, table: str) -> Iterator[tuple[str, StagedFile]]:
        batches = self.buffers.pop(table, None)
        if batches:
            yield table, stage(changelog_uri(self.sink, table), pa.Table.from_batches(batches))
