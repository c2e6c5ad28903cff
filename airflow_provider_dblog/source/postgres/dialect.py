"""``PostgresDialect``: the ``DataSourceDialect`` for PostgreSQL 10+, composed of the modules beside it.

A capture is one database (``postgresql://USER@HOST:PORT/DB``), its tables ``SCHEMA.TABLE``; planning,
chunking, chunk reads (``COPY`` -> Arrow), positions (WAL locations through ``core.positions.lsn_position``),
server identity and key order work as for MySQL, and the lake is the same. A streaming capture (``--startup
initial`` or ``latest``) owns a ``pgoutput`` replication slot and a publication (``slot``), created by the plan
and recorded in the state's options; its changes are read from the slot (``stream``) and the slot is advanced
to what the lake still needs (``release``).
"""
from __future__ import annotations

from typing import Iterator, Mapping, NoReturn, Sequence

import psycopg2
import pyarrow as pa

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.checksums import ChunkChecksum
from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError, StreamLost
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import SourcePosition, lsn_position, position_lsn
from airflow_provider_dblog.core.retention import BinlogRetention
from airflow_provider_dblog.core.schema_events import ColumnAction, SchemaChange, SchemaVersion
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.dialect import RangeScan
from airflow_provider_dblog.source.postgres import checksum, reader, retention, schema, slot, splitter, watermarks
from airflow_provider_dblog.source.postgres.connection import PostgresClient, first_line
from airflow_provider_dblog.source.postgres.keys import KeyOrder
from airflow_provider_dblog.source.postgres.pgoutput import format_lsn
from airflow_provider_dblog.source.postgres.stream import SlotReader
from airflow_provider_dblog.source.postgres.sql import at_most, quote_ident, range_condition, snapshot_sql, table_sql
from airflow_provider_dblog.source.postgres.values import arrow_type

STARTUP_MODES = ("initial", "snapshot-only", "latest")
NO_STREAM = ("this capture was planned with --startup snapshot-only: it has no replication slot, so it has no "
             "stream; capture again with --startup initial (a new --state and --sink)")


def no_stream(what: str) -> NoReturn:
    raise DblogError(f"{what}: {NO_STREAM}")


def arrow_schema(meta: TableMeta) -> pa.Schema:
    """The lake's columns of a table: ``values.arrow_type`` of each column's (base) type and typmod."""
    return pa.schema([pa.field(c.name, arrow_type(c.type_oid or 0, -1 if c.typmod is None else c.typmod),
                               c.nullable or c.name in meta.key_columns) for c in meta.columns])


class PostgresDialect:
    def __init__(self, config: SourceConfig, options: dict | None = None):
        options = options or {}
        self.config = config
        self.client = PostgresClient(config)
        self.key_order = KeyOrder(self.client)
        self.slot, self.publication = options.get("slot"), options.get("publication")
        self.given_publication = bool(options.get("publication_given"))  # the owner's (--publication): never dropped
        self.stream_dropped = bool(options.get("stream_dropped"))  # by ``dblog drop``: never made anew

    @property
    def stream(self) -> SlotReader:
        if not self.slot:
            no_stream("reading changes")
        return SlotReader(self.client, self.slot, self.publication)

    def close(self) -> None:
        self.client.close()

    # ---- planning ----
    def check_source(self) -> None:
        schema.check_source(self.client)

    def check_startup(self, mode: StartupMode) -> None:
        if mode.kind not in STARTUP_MODES:
            raise DblogError(f"--startup {mode} is not available for PostgreSQL sources (a slot streams from its "
                             f"creation on): use initial, latest or snapshot-only")

    def check_prepared(self) -> None:
        """pgoutput (without two_phase) decodes a prepared transaction whole at its COMMIT PREPARED."""

    def prepare_stream(self, metas: Sequence[TableMeta]) -> dict:
        """The capture's publication (with ``metas``' tables) and slot, created unless they exist; returns the
        state's options naming them. Checks first: wal_level, the REPLICATION privilege, replica identities."""
        slot.check_stream_settings(self.client)
        slot.check_replica_identity(self.client, metas)
        if not self.slot:
            names = slot.new_stream_options()
            self.slot, self.publication = names["slot"], self.publication or names["publication"]
        if self.given_publication and slot.published_tables(self.client, self.publication) is None:
            raise DblogError(f"publication {self.publication} (--publication) does not exist on {self.client.where}: "
                             f"have the tables' owner create it (CREATE PUBLICATION {self.publication} FOR TABLE ... "
                             f"WITH (publish_via_partition_root = true)), or leave out --publication")
        created = slot.ensure_publication(self.client, self.publication, [m.qualified for m in metas],
                                          given=self.given_publication)
        try:
            slot.ensure_slot(self.client, self.slot)
        except DblogError:
            if created:  # nothing records it yet: a failed plan leaves nothing behind
                slot.drop(self.client, None, self.publication)
            raise
        return {"slot": self.slot, "publication": self.publication,
                **({"publication_given": True} if self.given_publication else {})}

    def read_signals(self, table: str) -> list[tuple[str, str, str | None]]:
        schema_name, name = schema.split_name(table)
        try:
            rows = self.client.query(f"SELECT id::text, type::text, data::text FROM {quote_ident(schema_name)}."
                                     f"{quote_ident(name)}", ())
        except psycopg2.Error as exc:
            raise DblogError(f"cannot read the signal table {table}: {first_line(exc, self.config.password)}; create "
                             f"it (CREATE TABLE {table} (id text PRIMARY KEY, type text NOT NULL, data text)) and let "
                             f"{self.config.user} SELECT it") from None
        return [(i, t, d) for i, t, d in rows]

    def check_stream(self, tables: Sequence[str]) -> None:
        """A snapshot-only capture has no slot; a dropped slot (``dblog drop``, a DBA) took the changes with it;
        an operation, rows or columns the publication no longer publishes are left out of the stream
        (``slot.publication_problem``; the stream checks it again before each read, with the tables that exist)."""
        if not self.slot:
            no_stream("dblog tail")
        if slot.slot_state(self.client, self.slot) is None and not self._renewable():
            raise StreamLost(f"the capture's replication slot {self.slot} is gone from {self.client.where} ("
                             f"{'dblog drop' if self.stream_dropped else 'its publication ' + str(self.publication) + ' too'}"
                             f"): capture again (dblog run with a new --state and --sink)")
        problem = slot.publication_problem(self.client, self.publication, [])  # the tables: before each read
        if problem:
            raise DblogError(problem)

    def drop_stream(self) -> list[str]:
        """Drop the capture's slot and publication (``dblog drop``); what was dropped."""
        return slot.drop(self.client, self.slot, None if self.given_publication else self.publication)

    def renew_stream(self) -> bool:
        """A new slot of the same name for a capture whose slot the server invalidated or someone dropped (its
        publication is still there: not a ``dblog drop``). It starts at the server's WAL now, after every
        position the lake holds, so each table's floor is before it and the tail reads every table again."""
        if not self._renewable():
            return False
        state = slot.slot_state(self.client, self.slot)
        if state is not None and state.wal_status != "lost":
            return False
        if state is not None:
            slot.drop(self.client, self.slot, None)
        slot.ensure_slot(self.client, self.slot)
        return True

    def _renewable(self) -> bool:
        """Not after ``dblog drop`` (the state says so; an owner's publication outlives it), nor without the
        capture's publication (a DBA who drops both gave the capture up)."""
        return (bool(self.slot) and not self.stream_dropped
                and slot.published_tables(self.client, self.publication) is not None)

    def release(self, position: SourcePosition) -> None:
        """The lake holds every change before ``position``: the slot may let the server recycle that WAL."""
        if self.slot:
            slot.advance(self.client, self.slot, position_lsn(position))

    def list_tables(self) -> list[str]:
        return schema.list_tables(self.client)

    def describe_table(self, table: str, chunk_key: Sequence[str] | None = None) -> TableMeta:
        return schema.describe_table(self.client, table, chunk_key, self.publication)

    def split_chunks(self, meta: TableMeta, chunk_size: int) -> list[ChunkRange]:
        return splitter.split_chunks(self.client, meta, chunk_size)

    def estimate_rows(self, meta: TableMeta) -> int:
        return splitter.approximate_rows(self.client, meta)

    def resolve_strategy(self, strategy: str, meta: TableMeta) -> str:
        return watermarks.resolve_strategy(strategy)

    # ---- snapshot ----
    def arrow_schema(self, meta: TableMeta) -> pa.Schema:
        return arrow_schema(meta)

    def read_snapshot(self, meta: TableMeta, chunk: ChunkRange) -> pa.Table:
        """The chunk's rows through ``COPY``, in the window's transaction when one is open (``watermark``),
        else in a transaction of its own."""
        client = self.client
        conn = client.snapshot_conn
        own = not client.in_snapshot
        select, params = snapshot_sql(meta, chunk)
        try:
            rows = reader.read_rows(conn, meta, arrow_schema(meta), select, params)
        except psycopg2.Error as exc:
            client.drop_snapshot()
            raise DblogError(f"reading chunk {chunk.id} of {meta.qualified} failed: "
                             f"{first_line(exc, self.config.password)}") from None
        except BaseException:
            client.drop_snapshot()  # a parse error may leave the connection inside the COPY
            raise
        if own:
            conn.rollback()
        return rows

    def watermark(self, strategy: str, meta: TableMeta):
        watermarks.resolve_strategy(strategy)
        return watermarks.SnapshotWindow(self.client, meta)

    def sort_keys(self, meta: TableMeta, keys: Sequence[Key]) -> list[tuple]:
        return self.key_order.sort_keys(meta, keys)

    # ---- positions ----
    def server_identity(self) -> dict:
        """The cluster's ``system_identifier`` (``pg_control_system()``; a physical replica shares it) and the
        timeline of its last checkpoint (a promoted replica starts a new one)."""
        system, timeline = self.client.query(
            "SELECT s.system_identifier::text, c.timeline_id FROM pg_control_system() s, pg_control_checkpoint() c",
            ())[0]
        return {"system_identifier": str(system), "timeline": int(timeline)}

    def current_position(self) -> SourcePosition:
        return lsn_position(self.client.current_lsn())

    def gtid_position(self) -> str | None:
        return None

    def gtid_at(self, position: SourcePosition) -> str | None:
        return None

    def gtids_read(self) -> dict[int, str]:
        return {}

    def position_after_gtid(self, gtid: str) -> SourcePosition:
        raise DblogError("PostgreSQL has no GTIDs: a capture cannot move to another server by GTID")

    # ---- the stream ----
    def ensure_available(self, position: SourcePosition) -> None:
        """The slot still holds the WAL from ``position`` on (a read from before its ``confirmed_flush_lsn``
        would silently start later: refused like a purged binlog)."""
        if not self.slot:
            return  # snapshot-only: nothing streams
        slot.check_holds(self.client, self.slot, position_lsn(position), str(position))

    def binlog_retention(self, needed: Sequence[SourcePosition] = ()) -> BinlogRetention:
        return retention.wal_retention(self.client, self.slot, needed)

    def startup_position(self, mode: StartupMode) -> SourcePosition:
        if mode.kind == "latest":
            return self.current_position()
        raise DblogError(f"--startup {mode} is not available for PostgreSQL sources: use initial, latest or "
                         f"snapshot-only")

    def read_changes(self, start: SourcePosition, end: SourcePosition | None,
                     tables: Sequence[TableMeta], share: tuple[int, int] = (0, 1),
                     blocks_after: Mapping[str, SourcePosition] | None = None
                     ) -> Iterator[ChangeEvent | ChangeBlock | SchemaVersion | SchemaChange]:
        """The slot is read by one process at a time: the first share reads the range, the others nothing."""
        stream = self.stream
        if share[0] != 0:
            return iter(())
        return stream.changes(start, end if end is not None else self.current_position(), tables, blocks_after)

    def commit_after(self, start: SourcePosition, max_events: int) -> SourcePosition | None:
        return None  # a micro-batch takes the whole range (its changes are staged past the memory budget)

    def split_range(self, start: SourcePosition, end: SourcePosition, parts: int) -> list[SourcePosition]:
        return []  # a slot has one reader at a time

    def scan_changes(self, start: SourcePosition, end: SourcePosition, tables: Sequence[str]) -> RangeScan:
        return RangeScan(False, 0, "a PostgreSQL range is read, not scanned")

    def scan_each(self, floors: Mapping[str, SourcePosition], end: SourcePosition) -> dict[str, RangeScan]:
        return {name: self.scan_changes(floor, end, [name]) for name, floor in floors.items()}

    def range_bytes(self, start: SourcePosition, end: SourcePosition) -> int | None:
        """WAL bytes between two positions: their LSNs' difference."""
        return max(0, position_lsn(end) - position_lsn(start))

    # ---- drift detection ----
    def checksum_chunks(self, meta: TableMeta, chunks: Sequence[ChunkRange]
                        ) -> tuple[SourcePosition, dict[int, ChunkChecksum]]:
        """Checksums in one REPEATABLE READ snapshot, at the exact position the slot's commits give it
        (``checksum``); a snapshot-only capture has no stream to bring the lake to it."""
        if not self.slot:
            raise DblogError(f"dblog verify by checksums needs the capture's stream (this capture was planned with "
                             f"--startup snapshot-only): compare row by row with dblog verify --rows")
        return checksum.checksum_chunks(self.client, self.stream, meta, arrow_schema(meta), chunks)

    # ---- re-snapshot selection ----
    def quote_identifier(self, name: str) -> str:
        return quote_ident(name)

    def column_actions(self, change: SchemaChange) -> list[ColumnAction]:
        """Unknown: DDL is not in the WAL, a table's new columns come with its next Relation message, so
        what a change did to the rows already there is read again, never guessed."""
        return [ColumnAction("other")]


    def keeps_values(self, before: Column, after: Column) -> bool:
        """Never asked: every PostgreSQL schema change is read again (``column_actions``)."""
        return False
    def chunks_matching(self, meta: TableMeta, chunks: Sequence[ChunkRange], condition: str,
                        lo: Key | None, hi: Key | None) -> list[int]:
        table = table_sql(meta)
        condition = condition.replace("%", "%%")  # statements here run with parameters
        bounds, bound_params = [], []
        if lo is not None:
            sql, args = range_condition(meta, lo, None)
            bounds.append(sql)
            bound_params += args
        if hi is not None:
            sql, args = at_most(meta, hi)
            bounds.append(sql)
            bound_params += args
        try:
            self.client.query(f"SELECT 1 FROM {table} WHERE ({condition}) LIMIT 0", ())
        except psycopg2.Error as exc:  # the server's own verdict on the (validated) condition
            raise DblogError(f"filter rejected by the database: {first_line(exc)}") from None
        found = []
        for chunk in chunks:
            where, params = range_condition(meta, chunk.lo, chunk.hi)
            clause = " AND ".join([where, *bounds, f"({condition})"])
            if self.client.query(f"SELECT 1 FROM {table} WHERE {clause} LIMIT 1", (*params, *bound_params)):
                found.append(chunk.id)
        return found
