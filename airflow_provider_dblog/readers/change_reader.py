"""Reading tables' changes from the source's change log (a MySQL binlog, a PostgreSQL slot's WAL; "binlog"
below): ``[start, end)`` -> decoded events -> the emit rule -> lake rows.

Engine-neutral and source-neutral: Spark's streaming source runs it in executor tasks, the local catch-up in
the driver; the dialect decodes (``DataSourceDialect.read_changes``). One read of the binlog serves every table (``ChangeReader``), each with its own offset map and floor:
an event is emitted only after its table's floor (where the lake already holds every change) and after
the high watermark of its key's chunk (Flink CDC's binlog split rule); past the largest HW everything
is. Keys are located among chunk boundaries in the database's own order (``DataSourceDialect.sort_keys``),
so case-insensitive and composite keys land in the right chunk.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.chunks import locate
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.schema_events import UNREADABLE, SchemaChange, SchemaVersion
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.store.lake import block_rows, event_rows
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir

LOOKUP_BATCH = 2000  # events located among chunk boundaries per sort_keys call


@dataclass(frozen=True)
class TableStream:
    """What reading one table's changes needs: its columns and key, its offset map, and its floor (the
    lake holds every change of the table up to it, so the read starts after it). ``resnapshot_hw``: every chunk was
    read again after it (``StateDir.resnapshots``), so a change the source cannot show there no longer matters."""

    meta: TableMeta
    offsets: TableOffsets
    floor: SourcePosition
    resnapshot_hw: SourcePosition | None = None

    def needs(self, pos: SourcePosition) -> bool:
        """Whether the lake needs the table's change at ``pos``: past the floor, and past some chunk's read."""
        return pos > max(self.floor, self.offsets.min_hw, self.resnapshot_hw or self.floor).as_snapshot()


def table_floor(state: StateDir, sink: str, dialect, name: str, min_hw: SourcePosition,
                recorded: dict | None = None) -> SourcePosition:
    """Where the lake holds every change of ``name`` up to: the state's record (``resume_position``) or
    the lake's own, whichever is further (another host's tail may have committed past the state)."""
    floor = state.resume_position(name, min_hw, recorded)
    meta = state.table(name).meta
    lake = LakeTables(sink, name, dialect.arrow_schema(meta), meta.key_columns).tail_position()
    return floor if lake is None else max(floor, lake.in_file_of(floor))


def needed_position(state: StateDir) -> SourcePosition | None:
    """The smallest position the capture still needs from the source's log: per planned table where its stream
    resumes (the tail's record, else its smallest chunk HW), or its plan's position while it has no offsets yet
    (its chunks' windows all start after it). What ``DataSourceDialect.release`` may let go before."""
    offsets = state.offsets() if state.has_offsets() else {}
    recorded, plans = state.tail_positions(), state.tables()
    needs = [state.resume_position(name, offsets[name].min_hw, recorded, plans) if name in offsets else plan.planned_at
             for name, plan in plans.items()]
    return min(needs) if needs else None


def release_log(state: StateDir, dialect: DataSourceDialect) -> None:
    """Let the source recycle the log the capture no longer needs (after the lake committed)."""
    needed = needed_position(state)
    if needed is not None:
        dialect.release(needed)


class TableChangeReader:
    """One table's emit rule: which events to write, and each one's chunk."""

    def __init__(self, meta: TableMeta, offsets: TableOffsets, dialect: DataSourceDialect):
        self.meta, self.offsets, self.dialect = meta, offsets, dialect
        self._boundary_sort_keys = None

    def chunks_of(self, keys: Sequence[tuple]) -> list[int]:
        if not self.meta.key_unique and any(None in k for k in keys):  # a --chunk-key column set to NULL
            raise DblogError(f"a change of {self.meta.qualified} has NULL in its --chunk-key "
                             f"{','.join(self.meta.key_columns)}: the lake cannot tell such rows apart; take the table "
                             f"out of the capture (--exclude), or give it a primary key and capture it again")
        if not self.offsets.boundaries:  # one chunk: every key is in it
            return [0] * len(keys)
        if self._boundary_sort_keys is None:
            self._boundary_sort_keys = self.dialect.sort_keys(self.meta, list(self.offsets.boundaries))
        return [locate(sk, self._boundary_sort_keys) for sk in self.dialect.sort_keys(self.meta, keys)]

    def chunks_of_block(self, block: ChangeBlock) -> Sequence[int] | np.ndarray:
        """Each row's chunk: by a binary search over the boundaries when the key is one integer column
        (integers order alike in every database), else as ``chunks_of``."""
        key = self.meta.key_columns
        if len(key) == 1 and self.offsets.boundaries:
            values = block.images.field(key[0])
            bounds = [b[0] if isinstance(b, (tuple, list)) and len(b) == 1 else None for b in self.offsets.boundaries]
            if (pa.types.is_integer(values.type) and values.null_count == 0
                    and all(type(b) is int for b in bounds)):
                return np.searchsorted(np.array(bounds, np.int64), values.to_numpy(), side="right")
        return self.chunks_of(block.keys(key))

    def emitted(self, events: Sequence[ChangeEvent]) -> tuple[list[ChangeEvent], list[int]]:
        """The events to write and each one's chunk (every stream row carries its key's chunk, so that
        a later rerun of that chunk supersedes it)."""
        chunks = self.chunks_of([e.key for e in events])
        kept = [(e, c) for e, c in zip(events, chunks) if self.offsets.should_emit(e.pos, c)]
        return [e for e, _ in kept], [c for _, c in kept]


class _Pending:
    """One table's events waiting to be turned into rows, in the columns of its current schema version."""

    def __init__(self, stream: TableStream, dialect: DataSourceDialect):
        self.stream, self.reader = stream, TableChangeReader(stream.meta, stream.offsets, dialect)
        self.schema = dialect.arrow_schema(stream.meta)
        self.floor = stream.floor.as_snapshot()
        self.events: list[ChangeEvent] = []
        self.other_key = False  # rows of a version keyed otherwise than the plan: the driver plans the table again

    def rows(self) -> list[pa.RecordBatch]:
        events, self.events = self.events, []
        return event_rows(*self.reader.emitted(events), self.schema).to_batches() if events else []

    def block_rows(self, block: ChangeBlock) -> list[pa.RecordBatch]:
        """The rows of a block (every one emitted: it lies past the table's largest HW and its floor)."""
        if not (block.first > self.floor and self.reader.offsets.should_emit(block.first)):
            raise RuntimeError(f"a block of {block.table} at {block.first}, before its floor or largest high watermark: "
                               f"the source ignored blocks_after; report it")
        return block_rows(block, self.reader.chunks_of_block(block), self.schema).to_batches()


class ChangeReader:
    """Changelog rows of several tables from one read of the binlog."""

    def __init__(self, tables: Mapping[str, TableStream], dialect: DataSourceDialect):
        self.tables, self.dialect = dict(tables), dialect
        self.rows_in_blocks = 0  # changes the source decoded column by column (``ChangeBlock``), for the logs

    def batches(self, end: SourcePosition, share: tuple[int, int] = (0, 1), begin: SourcePosition | None = None
                ) -> Iterator[tuple[str, pa.RecordBatch | SchemaChange]]:
        """(table, item) for the changes after each table's floor up to ``end``: each table's rows in
        batches in the columns they were decoded with (a schema change starts new batches), and the DDL
        statements naming it, in binlog order per table. Tables whose floor is at or past ``end`` are not
        read. ``begin`` (a transaction boundary from ``DataSourceDialect.split_range``): only the changes after
        it, one piece of a range several readers share."""
        live = {name: t for name, t in self.tables.items() if t.floor < end}
        if not live:
            return
        start = min(t.floor for t in live.values())
        if begin is not None:
            start = max(start, begin)
        pending = {name: _Pending(t, self.dialect) for name, t in live.items()}
        blocks_after = {name: max(t.floor, t.offsets.max_hw).as_snapshot() for name, t in live.items()}
        try:
            for item in self.dialect.read_changes(start, end, [t.meta for t in live.values()], share=share,
                                                  blocks_after=blocks_after):
                name = item.meta.qualified if isinstance(item, SchemaVersion) else item.table
                table = pending[name]
                if isinstance(item, ChangeBlock):
                    if not table.other_key:
                        yield from ((name, b) for b in table.rows())  # its table's events before it come first
                        self.rows_in_blocks += len(item)
                        yield from ((name, b) for b in table.block_rows(item))
                    continue
                if isinstance(item, SchemaVersion):
                    yield from ((name, b) for b in table.rows())  # the last rows of the version before
                    table.other_key = tuple(item.meta.key_columns) != tuple(table.stream.meta.key_columns)
                    table.schema = self.dialect.arrow_schema(item.meta)
                    continue
                if item.pos <= table.floor:  # the lake has it (a read for a table further behind)
                    continue
                if isinstance(item, SchemaChange) and item.kind == UNREADABLE:
                    if table.stream.needs(item.pos):  # else every chunk was read after it: nothing is lost
                        raise DblogError(item.statement)
                    continue
                if isinstance(item, ChangeEvent):
                    if not table.other_key:
                        table.events.append(item)
                        if len(table.events) >= LOOKUP_BATCH:
                            yield from ((name, b) for b in table.rows())
                    continue
                yield from ((name, b) for b in table.rows())  # rows before the statement come first
                yield name, item
            for name, table in pending.items():
                yield from ((name, b) for b in table.rows())
        finally:
            self.dialect.close()
