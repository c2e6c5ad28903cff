"""The ``DataSourceDialect`` protocol (Flink CDC's name): exactly what the readers and steps call.

One implementation per database family (``source/mysql``, ``source/postgres``); tests/support/fake_dialect.py
is an in-memory one for tests of the algorithm. Tables are named ``DB.TABLE`` (MySQL) or ``SCHEMA.TABLE``
(PostgreSQL: a capture is one database) everywhere; callers never split, quote or compare them themselves.
Positions are ``SourcePosition`` for every source (``core.positions``: PostgreSQL LSNs via ``lsn_position``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Protocol, Sequence

import pyarrow as pa

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.checksums import ChunkChecksum
from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.retention import BinlogRetention
from airflow_provider_dblog.core.schema_events import ColumnAction, SchemaChange, SchemaVersion
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.core.tables import Column, TableMeta


@dataclass(frozen=True)
class RangeScan:
    """Whether a binlog range holds no change of some tables: ``clean`` proves it; otherwise ``reason``."""

    clean: bool
    events: int
    reason: str = ""


class Watermark(Protocol):
    """A snapshot window: ``low()`` before the SELECT, ``high()`` after it, then the events in it."""

    def low(self) -> None: ...

    def high(self) -> None: ...

    def window(self) -> tuple[SourcePosition, SourcePosition, list[ChangeEvent]]:
        """(LW, HW, the table's events between them)."""


class DataSourceDialect(Protocol):
    config: SourceConfig

    # ---- planning ----
    def check_source(self) -> None:
        """Raise ``DblogError`` naming the setting or privilege to fix if CDC cannot work here."""

    def list_tables(self) -> list[str]:
        """Every user table the login may read, as ``DB.TABLE`` / ``SCHEMA.TABLE`` (system schemas and dblog's own
        excluded)."""

    def describe_table(self, table: str, chunk_key: Sequence[str] | None = None) -> TableMeta: ...

    def split_chunks(self, meta: TableMeta, chunk_size: int) -> list[ChunkRange]: ...

    def estimate_rows(self, meta: TableMeta) -> int:
        """About how many rows the table has (progress and batch packing; exact for small tables)."""

    def resolve_strategy(self, strategy: str, meta: TableMeta) -> str:
        """``auto`` -> the best watermark strategy this server supports; others are checked."""

    def check_startup(self, mode: StartupMode) -> None:
        """Raise ``DblogError`` in one line if captures of this source cannot start in ``mode`` (the plan
        checks it first, before anything is read or written; needs no connection)."""

    def prepare_stream(self, metas: Sequence[TableMeta]) -> dict:
        """Make the source ready to stream ``metas``' tables (PostgreSQL: the capture's slot and publication)
        before any position is read; returns what the state's options record of it ({} where nothing is needed)."""

    def check_prepared(self) -> None:
        """After the plan's positions are taken, before any chunk is read: a transaction prepared before them
        and decided later must not fall between the snapshot and the stream. MySQL writes an XA transaction's
        rows at its prepare, so one still prepared is waited for a while, then refused in one line; PostgreSQL
        decodes a prepared transaction at its COMMIT PREPARED (nothing to do)."""

    def read_signals(self, table: str) -> list[tuple[str, str, str | None]]:
        """``(id, type, data)`` of every row of the signal table ``table`` (``core.signals``); ``DblogError`` in
        one line when it does not exist or cannot be read."""

    def check_stream(self, tables: Sequence[str]) -> None:
        """Raise ``DblogError`` in one line if this capture cannot stream ``tables`` (PostgreSQL: planned
        snapshot-only so it has no slot, the slot dropped, a table no longer in the publication); the tail asks
        before it reads anything."""

    def drop_stream(self) -> list[str]:
        """Remove what ``prepare_stream`` made at the source (``dblog drop``); what was removed."""

    def release(self, position: SourcePosition) -> None:
        """The lake holds every change before ``position``: the source may recycle its log before it (a slot
        advances; a binlog needs nothing)."""

    def renew_stream(self) -> bool:
        """Make the capture's change log anew after it was lost as a whole (``StreamLost``: a PostgreSQL slot the
        server invalidated or someone dropped, its publication still there), so reading every table again
        converges (``--on-purge resnapshot``); False where that cannot be (a binlog is never lost as a whole)."""

    # ---- snapshot ----
    def arrow_schema(self, meta: TableMeta) -> pa.Schema: ...

    def read_snapshot(self, meta: TableMeta, chunk: ChunkRange) -> pa.Table:
        """The chunk's rows as one SELECT sees them, in ``arrow_schema`` types."""

    def watermark(self, strategy: str, meta: TableMeta) -> Watermark: ...

    def sort_keys(self, meta: TableMeta, keys: Sequence[Key]) -> list[tuple]:
        """Values whose Python order (and equality) is the database's order of ``keys``."""

    # ---- binlog ----
    def server_identity(self) -> dict:
        """What names the server whose binlog positions these are (a promoted replica or another server
        answers with another identity: positions recorded on one mean nothing on the other)."""

    def current_position(self) -> SourcePosition: ...

    def gtid_position(self) -> str | None: ...

    def gtid_at(self, position: SourcePosition) -> str | None:
        """The server's GTID state at a transaction boundary of its binlog (None: no GTIDs here)."""

    def gtids_read(self) -> dict[int, str]:
        """Per GTID domain the last GTID the last ``read_changes`` passed (with the state at its start, the
        state at its end: what a failover resumes from)."""

    def position_after_gtid(self, gtid: str) -> SourcePosition:
        """The boundary right after the transaction ``gtid`` in this server's binlog (a promoted replica's
        own positions for what another server's binlog held); ``DblogError`` when it lacks it."""

    def ensure_available(self, position: SourcePosition) -> None:
        """Raise if the binlog needed to read from ``position`` was purged."""

    def binlog_retention(self, needed: Sequence[SourcePosition] = ()) -> BinlogRetention:
        """The server's binlog files (oldest first, sizes), its purge limits and clock, and what dates the
        files holding ``needed`` positions (``core/retention.py`` decides how close each is to its purge)."""

    def startup_position(self, mode: StartupMode) -> SourcePosition:
        """Where a startup mode without a snapshot starts: a transaction boundary the server still has
        (``DblogError`` in one line when purged, in the future, mid-transaction or not supported)."""

    def read_changes(self, start: SourcePosition, end: SourcePosition | None,
                     tables: Sequence[TableMeta], share: tuple[int, int] = (0, 1),
                     blocks_after: Mapping[str, SourcePosition] | None = None
                     ) -> Iterator[ChangeEvent | ChangeBlock | SchemaVersion | SchemaChange]:
        """Row changes of ``tables`` with ``start < pos <= end`` (end None: up to now); with
        ``share=(k, n)`` only the k-th of n interleaved shares, for parallel decoding. A table's changes
        after ``blocks_after[table]`` may come as ``ChangeBlock`` s (a source's column-by-column decoder),
        the others as ``ChangeEvent`` s."""

    def commit_after(self, start: SourcePosition, max_events: int) -> SourcePosition | None:
        """A transaction boundary about ``max_events`` events after ``start`` (a micro-batch limit)."""

    def split_range(self, start: SourcePosition, end: SourcePosition, parts: int) -> list[SourcePosition]:
        """Transaction boundaries inside ``(start, end)`` that cut the range into at most ``parts`` pieces of
        about equal size, each of which ``read_changes`` can read alone (every piece starts at a boundary); []
        when the source's log has one reader at a time (PostgreSQL's slot) or the range is too small to split."""

    def scan_changes(self, start: SourcePosition, end: SourcePosition, tables: Sequence[str]) -> RangeScan:
        """A cheap proof that ``[start, end)`` holds no row change of ``tables``."""

    def scan_each(self, floors: Mapping[str, SourcePosition], end: SourcePosition) -> dict[str, RangeScan]:
        """Per table the proof for ``[its floor, end)``, from one pass over the range whatever the tables."""

    def range_bytes(self, start: SourcePosition, end: SourcePosition) -> int | None:
        """Binlog bytes in ``[start, end)``; None when unknown."""

    # ---- drift detection ----
    def checksum_chunks(self, meta: TableMeta, chunks: Sequence[ChunkRange]
                        ) -> tuple[SourcePosition, dict[int, ChunkChecksum]]:
        """(P, each chunk's ``ChunkChecksum``) computed inside the database in one read view whose exact
        binlog position is P (``DblogError`` where the server cannot name it)."""

    # ---- re-snapshot selection ----
    def quote_identifier(self, name: str) -> str: ...

    def column_actions(self, change: SchemaChange) -> list[ColumnAction]:
        """What an ALTER ``change`` does to the rows, clause by clause, as far as its statement says;
        ``[ColumnAction(\"other\")]`` when it cannot tell (the table's chunks are then read again)."""

    def keeps_values(self, before: Column, after: Column) -> bool:
        """Whether a column's type change from ``before`` to ``after`` (a ``modify`` action) kept every value as it
        was; False: the table is read again."""

    def chunks_matching(self, meta: TableMeta, chunks: Sequence[ChunkRange], condition: str,
                        lo: Key | None, hi: Key | None) -> list[int]:
        """Ids of ``chunks`` holding a row with ``condition`` and ``lo <= key <= hi`` now."""

    def close(self) -> None: ...
