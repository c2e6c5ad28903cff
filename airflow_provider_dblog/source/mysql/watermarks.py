"""The three watermark strategies (docs/semantics): the window around one chunk's SELECT."""
from __future__ import annotations

import logging
import time
import uuid

import pymysql

from airflow_provider_dblog.core.errors import DblogError, SchemaChangedError, UnseenXaCommit
from airflow_provider_dblog.core.events import ChangeEvent, row_change
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.core.schema_events import UNREADABLE
from airflow_provider_dblog.source.mysql.binlog import BinlogStream, current_position
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.types import quote_ident
from airflow_provider_dblog.source.mysql.xa import unseen_xa_commit

log = logging.getLogger("dblog")
WATERMARK_TABLE = "_dblog_watermark"
HIGH_MARK_TIMEOUT_SECONDS = 120


def has_snapshot_status(client: MySqlClient) -> bool:
    return bool(client.query("SHOW STATUS LIKE 'binlog_snapshot_position'"))


def watermark_table_name(configured: str | None, meta: TableMeta) -> str:
    return configured or f"{meta.database}.{WATERMARK_TABLE}"


def ensure_watermark_table(client: MySqlClient, name: str) -> None:
    db, table = name.split(".", 1)
    try:
        client.query(f"CREATE TABLE IF NOT EXISTS {quote_ident(db)}.{quote_ident(table)} "
                     f"(id TINYINT PRIMARY KEY, mark VARCHAR(64) NOT NULL) ENGINE=InnoDB")
        client.query(f"INSERT IGNORE INTO {quote_ident(db)}.{quote_ident(table)} VALUES (1, '')")
        # each chunk's window UPDATEs the mark: a grant without UPDATE fails here, at plan, not in every chunk read
        # (a no-op update: no row changes, nothing in the binlog)
        client.query(f"UPDATE {quote_ident(db)}.{quote_ident(table)} SET mark = mark WHERE id = 1")
    except pymysql.MySQLError as exc:
        raise DblogError(f"cannot write the watermark table {db}.{table} ({exc.args[-1]}): grant CREATE, "
                         f"INSERT, UPDATE on it, or use --watermark consistent_snapshot or position") from None


def resolve_strategy(client: MySqlClient, strategy: str, table_name: str) -> str:
    """``auto``: consistent_snapshot where the server has it, else watermark_table if writable, else position."""
    if strategy == "consistent_snapshot" or (strategy == "auto" and has_snapshot_status(client)):
        if not has_snapshot_status(client):
            raise DblogError(f"watermark strategy consistent_snapshot needs MariaDB or Percona Server "
                             f"(Binlog_snapshot_position); {client.config.address} runs {client.version}: "
                             f"use --watermark watermark_table or position")
        return "consistent_snapshot"
    if strategy == "auto":
        try:
            ensure_watermark_table(client, table_name)
            return "watermark_table"
        except DblogError as exc:
            log.warning("watermark strategy auto: %s; falling back to position, whose known race can leave a "
                        "transaction out of a chunk until its key changes again or the chunk is re-read "
                        "(dblog verify finds it; --watermark position says you accept it)", exc)
            return "position"
    if strategy == "watermark_table":
        ensure_watermark_table(client, table_name)
    if strategy not in ("position", "watermark_table"):
        raise DblogError(f"unknown watermark strategy {strategy!r}: use auto, position, watermark_table "
                         f"or consistent_snapshot")
    return strategy


def only_changes(items: list, meta: TableMeta) -> list[ChangeEvent]:
    """A window's row changes; a schema change of the table inside the window means the SELECT and the
    window's images may not share their columns: the chunk must be read again (``SchemaChangedError``)."""
    changed = [i for i in items if not isinstance(i, ChangeEvent)]
    if changed:
        if getattr(changed[0], "kind", "") == UNREADABLE:  # a change the window's events cannot show
            raise SchemaChangedError(f"{changed[0].statement} (inside a chunk's watermark window: reading the chunk "
                                     f"again)")
        raise SchemaChangedError(f"the columns of {meta.qualified} changed inside a chunk's watermark window "
                                 f"(at {changed[0].pos}): reading the chunk again")
    return items


class PositionWatermark:
    """Flink CDC's watermarks: the binlog position before and after the SELECT.

    Known race: a transaction already in the binlog before LW but not yet visible to the SELECT.
    """

    def __init__(self, client: MySqlClient, stream: BinlogStream, meta: TableMeta):
        self.client, self.stream, self.meta = client, stream, meta
        self.lw = self.hw = None

    def low(self) -> None:
        self.lw = current_position(self.client)

    def high(self) -> None:
        self.hw = current_position(self.client)

    def window(self) -> tuple[SourcePosition, SourcePosition, list[ChangeEvent]]:
        events = list(self.stream.changes(self.lw, self.hw, [self.meta], window=True)) if self.hw > self.lw else []
        return self.lw, self.hw, only_changes(events, self.meta)


class ConsistentSnapshotWatermark(PositionWatermark):
    """LW is the exact binlog position of a consistent-snapshot read view (MariaDB, Percona).

    Every transaction before it is visible to any read view opened later, so the SELECT that follows
    sees all of them: the race of ``position`` cannot happen.
    """

    def low(self) -> None:
        with self.client.conn.cursor() as cur:
            try:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {k.lower(): v for k, v in cur.fetchall()}
            finally:
                cur.execute("COMMIT")
        self.lw = self.client.position(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))


class TableWatermark:
    """DBLog's watermarks: a fresh UUID written to a one-row table, each write its own transaction,
    then located in the binlog. LW/HW are the commit positions of those two transactions."""

    def __init__(self, client: MySqlClient, stream: BinlogStream, meta: TableMeta, table: str):
        self.client, self.stream, self.meta, self.table = client, stream, meta, table
        self.start = None
        self.marks: list[str] = []

    def _write(self) -> None:
        mark = uuid.uuid4().hex
        db, name = self.table.split(".", 1)
        self.client.query(f"UPDATE {quote_ident(db)}.{quote_ident(name)} SET mark = %s WHERE id = 1", (mark,))
        self.marks.append(mark)

    def low(self) -> None:
        self.start = current_position(self.client)
        self._write()

    def high(self) -> None:
        self._write()

    def window(self) -> tuple[SourcePosition, SourcePosition, list[ChangeEvent]]:
        low_mark, high_mark = self.marks
        lw = hw = None
        seen: str | None = None
        events: list[ChangeEvent] = []
        deadline = time.time() + HIGH_MARK_TIMEOUT_SECONDS
        while hw is None:
            for kind, pos, payload in self.stream.items(self.start, None, [self.meta], [self.table], window=True):
                if kind == "commit":
                    if seen == low_mark and lw is None:
                        lw = pos
                    elif seen == high_mark:
                        hw = pos
                        break
                    seen = None
                    continue
                if kind in ("schema", "ddl"):
                    if lw is not None:
                        only_changes([payload], self.meta)
                    continue
                if kind == "unseen_xa":  # before the low mark it committed before the SELECT: harmless
                    if lw is not None:
                        raise UnseenXaCommit(unseen_xa_commit(payload, pos, [self.meta.qualified]))
                    continue
                name, before, after, ts = payload
                if name == self.table:
                    seen = (after or {}).get("mark")
                elif lw is not None:
                    events.extend(row_change(name, pos, self.meta.key_columns, before, after, ts))
            if hw is None:
                if time.time() > deadline:
                    raise DblogError(f"the high watermark written to {self.table} did not appear in the binlog "
                                     f"within {HIGH_MARK_TIMEOUT_SECONDS} s: check that binlog filters do not "
                                     f"exclude {self.table}")
                lw, events = None, []
                time.sleep(0.2)
        return lw, hw, events
