"""Chunk planning on PostgreSQL: ``source.key_splitter`` with its questions asked in PostgreSQL's SQL.

PostgreSQL orders and compares the keys (row comparison for composite keys, the column's collation for text,
uuid, numeric, timestamps); a boundary is read as its text (``SELECT key ... WHERE key > previous ORDER BY key
OFFSET n LIMIT 1``) and typed with ``values.converter``.
"""
from __future__ import annotations

from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.key_splitter import split_by_key
from airflow_provider_dblog.source.postgres.connection import PostgresClient
from airflow_provider_dblog.source.postgres.schema import relation_oid
from airflow_provider_dblog.source.postgres.sql import compare, order_by_key, quote_ident, table_sql
from airflow_provider_dblog.source.postgres.values import INT2, INT4, INT8, converter
from airflow_provider_dblog.source.row_identity import check_chunk_key

INTEGER_OIDS = {INT2, INT4, INT8}
EXACT_COUNT_BELOW = 1_000_000  # the statistics' estimate below this: an exact count is cheap and stats lag


def _key_texts(meta: TableMeta) -> str:
    return ", ".join(f"{quote_ident(c)}::text AS k{i}" for i, c in enumerate(meta.key_columns))


def _typed(meta: TableMeta, texts) -> Key:
    cols = [meta.column(c) for c in meta.key_columns]
    return tuple(None if t is None else converter(c.type_oid, c.typmod if c.typmod is not None else -1)(t)
                 for c, t in zip(cols, texts))


class _PostgresKeyQueries:
    """``key_splitter.KeyQueries`` in PostgreSQL's SQL: keys read as text and typed (``values.converter``)."""

    def __init__(self, client: PostgresClient, meta: TableMeta):
        self.client, self.meta, self.table = client, meta, table_sql(meta)
        self.lead = quote_ident(meta.key_columns[0])
        self.select, self.order = f"SELECT {_key_texts(meta)} FROM {self.table}", f"ORDER BY {order_by_key(meta)}"

    def lead_bounds(self):
        return self.client.query(f"SELECT min({self.lead}), max({self.lead}) FROM {self.table}", ())[0]

    def approximate_rows(self) -> int:
        return approximate_rows(self.client, self.meta)

    def first_key_at_or_after(self, lead: int) -> Key:
        row = self.client.query(f"{self.select} WHERE {self.lead} >= %s {self.order} LIMIT 1", (lead,))
        return _typed(self.meta, row[0])

    def key_after(self, previous: Key | None, rows: int) -> Key | None:
        where, params = ("", []) if previous is None else compare(self.meta, ">", previous)
        row = self.client.query(f"{self.select} {'WHERE ' + where if where else ''} {self.order} OFFSET %s LIMIT 1",
                                (*params, rows))
        return _typed(self.meta, row[0]) if row else None


def split_chunks(client: PostgresClient, meta: TableMeta, chunk_size: int,
                 factor_bounds: tuple[float, float] = (0.05, 100.0)) -> list[ChunkRange]:
    if not meta.key_unique and chunk_size > 0:
        check_chunk_key(lambda sql: client.query(sql, ()), meta.qualified, table_sql(meta), meta.key_columns,
                        quote_ident)
    integer_lead = meta.column(meta.key_columns[0]).type_oid in INTEGER_OIDS
    return split_by_key(_PostgresKeyQueries(client, meta), meta, chunk_size, integer_lead, factor_bounds)


def approximate_rows(client: PostgresClient, meta: TableMeta) -> int:
    """The planner's estimate (``reltuples``, summed over a partitioned table's leaves); an exact count when
    that is small or the table was never analyzed."""
    oid = relation_oid(client, meta.qualified)
    if client.version_num >= 120000:
        estimate = client.scalar("SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint "
                                 "FROM pg_partition_tree(%s::oid::regclass) p JOIN pg_class c ON c.oid = p.relid "
                                 "WHERE p.isleaf", (oid,))
    else:
        estimate = client.scalar("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s", (oid,))
    if (estimate or 0) < EXACT_COUNT_BELOW:
        estimate = client.scalar(f"SELECT count(*) FROM {table_sql(meta)}", ())
    return int(estimate)
