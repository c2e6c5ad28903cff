"""XA transactions in the binlog. The server writes an XA transaction's rows at ``XA PREPARE`` (MySQL 5.7+,
MariaDB 10.5+), before anyone knows whether it commits: a group ``XA START`` (MariaDB: a flag of its GTID
event), row events, ``XA END xid``, an XA_prepare event; later, in its own group, ``XA COMMIT xid`` or
``XA ROLLBACK xid``. Applied at prepare, a rolled-back transaction's rows stay in the lake for good.

So a read holds a prepared group's items until its outcome: at ``XA COMMIT`` they come at the commit's
position (the transaction's rows became visible there, and its row locks kept every other writer off those
rows in between, so each key's order holds), at ``XA ROLLBACK`` they are dropped. A group still undecided
where the read ends is looked up past the end: rolled back, it is dropped; committed, its tables are read
again (its rows belong past this read, and no later read sees its prepare); undecided in the whole binlog,
the read stops in one line (nothing of it is written; a later read finds the outcome)."""
from __future__ import annotations

import logging
import os
import re
import time
from typing import Iterable

import pymysql

from airflow_provider_dblog.core.errors import DblogError, TryAgainLater
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.schema_events import SchemaVersion

log = logging.getLogger("dblog")

MARIADB_PREPARED_XA = 64  # FL_PREPARED_XA in a MariaDB GTID event's flags: the group is an XA PREPARE's
WAIT_SECONDS = 60  # how long a plan waits for XA transactions prepared before it (DBLOG_XA_WAIT_SECONDS)
_XA = re.compile(r"^\s*XA\s+(START|BEGIN|END|COMMIT|ROLLBACK)\b\s*(.*?)\s*(\bONE\s+PHASE)?\s*$", re.I | re.S)


def xa_statement(query: str) -> tuple[str, str] | None:
    """(verb, xid) of an ``XA ...`` statement as the binlog writes it (``X'..',X'..',format``), else None;
    ``XA COMMIT xid ONE PHASE`` is ("COMMIT ONE PHASE", xid)."""
    found = _XA.match(query) if query[:2].upper() == "XA" else None
    if found is None:
        return None
    verb = found.group(1).upper()
    return (f"{verb} ONE PHASE" if found.group(3) else verb), "".join(found.group(2).split())


class PreparedXa:
    """The items of XA groups a read has seen prepared, until their ``XA COMMIT`` or ``XA ROLLBACK``."""

    def __init__(self) -> None:
        self.open: list | None = None  # the items of the group being read, when it is an XA group
        self._xid = ""
        self._prepared: dict[str, tuple[SourcePosition, list]] = {}

    @property
    def holding(self) -> bool:
        return self.open is not None

    def begin(self) -> None:
        self.open, self._xid = [], ""

    def hold(self, items: Iterable) -> Iterable:
        """``items`` themselves outside an XA group; inside one, nothing now (they wait for the outcome)."""
        if self.open is None:
            return items
        self.open.extend(items)
        return ()

    def ended(self, xid: str) -> None:
        self._xid = xid

    def prepared(self, pos: SourcePosition) -> None:
        if self.open is not None:
            self._prepared[self._xid] = (pos, self.open)
        self.open = None

    def committed(self, xid: str | None, pos: SourcePosition, row: int = 0) -> list:
        """The group's items at ``pos`` (the commit), rows numbered in their order from ``row``; ``xid`` None:
        the group being read (a one-phase commit)."""
        if xid is None:
            items, self.open = self.open or [], None
        else:
            items = self._prepared.pop(xid, (pos, []))[1]
        moved = []
        for kind, _, payload in items:
            at = pos.with_row(row)
            if kind == "row":
                moved.append(("row", at, payload))
                row += 1
            elif kind == "schema":
                moved.append(("schema", at, SchemaVersion(payload.meta, at)))
            else:  # ("cascade", pos, (table,)): a table the group changed without rows of its own
                moved.append((kind, at, payload))
        return moved

    def knows(self, xid: str) -> bool:
        """Whether the read saw ``xid`` prepared (and not yet decided)."""
        return xid in self._prepared

    def rolled_back(self, xid: str) -> None:
        self._prepared.pop(xid, None)

    def undecided(self, captured: Iterable[str]) -> dict[str, tuple[SourcePosition, list[str]]]:
        """The groups still undecided that change one of ``captured``: xid -> (prepared at, those tables)."""
        captured = set(captured)
        found = {}
        for xid, (pos, items) in self._prepared.items():
            tables = sorted({payload[0] for kind, _, payload in items if kind in ("row", "cascade")} & captured)
            if tables:
                found[xid] = (pos, tables)
        return found


def undecided_error(xid: str, pos: SourcePosition, tables: list[str], end: SourcePosition) -> str:
    return (f"XA transaction {xid} prepared at {pos} changes {', '.join(tables)} and is neither committed nor "
            f"rolled back in the binlog (read to {end}): its rows count only from its XA COMMIT, so the read stops "
            f"before it; run the tail again once it is decided (XA RECOVER lists it)")


def unseen_xa_commit(xid: str, pos: SourcePosition, tables: Iterable[str]) -> str:
    return (f"XA transaction {xid} committed at {pos}, inside the watermark window of a chunk of "
            f"{', '.join(tables)}, was prepared before the window: its rows are not in the window and the chunk's "
            f"SELECT may not show them, so the chunk is read again")


def wait_seconds() -> float:
    return float(os.environ.get("DBLOG_XA_WAIT_SECONDS", WAIT_SECONDS))


def _recover(client) -> list | None:
    """``XA RECOVER``'s rows (format, gtrid length, bqual length, data), None when this user may not list them."""
    try:
        return client.query("XA RECOVER")
    except pymysql.MySQLError as exc:
        log.warning("cannot list prepared XA transactions (XA RECOVER: %s): one prepared before the plan and "
                    "committed after its snapshot would be missed (dblog verify finds it); grant XA_RECOVER_ADMIN "
                    "(MySQL 8) to check", exc.args[-1])
        return None


def _shown(data) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


def prepared_xids(client) -> set[str] | None:
    """The XA transactions prepared on the server now, as XA RECOVER shows them (None: not listable)."""
    rows = _recover(client)
    return None if rows is None else {_shown(row[3]) for row in rows}


def binlog_xid(format_id: int, gtrid_length: int, bqual_length: int, data) -> str:
    """An ``XA RECOVER`` row's xid as the binlog writes it (``X'gtrid',X'bqual',format``, ``xa_statement``)."""
    raw = data if isinstance(data, bytes) else str(data).encode()
    gtrid, bqual = raw[:gtrid_length], raw[gtrid_length:gtrid_length + bqual_length]
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{int(format_id)}"


def recovered(client) -> dict[str, str] | None:
    """binlog xid (lower case) -> the xid as XA RECOVER shows it, of the transactions prepared now (None: not
    listable)."""
    rows = _recover(client)
    return None if rows is None else {binlog_xid(*row[:3], row[3]).lower(): _shown(row[3]) for row in rows}


def wait_for_prepared(client, seconds: float) -> None:
    """A plan's positions are taken: an XA transaction prepared before them wrote its rows to the binlog there,
    before the stream starts, and the snapshot sees them only once it commits. So wait until each one prepared
    now is decided (a commit before the snapshot reads is seen by it); refuse in one line after ``seconds``."""
    pending = prepared_xids(client)
    if not pending:
        return
    log.info("plan: waiting up to %.0f s for %d XA transaction(s) prepared before the plan's position (%s) to be "
             "committed or rolled back", seconds, len(pending), ", ".join(sorted(pending)))
    deadline = time.time() + seconds
    while True:
        now = prepared_xids(client)
        if now is None:
            raise DblogError("the XA transactions prepared before the plan's position could not be listed again "
                             "(XA RECOVER failed while the plan waited for them): plan again")
        pending &= now
        if not pending:
            log.info("plan: the XA transactions prepared before it are decided")
            return
        if time.time() >= deadline:
            raise TryAgainLater(
                f"{len(pending)} XA transaction(s) prepared before the plan's position are still undecided after "
                f"{seconds:.0f} s ({', '.join(sorted(pending))}): the server wrote their rows to the binlog at XA "
                f"PREPARE, before the stream starts, and the snapshot cannot see them before they commit, so dblog "
                f"would miss them; XA COMMIT or XA ROLLBACK them (XA RECOVER lists them) and plan again, or wait "
                f"longer (DBLOG_XA_WAIT_SECONDS)")
        time.sleep(0.2)
