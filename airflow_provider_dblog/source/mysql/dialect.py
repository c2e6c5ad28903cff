"""``MySqlDialect``: the ``DataSourceDialect`` for MySQL 5.7/8.x and MariaDB 10.5+, composed of the
modules beside it (one concern each)."""
from __future__ import annotations

import logging
from typing import Iterator, Mapping, Sequence
from urllib.parse import quote

import pyarrow as pa
import pymysql

from airflow_provider_dblog.core.checksums import ChunkChecksum
from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.retention import BinlogRetention
from airflow_provider_dblog.core.schema_events import ColumnAction, SchemaChange
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.dialect import RangeScan
from airflow_provider_dblog.source.mysql import binlog, checksum, retention, schema, splitter, startup, watermarks, xa
from airflow_provider_dblog.source.mysql.collation import KeyOrder
from airflow_provider_dblog.source.mysql.connection import MySqlClient, session_statements
from airflow_provider_dblog.source.mysql.ddl import alter_actions
from airflow_provider_dblog.source.mysql.sql import at_most, range_condition, snapshot_sql, table_sql
from airflow_provider_dblog.source.mysql.types import arrow_schema, cast_snapshot_column, keeps_values, quote_ident

log = logging.getLogger("dblog")
DEFAULT_SERVER_IDS = (1_000_000, 2_000_000_000)


class MySqlDialect:
    def __init__(self, config: SourceConfig, watermark_table: str | None = None,
                 server_id_range: tuple[int, int] = DEFAULT_SERVER_IDS, epoch: int = 0):
        self.config = config
        self.watermark_table = watermark_table
        self.client = MySqlClient(config, epoch)
        self.stream = binlog.BinlogStream(self.client, tuple(server_id_range))
        self.key_order = KeyOrder(self.client)

    def close(self) -> None:
        self.client.close()

    # ---- planning ----
    def check_source(self) -> None:
        schema.check_source(self.client)

    def list_tables(self) -> list[str]:
        return schema.list_tables(self.client, internal=(watermarks.WATERMARK_TABLE,))

    def describe_table(self, table: str, chunk_key: Sequence[str] | None = None) -> TableMeta:
        return schema.describe_table(self.client, table, chunk_key)

    def split_chunks(self, meta: TableMeta, chunk_size: int) -> list[ChunkRange]:
        return splitter.split_chunks(self.client, meta, chunk_size)

    def estimate_rows(self, meta: TableMeta) -> int:
        return splitter.approximate_rows(self.client, meta)

    def resolve_strategy(self, strategy: str, meta: TableMeta) -> str:
        return watermarks.resolve_strategy(self.client, strategy,
                                           watermarks.watermark_table_name(self.watermark_table, meta))

    def check_startup(self, mode: StartupMode) -> None:
        """Every startup mode works here (``startup_position`` checks a mode's position against the binlog)."""

    def prepare_stream(self, metas: Sequence[TableMeta]) -> dict:
        """Nothing to make for the binlog; a server whose binlog would leave the tables' writes out is refused
        (``schema.binlog_gap``)."""
        self.check_stream([m.qualified for m in metas])
        return {}

    def check_prepared(self) -> None:
        xa.wait_for_prepared(self.client, xa.wait_seconds())

    def read_signals(self, table: str) -> list[tuple[str, str, str | None]]:
        database, _, name = table.partition(".")
        try:
            rows = self.client.query(f"SELECT id, type, data FROM {quote_ident(database)}.{quote_ident(name)}")
        except pymysql.MySQLError as exc:
            raise DblogError(f"cannot read the signal table {table}: {exc.args[-1]}; create it (CREATE TABLE {table} "
                             f"(id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT)) and let "
                             f"{self.config.user} SELECT it") from None
        return [(str(i), str(t), None if d is None else str(d)) for i, t, d in rows]

    def check_stream(self, tables: Sequence[str]) -> None:
        """The tables' writes must be in the binlog: no filter leaves their database out, and a replica logs
        what it applies (both can change with a restart or a CHANGE MASTER after the plan)."""
        gap = schema.binlog_gap(self.client, sorted({t.partition(".")[0] for t in tables}))
        if gap:
            raise DblogError(gap)

    def drop_stream(self) -> list[str]:
        return []

    def release(self, position: SourcePosition) -> None:
        """The server purges its binlog on its own (``binlog_retention`` reports how close that is)."""

    def renew_stream(self) -> bool:
        return False  # files are purged one by one (``ensure_available``), never the whole log at once

    # ---- snapshot ----
    def arrow_schema(self, meta: TableMeta) -> pa.Schema:
        return arrow_schema(meta)

    def read_snapshot(self, meta: TableMeta, chunk: ChunkRange) -> pa.Table:
        """One SELECT through connectorx (Arrow, columnar); the password never reaches an error."""
        import connectorx as cx

        cfg = self.config
        auth = quote(cfg.user, safe="") + (":" + quote(cfg.password, safe="") if cfg.password else "")
        uri = f"mysql://{auth}@{cfg.uri_host}:{cfg.port}/{quote(meta.database, safe='')}"
        target = arrow_schema(meta)
        statements = session_statements(self.client.version)

        def read(known_dates: bool) -> pa.Table:
            return cx.read_sql(uri, snapshot_sql(meta, chunk, known_dates), return_type="arrow",
                               pre_execution_query=statements)
        try:
            try:
                raw = read(False)
            except BaseException as exc:  # a date that does not exist (0000-00-00, 2020-02-30) panics connectorx
                if not any(name in str(exc) for name in ("NaiveDate", "NaiveDateTime")):
                    raise
                log.info("chunk %d of %s holds a date that does not exist: read again with such dates as NULL",
                         chunk.id, meta.qualified)
                raw = read(True)  # the same window: the chunk read again with such dates as NULL
        except Exception as exc:  # connectorx raises bare RuntimeErrors; never echo the URI
            message = str(exc).replace(cfg.password, "***") if cfg.password else str(exc)
            raise DblogError(f"reading chunk {chunk.id} of {meta.qualified} failed: {message.splitlines()[0]}") from None
        if raw.num_rows == 0:
            return target.empty_table()
        return pa.table([cast_snapshot_column(raw.column(f.name), meta.column(f.name), f.type) for f in target],
                        schema=target)

    def watermark(self, strategy: str, meta: TableMeta):
        if strategy == "watermark_table":
            return watermarks.TableWatermark(self.client, self.stream, meta,
                                             watermarks.watermark_table_name(self.watermark_table, meta))
        kind = {"position": watermarks.PositionWatermark,
                "consistent_snapshot": watermarks.ConsistentSnapshotWatermark}[strategy]
        return kind(self.client, self.stream, meta)

    def sort_keys(self, meta: TableMeta, keys: Sequence[Key]) -> list[tuple]:
        return self.key_order.sort_keys(meta, keys)

    # ---- binlog ----
    def server_identity(self) -> dict:
        """``server_id``, and MySQL's ``server_uuid`` (MariaDB has none)."""
        identity = {"server_id": int(self.client.scalar("SELECT @@server_id"))}
        if not self.client.is_mariadb:
            identity["server_uuid"] = str(self.client.scalar("SELECT @@server_uuid"))
        return identity

    def current_position(self) -> SourcePosition:
        return binlog.current_position(self.client)

    def gtid_position(self) -> str | None:
        var = "@@gtid_current_pos" if self.client.is_mariadb else "@@gtid_executed"
        try:
            return self.client.scalar(f"SELECT {var}")
        except pymysql.MySQLError:
            return None

    def gtid_at(self, position: SourcePosition) -> str | None:
        return startup.gtid_at(self.client, position)

    def gtids_read(self) -> dict[int, str]:
        return dict(self.stream.gtids)

    def position_after_gtid(self, gtid: str) -> SourcePosition:
        return startup.gtid_position(self.client, gtid)

    def ensure_available(self, position: SourcePosition) -> None:
        binlog.ensure_available(self.client, position)

    def binlog_retention(self, needed: Sequence[SourcePosition] = ()) -> BinlogRetention:
        return retention.binlog_retention(self.client, self.stream.server_id_range, needed)

    def startup_position(self, mode: StartupMode) -> SourcePosition:
        take = lambda: startup.startup_position(self.client, self.stream.server_id_range, mode)  # noqa: E731
        if mode.kind == "latest":  # a start no XA transaction straddles (a past start is the user's to choose)
            return startup.start_clear_of_prepared(self.client, take, xa.wait_seconds())
        return take()

    def read_changes(self, start: SourcePosition, end: SourcePosition | None,
                     tables: Sequence[TableMeta], share: tuple[int, int] = (0, 1),
                     blocks_after: Mapping[str, SourcePosition] | None = None) -> Iterator[ChangeEvent]:
        return self.stream.changes(start, end, tables, share, blocks_after)

    def commit_after(self, start: SourcePosition, max_events: int) -> SourcePosition | None:
        return binlog.commit_after(self.client, start, max_events)

    def split_range(self, start: SourcePosition, end: SourcePosition, parts: int) -> list[SourcePosition]:
        return binlog.split_points(self.client, start, end, parts)

    def scan_changes(self, start: SourcePosition, end: SourcePosition, tables: Sequence[str]) -> RangeScan:
        return binlog.scan_table_events(self.client, start, end, tables, parents=self._cascade_parents(tables),
                                        myisam=self.stream.cascades.myisam(tables))

    def scan_each(self, floors: Mapping[str, SourcePosition], end: SourcePosition) -> dict[str, RangeScan]:
        return binlog.scan_each_table(self.client, floors, end, parents=self._cascade_parents(floors),
                                      myisam=self.stream.cascades.myisam(floors))

    def _cascade_parents(self, tables) -> dict[str, list[str]]:
        """Per table whose changes cascade into some of ``tables`` unlogged, those tables: a scan for changes
        counts the parent's row events as theirs."""
        return {parent: sorted({child for _, child in through})
                for parent, through in self.stream.cascades.watched(tables).items()}

    def range_bytes(self, start: SourcePosition, end: SourcePosition) -> int | None:
        return binlog.range_bytes(self.client, start, end)

    # ---- drift detection ----
    def checksum_chunks(self, meta: TableMeta, chunks: Sequence[ChunkRange]
                        ) -> tuple[SourcePosition, dict[int, ChunkChecksum]]:
        return checksum.checksum_chunks(self.client, meta, chunks)

    # ---- re-snapshot selection ----
    def quote_identifier(self, name: str) -> str:
        return quote_ident(name)

    def column_actions(self, change: SchemaChange) -> list[ColumnAction]:
        return alter_actions(change.statement)

    def keeps_values(self, before: Column, after: Column) -> bool:
        return keeps_values(before, after)

    def chunks_matching(self, meta: TableMeta, chunks: Sequence[ChunkRange], condition: str,
                        lo: Key | None, hi: Key | None) -> list[int]:
        table = table_sql(meta)
        key_range = ([range_condition(meta, lo, None)] if lo is not None else []) + (
            [at_most(meta, hi)] if hi is not None else [])
        try:
            self.client.query(f"SELECT 1 FROM {table} WHERE ({condition}) LIMIT 0")
        except pymysql.MySQLError as exc:  # the server's own verdict on the (validated) condition
            raise DblogError(f"filter rejected by the database: {exc.args[-1]}") from None
        found = []
        for chunk in chunks:
            where = " AND ".join([range_condition(meta, chunk.lo, chunk.hi), *key_range, f"({condition})"])
            if self.client.query(f"SELECT 1 FROM {table} WHERE {where} LIMIT 1"):
                found.append(chunk.id)
        return found
