"""Connections to PostgreSQL (psycopg2): one lazily opened control connection and one for chunk reads,
both with ``values.SESSION_SETTINGS`` (UTC, ISO dates, hex bytea, ...) so every value's text form is the
one the readers parse, whatever the server's or the role's defaults. Errors are one line and never hold
the password."""
from __future__ import annotations

from typing import Sequence

import psycopg2

from airflow_provider_dblog.core.config import PASSWORD_ENV, SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source.postgres.pgoutput import parse_lsn
from airflow_provider_dblog.source.postgres.values import libpq_options

APPLICATION_NAME = "dblog"
CONNECT_TIMEOUT_SECONDS = 10


def first_line(exc: BaseException, secret: str = "") -> str:
    """A psycopg2 error as one line (the server's message, without libpq's "connection to server at ..."
    prefix), the password masked."""
    text = (getattr(exc, "pgerror", None) or str(exc) or type(exc).__name__).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = next((part for part in lines if part.startswith(("FATAL:", "ERROR:"))), lines[0] if lines else "")
    if "failed: " in line and line.startswith("connection to server"):
        line = line.split("failed: ", 1)[1]
    for prefix in ("FATAL:", "ERROR:"):
        if line.startswith(prefix):
            line = line[len(prefix):].strip()
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
        try:
            conn = psycopg2.connect(host=cfg.host, port=cfg.port, user=cfg.user, password=cfg.password or None,
                                    dbname=cfg.database, connect_timeout=CONNECT_TIMEOUT_SECONDS,
                                    application_name=APPLICATION_NAME, options=libpq_options())
        except psycopg2.OperationalError as exc:
            message = first_line(exc, cfg.password)
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
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall()) if cur.description else []

    def scalar(self, sql: str, args: Sequence | dict | None = None):
        rows = self.query(sql, args)
        return rows[0][0] if rows else None

    def current_lsn(self) -> int:
        """The WAL insert location now (``pg_current_wal_lsn()``): every transaction committed before this
        call has its commit record below it."""
        return parse_lsn(self.scalar("SELECT pg_current_wal_lsn()::text"))

    @property
    def version_num(self) -> int:
        return int(self.conn.server_version)

    # ---- a chunk's transaction ----
    def begin_snapshot(self) -> int:
        """Open the chunk's REPEATABLE READ, READ ONLY transaction; its first statement takes the snapshot
        every later read of the transaction sees, and returns the WAL location read in it (the LW)."""
        conn = self.snapshot_conn
        conn.rollback()  # a window a failed read left open
        self.in_snapshot = False
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur.execute("SELECT pg_current_wal_lsn()::text")
            lsn = parse_lsn(cur.fetchone()[0])
        self.in_snapshot = True
        return lsn

    def end_snapshot(self) -> int:
        """The WAL location after the chunk's reads (the HW), then the transaction ends."""
        conn = self.snapshot_conn
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_current_wal_lsn()::text")
                return parse_lsn(cur.fetchone()[0])
        finally:
            conn.rollback()  # read only: nothing to commit
            self.in_snapshot = False

    def drop_snapshot(self) -> None:
        """After a failed read: the snapshot connection is closed (its transaction is aborted, it may even be
        inside a COPY); the next read opens a new one."""
        if self._snapshot is not None and not self._snapshot.closed:
            self._snapshot.close()
        self._snapshot = None
        self.in_snapshot = False
