"""Control connections to MySQL / MariaDB (pymysql): one TLS context per process, errors as one line."""
from __future__ import annotations

import re
import threading
import time
from typing import Sequence

import pymysql

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.source.reconnect import ConnectionLost, again_when_lost

# The server closed the connection under us: gone away, lost during a query, killed (KILL, pt-kill), closed for
# inactivity (wait_timeout; MySQL 8.0.24+ says so). A new connection is the answer, not a failed tail.
CONNECTION_LOST = {2006, 2013, 2055, 1927, 4031}
# A connection idle this long is pinged before a transaction starts on it (a kill while idle shows only then).
IDLE_PING_SECONDS = 1.0


class SharedTlsConnection(pymysql.connections.Connection):
    """pymysql's connection with one default TLS context per process. Given no ssl option, pymysql
    prefers TLS and builds a new context per connection (≈19 ms of CPU loading the CA store; a chunk
    opens three). Same behaviour: TLS where the server offers it. Overrides pymysql 1.2.4's
    ``_create_ssl_ctx`` (pinned in pyproject; tests/integration/test_connection.py)."""

    _default_tls: list = []
    _lock = threading.Lock()

    def _create_ssl_ctx(self, sslp):
        if not (isinstance(sslp, dict) and not sslp):
            return super()._create_ssl_ctx(sslp)
        with self._lock:
            if not self._default_tls:
                self._default_tls.append(super()._create_ssl_ctx(sslp))
        return self._default_tls[0]


# What every session dblog opens reads and parses by, whatever the server's defaults (a DBA may change them at
# run time): UTC for TIMESTAMP, no sql_mode, REPEATABLE READ. PAD_CHAR_TO_FULL_LENGTH pads CHAR values the binlog
# logs unpadded (the lake mixed both, verify then differed); NO_BACKSLASH_ESCAPES reads the backslash-escaped
# literals of key bounds as other strings or other SQL; ANSI_QUOTES and ORACLE change the parser; READ UNCOMMITTED
# reads rows no transaction committed (they stayed in the lake), and a consistent snapshot is one only under
# REPEATABLE READ. Two statements: the isolation level has no variable both MySQL and MariaDB 10.x know. And
# utf8mb4 for what the session sends and receives: the client asks for it at login, but the server's
# ``init_connect`` runs after that for a user without SUPER (a DBA's ``SET NAMES latin1`` for a legacy application
# turned every non-latin1 character into '?' in the chunk reads, where the binlog holds the stored bytes).
SESSION_STATEMENTS = ("SET NAMES utf8mb4, time_zone = '+00:00', sql_mode = ''",
                      "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
# and no statement time limit (a DBA's SET GLOBAL for the applications): a chunk's read and a checksum are long
# SELECTs. The two servers name it differently (MariaDB's seconds, MySQL's milliseconds for SELECTs)
NO_TIME_LIMIT = {True: "SET SESSION max_statement_time = 0", False: "SET SESSION max_execution_time = 0"}


def session_statements(version: str) -> list[str]:
    """``SESSION_STATEMENTS`` and the lifted time limit of the server whose ``VERSION()`` is ``version``."""
    return [*SESSION_STATEMENTS, NO_TIME_LIMIT["mariadb" in version.lower()]]


def binlog_status_sql(version: str) -> str:
    """MySQL 8.2 renamed SHOW MASTER STATUS (removed in 8.4); MariaDB keeps it."""
    if "mariadb" in version.lower():
        return "SHOW MASTER STATUS"
    major_minor = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    return "SHOW BINARY LOG STATUS" if major_minor >= (8, 2) else "SHOW MASTER STATUS"


def login_password(config: SourceConfig) -> bytes:
    """The password as UTF-8 bytes: pymysql sends a str as latin-1, so a non-ASCII password set by a UTF-8 client
    (and read so by connectorx) was refused as "access denied"."""
    return config.password.encode("utf-8")


class MySqlClient:
    """One lazily opened control connection (autocommit, UTC session) and the queries on it."""

    def __init__(self, config: SourceConfig, epoch: int = 0):
        self.config = config
        self.epoch = epoch  # the capture's how-many-th server this is (``core.positions``: after failovers)
        self._conn: pymysql.connections.Connection | None = None
        self._used = 0.0
        self._version: str | None = None

    def position(self, file: str, offset: int, row: int = 0) -> SourcePosition:
        """A position this server reports (its binlog ``file`` and ``offset``) in the capture's order."""
        return SourcePosition.at(file, offset, row, self.epoch)

    def connect(self, database: str | None = None) -> pymysql.connections.Connection:
        try:
            conn = SharedTlsConnection(
                host=self.config.host, port=self.config.port, user=self.config.user,
                password=login_password(self.config), database=database, autocommit=True, charset="utf8mb4",
                connect_timeout=10,
            )
            with conn.cursor() as cur:
                for statement in session_statements(conn.get_server_info()):
                    cur.execute(statement)
            return conn
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code == 1045:
                raise DblogError(f"cannot log in to {self.config.address} as {self.config.user}: access denied; "
                                 f"check the password (in the URI or $DBLOG_SOURCE_PASSWORD)") from None
            raise DblogError(f"cannot connect to {self.config.address}: {exc.args[-1]}; "
                             f"check that the server runs and --source is right") from None

    @property
    def conn(self) -> pymysql.connections.Connection:
        """The open control connection; one that idled is pinged first, and opened again if the server closed it
        meanwhile (``wait_timeout``, a DBA's KILL), so a transaction never starts on a dead connection."""
        if self._conn is not None and self._conn.open and time.monotonic() - self._used > IDLE_PING_SECONDS:
            try:
                self._conn.ping(reconnect=False)
            except pymysql.MySQLError:
                self.close()
        if self._conn is None or not self._conn.open:
            self._conn = self.connect()
        self._used = time.monotonic()
        return self._conn

    def close(self) -> None:
        if self._conn is not None and self._conn.open:
            try:
                self._conn.close()
            except pymysql.MySQLError:
                pass  # the server closed it first
        self._conn = None

    def __getstate__(self) -> dict:  # shipped to Spark executors: no live connection
        return {**self.__dict__, "_conn": None}

    def query(self, sql: str, args: Sequence | None = None) -> list[tuple]:
        """One autocommit statement (every caller's is a read or an idempotent write), run again on a new connection
        when the server closed the one it was sent on (``source.reconnect``)."""
        def once() -> list[tuple]:
            try:
                with self.conn.cursor() as cur:
                    cur.execute(sql, args)
                    return list(cur.fetchall())
            except pymysql.OperationalError as exc:
                if exc.args and exc.args[0] in CONNECTION_LOST:
                    raise ConnectionLost(str(exc.args[-1])) from None
                raise
        return again_when_lost(once, self.close, self.config.address)

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
