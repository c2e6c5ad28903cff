"""The ``DataSourceDialect`` protocol (Flink CDC's name) and the value objects dialects share."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Iterator, Protocol, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa

from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.errors import DblogError

PASSWORD_ENV = "DBLOG_SOURCE_PASSWORD"
STRATEGIES = ("auto", "position", "watermark_table", "consistent_snapshot")


@dataclass(frozen=True)
class SourceConfig:
    """Where the source is. ``password`` is never serialised: see ``public_uri``."""

    host: str
    port: int
    user: str
    password: str = field(default="", repr=False)
    database: str = ""
    scheme: str = "mysql"

    @classmethod
    def parse(cls, uri: str) -> "SourceConfig":
        parsed = urlparse(uri)
        if parsed.scheme not in ("mysql", "mariadb") or not parsed.hostname or not parsed.username:
            raise DblogError("bad --source: expected mysql://USER[:PASSWORD]@HOST:PORT[/DB]")
        try:
            port = parsed.port or 3306
        except ValueError:
            raise DblogError("bad --source: the port is not a number (mysql://USER@HOST:PORT)") from None
        return cls(parsed.hostname, port, unquote(parsed.username), unquote(parsed.password or ""),
                   parsed.path.lstrip("/"), "mysql")

    @property
    def public_uri(self) -> str:
        """The URI without the password: safe for logs, state files and XComs."""
        return f"{self.scheme}://{self.user}@{self.host}:{self.port}" + (f"/{self.database}" if self.database else "")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def with_password(self, password: str) -> "SourceConfig":
        return replace(self, password=password)

    def resolve_password(self) -> "SourceConfig":
        """Fill a missing password from $DBLOG_SOURCE_PASSWORD or the user's credentials file."""
        if self.password:
            return self
        if os.environ.get(PASSWORD_ENV):
            return self.with_password(os.environ[PASSWORD_ENV])
        from airflow_provider_dblog.credentials import lookup

        return self.with_password(lookup(self) or "")


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str          # information_schema DATA_TYPE, lower case
    column_type: str        # full COLUMN_TYPE, e.g. "bigint(20) unsigned"
    nullable: bool = True
    charset: str | None = None
    collation: str | None = None
    precision: int | None = None
    scale: int | None = None
    char_length: int | None = None

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type


@dataclass(frozen=True)
class TableMeta:
    """A source table as the pipeline sees it. ``key_columns`` identify a row and order chunks."""

    database: str
    name: str
    columns: tuple[Column, ...]
    key_columns: tuple[str, ...]
    key_source: str  # primary | unique | chunk_key

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def key_unique(self) -> bool:
        return self.key_source != "chunk_key"


class DataSourceDialect(Protocol):
    """What the pipeline needs of a source database. One implementation per database family."""

    config: SourceConfig

    def check_source(self) -> None:
        """Raise ``DblogError`` naming the setting or privilege to fix if CDC cannot work here."""

    def describe_table(self, table: str, chunk_key: Sequence[str] | None = None) -> TableMeta: ...

    def split_chunks(self, meta: TableMeta, chunk_size: int) -> list[ChunkRange]: ...

    def arrow_schema(self, meta: TableMeta) -> pa.Schema: ...

    def read_snapshot(self, meta: TableMeta, chunk: ChunkRange) -> pa.Table:
        """The chunk's rows as one SELECT sees them, in ``arrow_schema`` types."""

    def current_position(self) -> BinlogPosition: ...

    def resolve_strategy(self, strategy: str, meta: TableMeta) -> str: ...

    def watermark(self, strategy: str, meta: TableMeta) -> "Watermark": ...

    def read_changes(self, start: BinlogPosition, end: BinlogPosition | None,
                     tables: Sequence[TableMeta], share: tuple[int, int] = (0, 1)) -> Iterator[ChangeEvent]:
        """Row changes of ``tables`` with ``start < pos <= end`` (end None: up to now); with
        ``share=(k, n)`` only the k-th of n interleaved shares, for parallel decoding."""

    def sort_keys(self, meta: TableMeta, keys: Sequence[Key]) -> list[tuple]:
        """Values whose Python order (and equality) is the database's order of ``keys``."""

    def ensure_available(self, position: BinlogPosition) -> None:
        """Raise if the binlog needed to read from ``position`` was purged."""


class Watermark(Protocol):
    """A snapshot window: ``low()`` before the SELECT, ``high()`` after it, then the events in it."""

    def low(self) -> None: ...

    def high(self) -> None: ...

    def window(self, meta: TableMeta) -> tuple[BinlogPosition, BinlogPosition, list[ChangeEvent]]:
        """(LW, HW, the events of ``meta`` between them)."""
