"""Which files of ``current`` a batch of changes has to rewrite: ``current``'s files are key ranges.

``current`` is partitioned by chunk, and inside a chunk every file the tail writes holds a contiguous,
sorted range of keys of at most about ``FILE_ROWS * 2`` rows, with the key's minimum and maximum in the
file's Delta statistics (the add action's ``stats``). An update of ``current`` then reads only the files
whose key range [min, max] holds a changed key (the others cannot hold it), and rewrites only those in
which a changed key lives or to which a new key goes: the cost follows the files the changes touch, not
the table.

Statistics are used only where they are exact: integer keys, and text keys whose maximum is shorter than
``TEXT_STATS_EXACT`` characters (writers truncate longer text statistics, delta-rs at 64 characters and
Spark at 32: a truncated maximum is below the real one). Timestamps' statistics are milliseconds (a
microsecond key would fall outside), decimals and binary ones vary by writer: such a key column bounds
nothing, and every file of the chunk is read, as without this layout. A file without statistics (written
by an older version, a staged file of a huge transaction) holds any key of its chunk.

A key that no file's range holds (a key inserted beyond the last one, or between two files) goes to the
file whose range is nearest below it (the chunk's first file if none is below), so ranges stay disjoint.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FILE_ROWS = 65_536  # rows of one key-range file; a rewritten file past twice this is split
TEXT_STATS_EXACT = 32


@dataclass
class RangeFile:
    """One file of ``current``: its path as the log names it, size, chunk, rows, and per usable key
    column the lower and upper bound of its keys (None: unbounded)."""

    path: str
    size: int
    chunk: int
    rows: int
    low: tuple
    high: tuple


def bounded_columns(schema: pa.Schema, keys: Sequence[str]) -> list[str]:
    """The key columns whose Delta statistics bound the keys of a file exactly (integer or text)."""
    return [k for k in keys if pa.types.is_integer(schema.field(k).type) or pa.types.is_string(schema.field(k).type)
            or pa.types.is_large_string(schema.field(k).type)]


def range_files(table, bounded: Sequence[str]) -> list[RangeFile]:
    """``table``'s files (a DeltaTable at the version read) with the key bounds of their statistics."""
    actions = pa.table(table.get_add_actions(flatten=True))
    n = actions.num_rows
    if not n:
        return []
    data = actions.to_pydict()
    chunks = data.get("partition._chunk") or [None] * n
    lows, highs = [], []
    for k in bounded:
        lo, hi = data.get(f"min.{k}") or [None] * n, data.get(f"max.{k}") or [None] * n
        lows.append(lo)
        highs.append([None if isinstance(v, str) and len(v) >= TEXT_STATS_EXACT else v for v in hi])
    return [RangeFile(data["path"][i], int(data["size_bytes"][i]), int(chunks[i]) if chunks[i] is not None else -1,
                      int(data["num_records"][i] or 0) if "num_records" in data else 0,
                      tuple(lo[i] for lo in lows), tuple(hi[i] for hi in highs)) for i in range(n)]


def holds(file: RangeFile, keys: pa.Table, bounded: Sequence[str]) -> pa.Array:
    """Per row of ``keys`` whether ``file``'s range can hold that key."""
    mask = pa.array([True] * keys.num_rows, pa.bool_())
    for k, lo, hi in zip(bounded, file.low, file.high):
        column = keys[k]
        if lo is not None:
            mask = pc.and_(mask, pc.greater_equal(column, pa.scalar(lo).cast(column.type)))
        if hi is not None:
            mask = pc.and_(mask, pc.less_equal(column, pa.scalar(hi).cast(column.type)))
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


def nearest_below(files: Sequence[RangeFile], keys: pa.Table, bounded: Sequence[str]) -> np.ndarray:
    """For each row of ``keys``, the index in ``files`` of the file whose lower bound (first bounded key
    column) is the greatest one at or below the key, else the file with the smallest lower bound."""
    ordered = sorted((f.low[0], i) for i, f in enumerate(files) if f.low[0] is not None) if bounded else []
    if not ordered:
        return np.zeros(keys.num_rows, np.int64)
    index = np.array([i for _, i in ordered], np.int64)
    lows = [lo for lo, _ in ordered]
    column = keys[bounded[0]]
    # one search for all keys (text as Python strings: code point order, as Arrow sorts it)
    at = np.searchsorted(pa.array(lows, column.type).to_numpy(zero_copy_only=False), column.to_numpy(),
                         side="right") - 1
    return index[np.maximum(at, 0)]


def pieces(rows: pa.Table, file_rows: int = FILE_ROWS) -> list[pa.Table]:
    """Sorted rows of one rewritten file as files: one file up to twice ``file_rows``, else even pieces of
    about ``file_rows`` (contiguous key ranges)."""
    n = rows.num_rows
    if n <= 2 * file_rows:
        return [rows] if n else []
    count = -(-n // file_rows)
    bounds = [n * i // count for i in range(count + 1)]
    return [rows.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]


def compaction_groups(files: Sequence[RangeFile], file_rows: int = FILE_ROWS) -> list[list[RangeFile]]:
    """Files of ``current`` to rewrite together so that its files stay key ranges of about ``file_rows``:
    per chunk, runs of neighbouring files (in key order) smaller than half of ``file_rows`` whose rows add up
    to at most ``file_rows``; a chunk whose several files are not disjoint ranges (statistics missing, or
    files of an older writer) is rewritten whole into sorted ranges. Untouched otherwise."""
    by_chunk: dict[int, list[RangeFile]] = {}
    for f in files:
        by_chunk.setdefault(f.chunk, []).append(f)
    groups = []
    for chunk in sorted(by_chunk):
        these = by_chunk[chunk]
        if len(these) < 2:
            continue
        if any(f.low[:1] == (None,) or f.high[:1] == (None,) or not f.low for f in these):
            groups.append(these)
            continue
        ordered = sorted(these, key=lambda f: (f.low[0], f.high[0]))
        if any(a.high[0] >= b.low[0] for a, b in zip(ordered, ordered[1:])):
            groups.append(these)
            continue
        run: list[RangeFile] = []
        for f in [*ordered, None]:
            if f is not None and f.rows < file_rows // 2 and sum(g.rows for g in run) + f.rows <= file_rows:
                run.append(f)
                continue
            if len(run) > 1:
                groups.append(run)
            run = [f] if f is not None and f.rows < file_rows // 2 else []
    return groups
