"""MySQL / MariaDB: pymysql for control queries, connectorx for chunk SELECTs (Arrow, columnar),
python-mysql-replication for the binlog."""
from __future__ import annotations

import datetime as dt
import random
import re
import threading
import time
import uuid
from typing import Iterator, Sequence
from urllib.parse import quote

import pyarrow as pa
import pymysql
from pymysql.converters import escape_item
# imported here, not where used: two reader threads importing the package at once can see one of
# its modules half initialised (a circular import inside python-mysql-replication)
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_dblog.core.chunks import (
    ChunkRange, Key, chunks_from_boundaries, even_boundaries, even_step,
)
from airflow_provider_dblog.core.events import ChangeEvent, row_change
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.dialects.base import Column, SourceConfig, TableMeta
from airflow_provider_dblog.dialects.mysql_rows import RowImages
from airflow_provider_dblog.dialects.mysql_types import (
    arrow_type, binlog_converter, cast_snapshot_column, is_collated_text, quote_ident, select_expression,
)
from airflow_provider_dblog.errors import DblogError

# What check_source() requires of the server (docker-compose.yaml is tested against this).
REQUIRED_SETTINGS = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}
SERVER_CONFIG_FIX = ("start the server with --log-bin --binlog-format=ROW --binlog-row-image=FULL "
                     "--binlog-row-metadata=FULL --server-id=N")
INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
WATERMARK_TABLE = "_dblog_watermark"


class _Connection(pymysql.connections.Connection):
    """pymysql's connection, with one default TLS context per process. Given no ssl option, pymysql
    (1.2+) prefers TLS and builds a new context for every connection: loading the system's CA store
    costs ≈19 ms of CPU each time, and a snapshot chunk opened three connections (the low watermark's
    and the window reader's two). The shared context behaves the same: TLS where the server offers it."""

    _default_tls: list = []
    _lock = threading.Lock()

    def _create_ssl_ctx(self, sslp):
        if not (isinstance(sslp, dict) and not sslp):
            return super()._create_ssl_ctx(sslp)
        with self._lock:
            if not self._default_tls:
                self._default_tls.append(super()._create_ssl_ctx(sslp))
        return self._default_tls[0]


def _naive_utc(value):
    """TIMESTAMP keys arrive naive from SELECTs (UTC session) and aware from the binlog path."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def binlog_status_sql(version: str) -> str:
    """MySQL 8.2 renamed SHOW MASTER STATUS (removed in 8.4); MariaDB keeps it."""
    if "mariadb" in version.lower():
        return "SHOW MASTER STATUS"
    major_minor = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    return "SHOW BINARY LOG STATUS" if major_minor >= (8, 2) else "SHOW MASTER STATUS"


def _has_int_lead(meta: TableMeta) -> bool:
    """Whether the key's first column is an integer (chunks can then be spaced evenly by value)."""
    return meta.column(meta.key_columns[0]).data_type in INTEGER_TYPES


class MySqlDialect:
    """The ``DataSourceDialect`` for MySQL 5.7/8.x and MariaDB 10.5+."""

    def __init__(self, config: SourceConfig, watermark_table: str | None = None,
                 server_id_range: tuple[int, int] = (1_000_000, 2_000_000_000)):
        self.config = config
        self.watermark_table = watermark_table
        self.server_id_range = server_id_range
        self._conn: pymysql.connections.Connection | None = None
        self._weights: dict[tuple[str, str], bytes] = {}
        self._version: str | None = None

    # ---- connections -------------------------------------------------------------------------
    def connect(self, database: str | None = None) -> pymysql.connections.Connection:
        try:
            return _Connection(
                host=self.config.host, port=self.config.port, user=self.config.user,
                password=self.config.password, database=database, autocommit=True, charset="utf8mb4",
                init_command="SET time_zone = '+00:00'", connect_timeout=10,
            )
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code == 1045:
                raise DblogError(f"cannot log in to {self.config.address} as {self.config.user}: access denied; "
                                 f"check the password (in the URI or $DBLOG_SOURCE_PASSWORD)") from None
            raise DblogError(f"cannot connect to {self.config.address}: {exc.args[-1]}; "
                             f"check that the server runs and --source is right") from None

    @property
    def conn(self) -> pymysql.connections.Connection:
        if self._conn is None or not self._conn.open:
            self._conn = self.connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None and self._conn.open:
            self._conn.close()
        self._conn = None

    def __getstate__(self) -> dict:  # shipped to Spark executors: no live connection
        return {**self.__dict__, "_conn": None}

    def query(self, sql: str, args: Sequence | None = None) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def scalar(self, sql: str, args: Sequence | None = None):
        rows = self.query(sql, args)
        return rows[0][0] if rows else None

    @property
    def version(self) -> str:
        if self._version is None:
            self._version = self.scalar("SELECT VERSION()")
        return self._version

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.version.lower()

    # ---- server checks -----------------------------------------------------------------------
    def check_source(self) -> None:
        log_bin, fmt, image = self.query("SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image")[0]
        where = f"on {self.config.address}"
        if str(log_bin) not in ("1", "ON"):
            raise DblogError(f"binary logging is off {where} (log_bin=OFF): {SERVER_CONFIG_FIX}")
        if str(fmt).upper() != "ROW":
            raise DblogError(f"binlog_format is {fmt} {where}, CDC needs ROW: {SERVER_CONFIG_FIX}")
        if str(image).upper() != "FULL":
            raise DblogError(f"binlog_row_image is {image} {where}, CDC needs FULL: {SERVER_CONFIG_FIX}")
        try:
            metadata = self.scalar("SELECT @@GLOBAL.binlog_row_metadata")
        except pymysql.MySQLError:
            metadata = None  # older than MySQL 8.0.1 / MariaDB 10.5
        if str(metadata).upper() != "FULL":
            raise DblogError(f"binlog_row_metadata is {metadata} {where}, CDC needs FULL (column names in the "
                             f"binlog): {SERVER_CONFIG_FIX}")
        self.check_privileges()

    def check_privileges(self) -> None:
        grants = " ".join(row[0] for row in self.query("SHOW GRANTS")).upper()
        if "ALL PRIVILEGES ON *.*" in grants or "SUPER" in grants:
            return
        missing = []
        if "REPLICATION SLAVE" not in grants and "REPLICATION REPLICA" not in grants:
            missing.append("REPLICATION SLAVE")
        if not any(p in grants for p in ("REPLICATION CLIENT", "BINLOG MONITOR", "REPLICATION SLAVE ADMIN")):
            missing.append("BINLOG MONITOR" if self.is_mariadb else "REPLICATION CLIENT")
        if missing:
            raise DblogError(f"user {self.config.user} lacks {' and '.join(missing)} on {self.config.address}: "
                             f"GRANT {', '.join(missing)} ON *.* TO '{self.config.user}'@'%'")

    # ---- table metadata ----------------------------------------------------------------------
    def describe_table(self, table: str, chunk_key: Sequence[str] | None = None) -> TableMeta:
        if "." not in table:
            raise DblogError(f"bad table name {table!r}: use DB.TABLE")
        database, name = table.split(".", 1)
        rows = self.query(
            "SELECT COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE), IS_NULLABLE = 'YES', CHARACTER_SET_NAME, "
            "COLLATION_NAME, NUMERIC_PRECISION, NUMERIC_SCALE, CHARACTER_MAXIMUM_LENGTH "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (database, name))
        if not rows:
            raise DblogError(f"unknown table {table} on {self.config.address}: check the name "
                             f"(DB.TABLE, case-sensitive on Linux) and that {self.config.user} may SELECT it")
        columns = tuple(Column(r[0], r[1], r[2], bool(r[3]), r[4], r[5], r[6], r[7], r[8]) for r in rows)
        if self.is_mariadb:  # MariaDB reports JSON as longtext guarded by json_valid()
            json_cols = {r[0] for r in self.query(
                "SELECT CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS "
                "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s AND CHECK_CLAUSE LIKE 'json_valid(%%'",
                (database, name))}
            columns = tuple(Column(c.name, "json", c.column_type, c.nullable, c.charset, c.collation, c.precision,
                                   c.scale, c.char_length) if c.name in json_cols else c for c in columns)
        keys = self.query(
            "SELECT INDEX_NAME, COLUMN_NAME, NULLABLE FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 ORDER BY INDEX_NAME = 'PRIMARY' DESC, "
            "INDEX_NAME, SEQ_IN_INDEX", (database, name))
        indexes: dict[str, list[tuple[str, bool]]] = {}
        for index, column, nullable in keys:
            indexes.setdefault(index, []).append((column, nullable == "YES"))
        names = {c.name for c in columns}
        if chunk_key:
            unknown = [c for c in chunk_key if c not in names]
            if unknown:
                raise DblogError(f"--chunk-key {','.join(unknown)} is not a column of {table}: "
                                 f"choose from {', '.join(c.name for c in columns)}")
            unique = any([c for c, _ in cols] == list(chunk_key) for cols in indexes.values())
            return TableMeta(database, name, columns, tuple(chunk_key), "unique" if unique else "chunk_key")
        if "PRIMARY" in indexes:
            return TableMeta(database, name, columns, tuple(c for c, _ in indexes["PRIMARY"]), "primary")
        for cols in indexes.values():
            if not any(nullable for _, nullable in cols):
                return TableMeta(database, name, columns, tuple(c for c, _ in cols), "unique")
        raise DblogError(f"table {table} has no primary key or NOT NULL unique key: add one, or pass "
                         f"--chunk-key COL[,COL] (an indexed column to split on)")

    # ---- SQL fragments -----------------------------------------------------------------------
    def literal(self, value, col: Column) -> str:
        if col.data_type == "timestamp" and value is not None:
            epoch = value.replace(tzinfo=dt.timezone.utc).timestamp()
            return f"FROM_UNIXTIME({epoch:.6f})"
        return escape_item(value, "utf8mb4")

    def _compare(self, meta: TableMeta, bound: Key, strict_op: str, last_op: str) -> str:
        """Row comparison ``key <op> bound`` spelled out so every server uses the index range."""
        cols = [meta.column(c) for c in meta.key_columns]
        terms = []
        for i, col in enumerate(cols):
            eqs = [f"{quote_ident(c.name)} = {self.literal(v, c)}" for c, v in zip(cols[:i], bound[:i])]
            op = last_op if i == len(cols) - 1 else strict_op
            eqs.append(f"{quote_ident(col.name)} {op} {self.literal(bound[i], col)}")
            terms.append("(" + " AND ".join(eqs) + ")")
        return "(" + " OR ".join(terms) + ")"

    def range_condition(self, meta: TableMeta, lo: Key | None, hi: Key | None) -> str:
        parts = []
        if lo is not None:
            parts.append(self._compare(meta, lo, ">", ">="))
        if hi is not None:
            parts.append(self._compare(meta, hi, "<", "<"))
        return " AND ".join(parts) or "TRUE"

    def table_sql(self, meta: TableMeta) -> str:
        return f"{quote_ident(meta.database)}.{quote_ident(meta.name)}"

    # ---- chunk planning ----------------------------------------------------------------------
    def split_chunks(self, meta: TableMeta, chunk_size: int, factor_bounds: tuple[float, float] = (0.05, 100.0)
                     ) -> list[ChunkRange]:
        if chunk_size <= 0:
            raise DblogError("--chunk-size must be a positive number of rows")
        order = ", ".join(quote_ident(c) for c in meta.key_columns)
        keys = ", ".join(quote_ident(c) for c in meta.key_columns)
        table = self.table_sql(meta)
        if _has_int_lead(meta) and meta.key_unique:
            lead = quote_ident(meta.key_columns[0])
            lo, hi = self.query(f"SELECT MIN({lead}), MAX({lead}) FROM {table}")[0]
            if lo is None:
                return chunks_from_boundaries([])
            step = even_step(int(lo), int(hi), self.approximate_rows(meta), chunk_size, *factor_bounds)
            if step is not None:
                leads = even_boundaries(int(lo), int(hi), step)
                if len(meta.key_columns) == 1:
                    return chunks_from_boundaries(leads)
                # a composite key (order_id, line): each boundary is the first whole key at or after an
                # evenly spaced leading value, one index seek each instead of a scan of the whole index
                firsts = [self.query(f"SELECT {keys} FROM {table} WHERE {lead} >= {int(v)} ORDER BY {order} "
                                     f"LIMIT 1")[0] for (v,) in leads]
                return chunks_from_boundaries(list(dict.fromkeys(tuple(k) for k in firsts)))
        boundaries: list[Key] = []
        row = self.query(f"SELECT {keys} FROM {table} ORDER BY {order} LIMIT {chunk_size}, 1")
        while row:
            boundaries.append(tuple(row[0]))
            after = self._compare(meta, boundaries[-1], ">", ">")
            row = self.query(f"SELECT {keys} FROM {table} WHERE {after} ORDER BY {order} LIMIT {chunk_size - 1}, 1"
                             if chunk_size > 1 else
                             f"SELECT {keys} FROM {table} WHERE {after} ORDER BY {order} LIMIT 1")
        return chunks_from_boundaries(boundaries)

    def approximate_rows(self, meta: TableMeta) -> int:
        estimate = self.scalar("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                               "AND TABLE_NAME = %s", (meta.database, meta.name)) or 0
        if estimate < 1_000_000:  # small or fresh tables: stats lag, an exact count is cheap
            estimate = self.scalar(f"SELECT COUNT(*) FROM {self.table_sql(meta)}")
        return int(estimate)

    def count_rows(self, meta: TableMeta, chunk: ChunkRange) -> int:
        return int(self.scalar(f"SELECT COUNT(*) FROM {self.table_sql(meta)} "
                               f"WHERE {self.range_condition(meta, chunk.lo, chunk.hi)}"))

    # ---- snapshot reads ----------------------------------------------------------------------
    def arrow_schema(self, meta: TableMeta) -> pa.Schema:
        return pa.schema([pa.field(c.name, arrow_type(c), c.nullable or c.name in meta.key_columns)
                          for c in meta.columns])

    def snapshot_sql(self, meta: TableMeta, chunk: ChunkRange) -> str:
        items = ", ".join(select_expression(c) for c in meta.columns)
        return f"SELECT {items} FROM {self.table_sql(meta)} WHERE {self.range_condition(meta, chunk.lo, chunk.hi)}"

    def read_snapshot(self, meta: TableMeta, chunk: ChunkRange) -> pa.Table:
        import connectorx as cx

        cfg = self.config
        auth = quote(cfg.user, safe="") + (":" + quote(cfg.password, safe="") if cfg.password else "")
        uri = f"mysql://{auth}@{cfg.host}:{cfg.port}/{quote(meta.database, safe='')}"
        schema = self.arrow_schema(meta)
        try:
            raw = cx.read_sql(uri, self.snapshot_sql(meta, chunk), return_type="arrow")
        except Exception as exc:  # connectorx raises bare RuntimeErrors; never echo the URI
            message = str(exc).replace(cfg.password, "***") if cfg.password else str(exc)
            raise DblogError(f"reading chunk {chunk.id} of {meta.qualified} failed: {message.splitlines()[0]}") from None
        if raw.num_rows == 0:
            return schema.empty_table()
        return pa.table([cast_snapshot_column(raw.column(f.name), meta.column(f.name), f.type) for f in schema],
                        schema=schema)

    # ---- binlog positions --------------------------------------------------------------------
    def current_position(self) -> BinlogPosition:
        rows = self.query(binlog_status_sql(self.version))
        if not rows:
            raise DblogError(f"binary logging is off on {self.config.address}: {SERVER_CONFIG_FIX}")
        return BinlogPosition.at(rows[0][0], rows[0][1])

    def binlog_files(self) -> list[str]:
        return [r[0] for r in self.query("SHOW BINARY LOGS")]

    def ensure_available(self, position: BinlogPosition) -> None:
        files = self.binlog_files()
        if position.file not in files:
            raise DblogError(f"binlog {position.file} (needed to resume at {position}) was purged from "
                             f"{self.config.address}, oldest is {files[0] if files else 'none'}: the lake can no "
                             f"longer be caught up; re-snapshot the table (dblog run with a new --state)")

    def commit_after(self, start: BinlogPosition, max_events: int) -> BinlogPosition | None:
        """The last transaction boundary within ``max_events`` binlog events after ``start`` (at least
        one whole transaction), or None if no transaction has ended after ``start`` yet."""
        files = self.binlog_files()
        file, offset, seen, last = start.file, start.offset, 0, None
        while True:
            want = max(max_events - seen, 1)
            rows = self.query(f"SHOW BINLOG EVENTS IN %s FROM {int(offset)} LIMIT {want}", (file,))
            for _log, _pos, kind, _sid, end_pos, info in rows:
                seen += 1
                if kind == "Xid" or (kind == "Query" and str(info).strip().upper() == "COMMIT"):
                    last = BinlogPosition.at(file, end_pos)
                offset = end_pos
            if last is not None and seen >= max_events:
                return last
            if len(rows) < want:  # end of this file
                later = files[files.index(file) + 1:] if file in files else []
                if not later:
                    return last
                file, offset = later[0], 4

    def gtid_position(self) -> str | None:
        var = "@@gtid_current_pos" if self.is_mariadb else "@@gtid_executed"
        try:
            return self.scalar(f"SELECT {var}")
        except pymysql.MySQLError:
            return None

    def resolve_strategy(self, strategy: str, meta: TableMeta) -> str:
        if strategy == "consistent_snapshot" or (strategy == "auto" and self._has_snapshot_status()):
            if not self._has_snapshot_status():
                raise DblogError(f"watermark strategy consistent_snapshot needs MariaDB or Percona Server "
                                 f"(Binlog_snapshot_position); {self.config.address} runs {self.version}: "
                                 f"use --watermark watermark_table or position")
            return "consistent_snapshot"
        if strategy == "auto":
            try:
                self._ensure_watermark_table(meta)
                return "watermark_table"
            except DblogError:
                return "position"
        if strategy == "watermark_table":
            self._ensure_watermark_table(meta)
        if strategy not in ("position", "watermark_table"):
            raise DblogError(f"unknown watermark strategy {strategy!r}: use auto, position, watermark_table "
                             f"or consistent_snapshot")
        return strategy

    def _has_snapshot_status(self) -> bool:
        return bool(self.query("SHOW STATUS LIKE 'binlog_snapshot_position'"))

    def watermark(self, strategy: str, meta: TableMeta):
        return {"position": PositionWatermark, "consistent_snapshot": ConsistentSnapshotWatermark,
                "watermark_table": TableWatermark}[strategy](self, meta)

    def watermark_table_name(self, meta: TableMeta) -> str:
        return self.watermark_table or f"{meta.database}.{WATERMARK_TABLE}"

    def _ensure_watermark_table(self, meta: TableMeta) -> None:
        db, name = self.watermark_table_name(meta).split(".", 1)
        try:
            self.query(f"CREATE TABLE IF NOT EXISTS {quote_ident(db)}.{quote_ident(name)} "
                       f"(id TINYINT PRIMARY KEY, mark VARCHAR(64) NOT NULL) ENGINE=InnoDB")
            self.query(f"INSERT IGNORE INTO {quote_ident(db)}.{quote_ident(name)} VALUES (1, '')")
        except pymysql.MySQLError as exc:
            raise DblogError(f"cannot write the watermark table {db}.{name} ({exc.args[-1]}): grant CREATE, "
                             f"INSERT, UPDATE on it, or use --watermark consistent_snapshot or position") from None

    # ---- binlog reading ----------------------------------------------------------------------
    def _stream(self, start: BinlogPosition, schemas: Sequence[str], tables: Sequence[str]):
        return BinLogStreamReader(
            connection_settings={"host": self.config.host, "port": self.config.port, "user": self.config.user,
                                 "passwd": self.config.password},
            server_id=random.randint(*self.server_id_range), resume_stream=True, blocking=False,
            pymysql_wrapper=_Connection,
            log_file=start.file, log_pos=start.offset, is_mariadb=False,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent, RotateEvent],
            only_schemas=list(set(schemas)), only_tables=list(set(tables)), enable_logging=False,
        )

    def binlog_items(self, start: BinlogPosition, end: BinlogPosition | None,
                     tables: Sequence[TableMeta], extra_tables: Sequence[str] = (), share: tuple[int, int] = (0, 1)
                     ) -> Iterator[tuple[str, BinlogPosition, object]]:
        """("row", pos, (table, before, after, ts)) and ("commit", pos, None), for ``start < pos <= end``.

        Row images of ``tables`` hold the lake's values (``mysql_rows`` decodes them, or the library
        plus ``row_converter`` where it can't); those of ``extra_tables`` the library's.
        ``share=(k, n)`` decodes only every n-th rows event from the k-th on: n readers of the same range
        split the decoding (the costly part; rows decode lazily) while each sees every table map, so
        even one huge transaction is decoded in parallel. Positions stay global.
        """
        part, parts = share
        rows_events = -1
        metas = {m.qualified: m for m in tables}
        wanted = set(metas) | set(extra_tables)
        images = RowImages(metas, self.row_converter)
        stream = self._stream(start, [t.split(".")[0] for t in wanted], [t.split(".", 1)[1] for t in wanted])
        try:
            for event in stream:
                log_pos = event.packet.log_pos
                if not log_pos or isinstance(event, RotateEvent):
                    continue  # a rotate's log_pos belongs to the file it closes, log_file is already the next
                pos = BinlogPosition.at(stream.log_file, log_pos)
                if end is not None and pos > end.as_snapshot():
                    return
                if pos <= start.as_snapshot():
                    continue
                if isinstance(event, XidEvent) or (isinstance(event, QueryEvent) and event.query == "COMMIT"):
                    yield "commit", pos, None
                elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                    qualified = f"{event.schema}.{event.table}"
                    if qualified not in wanted:
                        continue
                    rows_events += 1
                    if rows_events % parts != part:
                        continue
                    ts = int(event.timestamp) * 1000
                    seq, offset, file = pos.seq, pos.offset, pos.file
                    if isinstance(event, WriteRowsEvent):
                        for i, (after,) in enumerate(images.of(event, qualified, ("values",))):
                            yield "row", BinlogPosition(seq, offset, i, file), (qualified, None, after, ts)
                    elif isinstance(event, DeleteRowsEvent):
                        for i, (before,) in enumerate(images.of(event, qualified, ("values",))):
                            yield "row", BinlogPosition(seq, offset, i, file), (qualified, before, None, ts)
                    else:
                        for i, (before, after) in enumerate(images.of(event, qualified, ("before_values", "after_values"))):
                            yield "row", BinlogPosition(seq, offset, i, file), (qualified, before, after, ts)
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] == 1236:
                self.ensure_available(start)
            raise DblogError(f"reading the binlog of {self.config.address} from {start} failed: {exc.args[-1]}") from None
        finally:
            stream.close()

    def read_changes(self, start: BinlogPosition, end: BinlogPosition | None,
                     tables: Sequence[TableMeta], share: tuple[int, int] = (0, 1)) -> Iterator[ChangeEvent]:
        keys = {m.qualified: m.key_columns for m in tables}
        for kind, pos, payload in self.binlog_items(start, end, tables, share=share):
            if kind == "row":
                name, before, after, ts = payload
                yield from row_change(name, pos, keys[name], before, after, ts)

    def row_converter(self, meta: TableMeta):
        schema = self.arrow_schema(meta)
        converters = [(c.name, fn) for c in meta.columns
                      if (fn := binlog_converter(c, schema.field(c.name).type)) is not None]

        def convert(values: dict | None) -> dict | None:
            """In place (the library builds a fresh dict per row image): only columns that need it."""
            if values is not None:
                for name, fn in converters:
                    values[name] = fn(values.get(name))
            return values

        return convert

    # ---- key order ---------------------------------------------------------------------------
    def sort_keys(self, meta: TableMeta, keys: Sequence[Key]) -> list[tuple]:
        columns = [meta.column(c) for c in meta.key_columns]
        per_column = []
        for i, col in enumerate(columns):
            values = [k[i] for k in keys]
            if is_collated_text(col):
                weights = self._weights_for(col, {v for v in values if v is not None})
                per_column.append([(v is not None, weights.get(v, b"")) for v in values])
            else:
                per_column.append([(v is not None, _naive_utc(v) if v is not None else 0) for v in values])
        return [tuple(col[j] for col in per_column) for j in range(len(keys))]

    def _weights_for(self, col: Column, values: set[str]) -> dict[str, bytes]:
        missing = [v for v in values if (col.collation, v) not in self._weights]
        nopad = "nopad" in (col.collation or "").lower() or "0900" in (col.collation or "")
        pad = "" if nopad or not col.char_length else f" AS CHAR({int(col.char_length)})"
        for i in range(0, len(missing), 200):
            batch = missing[i:i + 200]
            items = ", ".join(f"WEIGHT_STRING(CONVERT(%s USING {col.charset}) COLLATE {col.collation}{pad})"
                              for _ in batch)
            row = self.query(f"SELECT {items}", batch)[0]
            for value, weight in zip(batch, row):
                self._weights[(col.collation, value)] = bytes(weight or b"")
        if len(self._weights) > 200_000:
            kept = {(col.collation, v): self._weights[(col.collation, v)] for v in values}
            self._weights = kept
        return {v: self._weights[(col.collation, v)] for v in values}


class PositionWatermark:
    """Flink CDC's watermarks: the binlog position before and after the SELECT.

    Known race: a transaction already in the binlog before LW but not yet visible to the SELECT.
    """

    def __init__(self, dialect: MySqlDialect, meta: TableMeta):
        self.dialect, self.meta = dialect, meta
        self.lw = self.hw = None

    def low(self) -> None:
        self.lw = self.dialect.current_position()

    def high(self) -> None:
        self.hw = self.dialect.current_position()

    def window(self, meta: TableMeta) -> tuple[BinlogPosition, BinlogPosition, list[ChangeEvent]]:
        events = list(self.dialect.read_changes(self.lw, self.hw, [meta])) if self.hw > self.lw else []
        return self.lw, self.hw, events


class ConsistentSnapshotWatermark(PositionWatermark):
    """LW is the exact binlog position of a consistent-snapshot read view (MariaDB, Percona).

    Every transaction before it is visible to any read view opened later, so the SELECT that follows
    sees all of them: the race of ``position`` cannot happen.
    """

    def low(self) -> None:
        with self.dialect.conn.cursor() as cur:
            try:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {k.lower(): v for k, v in cur.fetchall()}
            finally:
                cur.execute("COMMIT")
        self.lw = BinlogPosition.at(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))


class TableWatermark:
    """DBLog's watermarks: a fresh UUID written to a one-row table, each write its own transaction,
    then located in the binlog. LW/HW are the commit positions of those two transactions."""

    def __init__(self, dialect: MySqlDialect, meta: TableMeta):
        self.dialect, self.meta = dialect, meta
        self.table = dialect.watermark_table_name(meta)
        self.start = None
        self.marks: list[str] = []

    def _write(self) -> None:
        mark = uuid.uuid4().hex
        db, name = self.table.split(".", 1)
        self.dialect.query(f"UPDATE {quote_ident(db)}.{quote_ident(name)} SET mark = %s WHERE id = 1", (mark,))
        self.marks.append(mark)

    def low(self) -> None:
        self.start = self.dialect.current_position()
        self._write()

    def high(self) -> None:
        self._write()

    def window(self, meta: TableMeta) -> tuple[BinlogPosition, BinlogPosition, list[ChangeEvent]]:
        low_mark, high_mark = self.marks
        lw = hw = None
        seen: str | None = None
        events: list[ChangeEvent] = []
        deadline = time.time() + 120
        while hw is None:
            for kind, pos, payload in self.dialect.binlog_items(self.start, None, [meta], [self.table]):
                if kind == "commit":
                    if seen == low_mark and lw is None:
                        lw = pos
                    elif seen == high_mark:
                        hw = pos
                        break
                    seen = None
                    continue
                name, before, after, ts = payload
                if name == self.table:
                    seen = (after or {}).get("mark")
                elif lw is not None:
                    events.extend(row_change(name, pos, meta.key_columns, before, after, ts))
            if hw is None:
                if time.time() > deadline:
                    raise DblogError(f"the high watermark written to {self.table} did not appear in the binlog "
                                     f"within 120 s: check that binlog filters do not exclude {self.table}")
                lw, events = None, []
                time.sleep(0.2)
        return lw, hw, events
