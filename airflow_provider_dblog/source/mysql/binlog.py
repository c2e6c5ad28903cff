"""The binlog: positions, the one ``SHOW BINLOG EVENTS`` pager (micro-batch limits, change scans) and
row changes decoded from the replication stream (python-mysql-replication + the compiled decoder)."""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

import pymysql
from pymysqlreplication.event import (
    ExecuteLoadQueryEvent, MariadbGtidEvent, NotImplementedEvent, QueryEvent, RotateEvent, XAPrepareEvent, XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent, PartialUpdateRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent,
)

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.errors import DblogError, UnseenXaCommit
from airflow_provider_dblog.core.events import ChangeEvent, row_change
from airflow_provider_dblog.core.positions import ROWS_PER_POSITION, SourcePosition, too_many_rows
from airflow_provider_dblog.core.schema_events import UNREADABLE, SchemaChange, SchemaVersion
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.dialect import RangeScan
from airflow_provider_dblog.source.mysql.connection import MySqlClient, binlog_status_sql
from airflow_provider_dblog.source.mysql import compressed
from airflow_provider_dblog.source.mysql.cascades import CascadeCatalog, changed_through, keys_changed
from airflow_provider_dblog.source.mysql.ddl import (
    altered_engine, ddl_tables, dml_tables, plain_statement, truncated_tables,
)
from airflow_provider_dblog.source.mysql.mapped_tables import MappedWithoutRows
from airflow_provider_dblog.source.mysql.replication import DUMP_REFUSED, binlog_events
from airflow_provider_dblog.source.mysql.xa import (
    MARIADB_PREPARED_XA, PreparedXa, undecided_error, unseen_xa_commit, xa_statement,
)
from airflow_provider_dblog.source.mysql.block_decoder import MIN_EVENTS, RowsEvent, block_layout, decode_run
from airflow_provider_dblog.source.mysql.rows import (
    ByColumns, RowDecoder, RowImages, body_of, decode_rows, full_image, has_column_names,
)
from airflow_provider_dblog.source.mysql.schema import (
    SERVER_CONFIG_FIX, system_versioned, undecodable_refusal, versioned_refusal,
)
from airflow_provider_dblog.source.mysql.side_effects import Routines, reached, read_routines
from airflow_provider_dblog.source.mysql.types import arrow_schema, binlog_converter

log = logging.getLogger("dblog")
MAX_SCAN_EVENTS = 50_000
BLOCK_RUN_BYTES = 4 << 20  # row images of one table gathered before they are decoded as blocks
SPLIT_MIN_BYTES = 1 << 20  # a micro-batch's range below this is not cut into pieces read apart
SCAN_PAGE = 10_000
# every event the library does not decode comes as NotImplementedEvent: decoded here or refused
_STREAM_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent, RotateEvent,
                  NotImplementedEvent, ExecuteLoadQueryEvent, MariadbGtidEvent, XAPrepareEvent, PartialUpdateRowsEvent)
_TABLE_MAP = re.compile(r"\((?P<name>.*)\)\s*$")


# ---- positions ---------------------------------------------------------------------------------
def current_position(client: MySqlClient) -> SourcePosition:
    rows = client.query(binlog_status_sql(client.version))
    if not rows:
        raise DblogError(f"binary logging is off on {client.config.address}: {SERVER_CONFIG_FIX}")
    return client.position(rows[0][0], rows[0][1])


def binlog_sizes(client: MySqlClient) -> dict[str, int]:
    """Every binlog file the server still has, oldest first, with its size."""
    return {row[0]: int(row[1]) for row in client.query("SHOW BINARY LOGS")}


def ensure_available(client: MySqlClient, position: SourcePosition) -> None:
    files = list(binlog_sizes(client))
    if position.file not in files:
        raise DblogError(f"binlog {position.file} (needed to resume at {position}) was purged from "
                         f"{client.config.address}, oldest is {files[0] if files else 'none'}: the lake can no "
                         f"longer be caught up; re-snapshot the table (dblog run with a new --state)")


def range_bytes(client: MySqlClient, start: SourcePosition, end: SourcePosition) -> int | None:
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


def listed_events(client: MySqlClient, start: SourcePosition, files: Sequence[str], page: int = SCAN_PAGE
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


def commit_after(client: MySqlClient, start: SourcePosition, max_events: int) -> SourcePosition | None:
    """The last transaction boundary within ``max_events`` binlog events after ``start`` (at least one
    whole transaction), or None if no transaction has ended after ``start`` yet."""
    files = list(binlog_sizes(client))
    if start.file not in files:
        return None
    seen, last = 0, None
    for event in listed_events(client, start, files, page=max(min(max_events, SCAN_PAGE), 1)):
        seen += 1
        if event.is_commit:
            last = client.position(event.file, event.end_pos)
        if last is not None and seen >= max_events:
            return last
    return last


def split_points(client: MySqlClient, start: SourcePosition, end: SourcePosition, parts: int,
                 min_bytes: int = SPLIT_MIN_BYTES, max_events: int = 4 * MAX_SCAN_EVENTS) -> list[SourcePosition]:
    """Transaction ends inside ``(start, end)`` cutting it into at most ``parts`` pieces of about equal bytes
    (one page through ``SHOW BINLOG EVENTS``: headers only, at most ``max_events`` of them: the cuts found by
    then); [] below ``min_bytes`` of binlog."""
    if parts < 2 or end <= start:
        return []
    sizes = binlog_sizes(client)
    files = list(sizes)
    if start.file not in sizes or end.file not in sizes:
        return []
    offset_of, total = {}, 0  # bytes of the files before each one, from the start's file on
    for name in files[files.index(start.file):]:
        offset_of[name] = total
        total += sizes[name]
    origin = offset_of[start.file] + start.offset
    size = offset_of[end.file] + end.offset - origin  # what range_bytes says, from the same listing
    if size < max(min_bytes, 1):
        return []
    targets = [origin + size * k // parts for k in range(1, parts)]
    points: list[SourcePosition] = []
    for seen, event in enumerate(listed_events(client, start, files[:files.index(end.file) + 1])):
        at = client.position(event.file, event.end_pos)
        if at >= end or not targets or seen >= max_events:
            break
        if event.is_commit and offset_of[event.file] + event.end_pos >= targets[0]:
            points.append(at)
            while targets and offset_of[event.file] + event.end_pos >= targets[0]:
                targets.pop(0)
    return points


def scan_table_events(client: MySqlClient, start: SourcePosition, end: SourcePosition, tables: Iterable[str],
                      max_events: int = MAX_SCAN_EVENTS, page: int = SCAN_PAGE,
                      parents: Mapping[str, Sequence[str]] | None = None, myisam: Sequence[str] = ()
                      ) -> RangeScan:
    """Whether ``[start, end)`` holds no row event of ``tables`` (the first change found says why not)."""
    scans = scan_each_table(client, dict.fromkeys(tables, start), end, max_events, page, first_only=True,
                            parents=parents, myisam=myisam)
    dirty = [scan for scan in scans.values() if not scan.clean]
    return min(dirty, key=lambda scan: scan.events) if dirty else RangeScan(True, max(
        (scan.events for scan in scans.values()), default=0))


def scan_each_table(client: MySqlClient, floors: Mapping[str, SourcePosition], end: SourcePosition,
                    max_events: int = MAX_SCAN_EVENTS, page: int = SCAN_PAGE, first_only: bool = False,
                    parents: Mapping[str, Sequence[str]] | None = None, myisam: Sequence[str] = ()
                    ) -> dict[str, RangeScan]:
    """Per table, whether ``[its floor, end)`` holds no row event or DDL statement of it: one pass over the
    binlog from the smallest floor, whatever the number of tables (stops when every table has a change, or
    at the first with ``first_only``, leaving out the tables not scanned to the end). Every rows event follows a ``Table_map`` naming its table, so a range
    without one of them holds no change of it. Names compare case-insensitively: a false match only costs
    the caller the normal read, a missed one would lose changes. ``parents``: per table whose changes may
    cascade into some of ``floors`` without an event of theirs (``cascades``), those tables. ``myisam``: those of
    ``floors`` a TRUNCATE of a table the scan does not know may empty (a MERGE table's, gone since)."""
    names = {t.lower(): t for t in floors}
    into = {p.lower(): [c.lower() for c in children] for p, children in (parents or {}).items()}
    out: dict[str, RangeScan] = {t: RangeScan(True, 0) for t, floor in floors.items() if end <= floor}
    todo = {t.lower(): floor for t, floor in floors.items() if t not in out}
    if not todo:
        return out
    start = min(todo.values())
    found = []

    def dirty(tables, seen: int, reason: str) -> None:
        for lower in tables:
            if lower in todo:
                out[names[lower]] = RangeScan(False, seen, reason)
                del todo[lower]
                found.append(lower)

    try:
        files = list(binlog_sizes(client))
        if start.file not in files or end.file not in files:
            missing = start.file if start.file not in files else end.file
            dirty(list(todo), 0, f"binlog {missing} is not listed")
            return out
        seen = 0
        for event in listed_events(client, start, files[:files.index(end.file) + 1], page):
            if event.file == end.file and event.pos >= end.offset:
                break
            seen += 1
            at = client.position(event.file, event.pos)

            def past_floor(tables) -> list[str]:  # of ``tables``, those whose floor is at or before the event
                return [n for n in tables if n in todo and at >= todo[n]]

            if event.kind == "Table_map":
                match = _TABLE_MAP.search(event.info)
                name = match.group("name").lower() if match else None
                if name is None or name in todo or name in into:
                    hit = list(todo) if name is None else [name, *into.get(name, ())]
                    dirty(past_floor(hit), seen,
                          f"row events of {match.group('name') if match else '?'} at {event.file}:{event.pos}")
            elif event.kind in ("Query", "Query_compressed"):
                what, named = _names_tables(event.info, set(todo) | set(into))
                if not what and myisam and "TRUNCATE" in event.info.upper():
                    what, named = "TRUNCATE of a table that may be a MERGE table's", {m.lower() for m in myisam}
                if what:
                    named = {*named, *(c for n in named for c in into.get(n, ()))}
                    dirty(past_floor(named), seen, f"a {what} at {event.file}:{event.pos}")
            elif event.kind not in LISTED_WITHOUT_CHANGES:
                dirty(past_floor(list(todo)), seen, f"a {event.kind} event at {event.file}:{event.pos}")
            if not todo or (first_only and found):
                break
            if seen > max_events:
                dirty(list(todo), seen, f"more than {max_events:,} events to scan")
                break
        if not (first_only and found):  # with first_only, the tables not scanned to the end are left out
            out.update({names[lower]: RangeScan(True, seen) for lower in todo})
        return out
    except pymysql.MySQLError as exc:
        dirty(list(todo), 0, f"SHOW BINLOG EVENTS failed: {exc.args[-1] if exc.args else exc}")
        return out


_USE = re.compile(r"^use\s+(`(?:[^`]|``)+`|\S+)\s*;\s*", re.I)


# what SHOW BINLOG EVENTS lists that holds no row change by itself (rows events follow a Table_map)
LISTED_WITHOUT_CHANGES = {"Query", "Query_compressed", "Table_map", "Xid", "Gtid", "Gtid_list", "Binlog_checkpoint",
                          "Format_desc", "Rotate", "Stop", "Annotate_rows", "Start_encryption", "Intvar", "Rand",
                          "User var", "Anonymous_Gtid", "Previous_gtids", "Rows_query", "Heartbeat",
                          "Write_rows_v1", "Update_rows_v1", "Delete_rows_v1", "Write_rows", "Update_rows",
                          "Delete_rows", "Write_rows_compressed_v1", "Update_rows_compressed_v1",
                          "Delete_rows_compressed_v1", "Write_rows_compressed", "Update_rows_compressed",
                          "Delete_rows_compressed"}


def _names_tables(info: str, wanted: set[str]) -> tuple[str, set[str]]:
    """What a listed Query event (``use `db`; STATEMENT``) naming ``wanted`` tables (lower case) is ("DDL
    statement", "statement-logged DML", or "" when it names none) and which of them it names."""
    match = _USE.match(info)
    default_db = match.group(1).strip("`") if match else ""
    statement = info[match.end():] if match else info
    named = {n.lower() for n in captured_ddl(statement, default_db, wanted)[1]}
    if named:
        return "DDL statement", named
    text = plain_statement(statement)
    dml = dml_tables(text, default_db)
    named = {n.lower() for n in dml[1]} & wanted if dml is not None else set()
    if named:
        return "statement-logged DML", named
    if dml is not None or _CALLING.match(text):  # its triggers or functions: any table
        return "statement-logged statement of other tables", set(wanted)
    return "", set()


def unlogged_rows(table: str, cascaded: bool) -> str:
    """Why rows of ``table`` changed without a row event of it in a read."""
    why = ("a foreign-key cascade from a parent's DELETE or key UPDATE, which InnoDB does not log, or a write "
           "through a MERGE table over it" if cascaded else "an XA transaction prepared in this read and "
                                                            "committed after it")
    return f"rows of {table} changed without a row event of it in the read: {why}"


def truncated_parents(truncated: Sequence[str], watched: Mapping[str, object]) -> list[str]:
    """The watched tables among those a ``TRUNCATE`` names (``ddl.truncated_tables``): truncating a MERGE table
    empties its children with no event of theirs (before: the lake kept all their rows, exit 0). An InnoDB parent
    of a foreign key refuses TRUNCATE."""
    lowered = {name.lower(): name for name in watched} if truncated else {}
    return [lowered[n.lower()] for n in truncated if n.lower() in lowered]


def captured_ddl(statement: str, default_db: str, tables) -> tuple[str, list[str]]:
    """(kind, the ``tables`` it names, in their own spelling) of a DDL statement; names compare
    case-insensitively (a false match costs a re-check, a missed one would lose a schema change)."""
    parsed = ddl_tables(statement, default_db)
    if parsed is None:
        return "", []
    lowered = {name.lower(): name for name in tables}
    named = []
    for n in (n.lower() for n in parsed[1]):  # in the statement's order; ``db.*``: every table of a dropped database
        named.extend([name for low, name in lowered.items() if low.startswith(n[:-1])] if n.endswith(".*")
                     else [lowered[n]] if n in lowered else [])
    return parsed[0], list(dict.fromkeys(named))


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
        self.gtids: dict[int, str] = {}  # per domain the last GTID the last read passed (MariaDB)
        self.cascades = CascadeCatalog(client)

    def items(self, start: SourcePosition, end: SourcePosition | None, tables: Sequence[TableMeta],
              extra_tables: Sequence[str] = (), share: tuple[int, int] = (0, 1),
              blocks_after: Mapping[str, SourcePosition] | None = None, window: bool = False
              ) -> Iterator[tuple[str, SourcePosition, object]]:
        """For ``start < pos <= end``: ("row", pos, (table, before, after, ts)), ("commit", pos, None),
        ("schema", pos, SchemaVersion) before the first row of ``tables`` decoded with other columns than
        the version before (the planned one at first), and ("ddl", pos, SchemaChange) for a DDL statement
        naming one of ``tables``. Rows events of a table after ``blocks_after[table]`` may come as ("block",
        pos, ChangeBlock): runs of them decoded column by column (``block_decoder``), in order among its
        table's other items.

        Row images of ``tables`` hold the lake's values; those of ``extra_tables`` the library's.
        ``share=(k, n)`` decodes only every n-th rows event from the k-th on: n readers of the same range
        split the decoding (rows decode lazily) while each sees every table map; DDL statements go to the
        first share only. Positions stay global.

        Changes the binlog does not show as rows of ``tables`` end the read with ("ddl", end, SchemaChange) of
        kind ``rewrite`` (the committer reads the table again): rows a foreign-key cascade changed
        (``cascades``) and XA groups committed after ``end`` (``xa``). ``window``: a chunk's watermark window,
        which needs neither (it only overlays events up to its high watermark), but must know of an XA COMMIT
        whose prepare it did not read: ("unseen_xa", pos, xid) (its rows came before the read; the chunk's
        SELECT may not show them).
        """
        part, parts = share
        rows_events = -1
        metas = {m.qualified: m for m in tables}
        versions = dict(metas)
        if not window:  # a table versioned now: its history rows may be anywhere in the range
            versioned = system_versioned(self.client, list(metas))
            if versioned:
                raise DblogError(versioned_refusal(versioned))
            refused = undecodable_refusal(self.client, list(metas))
            if refused:
                raise DblogError(refused)
        # parents of cascading keys and MERGE tables: in a chunk's window too (their changes there make the chunk
        # be read again: the SELECT may predate them, and the window holds no event of the chunk's rows for them)
        watched = {} if not metas else self.cascades.watched(metas)
        maps = MappedWithoutRows(metas, self.cascades.myisam(metas))  # MyISAM: a MERGE table the catalog misses
        cascaded: set[str] = set()  # captured tables a parent's change cascaded into (not logged)
        counted = set(metas) | set(extra_tables)  # rows events shared out by their count (the same in every share)
        wanted = counted | set(watched)

        def decodes(qualified: str) -> bool:  # whether this share takes the rows event
            nonlocal rows_events
            if qualified not in counted:
                return part == 0  # a watched parent only: the first share
            rows_events += 1
            return part == 0 if xa.holding else rows_events % parts == part

        unplaced: list[tuple[str, SourcePosition]] = []  # a window's cascades, said as soon as they are seen

        def cascaded_at(name: str, at: SourcePosition) -> None:
            cascaded.add(name)
            if window:
                unplaced.append((name, at))

        def placed() -> Iterator[tuple]:  # a window's cascades so far: the chunk is read again
            while unplaced:
                name, at = unplaced.pop(0)
                yield "ddl", at, SchemaChange(name, UNREADABLE, unlogged_rows(name, True), start, at)

        def unlogged(names: Iterable[str], pos: SourcePosition) -> None:  # captured tables changed without events
            for _, at, (name,) in xa.hold([("cascade", pos, (name,)) for name in names]):  # held in an XA group
                cascaded_at(name, at)

        def cascade(qualified: str, kind: str, updated, pos: SourcePosition) -> None:
            unlogged(changed_through(kind, updated, watched[qualified]), pos)

        def statement_end(pos: SourcePosition) -> None:
            unwritten = maps.ended(pos)
            if part == 0:
                unlogged(unwritten, pos)

        def released(moved: list) -> Iterator:  # a committed XA group's items; its cascades count now
            for item in moved:
                if item[0] == "cascade":
                    cascaded_at(item[2][0], item[1])
                else:
                    yield item

        routines: list[Routines] = []  # the catalog of triggers, views and routines, read at the first need

        def catalog() -> Routines:
            if not routines:
                routines.append(read_routines(self.client))
            return routines[0]

        def unreadable(problems: Mapping[str, str], at: SourcePosition) -> Iterator[tuple]:
            """Per captured table a change there the binlog cannot show: the reader stops on it in one line when
            the lake needs the table's changes there (a re-snapshot of the table gets past it)."""
            for name, problem in problems.items():
                yield "ddl", at, SchemaChange(name, UNREADABLE, problem, boundary, at)

        mariadb = self.client.is_mariadb  # a FLOAT/DOUBLE -0 read as 0.0, as its SELECT shows it
        images = RowImages(metas, row_converter, mariadb)
        runs = _Runs(blocks_after or {}, versions, mariadb)
        boundary = start  # the last transaction end seen: where a DDL statement starts
        xa = PreparedXa()  # XA groups' items wait for their XA COMMIT
        self.gtids = {}
        events = binlog_events(self.client, self.server_id_range, start,
                               (*_STREAM_EVENTS, TableMapEvent) if metas else _STREAM_EVENTS,
                               list({t.split(".")[0] for t in wanted}), list({t.split(".", 1)[1] for t in wanted}))
        first, last = start.as_snapshot(), None if end is None else end.as_snapshot()  # the range's ends
        try:
            for stream, event in events:
                yield from placed()  # a window read that ends at a mark of its own must see them before it stops
                log_pos = event.packet.log_pos
                if not log_pos or isinstance(event, RotateEvent):
                    continue  # a rotate's log_pos belongs to the file it closes, log_file is already the next
                pos = self.client.position(stream.log_file, log_pos)
                if last is not None and pos > last:
                    break
                if pos <= first:
                    continue
                statement = None
                if isinstance(event, TableMapEvent):
                    unwritten = maps.mapped(f"{event.schema}.{event.table}", pos)
                    if part == 0:
                        unlogged(unwritten, pos)
                    continue
                if isinstance(event, MariadbGtidEvent):
                    self.gtids[event.domain_id] = event.gtid
                    if event.flags & MARIADB_PREPARED_XA:
                        yield from runs.flush()
                        xa.begin()
                    continue
                if isinstance(event, XAPrepareEvent):
                    boundary = pos
                    if event.one_phase:  # MySQL's XA COMMIT ... ONE PHASE: the group commits here
                        yield from released(xa.committed(None, pos))
                        yield "commit", pos, None
                    else:
                        xa.prepared(pos)
                    continue
                if isinstance(event, NotImplementedEvent):
                    if event.event_type == compressed.QUERY_COMPRESSED:
                        statement = query_statement(event)
                    elif event.event_type in compressed.ROWS_COMPRESSED:
                        rows = compressed.rows(event)
                        table = stream.table_map.get(rows.table_id)  # the library keeps wanted tables' maps only
                        qualified = f"{table.schema}.{table.table}" if table is not None else ""
                        maps.wrote(qualified)
                        if qualified not in wanted or not decodes(qualified):
                            continue
                        if qualified in watched:  # its images are not decoded here: any UPDATE counts
                            cascade(qualified, rows.kind, None, pos)
                            if qualified not in counted:
                                continue
                        if qualified not in metas:
                            raise DblogError(f"a compressed rows event of {qualified} at {pos}: dblog decodes "
                                             f"compressed events of captured tables only; {COMPRESSION_FIX}")
                        yield from runs.flush(qualified)
                        problem = rows_event_problem(qualified, rows.kind, table.columns, rows.full, pos)
                        if problem:
                            yield from unreadable({qualified: problem}, pos)
                            continue
                        decoded = images.of_compressed(table, qualified, rows.rows, 2 if rows.kind == "update" else 1)
                        yield from xa.hold(self._rows(images.meta_of(table, qualified), versions, rows.kind,
                                                      decoded, pos, int(event.timestamp) * 1000))
                        continue
                    else:
                        if event.event_type in REFUSED_EVENT_TYPES:  # may hold any table's changes
                            yield from runs.flush()
                            yield from unreadable({name: event_problem(event.event_type, pos, name)
                                                   for name in metas}, pos)
                        else:
                            refuse_event(event.event_type, pos)
                        continue
                elif isinstance(event, ExecuteLoadQueryEvent):  # its statement is not decoded: any table's rows
                    yield from runs.flush()
                    yield from unreadable({name: f"a statement-logged LOAD DATA at {pos}: dblog cannot tell which "
                                                 f"rows it changed; " + STATEMENT_FIX.format(table=name)
                                           for name in metas}, pos)
                    continue
                elif isinstance(event, QueryEvent):
                    statement = query_statement(event)
                if statement is not None:
                    statement_end(pos)
                    default_db, query = statement
                    if query == "COMMIT":
                        boundary = pos
                        yield "commit", pos, None
                        continue
                    xa_verb = xa_statement(query)
                    if xa_verb is not None:
                        verb, xid = xa_verb
                        if verb in ("START", "BEGIN"):  # MySQL (MariaDB flags the GTID event)
                            yield from runs.flush()
                            xa.begin()
                        elif verb == "END":
                            xa.ended(xid)
                        else:
                            boundary = pos
                            if verb == "ROLLBACK":
                                xa.rolled_back(xid)
                            else:  # a prepared group's outcome, or the group being read (ONE PHASE)
                                if window and xa.open is None and not xa.knows(xid):
                                    yield "unseen_xa", pos, xid  # prepared before the window: rows unknown
                                yield from released(xa.committed(xid if xa.open is None else None, pos))
                                yield "commit", pos, None
                        continue
                    if part == 0:
                        truncated = truncated_tables(query, default_db)
                        for parent in truncated_parents(truncated, watched):  # a MERGE table's children
                            cascade(parent, "delete", (), pos)
                        unlogged(self.cascades.truncated_unknown(truncated, watched, maps.myisam_tables), pos)
                        unlogged(keys_changed(default_db, query, watched, metas), pos)
                        changes = schema_changes(default_db, query, boundary, pos, metas)
                        if changes:
                            yield from runs.flush()
                            engine = altered_engine(query)  # a MERGE table may have written it while MyISAM
                            for change in changes if engine else ():
                                for name, at in maps.engine_changed(change.table, engine):
                                    unlogged([name], at)
                        yield from (("ddl", pos, change) for change in changes)
                        if not changes:  # a watched parent's statement-logged rows would hide a cascade too
                            problems = statement_problems(default_db, query, pos, metas, watched, catalog)
                            if problems:
                                yield from runs.flush()
                                yield from unreadable(problems, pos)
                    if query != "BEGIN":
                        boundary = pos
                elif isinstance(event, XidEvent):
                    statement_end(pos)
                    boundary = pos
                    yield "commit", pos, None
                elif isinstance(event, PartialUpdateRowsEvent):  # a subclass of UpdateRowsEvent: first
                    qualified = f"{event.schema}.{event.table}"
                    maps.wrote(qualified)
                    if qualified in metas:
                        yield from runs.flush(qualified)
                        yield from unreadable({qualified: f"the update rows event of {qualified} at {pos} holds partial "
                                                          f"JSON values (binlog_row_value_options=PARTIAL_JSON): dblog "
                                                          f"stops before it; "
                                                          + PARTIAL_JSON_FIX.format(table=qualified)}, pos)
                elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                    qualified = f"{event.schema}.{event.table}"
                    maps.wrote(qualified)
                    if qualified not in wanted or not decodes(qualified):
                        continue
                    kind = next(k for cls, k in _KINDS.items() if isinstance(event, cls))  # the library's or dblog's
                    parent = qualified in watched
                    if parent and qualified not in counted:  # watched only: the library decodes its images
                        cascade(qualified, kind, _lowered([(r["before_values"], r["after_values"]) for r in event.rows])
                                if kind == "update" else (), pos)
                        continue
                    # a captured parent's UPDATE: its images decoded below tell whether a referenced key changed
                    checks_images = parent and kind == "update"
                    if parent and not checks_images:
                        cascade(qualified, kind, (), pos)
                    meta = None  # the watermark table (not captured): the library's values
                    if qualified in metas:
                        problem = rows_event_problem(qualified, kind, event.columns, full_image(event), pos)
                        if problem:
                            yield from runs.flush(qualified)
                            yield from unreadable({qualified: problem}, pos)
                            continue
                        meta = images.meta_of(event, qualified)
                        if not xa.holding and not checks_images and runs.takes(qualified, pos):
                            added = runs.add(event, meta, images.decoder(event, meta), kind, pos)
                            if added is not None:
                                yield from added
                                continue
                        yield from runs.flush(qualified)
                    decoded = images.of(event, qualified, ("before_values", "after_values") if kind == "update"
                                        else ("values",))
                    if checks_images:
                        cascade(qualified, kind, _lowered(decoded), pos)
                    yield from xa.hold(self._rows(meta, versions, kind, decoded, pos, int(event.timestamp) * 1000,
                                                  qualified))
            yield from runs.flush()
            events.close()
            statement_end(end if end is not None else boundary)
            yield from placed()
            later = self._decided_later(xa, end, metas) if end is not None and not window and part == 0 else set()
            read_to = end if end is not None else boundary  # a read to the binlog's end: its last boundary
            for name in [] if window else sorted(cascaded | later):  # the committer reads the table again
                yield "ddl", read_to, SchemaChange(name, "rewrite", f"({unlogged_rows(name, name in cascaded)})",
                                                   start, read_to)
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] == DUMP_REFUSED:
                ensure_available(self.client, start)
            raise DblogError(f"reading the binlog of {self.client.config.address} from {start} failed: "
                             f"{exc.args[-1]}") from None
        except (IndexError, KeyError, ValueError, NotImplementedError) as exc:  # the library: a type it does not know
            refused = undecodable_refusal(self.client, list(metas))  # (a column made so in this read)
            if refused:
                raise DblogError(refused) from None
            raise DblogError(f"decoding the binlog of {self.client.config.address} from {start} failed "
                             f"({type(exc).__name__}: {exc}): a table map of a type the replication library does not "
                             f"know (a MariaDB COMPRESSED column, even one made plain since) stops the tail there; "
                             f"take the table out of the capture or capture it again (rerun with -v for details)"
                             ) from exc
        finally:
            events.close()

    def _decided_later(self, xa: PreparedXa, end: SourcePosition, metas: Mapping[str, TableMeta]) -> set[str]:
        """The captured tables of XA groups prepared in the read and committed after ``end``: their rows count
        from that commit, past this read, and no later read sees their prepare, so the committer reads those
        tables again (after the commit: the source shows the rows). Groups rolled back after ``end`` are dropped;
        one undecided in the whole binlog stops the read in one line."""
        pending = xa.undecided(metas)
        if not pending:
            return set()
        outcomes: dict[str, bool] = {}
        events = binlog_events(self.client, self.server_id_range, end, (QueryEvent, NotImplementedEvent))
        try:
            for _, event in events:
                statement = query_statement(event)
                verb = xa_statement(statement[1]) if statement is not None else None
                if verb is not None and verb[1] in pending and verb[0] in ("COMMIT", "ROLLBACK"):
                    outcomes[verb[1]] = verb[0] == "COMMIT"
                    if len(outcomes) == len(pending):
                        break
        finally:
            events.close()
        tables: set[str] = set()
        for xid, (prepared_at, names) in pending.items():
            if xid not in outcomes:
                raise DblogError(undecided_error(xid, prepared_at, names, end))
            if outcomes[xid]:
                log.info("XA transaction %s prepared at %s committed after %s: %s read again", xid, prepared_at, end,
                         ", ".join(names))
                tables.update(names)
        return tables

    @staticmethod
    def _rows(meta: TableMeta | None, versions: dict, kind: str, decoded: list[tuple], pos: SourcePosition, ts: int,
              qualified: str = ""):
        """The items of one rows event: its table's new version first (when its columns changed), then
        ("row", position of the i-th row, (table, before, after, ts)); ``meta`` None: not a captured table."""
        if meta is not None:
            qualified = meta.qualified
            if meta is not versions[qualified]:
                versions[qualified] = meta
                yield "schema", pos, SchemaVersion(meta, pos)
        seq, offset, file = pos.seq, pos.offset, pos.file
        for i, images in enumerate(decoded):
            before, after = (None, images[0]) if kind == "write" else (images[0], None) if kind == "delete" else images
            yield "row", SourcePosition(seq, offset, i, file), (qualified, before, after, ts)

    def changes(self, start: SourcePosition, end: SourcePosition | None, tables: Sequence[TableMeta],
                share: tuple[int, int] = (0, 1), blocks_after: Mapping[str, SourcePosition] | None = None,
                window: bool = False) -> Iterator[ChangeEvent | ChangeBlock | SchemaVersion | SchemaChange]:
        """Row changes of ``tables``, each after the ``SchemaVersion`` it was decoded with (when that is
        not the planned one), and the DDL statements naming them, in binlog order; past
        ``blocks_after[table]`` runs of a table's changes may come as ``ChangeBlock`` s."""
        keys = {m.qualified: m.key_columns for m in tables}
        for kind, pos, payload in self.items(start, end, tables, share=share, blocks_after=blocks_after,
                                             window=window):
            if kind == "block":
                yield payload
            elif kind == "row":
                name, before, after, ts = payload
                if pos.row < ROWS_PER_POSITION:
                    yield from row_change(name, pos, keys[name], before, after, ts)
                elif pos.row == ROWS_PER_POSITION:  # the change's later rows have no position: its table stops
                    yield SchemaChange(name, UNREADABLE, f"{name}: {too_many_rows(pos)}; "
                                       + RESNAPSHOT_FIX.format(table=name), pos.with_row(0), pos)
            elif kind == "schema":
                keys[payload.meta.qualified] = payload.meta.key_columns
                yield payload
            elif kind == "ddl":
                yield payload
            elif kind == "unseen_xa":
                raise UnseenXaCommit(unseen_xa_commit(payload, pos, [m.qualified for m in tables]))


class _Runs:
    """Rows events of each table past its ``blocks_after`` position, gathered while their layout stays the same
    and decoded as blocks when the run ends (another layout, a DDL statement, an event read one by one, the
    run's size, the end of the read). Items of one table stay in binlog order; tables need no order between
    them."""

    def __init__(self, blocks_after: Mapping[str, SourcePosition], versions: dict[str, TableMeta],
                 mariadb: bool = False):
        self.after = {name: pos for name, pos in blocks_after.items()}
        self.versions = versions
        self.mariadb = mariadb
        self.runs: dict[str, tuple[TableMeta, list, RowDecoder, list[RowsEvent]]] = {}
        self.sizes: dict[str, int] = {}
        self._layouts = ByColumns()  # the block layout of a table map's columns, or None

    def takes(self, table: str, pos: SourcePosition) -> bool:
        after = self.after.get(table)
        return after is not None and pos.with_row(0) > after

    def add(self, event, meta: TableMeta, decoder: RowDecoder | None, kind: str, pos: SourcePosition) -> list | None:
        """Add a rows event to its table's run: the items to yield before it (an ended run, a new version), or
        None when it cannot be read column by column (the caller decodes it one by one)."""
        body = body_of(event) if decoder is not None else None
        if body is None:
            return None
        specs = self._layouts.get(event.columns, lambda: block_layout(event.columns, meta, self.mariadb))
        if specs is None:
            return None
        table = meta.qualified
        out: list = []
        run = self.runs.get(table)
        if run is not None and run[0] is not meta:
            out.extend(self.flush(table))
            run = None
        if meta is not self.versions[table]:
            self.versions[table] = meta
            out.append(("schema", pos, SchemaVersion(meta, pos)))
        if run is None:
            run = self.runs[table] = (meta, specs, decoder, [])
            self.sizes[table] = 0
        run[3].append(RowsEvent(body[0], body[1], body[2], kind, pos, int(event.timestamp) * 1000))
        self.sizes[table] += body[2] - body[1]
        if self.sizes[table] >= BLOCK_RUN_BYTES:
            out.extend(self.flush(table))
        return out

    def flush(self, table: str | None = None) -> Iterator[tuple[str, SourcePosition, object]]:
        """The items of ``table``'s run (every table's when None), which ends here."""
        for name in ([table] if table is not None else list(self.runs)):
            run = self.runs.pop(name, None)
            if run is None:
                continue
            meta, specs, decoder, events = run
            pieces = decode_run(name, meta, specs, events) if len(events) >= MIN_EVENTS else [range(len(events))]
            for piece in pieces:
                if isinstance(piece, ChangeBlock):
                    yield "block", piece.first, piece
                    continue
                for e in (events[i] for i in piece):
                    decoded = decode_rows(decoder, e.body, e.start, e.end, 2 if e.kind == "update" else 1)
                    yield from BinlogStream._rows(meta, self.versions, e.kind, decoded, e.pos, e.ts_ms)


def schema_changes(default_db: str, statement: str, start: SourcePosition, pos: SourcePosition,
                   metas: dict[str, TableMeta]) -> list[SchemaChange]:
    """The captured tables a query event's DDL statement names (``start``: the boundary before it)."""
    kind, names = captured_ddl(statement, default_db, metas)
    return [SchemaChange(name, kind, statement, start, pos) for name in names]


# ---- never silent: what dblog cannot decode stops the read before it ------------------------------
_KINDS = {WriteRowsEvent: "write", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
RESNAPSHOT_FIX = "then re-snapshot the table (dblog resnapshot --table {table})"
IMAGE_FIX = "SET GLOBAL binlog_row_image=FULL (and in every session that writes), " + RESNAPSHOT_FIX
METADATA_FIX = "SET GLOBAL binlog_row_metadata=FULL, " + RESNAPSHOT_FIX
STATEMENT_FIX = "SET GLOBAL binlog_format=ROW (and in every session that writes), " + RESNAPSHOT_FIX
PARTIAL_JSON_FIX = "SET GLOBAL binlog_row_value_options='' (and in every session that writes), " + RESNAPSHOT_FIX
COMPRESSION_FIX = "SET GLOBAL log_bin_compress=OFF, then re-snapshot the table"
# events that never carry a row change or DDL (MySQL's GTID and transaction bookkeeping, ignorable events)
IGNORED_EVENT_TYPES = {0x1C, 0x22, 0x24, 0x25, 0x29, 0x2A}
REFUSED_EVENT_TYPES = {
    compressed.TRANSACTION_PAYLOAD: "a compressed transaction (binlog_transaction_compression=ON): SET GLOBAL "
                                    "binlog_transaction_compression=OFF, " + RESNAPSHOT_FIX,
    0x1A: "an INCIDENT event (the server could not log some changes): " + RESNAPSHOT_FIX,
}


def event_problem(event_type: int, pos: SourcePosition, table: str) -> str:
    """The one line of a refused event type that may hold ``table``'s changes."""
    return (f"binlog event type {event_type} at {pos} is {REFUSED_EVENT_TYPES[event_type].format(table=table)}; "
            f"dblog stops before it")


def rows_event_problem(table: str, kind: str, columns, full: bool, pos: SourcePosition) -> str | None:
    """Why a rows event of a captured table cannot be written to the lake as whole rows (None: it can)."""
    if not has_column_names(columns):
        return (f"the {kind} rows event of {table} at {pos} has no column names (binlog_row_metadata is not FULL): "
                f"dblog stops before it; " + METADATA_FIX.format(table=table))
    if not full:
        return (f"the {kind} rows event of {table} at {pos} lacks columns (binlog_row_image is not FULL where it "
                f"was written): dblog stops before it; " + IMAGE_FIX.format(table=table))
    return None


# statements logged only for what the stored functions they call wrote (``SELECT f()``)
_CALLING = re.compile(r"^(?:SELECT|DO)\b", re.I)


def statement_problems(default_db: str, statement: str, pos: SourcePosition, metas: Mapping[str, TableMeta],
                       watched: Mapping[str, list], catalog) -> dict[str, str]:
    """Per captured table a statement-logged statement (binlog_format STATEMENT or MIXED) may have changed, the
    one line that stops a read needing its changes: the tables it names, the captured tables a watched parent it
    names cascades into, and those it reaches through triggers, views and stored functions (``side_effects``;
    ``catalog()`` reads them, only for such a statement)."""
    text = plain_statement(statement)
    parsed = dml_tables(text, default_db)
    if parsed is None:
        if not _CALLING.match(text):
            return {}
        parsed = (text.split(None, 1)[0].lower(), [])
    kind, named = parsed
    lowered = {name.lower(): name for name in metas}
    parents = {name.lower(): name for name in watched}
    problems: dict[str, str] = {}
    ran = f"(binlog_format STATEMENT or MIXED where it ran): its rows are not in the binlog; dblog stops before it; "
    for name in named:
        if name.lower() in lowered:
            table = lowered[name.lower()]
            problems[table] = (f"{table} changed by a statement-logged {kind.upper()} at {pos} {ran}"
                               + STATEMENT_FIX.format(table=table))
        for _, child in watched.get(parents.get(name.lower(), ""), ()):
            problems.setdefault(child, f"{child} changed through a foreign-key cascade by a statement-logged "
                                       f"{kind.upper()} of {parents[name.lower()]} at {pos} {ran}"
                                       + STATEMENT_FIX.format(table=child))
    for table in sorted(reached(named, text, catalog(), metas) - set(problems)):
        problems[table] = (f"{table} may have been changed by a statement-logged {kind.upper()} at {pos} through "
                           f"triggers, views or stored functions {ran}" + STATEMENT_FIX.format(table=table))
    return problems


def query_statement(event) -> tuple[str, str] | None:
    """(default database, statement) of a query event, MariaDB's compressed ones included; None for others."""
    if isinstance(event, QueryEvent):
        schema = event.schema
        return (schema.decode("utf-8", "replace") if isinstance(schema, bytes) else str(schema)), event.query
    if isinstance(event, NotImplementedEvent) and event.event_type == compressed.QUERY_COMPRESSED:
        return compressed.query(event)
    return None


def _lowered(images) -> list[tuple[dict, dict]]:
    """(before, after) images with lower-case column names (foreign keys name columns in any case)."""
    return [({k.lower(): v for k, v in before.items()}, {k.lower(): v for k, v in after.items()})
            for before, after in images]


def refuse_event(event_type: int, pos: SourcePosition) -> None:
    """Stop before a binlog event dblog cannot decode, unless it is known to change no row."""
    if event_type in IGNORED_EVENT_TYPES:
        return
    raise DblogError(f"binlog event type {event_type} at {pos} is an event type dblog does not know: it may hold row "
                     f"changes; report it with the server's version; dblog stops before it")
