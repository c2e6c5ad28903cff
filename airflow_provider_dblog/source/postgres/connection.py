"""Connections to PostgreSQL (psycopg2): one lazily opened control connection and one for chunk reads,
both with ``values.SESSION_SETTINGS`` (UTC, ISO dates, hex bytea, ...) so every value's text form is the
one the readers parse, whatever the server's or the role's defaults. Errors are one line and never hold
the password."""
from __future__ import annotations

import time
from typing import Sequence

import psycopg2

from airflow_provider_dblog.core.config import PASSWORD_ENV, SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source.postgres.pgoutput import parse_lsn
from airflow_provider_dblog.source.reconnect import ConnectionLost, again_when_lost
from airflow_provider_dblog.source.postgres.values import libpq_options

APPLICATION_NAME = "dblog"
# PostgreSQL 14+: a DBA's limit would close a control connection idle between statements, or a new one before its
# first (a loaded client); off from the start, as the other limits. Older servers refuse the name at connect time:
# their addresses are remembered and connected to without it
IDLE_OPTION = " -c idle_session_timeout=0"
_WITHOUT_IDLE_OPTION: set[str] = set()
CONNECT_TIMEOUT_SECONDS = 10
FLUSH_NUDGE_SECONDS = 0.02  # then an empty commit flushes what an idle server has not (``current_lsn``)
FLUSH_WAIT_SECONDS = 60.0  # the WAL writer flushes asynchronous commits within a few wal_writer_delay


# SQLSTATEs dblog acts on: the server's messages are in its lc_messages (German, French, ...), its codes are not
OBJECT_IN_USE = "55006"  # replication slot ... is active for PID ...
CONFIGURATION_LIMIT_EXCEEDED = "53400"  # all replication slots are in use
INSUFFICIENT_PRIVILEGE = "42501"  # permission denied, must be superuser or replication role


def sqlstate(exc: BaseException) -> str | None:
    """The server's SQLSTATE of a psycopg2 error (None: not the server's, e.g. a failed connection)."""
    return getattr(exc, "pgcode", None)


def first_line(exc: BaseException, secret: str = "") -> str:
    """A psycopg2 error as one line (the server's primary message, in the server's language, without its
    severity or libpq's "connection to server at ..." prefix), the password masked."""
    diag = getattr(exc, "diag", None)
    line = (getattr(diag, "message_primary", None) or "").strip()
    if not line:
        text = (getattr(exc, "pgerror", None) or str(exc) or type(exc).__name__).strip()
        lines = [part.strip() for part in text.splitlines() if part.strip()]
        line = next((part for part in lines if part.startswith(("FATAL:", "ERROR:"))), lines[0] if lines else "")
        if "failed: " in line and line.startswith("connection to server"):
            line = line.split("failed: ", 1)[1]
        for prefix in ("FATAL:", "ERROR:"):
            if line.startswith(prefix):
                line = line[len(prefix):].strip()
    if "row-level security" in line:  # the readers' row_security = off (values.SESSION_SETTINGS) says no
        line += (" (a capture reads every row: ALTER ROLE ... BYPASSRLS, or read as the table's owner without "
                 "FORCE ROW LEVEL SECURITY, or as a superuser)")
    return line.replace(secret, "***") if secret else line


class PostgresClient:
    """The control connection (autocommit: catalog queries, positions) and the snapshot connection (one
    REPEATABLE READ, READ ONLY transaction per chunk window: ``begin_snapshot`` / ``end_snapshot``)."""

    def __init__(self, config: SourceConfig):
        self.config = config
        self._conn = None
        self._snapshot = None
        self.in_snapshot = False  # a chunk window's transaction is open on the snapshot connection

    @property
    def where(self) -> str:
        return f"{self.config.address}/{self.config.database}"

    def connect(self, autocommit: bool = True):
        cfg = self.config
        idle = "" if cfg.address in _WITHOUT_IDLE_OPTION else IDLE_OPTION
        try:
            conn = psycopg2.connect(host=cfg.host, port=cfg.port, user=cfg.user, password=cfg.password or None,
                                    dbname=cfg.database, connect_timeout=CONNECT_TIMEOUT_SECONDS,
                                    application_name=APPLICATION_NAME, options=libpq_options() + idle)
        except psycopg2.OperationalError as exc:
            message = first_line(exc, cfg.password)
            if idle and "idle_session_timeout" in message:  # a server before 14 (the name quoted in any language)
                _WITHOUT_IDLE_OPTION.add(cfg.address)
                return self.connect(autocommit)
            lowered = message.lower()
            if "password authentication failed" in lowered or "no password supplied" in lowered:
                raise DblogError(f"cannot log in to {cfg.address} as {cfg.user}: {message}; check the password (in "
                                 f"the URI or ${PASSWORD_ENV}) and pg_hba.conf") from None
            if "does not exist" in lowered and "database" in lowered:
                raise DblogError(f"database {cfg.database} does not exist on {cfg.address}: check the /DB of "
                                 f"--source") from None
            raise DblogError(f"cannot connect to {self.where} as {cfg.user}: {message}; check that the server runs "
                             f"and --source is right") from None
        conn.autocommit = autocommit
        if conn.server_version >= 170000:  # unknown to older servers, so not in the startup options
            with conn.cursor() as cur:
                cur.execute("SET transaction_timeout = 0")  # a chunk window's transaction outlives a DBA's limit
            if not autocommit:
                conn.commit()
        return conn

    @property
    def conn(self):
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        return self._conn

    @property
    def snapshot_conn(self):
        """The connection chunk reads run on (not autocommit: a chunk's reads share one transaction)."""
        if self._snapshot is None or self._snapshot.closed:
            self._snapshot = self.connect(autocommit=False)
            self.in_snapshot = False
        return self._snapshot

    def close(self) -> None:
        for conn in (self._conn, self._snapshot):
            if conn is not None and not conn.closed:
                conn.close()
        self._conn = self._snapshot = None
        self.in_snapshot = False

    def __getstate__(self) -> dict:  # shipped to Spark executors: no live connection
        return {**self.__dict__, "_conn": None, "_snapshot": None, "in_snapshot": False}

    def query(self, sql: str, args: Sequence | dict | None = None) -> list[tuple]:
        """One autocommit statement, run again on a new connection when the server closed the one it was sent on
        (``source.reconnect``). Every caller's statement is a read or may run twice (an advance, an emitted
        watermark whose reader takes the first)."""
        def once() -> list[tuple]:
            conn = self.conn
            try:
                with conn.cursor() as cur:
                    cur.execute(sql, args)
                    return list(cur.fetchall()) if cur.description else []
            except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                if conn.closed:  # the connection failed, not the statement
                    raise ConnectionLost(first_line(exc, self.config.password)) from None
                raise
        return again_when_lost(once, self._forget_control, self.where)

    def _forget_control(self) -> None:
        self._conn = None

    def scalar(self, sql: str, args: Sequence | dict | None = None):
        rows = self.query(sql, args)
        return rows[0][0] if rows else None

    def current_lsn(self) -> int:
        """A WAL location every transaction committed before this call is below, and that a read of the slot
        can reach: the insert location (past every record already reserved: a commit in progress ends below
        it), once the server has flushed WAL up to it (logical decoding reads flushed WAL only). A transaction
        is *before* such a location when its commit record starts below it (``stream.change_position``)."""
        insert = parse_lsn(self.scalar("SELECT pg_current_wal_insert_lsn()::text"))
        started = time.monotonic()
        deadline, nudged = started + FLUSH_WAIT_SECONDS, False
        while parse_lsn(self.scalar("SELECT pg_current_wal_flush_lsn()::text")) < insert:
            if not nudged and time.monotonic() - started > FLUSH_NUDGE_SECONDS:
                # an idle server leaves a record that commits nothing (the bgwriter's running-transactions
                # record, every 15 s) unflushed until the next commit: one empty commit flushes it
                nudged = True
                try:
                    self.scalar("SELECT txid_current()")
                except psycopg2.Error:  # not allowed here (a read-only login): the WAL writer flushes in time
                    pass
            if time.monotonic() > deadline:
                raise DblogError(f"{self.where} has not flushed its WAL up to {insert >> 32:X}/{insert & 0xFFFFFFFF:X} "
                                 f"within {FLUSH_WAIT_SECONDS:.0f} s: check the server's disk")
            time.sleep(0.005)
        return insert

    @property
    def version_num(self) -> int:
        return int(self.conn.server_version)

    # ---- a chunk's transaction ----
    def begin_snapshot(self) -> int:
        """The chunk's LW (``current_lsn``, read first, on the control connection), then its REPEATABLE READ,
        READ ONLY transaction on the snapshot connection, whose first statement takes the snapshot every read
        of the transaction sees: every transaction before the LW is visible to it (its commit was flushed and
        returned before the snapshot was taken), and later ones may be too (the stream applies them again)."""
        lsn = self.current_lsn()
        conn = self.snapshot_conn
        conn.rollback()  # a window a failed read left open
        self.in_snapshot = False
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur.execute("SELECT 1")
        self.in_snapshot = True
        return lsn

    def end_snapshot(self) -> None:
        """End the chunk's transaction (read only: nothing to commit)."""
        conn = self.snapshot_conn
        try:
            conn.rollback()
        finally:
            self.in_snapshot = False

    def drop_snapshot(self) -> None:
        """After a failed read: the snapshot connection is closed (its transaction is aborted, it may even be
        inside a COPY); the next read opens a new one."""
        if self._snapshot is not None and not self._snapshot.closed:
            self._snapshot.close()
        self._snapshot = None
        self.in_snapshot = False
