"""``PostgresDialect``: the ``DataSourceDialect`` for PostgreSQL 10+, composed of the modules beside it.

First milestone: snapshots. A capture is one database (``postgresql://USER@HOST:PORT/DB``), its tables
``SCHEMA.TABLE``; planning, chunking, chunk reads (``COPY`` -> Arrow), positions (WAL locations through
``core.positions.lsn_position``), server identity and key order work as for MySQL, and the lake is the
same. Only ``--startup snapshot-only`` is accepted: the logical-replication stream (``pgoutput`` slot and
publication, their life, the chunk windows' handover to it) is not wired yet, and every stream method
says so in one line.
"""
from __future__ import annotations

from typing import Iterator, Mapping, NoReturn, Sequence

import psycopg2
import pyarrow as pa

from airflow_provider_dblog.core.checksums import ChunkChecksum
from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import BinlogPosition, lsn_position
from airflow_provider_dblog.core.retention import BinlogRetention
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.dialect import RangeScan
from airflow_provider_dblog.source.postgres import reader, schema, splitter, watermarks
from airflow_provider_dblog.source.postgres.connection import PostgresClient, first_line
from airflow_provider_dblog.source.postgres.keys import KeyOrder
from airflow_provider_dblog.source.postgres.sql import at_most, quote_ident, range_condition, snapshot_sql, table_sql
from airflow_provider_dblog.source.postgres.values import arrow_type

SNAPSHOT_ONLY = ("PostgreSQL sources support --startup snapshot-only for now (the logical-replication stream is "
                 "not wired yet)")


def not_wired(what: str) -> NoReturn:
    raise DblogError(f"{what}: {SNAPSHOT_ONLY}")


def arrow_schema(meta: TableMeta) -> pa.Schema:
    """The lake's columns of a table: ``values.arrow_type`` of each column's (base) type and typmod."""
    return pa.schema([pa.field(c.name, arrow_type(c.type_oid or 0, -1 if c.typmod is None else c.typmod),
                               c.nullable or c.name in meta.key_columns) for c in meta.columns])


class PostgresDialect:
    def __init__(self, config: SourceConfig):
        self.config = config
        self.client = PostgresClient(config)
        self.key_order = KeyOrder(self.client)

    def close(self) -> None:
        self.client.close()

    # ---- planning ----
    def check_source(self) -> None:
        schema.check_source(self.client)

    def check_startup(self, mode: StartupMode) -> None:
        if mode.kind != "snapshot-only":
            raise DblogError(SNAPSHOT_ONLY)

    def list_tables(self) -> list[str]:
        return schema.list_tables(self.client)

    def describe_table(self, table: str, chunk_key: Sequence[str] | None = None) -> TableMeta:
        return schema.describe_table(self.client, table, chunk_key)

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

    def current_position(self) -> BinlogPosition:
        return lsn_position(self.client.current_lsn())

    def gtid_position(self) -> str | None:
        return None

    def gtid_at(self, position: BinlogPosition) -> str | None:
        return None

    def gtids_read(self) -> dict[int, str]:
        return {}

    def position_after_gtid(self, gtid: str) -> BinlogPosition:
        raise DblogError("PostgreSQL has no GTIDs: a capture cannot move to another server by GTID")

    # ---- the stream (not wired yet) ----
    def ensure_available(self, position: BinlogPosition) -> None:
        """Nothing can be purged yet: no slot holds WAL for a capture (a ``DblogError`` here would read as a
        purge to the tail, which would re-read the tables); the stream's reads below refuse in one line."""

    def binlog_retention(self, needed: Sequence[BinlogPosition] = ()) -> BinlogRetention:
        not_wired("WAL retention")

    def startup_position(self, mode: StartupMode) -> BinlogPosition:
        not_wired(f"--startup {mode}")

    def read_changes(self, start: BinlogPosition, end: BinlogPosition | None,
                     tables: Sequence[TableMeta], share: tuple[int, int] = (0, 1)) -> Iterator[ChangeEvent]:
        not_wired("reading changes")

    def commit_after(self, start: BinlogPosition, max_events: int) -> BinlogPosition | None:
        not_wired("reading changes")

    def scan_changes(self, start: BinlogPosition, end: BinlogPosition, tables: Sequence[str]) -> RangeScan:
        not_wired("reading changes")

    def scan_each(self, floors: Mapping[str, BinlogPosition], end: BinlogPosition) -> dict[str, RangeScan]:
        not_wired("reading changes")

    def range_bytes(self, start: BinlogPosition, end: BinlogPosition) -> int | None:
        return None

    # ---- drift detection ----
    def checksum_chunks(self, meta: TableMeta, chunks: Sequence[ChunkRange]
                        ) -> tuple[BinlogPosition, dict[int, ChunkChecksum]]:
        raise DblogError("dblog verify by checksums is not available for PostgreSQL sources yet: compare row by row "
                         "with dblog verify --rows")

    # ---- re-snapshot selection ----
    def quote_identifier(self, name: str) -> str:
        return quote_ident(name)

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
