"""Chunk planning on PostgreSQL: boundaries chosen and compared by the database.

* A unique integer leading key column whose values are dense enough (Flink CDC's distribution factor):
  boundaries evenly spaced by value from ``min``/``max`` (composite keys: the first whole key at or after
  each spaced leading value, one index probe each).
* Any other key (text under any collation, uuid, numeric, timestamps, composite keys, a ``--chunk-key``):
  a walk along the key's order, ``SELECT key ... WHERE key > previous ORDER BY key OFFSET n-1 LIMIT 1``,
  each step an index scan of one chunk's keys, so every chunk holds ``chunk_size`` rows (the last fewer).
  PostgreSQL orders and compares the keys (row comparison for composite keys, the column's collation for
  text); the boundaries are read as their text and typed with ``values.converter``.
"""
from __future__ import annotations

from airflow_provider_dblog.core.chunks import ChunkRange, Key, chunks_from_boundaries, even_boundaries, even_step
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.tables import TableMeta
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


def split_chunks(client: PostgresClient, meta: TableMeta, chunk_size: int,
                 factor_bounds: tuple[float, float] = (0.05, 100.0)) -> list[ChunkRange]:
    if chunk_size <= 0:
        raise DblogError("--chunk-size must be a positive number of rows")
    table = table_sql(meta)
    if not meta.key_unique:
        check_chunk_key(lambda sql: client.query(sql, ()), meta.qualified, table, meta.key_columns, quote_ident)
    lead_column = meta.column(meta.key_columns[0])
    if lead_column.type_oid in INTEGER_OIDS and meta.key_unique:
        lead = quote_ident(lead_column.name)
        lo, hi = client.query(f"SELECT min({lead}), max({lead}) FROM {table}", ())[0]
        if lo is None:
            return chunks_from_boundaries([])
        step = even_step(int(lo), int(hi), approximate_rows(client, meta), chunk_size, *factor_bounds)
        if step is not None:
            leads = even_boundaries(int(lo), int(hi), step)
            if len(meta.key_columns) == 1:
                return chunks_from_boundaries(leads)
            firsts = []
            for (value,) in leads:
                row = client.query(f"SELECT {_key_texts(meta)} FROM {table} WHERE {lead} >= %s "
                                   f"ORDER BY {order_by_key(meta)} LIMIT 1", (value,))
                firsts.append(_typed(meta, row[0]))
            return chunks_from_boundaries(list(dict.fromkeys(firsts)))
    boundaries: list[Key] = []
    select = f"SELECT {_key_texts(meta)} FROM {table}"
    order = f"ORDER BY {order_by_key(meta)}"
    row = client.query(f"{select} {order} OFFSET %s LIMIT 1", (chunk_size,))
    while row:
        boundaries.append(_typed(meta, row[0]))
        after, params = compare(meta, ">", boundaries[-1])
        row = client.query(f"{select} WHERE {after} {order} OFFSET %s LIMIT 1", (*params, chunk_size - 1))
    return chunks_from_boundaries(boundaries)


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
