"""SQL text for key ranges and chunk reads: row comparisons spelled out so every server uses the index."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

from pymysql.converters import escape_item

from airflow_provider_dblog.core.chunks import ChunkRange, Key
from airflow_provider_dblog.core.tables import DECLARED_ORDER, Column, TableMeta
from airflow_provider_dblog.source.mysql.types import declared_numbers, enum_labels, quote_ident, select_expression


def literal(value, col: Column) -> str:
    """A key value as SQL. Text carries the ``_utf8mb4`` introducer: its bytes are utf8mb4 whatever the session's
    ``character_set_connection`` (connectorx runs a query of its own to learn the result's types, on a session the
    server's ``init_connect`` may have set to utf8mb3 or latin1, where a 4-byte character is an illegal mix).
    ENUM, SET and BIT values are their numbers: the server compares those in key order (an ENUM compared with
    text compares text; a BIT with a binary string, neither); so is a wide DECIMAL's text."""
    if value is None:
        return "NULL"
    if col.data_type in DECLARED_ORDER:
        return str(declared_numbers(col)(value))
    if col.data_type == "bit" and isinstance(value, bytes):
        return str(int.from_bytes(value, "big"))
    if col.data_type == "decimal" and isinstance(value, str):  # the lake's text of a DECIMAL wider than 38 digits:
        return str(Decimal(value))  # a number (a DECIMAL compared with text compares doubles)
    if col.data_type == "timestamp":
        epoch = value.replace(tzinfo=dt.timezone.utc).timestamp()
        return f"FROM_UNIXTIME({epoch:.6f})"
    if isinstance(value, str):
        return "_utf8mb4" + escape_item(value, "utf8mb4")
    return escape_item(value, "utf8mb4")


def _compared(col: Column, op: str, value) -> str:
    """``col <op> value``. An ENUM's inequality is spelled as the list of its labels' numbers on that side: the
    server reads an index range for ``k IN (3, 4)``, and scans the whole index for ``k > 2``."""
    if col.data_type == "enum" and op != "=" and value is not None:
        number = declared_numbers(col)(value)
        last = len(enum_labels(col))
        side = {">": range(number + 1, last + 1), ">=": range(number, last + 1),
                "<": range(0, number), "<=": range(0, number + 1)}[op]
        return f"{quote_ident(col.name)} IN ({', '.join(map(str, side))})" if side else "FALSE"
    return f"{quote_ident(col.name)} {op} {literal(value, col)}"


def compare(meta: TableMeta, bound: Key, strict_op: str, last_op: str) -> str:
    """Row comparison ``key <op> bound``: ``(a > x) OR (a = x AND b >= y)`` for ``(a, b) >= (x, y)``."""
    cols = [meta.column(c) for c in meta.key_columns]
    terms = []
    for i, col in enumerate(cols):
        eqs = [_compared(c, "=", v) for c, v in zip(cols[:i], bound[:i])]
        op = last_op if i == len(cols) - 1 else strict_op
        eqs.append(_compared(col, op, bound[i]))
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
