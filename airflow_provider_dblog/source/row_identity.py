"""A ``--chunk-key`` that no unique index covers is the lake's row identity on the user's word: ``current`` holds
one row per key. Two source rows that share a key (or whose key is NULL, which no range of a chunk holds) would
leave one row, or none, in the lake without a word: a column that may be NULL is refused whenever the table is
described, and the plan checks the values once, with SQL both databases run alike; each refusal is one line."""
from __future__ import annotations

from typing import Callable, Sequence

from airflow_provider_dblog.core.errors import DblogError


def refuse_nullable(table: str, nullable: Sequence[str]) -> None:
    """A ``--chunk-key`` column that may be NULL: refused when the table is described with it."""
    if nullable:
        raise DblogError(f"--chunk-key {','.join(nullable)} of {table} may be NULL: a row whose key is NULL would "
                         f"fall in no chunk and the lake could not tell such rows apart; choose NOT NULL columns "
                         f"(or add NOT NULL)")


def check_chunk_key(query: Callable[[str], list], table: str, from_sql: str, key_columns: Sequence[str],
                    quote: Callable[[str], str]) -> None:
    """Refuse ``key_columns`` of ``table`` (``from_sql``: its quoted name; NOT NULL columns, ``refuse_nullable``)
    if two rows share their values (an index scan, at plan time)."""
    columns = [quote(c) for c in key_columns]
    named = ",".join(key_columns)
    shared = query(f"SELECT {', '.join(columns)}, COUNT(*) FROM {from_sql} GROUP BY {', '.join(columns)} "
                   f"HAVING COUNT(*) > 1 LIMIT 1")
    if shared:
        *key, count = shared[0]
        raise DblogError(f"--chunk-key {named} of {table} does not identify rows: {count} rows have "
                         f"({', '.join(map(str, key))}) and the lake keeps one row per key; choose columns whose "
                         f"values are unique, or add a primary key")
