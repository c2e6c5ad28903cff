"""Control connections to MySQL / MariaDB (pymysql): one TLS context per process, errors as one line."""
from __future__ import annotations

import re
import threading
from typing import Sequence

import pymysql

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition


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
# run time): UTC for TIMESTAMP, and no sql_mode. PAD_CHAR_TO_FULL_LENGTH pads CHAR values the binlog logs
# unpadded (the lake mixed both, verify then differed); NO_BACKSLASH_ESCAPES reads the backslash-escaped literals
# of key bounds as other strings or other SQL; ANSI_QUOTES and ORACLE change the parser.
SESSION_SQL = "SET time_zone = '+00:00', sql_mode = ''"


def binlog_status_sql(version: str) -> str:
    """MySQL 8.2 renamed SHOW MASTER STATUS (removed in 8.4); MariaDB keeps it."""
    if "mariadb" in version.lower():
        return "SHOW MASTER STATUS"
    major_minor = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    return "SHOW BINARY LOG STATUS" if major_minor >= (8, 2) else "SHOW MASTER STATUS"


class MySqlClient:
    """One lazily opened control connection (autocommit, UTC session) and the queries on it."""

    def __init__(self, config: SourceConfig, epoch: int = 0):
        self.config = config
        self.epoch = epoch  # the capture's how-many-th server this is (``core.positions``: after failovers)
        self._conn: pymysql.connections.Connection | None = None
        self._version: str | None = None

    def position(self, file: str, offset: int, row: int = 0) -> SourcePosition:
        """A position this server reports (its binlog ``file`` and ``offset``) in the capture's order."""
        return SourcePosition.at(file, offset, row, self.epoch)

    def connect(self, database: str | None = None) -> pymysql.connections.Connection:
        try:
            return SharedTlsConnection(
                host=self.config.host, port=self.config.port, user=self.config.user,
                password=self.config.password, database=database, autocommit=True, charset="utf8mb4",
                init_command=SESSION_SQL, connect_timeout=10,
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


class ChecksumPinnedConnection(SharedTlsConnection):
    """A replication connection for binlog files written with (``binlog_checksum=True``) or without CRC32s,
    whatever the server logs now. python-mysql-replication (1.0.17, pinned) asks ``SHOW GLOBAL VARIABLES LIKE
    'BINLOG_CHECKSUM'`` and sets ``@master_binlog_checksum`` from ``@@global.binlog_checksum``; on this
    connection those two statements state the file's setting instead. ``source/mysql/replication.py`` checks
    every file's setting against how its events were read, so a library that asks otherwise fails loudly."""

    def __init__(self, *args, binlog_checksum: bool, **kwargs):
        self._binlog_checksum = binlog_checksum
        super().__init__(*args, **kwargs)

    def query(self, sql, unbuffered=False):
        text = " ".join(sql.split()).upper() if isinstance(sql, str) else ""
        setting = "CRC32" if self._binlog_checksum else "NONE"
        if text == "SHOW GLOBAL VARIABLES LIKE 'BINLOG_CHECKSUM'":
            sql = f"SELECT 'binlog_checksum', '{setting}'"
        elif text.startswith("SET @MASTER_BINLOG_CHECKSUM"):
            sql = f"SET @master_binlog_checksum = '{setting}'"
        return super().query(sql, unbuffered)
