"""SQL text for key ranges and chunk reads: row comparisons spelled out so every server uses the index."""
from __future__ import annotations

import datetime as dt

from pymysql.converters import escape_item

from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.mysql.types import quote_ident, select_expression


def literal(value, col: Column) -> str:
    """A key value as SQL. Text carries the ``_utf8mb4`` introducer: its bytes are utf8mb4 whatever the session's
    ``character_set_connection`` (connectorx runs a query of its own to learn the result's types, on a session the
    server's ``init_connect`` may have set to utf8mb3 or latin1, where a 4-byte character is an illegal mix)."""
    if col.data_type == "timestamp" and value is not None:
        epoch = value.replace(tzinfo=dt.timezone.utc).timestamp()
        return f"FROM_UNIXTIME({epoch:.6f})"
    if isinstance(value, str):
        return "_utf8mb4" + escape_item(value, "utf8mb4")
    return escape_item(value, "utf8mb4")


def compare(meta: TableMeta, bound: Key, strict_op: str, last_op: str) -> str:
    """Row comparison ``key <op> bound``: ``(a > x) OR (a = x AND b >= y)`` for ``(a, b) >= (x, y)``."""
    cols = [meta.column(c) for c in meta.key_columns]
    terms = []
    for i, col in enumerate(cols):
        eqs = [f"{quote_ident(c.name)} = {literal(v, c)}" for c, v in zip(cols[:i], bound[:i])]
        op = last_op if i == len(cols) - 1 else strict_op
        eqs.append(f"{quote_ident(col.name)} {op} {literal(bound[i], col)}")
        terms.append("(" + " AND ".join(eqs) + ")")
    return "(" + " OR ".join(terms) + ")"


def range_condition(meta: TableMeta, lo: Key | None, hi: Key | None) -> str:
    """``lo <= key < hi`` (either side open when None)."""
    parts = []
    if lo is not None:
        parts.append(compare(meta, lo, ">", ">="))
    if hi is not None:
        parts.append(compare(meta, hi, "<", "<"))
    return " AND ".join(parts) or "TRUE"


def at_most(meta: TableMeta, hi: Key) -> str:
    """``key <= hi``."""
    return f"NOT {compare(meta, hi, '>', '>')}"


def table_sql(meta: TableMeta) -> str:
    return f"{quote_ident(meta.database)}.{quote_ident(meta.name)}"


def snapshot_sql(meta: TableMeta, chunk: ChunkRange, known_dates: bool = False) -> str:
    items = ", ".join(select_expression(c, known_dates) for c in meta.columns)
    return f"SELECT {items} FROM {table_sql(meta)} WHERE {range_condition(meta, chunk.lo, chunk.hi)}"
