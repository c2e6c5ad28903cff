"""Chunk planning: boundaries chosen by the database, evenly spaced by value where the key allows it."""
from __future__ import annotations

from airflow_provider_dblog.core.chunks import ChunkRange, Key, chunks_from_boundaries, even_boundaries, even_step
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.sql import compare, table_sql
from airflow_provider_dblog.source.mysql.types import quote_ident
from airflow_provider_dblog.source.row_identity import check_chunk_key

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}


def _has_int_lead(meta: TableMeta) -> bool:
    """Whether the key's first column is an integer (chunks can then be spaced evenly by value)."""
    return meta.column(meta.key_columns[0]).data_type in INTEGER_TYPES


def split_chunks(client: MySqlClient, meta: TableMeta, chunk_size: int,
                 factor_bounds: tuple[float, float] = (0.05, 100.0)) -> list[ChunkRange]:
    if chunk_size <= 0:
        raise DblogError("--chunk-size must be a positive number of rows")
    keys = ", ".join(quote_ident(c) for c in meta.key_columns)
    table = table_sql(meta)
    if not meta.key_unique:
        check_chunk_key(client.query, meta.qualified, table, meta.key_columns, quote_ident)
    if _has_int_lead(meta) and meta.key_unique:
        lead = quote_ident(meta.key_columns[0])
        lo, hi = client.query(f"SELECT MIN({lead}), MAX({lead}) FROM {table}")[0]
        if lo is None:
            return chunks_from_boundaries([])
        step = even_step(int(lo), int(hi), approximate_rows(client, meta), chunk_size, *factor_bounds)
        if step is not None:
            leads = even_boundaries(int(lo), int(hi), step)
            if len(meta.key_columns) == 1:
                return chunks_from_boundaries(leads)
            # a composite key (order_id, line): each boundary is the first whole key at or after an
            # evenly spaced leading value, one index seek each instead of a scan of the whole index
            firsts = [client.query(f"SELECT {keys} FROM {table} WHERE {lead} >= {int(v)} ORDER BY {keys} "
                                   f"LIMIT 1")[0] for (v,) in leads]
            return chunks_from_boundaries(list(dict.fromkeys(tuple(k) for k in firsts)))
    boundaries: list[Key] = []
    row = client.query(f"SELECT {keys} FROM {table} ORDER BY {keys} LIMIT {chunk_size}, 1")
    while row:
        boundaries.append(tuple(row[0]))
        after = compare(meta, boundaries[-1], ">", ">")
        row = client.query(f"SELECT {keys} FROM {table} WHERE {after} ORDER BY {keys} LIMIT {chunk_size - 1}, 1"
                           if chunk_size > 1 else
                           f"SELECT {keys} FROM {table} WHERE {after} ORDER BY {keys} LIMIT 1")
    return chunks_from_boundaries(boundaries)


def approximate_rows(client: MySqlClient, meta: TableMeta) -> int:
    estimate = client.scalar("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                             "AND TABLE_NAME = %s", (meta.database, meta.name)) or 0
    if estimate < 1_000_000:  # small or fresh tables: stats lag, an exact count is cheap
        estimate = client.scalar(f"SELECT COUNT(*) FROM {table_sql(meta)}")
    return int(estimate)
