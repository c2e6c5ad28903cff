"""The watermark window merge ("normalize") of DBLog / Flink CDC, in Arrow: the one production runs.

A chunk's SELECT ran at some read view between the low (LW) and the high (HW) watermark. Every
key the window's events touched ends in the state its *last* event in the window left (an
after-image, or gone for a delete), whatever the SELECT saw; every untouched key is as the SELECT
saw it, which is its state at HW too. So the merge yields the chunk's exact rows at HW.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.events import ChangeEvent, Key, Row

SortKeys = Callable[[Sequence[Key]], list[tuple]]


def last_images(events: Iterable[ChangeEvent], in_chunk: Callable[[Key], bool]) -> dict[Key, Row | None]:
    """For each in-chunk key the window touched: its final after-image, or None if deleted."""
    final: dict[Key, Row | None] = {}
    for event in sorted(events, key=lambda e: e.pos):
        if in_chunk(event.key):
            final[event.key] = event.after
    return final


def keys_in_chunk(keys: Sequence[Key], chunk: ChunkRange, sort_keys: SortKeys) -> set[Key]:
    """Which ``keys`` fall in ``[chunk.lo, chunk.hi)``, compared in the database's order (``sort_keys``)."""
    bounds = [b for b in (chunk.lo, chunk.hi) if b is not None]
    ordered = sort_keys(list(keys) + bounds)
    key_sk, bound_sk = ordered[:len(keys)], ordered[len(keys):]
    lo_sk = bound_sk[0] if chunk.lo is not None else None
    hi_sk = bound_sk[-1] if chunk.hi is not None else None
    return {k for k, sk in zip(keys, key_sk) if (lo_sk is None or sk >= lo_sk) and (hi_sk is None or sk < hi_sk)}


def merge_window(selected: pa.Table, key_columns: Sequence[str], chunk: ChunkRange,
                 events: Sequence[ChangeEvent], sort_keys: SortKeys) -> pa.Table:
    """The chunk's rows at HW: ``selected`` rows of keys the window did not touch, plus the final
    image of every touched key of the chunk that still exists."""
    if not events:
        return selected
    inside = keys_in_chunk([e.key for e in events], chunk, sort_keys)
    touched = last_images(events, lambda k: k in inside)
    if not touched:
        return selected
    survivors = pa.Table.from_pylist([r for r in touched.values() if r is not None], schema=selected.schema)
    return pa.concat_tables([selected.filter(pc.invert(rows_with_keys(selected, key_columns, touched))), survivors])


def rows_with_keys(table: pa.Table, key_columns: Sequence[str], keys) -> pa.Array:
    """Which rows of ``table`` have one of ``keys`` (tuples of Python values, compared exactly). A chunk
    holds up to millions of rows and a window touches a few: the first key column is matched in Arrow
    where Arrow's equality is Python's (integers, text, bytes), and only its candidates in Python."""
    first = table.column(key_columns[0])
    candidates = None
    if pa.types.is_integer(first.type) or pa.types.is_string(first.type) or pa.types.is_binary(first.type):
        try:
            candidates = pc.is_in(first, value_set=pa.array({k[0] for k in keys}, first.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # a value the column cannot hold
            candidates = None
        if candidates is not None and len(key_columns) == 1:
            return candidates
    index = pc.indices_nonzero(candidates) if candidates is not None else pa.array(range(table.num_rows), pa.int64())
    found = [tuple(vals) in keys for vals in zip(*(table.column(c).take(index).to_pylist() for c in key_columns))]
    mask = [False] * table.num_rows
    for row, hit in zip(index.to_pylist(), found):
        mask[row] = hit
    return pa.array(mask, pa.bool_())
