"""The binlog: positions, the one ``SHOW BINLOG EVENTS`` pager (micro-batch limits, change scans) and
row changes decoded from the replication stream (python-mysql-replication + the compiled decoder)."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import pymysql
# imported here, not where used: two reader threads importing the package at once can see one of
# its modules half initialised (a circular import inside python-mysql-replication)
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import ChangeEvent, row_change
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.core.schema_events import SchemaChange, SchemaVersion, ddl_tables
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.dialect import RangeScan
from airflow_provider_dblog.source.mysql.connection import MySqlClient, SharedTlsConnection, binlog_status_sql
from airflow_provider_dblog.source.mysql.rows import RowImages
from airflow_provider_dblog.source.mysql.schema import SERVER_CONFIG_FIX
from airflow_provider_dblog.source.mysql.types import arrow_schema, binlog_converter

MAX_SCAN_EVENTS = 50_000
SCAN_PAGE = 10_000
_TABLE_MAP = re.compile(r"\((?P<name>.*)\)\s*$")


# ---- positions ---------------------------------------------------------------------------------
def current_position(client: MySqlClient) -> BinlogPosition:
    rows = client.query(binlog_status_sql(client.version))
    if not rows:
        raise DblogError(f"binary logging is off on {client.config.address}: {SERVER_CONFIG_FIX}")
    return BinlogPosition.at(rows[0][0], rows[0][1])


def binlog_sizes(client: MySqlClient) -> dict[str, int]:
    """Every binlog file the server still has, oldest first, with its size."""
    return {row[0]: int(row[1]) for row in client.query("SHOW BINARY LOGS")}


def ensure_available(client: MySqlClient, position: BinlogPosition) -> None:
    files = list(binlog_sizes(client))
    if position.file not in files:
        raise DblogError(f"binlog {position.file} (needed to resume at {position}) was purged from "
                         f"{client.config.address}, oldest is {files[0] if files else 'none'}: the lake can no "
                         f"longer be caught up; re-snapshot the table (dblog run with a new --state)")


def range_bytes(client: MySqlClient, start: BinlogPosition, end: BinlogPosition) -> int | None:
    """Binlog bytes in ``[start, end)`` from ``SHOW BINARY LOGS`` sizes; None if a file is not listed."""
    if end <= start:
        return 0
    sizes = binlog_sizes(client)
    names = list(sizes)
    if start.file not in sizes or end.file not in sizes:
        return None
    first, last = names.index(start.file), names.index(end.file)
    if first == last:
        return end.offset - start.offset
    return (sizes[start.file] - start.offset) + sum(sizes[n] for n in names[first + 1:last]) + end.offset


# ---- SHOW BINLOG EVENTS -----------------------------------------------------------------------
@dataclass(frozen=True)
class ListedEvent:
    file: str
    pos: int
    kind: str
    end_pos: int
    info: str

    @property
    def is_commit(self) -> bool:
        return self.kind == "Xid" or (self.kind == "Query" and self.info.strip().upper() == "COMMIT")


def listed_events(client: MySqlClient, start: BinlogPosition, files: Sequence[str], page: int = SCAN_PAGE
                  ) -> Iterator[ListedEvent]:
    """Events from ``start`` (an event boundary) to the end of the last of ``files``, as the server lists
    them without decoding row images: a page of ``page`` events per query."""
    index = files.index(start.file)
    file, offset = start.file, start.offset
    while True:
        rows = client.query(f"SHOW BINLOG EVENTS IN %s FROM {int(offset)} LIMIT {int(page)}", (file,))
        for _log, pos, kind, _sid, end_pos, info in rows:
            yield ListedEvent(file, int(pos), kind, int(end_pos), str(info or ""))
            offset = int(end_pos)
        if len(rows) < page:  # end of this file
            if index + 1 >= len(files):
                return
            index += 1
            file, offset = files[index], 4


def commit_after(client: MySqlClient, start: BinlogPosition, max_events: int) -> BinlogPosition | None:
    """The last transaction boundary within ``max_events`` binlog events after ``start`` (at least one
    whole transaction), or None if no transaction has ended after ``start`` yet."""
    files = list(binlog_sizes(client))
    if start.file not in files:
        return None
    seen, last = 0, None
    for event in listed_events(client, start, files, page=max(min(max_events, SCAN_PAGE), 1)):
        seen += 1
        if event.is_commit:
            last = BinlogPosition.at(event.file, event.end_pos)
        if last is not None and seen >= max_events:
            return last
    return last


def scan_table_events(client: MySqlClient, start: BinlogPosition, end: BinlogPosition, tables: Iterable[str],
                      max_events: int = MAX_SCAN_EVENTS, page: int = SCAN_PAGE) -> RangeScan:
    """Whether ``[start, end)`` holds no row event of ``tables``. Every rows event follows a ``Table_map``
    naming its table, so a range without one of them holds no change of it. Names compare case-
    insensitively: a false match only costs the caller the normal read, a missed one would lose changes."""
    wanted = {t.lower() for t in tables}
    if end <= start:
        return RangeScan(True, 0)
    try:
        files = list(binlog_sizes(client))
        if start.file not in files or end.file not in files:
            return RangeScan(False, 0, f"binlog {start.file if start.file not in files else end.file} is not listed")
        seen = 0
        for event in listed_events(client, start, files[:files.index(end.file) + 1], page):
            if event.file == end.file and event.pos >= end.offset:
                break
            seen += 1
            if event.kind == "Table_map":
                match = _TABLE_MAP.search(event.info)
                if match is None or match.group("name").lower() in wanted:
                    return RangeScan(False, seen, f"row events of {match.group('name') if match else '?'} "
                                                  f"at {event.file}:{event.pos}")
            elif event.kind == "Query" and _names_table(event.info, wanted):
                return RangeScan(False, seen, f"a DDL statement at {event.file}:{event.pos}")
            if seen > max_events:
                return RangeScan(False, seen, f"more than {max_events:,} events to scan")
        return RangeScan(True, seen)
    except pymysql.MySQLError as exc:
        return RangeScan(False, 0, f"SHOW BINLOG EVENTS failed: {exc.args[-1] if exc.args else exc}")


_USE = re.compile(r"^use\s+(`(?:[^`]|``)+`|\S+)\s*;\s*", re.I)


def _names_table(info: str, wanted: set[str]) -> bool:
    """Whether a listed Query event (``use `db`; STATEMENT``) is a DDL statement naming a ``wanted`` table."""
    match = _USE.match(info)
    default_db = match.group(1).strip("`") if match else ""
    return bool(captured_ddl(info[match.end():] if match else info, default_db, wanted)[1])


def captured_ddl(statement: str, default_db: str, tables) -> tuple[str, list[str]]:
    """(kind, the ``tables`` it names, in their own spelling) of a DDL statement; names compare
    case-insensitively (a false match costs a re-check, a missed one would lose a schema change)."""
    parsed = ddl_tables(statement, default_db)
    if parsed is None:
        return "", []
    lowered = {name.lower(): name for name in tables}
    return parsed[0], list(dict.fromkeys(lowered[n.lower()] for n in parsed[1] if n.lower() in lowered))


# ---- row changes --------------------------------------------------------------------------------
def row_converter(meta: TableMeta):
    """Library row images -> the lake's values, in place, only the columns that need it."""
    schema = arrow_schema(meta)
    converters = [(c.name, fn) for c in meta.columns
                  if (fn := binlog_converter(c, schema.field(c.name).type)) is not None]

    def convert(values: dict | None) -> dict | None:
        if values is not None:
            for name, fn in converters:
                values[name] = fn(values.get(name))
        return values

    return convert


class BinlogStream:
    """Replication-protocol reads of ``start < pos <= end`` (one connection per read)."""

    def __init__(self, client: MySqlClient, server_id_range: tuple[int, int]):
        self.client = client
        self.server_id_range = server_id_range

    def _stream(self, start: BinlogPosition, schemas: Sequence[str], tables: Sequence[str]):
        config = self.client.config
        return BinLogStreamReader(
            connection_settings={"host": config.host, "port": config.port, "user": config.user,
                                 "passwd": config.password},
            server_id=random.randint(*self.server_id_range), resume_stream=True, blocking=False,
            pymysql_wrapper=SharedTlsConnection,
            log_file=start.file, log_pos=start.offset, is_mariadb=False,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent, RotateEvent],
            only_schemas=list(set(schemas)), only_tables=list(set(tables)), enable_logging=False,
        )

    def items(self, start: BinlogPosition, end: BinlogPosition | None, tables: Sequence[TableMeta],
              extra_tables: Sequence[str] = (), share: tuple[int, int] = (0, 1)
              ) -> Iterator[tuple[str, BinlogPosition, object]]:
        """For ``start < pos <= end``: ("row", pos, (table, before, after, ts)), ("commit", pos, None),
        ("schema", pos, SchemaVersion) before the first row of ``tables`` decoded with other columns than
        the version before (the planned one at first), and ("ddl", pos, SchemaChange) for a DDL statement
        naming one of ``tables``.

        Row images of ``tables`` hold the lake's values; those of ``extra_tables`` the library's.
        ``share=(k, n)`` decodes only every n-th rows event from the k-th on: n readers of the same range
        split the decoding (rows decode lazily) while each sees every table map; DDL statements go to the
        first share only. Positions stay global.
        """
        part, parts = share
        rows_events = -1
        metas = {m.qualified: m for m in tables}
        versions = dict(metas)
        wanted = set(metas) | set(extra_tables)
        images = RowImages(metas, row_converter)
        boundary = start  # the last transaction end seen: where a DDL statement starts
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
                    boundary = pos
                    yield "commit", pos, None
                elif isinstance(event, QueryEvent):
                    for change in schema_changes(event, boundary, pos, metas) if part == 0 else ():
                        yield "ddl", pos, change
                    if event.query != "BEGIN":
                        boundary = pos
                elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                    qualified = f"{event.schema}.{event.table}"
                    if qualified not in wanted:
                        continue
                    rows_events += 1
                    if rows_events % parts != part:
                        continue
                    if qualified in metas:
                        version = images.meta_of(event, qualified)
                        if version is not versions[qualified]:
                            versions[qualified] = version
                            yield "schema", pos, SchemaVersion(version, pos)
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
                ensure_available(self.client, start)
            raise DblogError(f"reading the binlog of {self.client.config.address} from {start} failed: "
                             f"{exc.args[-1]}") from None
        finally:
            stream.close()

    def changes(self, start: BinlogPosition, end: BinlogPosition | None, tables: Sequence[TableMeta],
                share: tuple[int, int] = (0, 1)) -> Iterator[ChangeEvent | SchemaVersion | SchemaChange]:
        """Row changes of ``tables``, each after the ``SchemaVersion`` it was decoded with (when that is
        not the planned one), and the DDL statements naming them, in binlog order."""
        keys = {m.qualified: m.key_columns for m in tables}
        for kind, pos, payload in self.items(start, end, tables, share=share):
            if kind == "row":
                name, before, after, ts = payload
                yield from row_change(name, pos, keys[name], before, after, ts)
            elif kind == "schema":
                keys[payload.meta.qualified] = payload.meta.key_columns
                yield payload
            elif kind == "ddl":
                yield payload


def schema_changes(event, start: BinlogPosition, pos: BinlogPosition, metas: dict[str, TableMeta]
                   ) -> list[SchemaChange]:
    """The captured tables a query event's DDL statement names (``start``: the boundary before it)."""
    default_db = event.schema.decode("utf-8", "replace") if isinstance(event.schema, bytes) else str(event.schema)
    kind, names = captured_ddl(event.query, default_db, metas)
    return [SchemaChange(name, kind, event.query, start, pos) for name in names]
