"""The tail's MERGE on Arrow tables: per key the change with the greatest ``_pos`` wins, and a key ``current``
lacks is inserted only after its chunk's HW. Pure functions of rows; ``lake_tables`` uses them where it
applies changes in memory or rewrites ``current``'s files itself instead of running delta-rs's MERGE."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.exact import bits_view
from airflow_provider_dblog.core.positions import SourcePosition


def merge_changes(data: pa.Table, changes: pa.Table, keys: Sequence[str],
                  hws: dict[int, SourcePosition | None]) -> pa.Table:
    """``current``'s rows ``data`` (one per key) with ``changes`` (one per key, ``latest_per_key``) applied as the
    tail's MERGE does: a change replaces its key's row when its ``_pos`` is greater (a delete drops the key), and
    a key ``data`` lacks is inserted only after its chunk's HW (``hws``: chunk -> HW; before it, the chunk's read
    has it). In no particular order: the rows ``data`` keeps, then the changes'. One hash join of the keys, built
    on the changes and probed with ``data``'s keys (no sort of ``data`` by key and position)."""
    if changes.num_rows == 0:
        return data
    keys = list(keys)
    rows = pa.array(np.arange(data.num_rows, dtype=np.int64))
    held = data.select(keys).append_column("_held", data["_pos"]).append_column("_j", rows)
    each = pa.array(np.arange(changes.num_rows, dtype=np.int64))
    found = held.join(changes.select(keys).append_column("_i", each), keys, join_type="inner")  # a row per change
    at = pc.index_in(each, value_set=found["_i"].combine_chunks())  # whose key ``data`` holds, as found's row
    held_pos = found["_held"].combine_chunks().take(at)  # per change: its key's ``_pos`` in ``data``, or null
    chunks = pc.unique(changes["_chunk"])
    chunk_hws = pa.array([(hws[c].as_snapshot().encode() if hws.get(c) else "") for c in chunks.to_pylist()],
                         pa.string())
    matched = pc.is_valid(held_pos)
    floor = pc.if_else(matched, held_pos, chunk_hws.take(pc.index_in(changes["_chunk"], value_set=chunks)))
    applies = pc.greater(changes["_pos"], floor)
    replaced = pc.filter(found["_j"].combine_chunks().take(at), pc.and_(matched, applies))
    kept = data.filter(pc.invert(pc.is_in(rows, value_set=replaced)))
    added = changes.filter(pc.and_(applies, pc.not_equal(changes["_op"], "d"))).select(data.column_names)
    return pa.concat_tables([kept, added])


def latest_per_key(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Per key the row with the greatest ``_pos`` (deletes included: the caller decides). Keys are the stored
    values, as the merge's hash join matches them: a float key column is grouped and sorted by its bits (-0.0 and
    0.0 are two keys, a NaN one key with its own bits), so a key change's delete of -0.0 is not lost to the insert
    of 0.0. The rows kept come sorted by key (float keys in the order of their bits)."""
    if rows.num_rows <= 1:
        return rows
    # the order is found on the keys and ``_pos`` alone, and the other columns are taken once, for the rows kept
    keyed = rows.select(list(dict.fromkeys([*keys, "_pos"])))
    if any(pa.types.is_floating(t) for t in keyed.schema.types):  # other keys as they are: no work added
        keyed = pa.table([bits_view(c) for c in keyed.columns], names=keyed.column_names)
    order = pc.sort_indices(keyed, sort_keys=[(k, "ascending") for k in keys] + [("_pos", "descending")])
    ordered = keyed.select(list(keys)).take(order)
    same = None  # row i has the key of row i - 1 (two nulls are the same key: a key column older rows lack)
    for k in keys:
        col = ordered[k]
        eq = pc.equal(col.slice(1), col.slice(0, len(col) - 1))
        if col.null_count:
            eq = pc.fill_null(eq, pc.and_(col.slice(1).is_null(), col.slice(0, len(col) - 1).is_null()))
        same = eq if same is None else pc.and_(same, eq)
    first = pa.concat_arrays([pa.array([True]), pc.invert(same).combine_chunks()])
    return rows.take(order.filter(first))


def distinct_versions(rows: pa.Table, keys: set[str]) -> pa.Table:
    """One row per (key, ``_pos``): the same row version found twice (live by two keys) is kept once."""
    return latest_per_key(rows, [*sorted(keys), "_pos"])
