"""Key order as PostgreSQL sees it: ``sort_keys`` values whose Python order (and equality) is PostgreSQL's
order of the keys (``DataSourceDialect.sort_keys``), per key column:

* integers, bounded ``numeric`` (Decimal), ``bool``, ``date``, ``timestamp``, ``timestamptz`` (UTC),
  ``time`` (its fixed-width text), ``uuid`` (its canonical lower-case text orders as its bytes) and
  ``bytea`` (bytes, compared like ``memcmp``): the values themselves;
* ``float4``/``float8``: (is NaN, value), PostgreSQL sorts NaN above every number;
* text, varchar and name under the ``C``/``POSIX``/``ucs_basic`` collation (or a database default that is
  one of them) in a UTF8, LATIN1 or SQL_ASCII database: the string itself; their byte order is code point
  order, Python's (other encodings' is not: PostgreSQL orders those);
* everything else (text under any other collation, ``char(n)``, enums, unbounded numeric, arrays,
  ...): PostgreSQL orders them. Each value gets a label, an exact ``Fraction``, from a query that sorts
  the values seen so far together with the new ones (``dense_rank()`` under the column's type and
  collation, so values PostgreSQL holds equal share a label); a label never changes once given, so sort
  keys from different calls compare correctly. The labels of every value seen stay in memory, and each
  call that brings new values sends the ones seen before as well: cheap for chunk boundaries and
  windows, to revisit if the stream locates millions of distinct collated keys.

NULL sorts last (PostgreSQL's ``ASC`` default); keys are NOT NULL anyway.
"""
from __future__ import annotations

import datetime as dt
import math
from fractions import Fraction
from typing import Any, Callable, Sequence

import psycopg2

from airflow_provider_dblog.core.chunks import Key
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.postgres.connection import PostgresClient, first_line
from airflow_provider_dblog.source.postgres.sql import key_text
from airflow_provider_dblog.source.postgres.values import (
    BOOL, BYTEA, DATE, FLOAT4, FLOAT8, INT2, INT4, INT8, NAME, NUMERIC, OID, TEXT, TIME, TIMESTAMP, TIMESTAMPTZ, UUID,
    VARCHAR, arrow_type,
)

PLAIN_ORDER = {INT2, INT4, INT8, OID, BOOL, DATE, TIMESTAMP, TIME, UUID, BYTEA}
BYTE_ORDER_COLLATIONS = {'"pg_catalog"."C"', '"pg_catalog"."POSIX"', '"pg_catalog"."ucs_basic"'}
DEFAULT_COLLATION = '"pg_catalog"."default"'
CODE_POINT_ENCODINGS = {"UTF8", "LATIN1", "SQL_ASCII"}  # their bytes sort as the code points they decode to
COLLATED_TEXT = {TEXT, VARCHAR, NAME}


def _utc(value):
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value


def _float(value):
    return (True, 0.0) if math.isnan(value) else (False, value)


class KeyOrder:
    def __init__(self, client: PostgresClient):
        self.client = client
        self._default_is_c: bool | None = None
        self._code_point_encoding: bool | None = None
        self._orders: dict[tuple[str, str | None], "_PostgresOrder"] = {}

    def sort_keys(self, meta: TableMeta, keys: Sequence[Key]) -> list[tuple]:
        per_column = []
        for i, name in enumerate(meta.key_columns):
            col = meta.column(name)
            values = [k[i] for k in keys]
            plain = self._plain(col)
            if plain is None:
                order = self._orders.setdefault((col.column_type, col.collation), _PostgresOrder(col))
                labels = order.labels(self.client, {v for v in values if v is not None})
                plain = labels.__getitem__
            per_column.append([(1, 0) if v is None else (0, plain(v)) for v in values])
        return [tuple(column[j] for column in per_column) for j in range(len(keys))]

    def _plain(self, col: Column) -> Callable[[Any], Any] | None:
        """How a value of ``col`` becomes its Python sort key, or None when PostgreSQL must order it."""
        oid = col.type_oid
        if oid in PLAIN_ORDER:
            return lambda v: v
        if oid == TIMESTAMPTZ:
            return _utc
        if oid in (FLOAT4, FLOAT8):
            return _float
        if oid == NUMERIC and arrow_type(oid, col.typmod if col.typmod is not None else -1) != arrow_type(TEXT):
            return lambda v: v  # Decimal
        if oid in COLLATED_TEXT and self._byte_order(col.collation):
            return lambda v: v
        return None

    def _byte_order(self, collation: str | None) -> bool:
        """Whether ``collation`` orders text as Python orders the decoded strings: a byte-order collation, in a
        database whose encoding's byte order is code point order (in WIN1251 '№', 0xB9, sorts before 'я',
        0xFF; U+2116 after U+044F)."""
        if self._code_point_encoding is None:
            self._code_point_encoding = self.client.query("SHOW server_encoding", ())[0][0] in CODE_POINT_ENCODINGS
        if not self._code_point_encoding:
            return False
        if collation in BYTE_ORDER_COLLATIONS:
            return True
        if collation != DEFAULT_COLLATION:
            return False
        if self._default_is_c is None:  # the database's default collation (libc provider)
            collate, provider = self.client.query(
                "SELECT datcollate, datlocprovider FROM pg_database WHERE datname = current_database()", ())[0] \
                if self.client.version_num >= 150000 else (self.client.query(
                    "SELECT datcollate FROM pg_database WHERE datname = current_database()", ())[0][0], "c")
            self._default_is_c = provider == "c" and collate in ("C", "POSIX")
        return self._default_is_c


class _PostgresOrder:
    """Stable order labels of one column type and collation's values, ordered by PostgreSQL."""

    def __init__(self, col: Column):
        self.cast = col.column_type
        self.collate = f" COLLATE {col.collation}" if col.collation else ""
        self.known: list[Any] = []  # values labelled so far, in PostgreSQL's order
        self.label: dict[Any, Fraction] = {}

    def labels(self, client: PostgresClient, values: set) -> dict[Any, Fraction]:
        new = [v for v in values if v not in self.label]
        if new:
            self._add(client, new)
        return self.label

    def _add(self, client: PostgresClient, new: list) -> None:
        items = self.known + new
        try:
            rows = client.query(
                f"SELECT i, dense_rank() OVER (ORDER BY v::{self.cast}{self.collate}) FROM unnest(%s::text[]) "
                f"WITH ORDINALITY AS u(v, i)", ([key_text(v) for v in items],))
        except psycopg2.DataError as exc:  # a key value the type no longer takes: a plan's boundary, or the lake's
            raise DblogError(
                f"a key value of type {self.cast} is no longer one ({first_line(exc, client.config.password)}): "
                f"the type changed under a key column (ALTER TYPE ... RENAME VALUE of an enum, a domain's new "
                f"constraint), so the planned chunks no longer apply; capture the table again (dblog run with a new "
                f"--state and --sink, or --exclude it here)") from None
        groups: dict[int, list[Any]] = {}
        for index, rank in rows:
            groups.setdefault(int(rank), []).append(items[int(index) - 1])
        ordered = [groups[r] for r in sorted(groups)]
        labels = [next((self.label[v] for v in group if v in self.label), None) for group in ordered]
        i = 0
        while i < len(ordered):  # runs of groups without a label, between labelled neighbours
            if labels[i] is not None:
                i += 1
                continue
            j = i
            while j < len(ordered) and labels[j] is None:
                j += 1
            lower = labels[i - 1] if i > 0 else None
            upper = labels[j] if j < len(ordered) else None
            count = j - i
            for n in range(count):
                if lower is None and upper is None:
                    labels[i + n] = Fraction(n)
                elif lower is None:
                    labels[i + n] = upper - count + n
                elif upper is None:
                    labels[i + n] = lower + 1 + n
                else:
                    labels[i + n] = lower + (upper - lower) * (n + 1) / (count + 1)
            i = j
        for group, label in zip(ordered, labels):
            for value in group:
                self.label[value] = label
        self.known = [v for group in ordered for v in group]
