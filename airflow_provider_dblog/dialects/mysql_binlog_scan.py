"""Does a binlog range hold row events of some tables? A cheap check with ``SHOW BINLOG EVENTS``.

Every row event (Write/Update/Delete_rows) is preceded in its transaction by a ``Table_map`` event
whose Info names the table (``table_id: 18 (db.table)``), so a range without such a Table_map holds
no row change of the table. The server lists events without decoding them (no row images leave it),
which is far cheaper than a replication stream; still, past ``max_events`` the scan gives up and the
caller should read the range the normal way.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import pymysql

from airflow_provider_dblog.core.positions import BinlogPosition

MAX_SCAN_EVENTS = 50_000
SCAN_PAGE = 10_000
_TABLE_MAP = re.compile(r"\((?P<name>.*)\)\s*$")


@dataclass(frozen=True)
class RangeScan:
    """``clean``: no row event of the tables in the range (proved); otherwise ``reason`` says why not."""

    clean: bool
    events: int
    reason: str = ""


def scan_table_events(dialect, start: BinlogPosition, end: BinlogPosition, tables: Iterable[str],
                      max_events: int = MAX_SCAN_EVENTS, page: int = SCAN_PAGE) -> RangeScan:
    """Whether the binlog range ``[start, end)`` holds no row event of ``tables`` (``db.table`` names).

    ``start`` must be an event boundary (a transaction boundary, as every dblog offset is) and ``end`` a
    position the server reported (``SHOW MASTER STATUS``). Names compare case-insensitively: a false
    match only costs the caller the normal read, a missed one would lose changes.
    """
    wanted = {t.lower() for t in tables}
    if end <= start:
        return RangeScan(True, 0)
    try:
        files = dialect.binlog_files()
        if start.file not in files or end.file not in files:
            return RangeScan(False, 0, f"binlog {start.file if start.file not in files else end.file} is not listed")
        index, last = files.index(start.file), files.index(end.file)
        file, offset, seen = start.file, start.offset, 0
        while True:
            rows = dialect.query(f"SHOW BINLOG EVENTS IN %s FROM {int(offset)} LIMIT {int(page)}", (file,))
            for _log, pos, kind, _sid, end_pos, info in rows:
                if file == end.file and int(pos) >= end.offset:
                    return RangeScan(True, seen)
                seen += 1
                if kind == "Table_map":
                    match = _TABLE_MAP.search(str(info or ""))
                    if match is None or match.group("name").lower() in wanted:
                        return RangeScan(False, seen, f"row events of {match.group('name') if match else '?'} "
                                                      f"at {file}:{pos}")
                offset = int(end_pos)
            if seen > max_events:
                return RangeScan(False, seen, f"more than {max_events:,} events to scan")
            if len(rows) < page:  # end of this file
                if index >= last:
                    return RangeScan(True, seen)
                index += 1
                file, offset = files[index], 4
    except pymysql.MySQLError as exc:
        return RangeScan(False, 0, f"SHOW BINLOG EVENTS failed: {exc.args[-1] if exc.args else exc}")


def range_bytes(dialect, start: BinlogPosition, end: BinlogPosition) -> int | None:
    """Binlog bytes in ``[start, end)`` from ``SHOW BINARY LOGS`` sizes; None if a file is not listed."""
    if end <= start:
        return 0
    sizes = {name: int(size) for name, size, *_ in dialect.query("SHOW BINARY LOGS")}
    names = list(sizes)
    if start.file not in sizes or end.file not in sizes:
        return None
    first, last = names.index(start.file), names.index(end.file)
    if first == last:
        return end.offset - start.offset
    return (sizes[start.file] - start.offset) + sum(sizes[n] for n in names[first + 1:last]) + end.offset
