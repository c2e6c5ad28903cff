"""Key order as the database sees it: collation weights for text keys; ENUM and SET by their numbers, MariaDB's
UUID and addresses by their stored order, TIME and wide DECIMAL by value whatever form they come in; plain
values otherwise."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Callable, Sequence

from airflow_provider_dblog.core.chunks import Key
from airflow_provider_dblog.core.tables import DECLARED_ORDER, Column, TableMeta
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.types import BYTES_AS_TEXT, declared_numbers, is_collated_text

MAX_CACHED_WEIGHTS = 200_000


def _naive_utc(value):
    """TIMESTAMP keys arrive naive from SELECTs (UTC session) and aware from the binlog path."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def _time_micros(value) -> int:
    """A TIME value as signed microseconds: from a ``timedelta`` or from text such as ``-838:59:59.500``."""
    if isinstance(value, dt.timedelta):
        return value // dt.timedelta(microseconds=1)
    text = str(value)
    sign = -1 if text.startswith("-") else 1
    hours, minutes, seconds = text.lstrip("-").split(":")
    whole, _, fraction = seconds.partition(".")
    return sign * (((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1_000_000 + int(fraction.ljust(6, "0")[:6]))


def _plain_order(col: Column) -> Callable[[Any], Any]:
    """How a key value of ``col`` (from a SELECT, the binlog or the lake) becomes a value that Python orders as
    the server does, for a column whose order is not its collation's."""
    if col.data_type in BYTES_AS_TEXT:  # MariaDB's UUID, INET6, INET4: not in the order of their text
        return BYTES_AS_TEXT[col.data_type][2]
    if col.data_type == "decimal":  # wider than 38 digits the lake and the binlog hold its text
        return lambda v: Decimal(v) if isinstance(v, str) else v
    if col.data_type == "time":  # a SELECT's timedelta, or the lake's and the binlog's text
        return _time_micros
    if col.data_type in DECLARED_ORDER:  # ENUM by its index, SET by its bits
        return declared_numbers(col)
    return _naive_utc


class KeyOrder:
    """``sort_keys``: values whose Python order (and equality) is the database's order of keys."""

    def __init__(self, client: MySqlClient):
        self.client = client
        self._weights: dict[tuple[str, str], bytes] = {}

    def sort_keys(self, meta: TableMeta, keys: Sequence[Key]) -> list[tuple]:
        columns = [meta.column(c) for c in meta.key_columns]
        per_column = []
        for i, col in enumerate(columns):
            values = [k[i] for k in keys]
            if is_collated_text(col):
                weights = self._weights_for(col, {v for v in values if v is not None})
                per_column.append([(v is not None, weights.get(v, b"")) for v in values])
            else:
                order = _plain_order(col)
                per_column.append([(v is not None, order(v) if v is not None else 0) for v in values])
        return [tuple(col[j] for col in per_column) for j in range(len(keys))]

    def _weights_for(self, col: Column, values: set[str]) -> dict[str, bytes]:
        missing = [v for v in values if (col.collation, v) not in self._weights]
        nopad = "nopad" in (col.collation or "").lower() or "0900" in (col.collation or "")
        pad = "" if nopad or not col.char_length else f" AS CHAR({int(col.char_length)})"
        for i in range(0, len(missing), 200):
            batch = missing[i:i + 200]
            items = ", ".join(f"WEIGHT_STRING(CONVERT(%s USING {col.charset}) COLLATE {col.collation}{pad})"
                              for _ in batch)
            row = self.client.query(f"SELECT {items}", batch)[0]
            for value, weight in zip(batch, row):
                self._weights[(col.collation, value)] = bytes(weight or b"")
        if len(self._weights) > MAX_CACHED_WEIGHTS:
            self._weights = {(col.collation, v): self._weights[(col.collation, v)] for v in values}
        return {v: self._weights[(col.collation, v)] for v in values}
