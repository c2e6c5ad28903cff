"""Chunk planning on MySQL/MariaDB: ``source.key_splitter`` with its questions asked in MySQL's SQL."""
from __future__ import annotations

from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.key_splitter import split_by_key
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.sql import compare, table_sql
from airflow_provider_dblog.source.mysql.types import quote_ident
from airflow_provider_dblog.source.row_identity import check_chunk_key

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}


def _has_int_lead(meta: TableMeta) -> bool:
    """Whether the key's first column is an integer (chunks can then be spaced evenly by value)."""
    return meta.column(meta.key_columns[0]).data_type in INTEGER_TYPES


class _MySqlKeyQueries:
    """``key_splitter.KeyQueries`` in MySQL's SQL (keys compared by the server: its collations)."""

    def __init__(self, client: MySqlClient, meta: TableMeta):
        self.client, self.meta = client, meta
        self.table, self.keys = table_sql(meta), ", ".join(quote_ident(c) for c in meta.key_columns)
        self.lead = quote_ident(meta.key_columns[0])

    def lead_bounds(self):
        return self.client.query(f"SELECT MIN({self.lead}), MAX({self.lead}) FROM {self.table}")[0]

    def approximate_rows(self) -> int:
        return approximate_rows(self.client, self.meta)

    def first_key_at_or_after(self, lead: int) -> Key:
        return self.client.query(f"SELECT {self.keys} FROM {self.table} WHERE {self.lead} >= {int(lead)} "
                                 f"ORDER BY {self.keys} LIMIT 1")[0]

    def key_after(self, previous: Key | None, rows: int) -> Key | None:
        where = "" if previous is None else f"WHERE {compare(self.meta, previous, '>', '>')} "
        row = self.client.query(f"SELECT {self.keys} FROM {self.table} {where}ORDER BY {self.keys} LIMIT {rows}, 1")
        return row[0] if row else None


def split_chunks(client: MySqlClient, meta: TableMeta, chunk_size: int,
                 factor_bounds: tuple[float, float] = (0.05, 100.0)) -> list[ChunkRange]:
    if not meta.key_unique and chunk_size > 0:
        check_chunk_key(client.query, meta.qualified, table_sql(meta), meta.key_columns, quote_ident)
    return split_by_key(_MySqlKeyQueries(client, meta), meta, chunk_size, _has_int_lead(meta), factor_bounds)


def approximate_rows(client: MySqlClient, meta: TableMeta) -> int:
    estimate = client.scalar("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                             "AND TABLE_NAME = %s", (meta.database, meta.name)) or 0
    if estimate < 1_000_000:  # small or fresh tables: stats lag, an exact count is cheap
        estimate = client.scalar(f"SELECT COUNT(*) FROM {table_sql(meta)}")
    return int(estimate)
