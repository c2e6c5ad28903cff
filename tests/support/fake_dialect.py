"""An in-memory source for unit tests of the algorithm (like Flink CDC's mocked dialect): a tiny
"server" with tables, an append-only binlog of transactions, and the ``DataSourceDialect`` over it.

It is never the only test of a behaviour: the same behaviours run against a real MariaDB in
tests/integration and tests/e2e. Sources named ``memory://user@NAME:1`` open ``InMemoryDialect``
over the ``InMemoryServer`` registered under NAME.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import pyarrow as pa

from airflow_provider_dblog.core.chunks import ChunkRange, chunks_from_boundaries
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError, UnknownTable
from airflow_provider_dblog.core.events import ChangeEvent, row_change
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.retention import BinlogFile, BinlogRetention
from airflow_provider_dblog.core.schema_events import ColumnAction
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source import register_dialect
from airflow_provider_dblog.source.dialect import RangeScan

BINLOG = "fake-bin.000001"
ARROW_TYPES = {"bigint": pa.int64(), "int": pa.int64(), "varchar": pa.string()}
SERVERS: dict[str, "InMemoryServer"] = {}


@dataclass
class Transaction:
    commit: SourcePosition
    rows: list[tuple[str, dict | None, dict | None]]  # (table, before, after)

    def event_position(self, row: int) -> SourcePosition:
        """Rows events end before their transaction's commit, as in a real binlog."""
        return SourcePosition(self.commit.seq, self.commit.offset - 50, row, self.commit.file)


@dataclass
class InMemoryServer:
    """Tables of rows by key and the binlog of every transaction, positions 100 bytes apart."""

    name: str
    metas: dict[str, TableMeta] = field(default_factory=dict)
    rows: dict[str, dict[tuple, dict]] = field(default_factory=dict)
    binlog: list[Transaction] = field(default_factory=list)
    on_low: list[Callable[[], None]] = field(default_factory=list)      # writes after a low watermark
    on_select: list[Callable[[], None]] = field(default_factory=list)   # writes after a chunk's SELECT
    retention: BinlogRetention | None = None  # what binlog_retention answers (None: one file, no purge)
    purged_before: SourcePosition | None = None  # ensure_available refuses a position before it

    def __post_init__(self):
        SERVERS[self.name] = self

    @property
    def uri(self) -> str:
        return f"memory://tester@{self.name}:1"

    def create(self, table: str, columns: Sequence[tuple[str, str]], key: Sequence[str]) -> TableMeta:
        db, name = table.split(".", 1)
        meta = TableMeta(db, name, tuple(Column(c, t, t, c not in key) for c, t in columns), tuple(key), "primary")
        self.metas[table], self.rows[table] = meta, {}
        return meta

    def position(self) -> SourcePosition:
        return self.binlog[-1].commit if self.binlog else SourcePosition.at(BINLOG, 4)

    def _key(self, table: str, row: dict) -> tuple:
        return tuple(row[c] for c in self.metas[table].key_columns)

    def transaction(self, *changes: tuple[str, str, dict]) -> None:
        """Apply ``(table, op, row)`` changes (op: insert / update / delete / upsert) as one transaction."""
        logged = []
        for table, op, row in changes:
            current = self.rows[table]
            key = self._key(table, row)
            before = current.get(key)
            if op == "delete":
                if before is None:
                    continue
                del current[key]
                logged.append((table, before, None))
            else:
                if op == "insert" and before is not None:
                    raise ValueError(f"duplicate key {key}")
                current[key] = dict(row)
                logged.append((table, before, dict(row)))
        if logged:
            self.binlog.append(Transaction(SourcePosition.at(BINLOG, self.position().offset + 100), logged))

    def change_key(self, table: str, old: tuple, new_row: dict) -> None:
        """An UPDATE that changes the primary key: one binlog row with both images."""
        before = self.rows[table].pop(old)
        self.rows[table][self._key(table, new_row)] = dict(new_row)
        self.binlog.append(Transaction(SourcePosition.at(BINLOG, self.position().offset + 100),
                                       [(table, before, dict(new_row))]))

    def events(self, start: SourcePosition, end: SourcePosition | None, tables: set[str]) -> Iterator[ChangeEvent]:
        for tx in self.binlog:
            for i, (table, before, after) in enumerate(tx.rows):
                pos = tx.event_position(i)
                if pos <= start.as_snapshot() or (end is not None and pos > end.as_snapshot()) or table not in tables:
                    continue
                yield from row_change(table, pos, self.metas[table].key_columns, before, after)


class InMemoryWatermark:
    """The ``position`` strategy over the in-memory binlog, with the server's test hooks."""

    def __init__(self, server: InMemoryServer, meta: TableMeta):
        self.server, self.meta = server, meta
        self.lw = self.hw = None

    def low(self) -> None:
        self.lw = self.server.position()
        for write in self.server.on_low:
            write()

    def high(self) -> None:
        for write in self.server.on_select:
            write()
        self.hw = self.server.position()

    def window(self):
        return self.lw, self.hw, list(self.server.events(self.lw, self.hw, {self.meta.qualified}))


class InMemoryDialect:
    def __init__(self, server: InMemoryServer, config: SourceConfig | None = None):
        self.server = server
        self.config = config or SourceConfig.parse(server.uri)

    def close(self) -> None:
        pass

    def check_source(self) -> None:
        pass

    def list_tables(self) -> list[str]:
        return sorted(self.server.metas)

    def describe_table(self, table: str, chunk_key=None) -> TableMeta:
        if table not in self.server.metas:
            raise UnknownTable(f"unknown table {table} on {self.server.name}")
        meta = self.server.metas[table]
        if chunk_key:
            return TableMeta(meta.database, meta.name, meta.columns, tuple(chunk_key), "chunk_key")
        if not meta.key_columns:
            raise DblogError(f"table {table} has no primary key or NOT NULL unique key: add one, or pass "
                             f"--chunk-key COL[,COL]")
        return meta

    def split_chunks(self, meta: TableMeta, chunk_size: int) -> list[ChunkRange]:
        keys = sorted(self.server.rows[meta.qualified])
        return chunks_from_boundaries(keys[chunk_size::chunk_size])

    def estimate_rows(self, meta: TableMeta) -> int:
        return len(self.server.rows[meta.qualified])

    def resolve_strategy(self, strategy: str, meta: TableMeta) -> str:
        if strategy not in ("auto", "position"):
            raise DblogError(f"watermark strategy {strategy} needs a real server: use position")
        return "position"

    def prepare_stream(self, metas) -> dict:
        return {}

    def read_signals(self, table) -> list:
        return []

    def check_stream(self, tables) -> None:
        pass

    def drop_stream(self) -> list[str]:
        return []

    def release(self, position) -> None:
        self.released = position

    def check_startup(self, mode) -> None:
        """Every startup mode: ``startup_position`` answers for the ones without a snapshot."""

    def check_prepared(self) -> None:
        """No prepared transactions in memory."""

    def arrow_schema(self, meta: TableMeta) -> pa.Schema:
        return pa.schema([pa.field(c.name, ARROW_TYPES[c.data_type], c.nullable) for c in meta.columns])

    def read_snapshot(self, meta: TableMeta, chunk: ChunkRange) -> pa.Table:
        rows = [r for k, r in sorted(self.server.rows[meta.qualified].items())
                if (chunk.lo is None or k >= chunk.lo) and (chunk.hi is None or k < chunk.hi)]
        return pa.Table.from_pylist(rows, schema=self.arrow_schema(meta))

    def watermark(self, strategy: str, meta: TableMeta) -> InMemoryWatermark:
        return InMemoryWatermark(self.server, meta)

    def sort_keys(self, meta: TableMeta, keys) -> list[tuple]:
        return [tuple(k) for k in keys]

    def server_identity(self) -> dict:
        return {"server_id": 1}

    def current_position(self) -> SourcePosition:
        return self.server.position()

    def gtid_position(self) -> str | None:
        return None

    def gtid_at(self, position: SourcePosition) -> str | None:
        return None  # no GTIDs: a failover is refused (steps.failover)

    def gtids_read(self) -> dict[int, str]:
        return {}

    def position_after_gtid(self, gtid: str) -> SourcePosition:
        raise DblogError(f"the in-memory server has no GTIDs ({gtid})")

    def ensure_available(self, position: SourcePosition) -> None:
        if self.server.purged_before is not None and position < self.server.purged_before:
            raise DblogError(f"the binlog at {position} was purged (the in-memory server keeps from "
                             f"{self.server.purged_before})")

    def binlog_retention(self, needed=()) -> BinlogRetention:
        return self.server.retention or BinlogRetention(
            (BinlogFile(BINLOG, self.server.position().offset),), None, None, 0.0)

    def startup_position(self, mode) -> SourcePosition:
        """latest and position:FILE:POS (a commit position of this binlog); other modes are not supported."""
        if mode.kind == "latest":
            return self.server.position()
        commits = {tx.commit for tx in self.server.binlog} | {SourcePosition.at(BINLOG, 4)}
        if mode.kind == "position" and mode.position in commits:
            return mode.position
        raise DblogError(f"startup mode {mode}: not a commit position of the in-memory binlog")

    def read_changes(self, start, end, tables, share=(0, 1), blocks_after=None) -> Iterator[ChangeEvent]:
        part, parts = share
        for i, event in enumerate(self.server.events(start, end, {m.qualified for m in tables})):
            if i % parts == part:
                yield event

    def commit_after(self, start: SourcePosition, max_events: int) -> SourcePosition | None:
        seen, last = 0, None
        for tx in self.server.binlog:
            if tx.commit > start:
                seen += len(tx.rows) + 1
                last = tx.commit
                if seen >= max_events:
                    break
        return last

    def split_range(self, start: SourcePosition, end: SourcePosition, parts: int) -> list[SourcePosition]:
        """Commits cutting the range into ``parts`` pieces of about equal numbers of transactions."""
        commits = [tx.commit for tx in self.server.binlog if start < tx.commit < end]
        return sorted({commits[len(commits) * k // parts] for k in range(1, parts)}) if len(commits) >= parts else []

    def scan_changes(self, start, end, tables) -> RangeScan:
        found = any(start < tx.commit <= end and any(t in tables for t, _, _ in tx.rows) for tx in self.server.binlog)
        return RangeScan(not found, len(self.server.binlog), "changes found" if found else "")

    def scan_each(self, floors, end) -> dict:
        return {table: self.scan_changes(floor, end, [table]) for table, floor in floors.items()}

    def range_bytes(self, start, end) -> int | None:
        return max(0, end.offset - start.offset)

    def column_actions(self, change) -> list:
        """The in-memory source has no DDL: whatever changed is read again."""
        return [ColumnAction("other")]

    def keeps_values(self, before, after) -> bool:
        return before == after

    def quote_identifier(self, name: str) -> str:
        return f"`{name}`"

    def chunks_matching(self, meta, chunks, condition, lo, hi) -> list[int]:
        raise DblogError("filters need a real server")


register_dialect("memory", lambda config, options: InMemoryDialect(SERVERS[config.host], config))
