"""Where a capture without a snapshot starts reading the binlog (startup modes ``latest``,
``position:FILE:POS``, ``gtid:SET``, ``timestamp:EPOCH_MS``): always a transaction boundary the server
still has, checked here with a one-line error otherwise (purged, past the end, mid-transaction, future)."""
from __future__ import annotations

import logging
import re
import time
from itertools import islice

import pymysql
from pymysqlreplication.event import FormatDescriptionEvent, GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent

from airflow_provider_dblog.core.errors import DblogError, TryAgainLater
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.source.mysql.binlog import binlog_sizes, current_position, listed_events
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.replication import binlog_events
from airflow_provider_dblog.source.mysql import xa

log = logging.getLogger("dblog")

# events inside a transaction: a position at one of them would start reading mid-transaction, which
# loses the transaction's rows (their table map is behind it)
_INSIDE = ("Table_map", "Write_rows", "Update_rows", "Delete_rows", "Annotate_rows", "Rows_query", "Xid")
_MARIADB_GTID = re.compile(r"^\d+-\d+-\d+$")
_GTID = re.compile(r"(\d+)-(\d+)-(\d+)")


def startup_position(client: MySqlClient, server_ids: tuple[int, int], mode: StartupMode) -> SourcePosition:
    """The transaction boundary where ``mode``'s stream starts (modes that read no snapshot)."""
    if mode.kind == "latest":
        return current_position(client)
    if mode.kind == "position":
        return checked_position(client, mode.position)
    if mode.kind == "gtid":
        return gtid_position(client, mode.gtid)
    if mode.kind == "timestamp":
        return timestamp_position(client, server_ids, mode.timestamp_ms)
    raise ValueError(f"startup mode {mode} reads a snapshot: it has no start position")


def _files(client: MySqlClient, position_text: str) -> list[str]:
    files = list(binlog_sizes(client))
    if not files:
        raise DblogError(f"binary logging is off on {client.config.address}: no binlog to start at {position_text}")
    return files


def checked_position(client: MySqlClient, position: SourcePosition) -> SourcePosition:
    """``position`` if the server still has it and it is a transaction boundary."""
    sizes = binlog_sizes(client)
    files = list(sizes)
    if position.file not in sizes:
        oldest = files[0] if files else "none"
        if files and position.seq < client.position(oldest, 4).seq:
            raise DblogError(f"startup position {position} was purged from {client.config.address} (oldest binlog is "
                             f"{oldest}): choose a later position, or snapshot the table (--startup initial)")
        raise DblogError(f"startup position {position}: {client.config.address} has no binlog {position.file} "
                         f"(it has {files[0] if files else 'none'} .. {files[-1] if files else 'none'})")
    if position.offset > sizes[position.file]:
        raise DblogError(f"startup position {position} is past the end of {position.file} "
                         f"({sizes[position.file]} bytes): a position in the future")
    if position.offset == sizes[position.file]:
        return position
    try:
        event = next(iter(listed_events(client, position, [position.file], page=1)), None)
    except pymysql.MySQLError:
        event = None
    if event is None or event.pos != position.offset:
        raise DblogError(f"startup position {position} is not the start of a binlog event: use a position "
                         f"SHOW BINARY LOG STATUS / SHOW MASTER STATUS printed, or an end_log_pos of a commit")
    if event.kind.startswith(_INSIDE) or (event.kind == "Query" and event.info.strip().upper() == "COMMIT"):
        raise DblogError(f"startup position {position} is inside a transaction (a {event.kind} event): use the "
                         f"position after its COMMIT (Xid) event")
    return position


def gtid_position(client: MySqlClient, gtid_set: str) -> SourcePosition:
    """MariaDB, one replication domain: the boundary after the transaction ``D-S-N`` (every transaction
    of domain D up to sequence N is before it). Other GTID sets are not supported: one line says so."""
    text = gtid_set.strip()
    if not client.is_mariadb:
        raise DblogError("startup mode gtid: is not supported on MySQL yet: use position:FILE:POS (the file and "
                         "position of SHOW BINARY LOG STATUS) or timestamp:EPOCH_MS")
    if not _MARIADB_GTID.match(text):
        raise DblogError(f"startup mode gtid:{text} is not supported: only one MariaDB GTID (DOMAIN-SERVER-SEQ, "
                         f"e.g. gtid:0-1-1500) is; use position:FILE:POS or timestamp:EPOCH_MS")
    domain, _, seq = (int(p) for p in text.split("-"))
    current = client.scalar("SELECT @@gtid_binlog_pos") or ""
    latest = {int(g.split("-")[0]): int(g.split("-")[2]) for g in current.split(",") if g.strip()}
    if seq > latest.get(domain, 0):
        raise DblogError(f"startup GTID {text} is in the future: the server's binlog is at {current or 'nothing'}")
    files = _files(client, f"gtid:{text}")
    # the newest file that starts at or before the transaction after N: its Gtid_list (the last GTID per
    # domain before the file) is at most N
    first = next((i for i in range(len(files) - 1, -1, -1) if _gtid_list(client, files[i]).get(domain, 0) <= seq),
                 None)
    if first is None:
        raise DblogError(f"startup GTID {text} was purged from {client.config.address} (the oldest binlog "
                         f"{files[0]} starts after it): choose a later GTID or --startup initial")
    for event in listed_events(client, client.position(files[first], 4), files[first:]):
        found = _GTID.search(event.info) if event.kind == "Gtid" else None
        if found and int(found.group(1)) == domain and int(found.group(3)) > seq:
            return client.position(event.file, event.pos)
    return current_position(client)


def gtid_at(client: MySqlClient, position: SourcePosition) -> str | None:
    """MariaDB's GTID state at a boundary of this server's binlog (``BINLOG_GTID_POS``, which reads the
    file up to it: asked once per tail start, not per batch); None on MySQL, for another server's position
    or without GTIDs."""
    if not client.is_mariadb or position.epoch != client.epoch:
        return None
    try:
        value = client.scalar("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.offset))
    except pymysql.MySQLError:
        return None
    return value or None


def _gtid_list(client: MySqlClient, file: str) -> dict[int, int]:
    """The last sequence per domain before ``file`` (its ``Gtid_list`` event, among its first events)."""
    for event in islice(listed_events(client, client.position(file, 4), [file], page=8), 8):
        if event.kind == "Gtid_list":
            last: dict[int, int] = {}
            for domain, _, seq in _GTID.findall(event.info):
                last[int(domain)] = max(last.get(int(domain), 0), int(seq))
            return last
    return {}


def file_started(client: MySqlClient, server_ids: tuple[int, int], file: str) -> int:
    """When ``file`` was created (its format description event), epoch seconds."""
    events = binlog_events(client, server_ids, client.position(file, 4), [FormatDescriptionEvent])
    try:
        return next((e.timestamp for _, e in events if e.timestamp), 0)
    finally:
        events.close()


def timestamp_position(client: MySqlClient, server_ids: tuple[int, int], timestamp_ms: int) -> SourcePosition:
    """The boundary before the first transaction written at or after ``timestamp_ms``. The binlog
    stamps events to the second: a transaction in the same second as the timestamp is included."""
    now_ms = int(float(client.scalar("SELECT UNIX_TIMESTAMP(NOW(3))")) * 1000)
    if timestamp_ms > now_ms:
        raise DblogError(f"startup timestamp {timestamp_ms} is in the future (the server's clock says {now_ms}): "
                         f"use a past time in milliseconds since 1970, or latest")
    second = timestamp_ms // 1000
    now = current_position(client)
    files = _files(client, f"timestamp:{timestamp_ms}")
    started = lambda f: file_started(client, server_ids, f)  # noqa: E731
    if started(files[0]) > second:
        raise DblogError(f"startup timestamp {timestamp_ms} is before the oldest binlog {files[0]} on "
                         f"{client.config.address}: changes since then were purged; choose a later time or "
                         f"--startup initial")
    lo, hi = 0, len(files) - 1  # the last file created before ``second``: binary search on creation times
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if started(files[mid]) < second else (lo, mid - 1)
    boundary = client.position(files[lo], 4)
    events = binlog_events(client, server_ids, boundary, [GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent])
    try:
        for stream, event in events:
            log_pos = event.packet.log_pos
            if not log_pos:
                continue
            pos = client.position(stream.log_file, log_pos)
            if pos > now:
                break
            query = event.query.strip().upper() if isinstance(event, QueryEvent) else ""
            starts = isinstance(event, (GtidEvent, MariadbGtidEvent)) or (isinstance(event, QueryEvent)
                                                                         and query != "COMMIT")
            if starts and event.timestamp >= second:
                return boundary
            if isinstance(event, XidEvent) or (isinstance(event, QueryEvent) and query != "BEGIN"):
                boundary = pos  # the end of a commit (or of a DDL statement)
    finally:
        events.close()
    return now


def prepared_since(client: MySqlClient, start: SourcePosition) -> set[str]:
    """The xids (binlog form, lower case) of the XA transactions prepared in the binlog from ``start`` on."""
    found = set()
    for event in listed_events(client, start, list(binlog_sizes(client))):
        verb = xa.xa_statement(event.info) if event.info[:2].upper() == "XA" else None
        if verb is not None and verb[0] in ("END", "PREPARE"):
            found.add(verb[1].lower())
    return found


def start_clear_of_prepared(client: MySqlClient, take_position, seconds: float) -> SourcePosition:
    """A start for a stream without a snapshot (``--startup latest``) that no XA transaction straddles: one
    prepared before it and committed after it has its rows before the start, and the stream would read only
    its commit. Taken between two ``XA RECOVER`` s; every transaction either lists must have its prepare at or
    after the start in the binlog, else the start is taken again once they are decided (their commits then
    come before it). After ``seconds``, one line (``TryAgainLater``)."""
    deadline, said = time.time() + seconds, False
    while True:
        before = xa.recovered(client)
        position = take_position()
        if before is None:
            return position
        after = xa.recovered(client) or {}
        listed = {**before, **after}
        straddling = set(listed) - prepared_since(client, position) if listed else set()
        if not straddling:
            if said:
                log.info("plan: the XA transactions prepared before the start are decided")
            return position
        names = ", ".join(sorted(listed[x] for x in straddling))
        if time.time() >= deadline:
            raise TryAgainLater(
                f"{len(straddling)} XA transaction(s) prepared before the stream's start are still undecided after "
                f"{seconds:.0f} s ({names}): the server wrote their rows to the binlog at XA PREPARE, before the "
                f"start, and a stream without a snapshot would read only their commits; XA COMMIT or XA ROLLBACK "
                f"them (XA RECOVER lists them) and plan again, or wait longer (DBLOG_XA_WAIT_SECONDS)")
        if not said:
            log.info("plan: waiting up to %.0f s for %d XA transaction(s) prepared before the stream's start (%s) "
                     "to be committed or rolled back", seconds, len(straddling), names)
            said = True
        time.sleep(0.2)
