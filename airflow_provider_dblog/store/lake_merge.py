"""The tail's MERGE on Arrow tables: per key the change with the greatest ``_pos`` wins, and a key ``current``
lacks is inserted only after its chunk's HW. Pure functions of rows; ``lake_tables`` uses them where it
applies changes in memory or rewrites ``current``'s files itself instead of running delta-rs's MERGE."""
from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.positions import SourcePosition


def merge_changes(data: pa.Table, changes: pa.Table, keys: Sequence[str],
                  hws: dict[int, SourcePosition | None]) -> pa.Table:
    """``current``'s rows ``data`` with ``changes`` (one per key, ``latest_per_key``) applied as the tail's
    MERGE does: per key the greatest ``_pos`` wins, deletes drop the key, and a key ``data`` lacks is
    inserted only after its chunk's HW (``hws``: chunk -> HW; before it, the chunk's read has it)."""
    if changes.num_rows == 0:
        return data
    probe = changes.select(list(keys)).append_column("_i", pa.array(range(changes.num_rows), pa.int64()))
    present = data.select(list(keys)).append_column("_in", pa.nulls(data.num_rows, pa.bool_()).fill_null(True))
    joined = probe.join(present, list(keys), join_type="left outer")
    matched = pc.fill_null(pc.take(joined["_in"], pc.sort_indices(joined["_i"])), False)
    chunk_hw = pa.array([(hws[c].as_snapshot().encode() if hws.get(c) else "") for c in changes["_chunk"].to_pylist()],
                        pa.string())
    keep = pc.or_(matched, pc.greater(changes["_pos"], chunk_hw))
    merged = latest_per_key(pa.concat_tables([data, changes.filter(keep).select(data.column_names)]), keys)
    return merged.filter(pc.not_equal(merged["_op"], "d"))


def latest_per_key(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Per key the row with the greatest ``_pos`` (deletes included: the caller decides)."""
    if rows.num_rows == 0:
        return rows
    ordered = rows.sort_by([(k, "ascending") for k in keys] + [("_pos", "descending")])
    if ordered.num_rows == 1:
        return ordered
    same = None  # row i has the key of row i - 1 (two nulls are the same key: a key column older rows lack)
    for k in keys:
        col = ordered[k]
        eq = pc.equal(col.slice(1), col.slice(0, len(col) - 1))
        if col.null_count:
            eq = pc.fill_null(eq, pc.and_(col.slice(1).is_null(), col.slice(0, len(col) - 1).is_null()))
        same = eq if same is None else pc.and_(same, eq)
    first = pa.concat_arrays([pa.array([True]), pc.invert(same).combine_chunks()])
    return ordered.filter(first)


def distinct_versions(rows: pa.Table, keys: set[str]) -> pa.Table:
    """One row per (key, ``_pos``): the same row version found twice (live by two keys) is kept once."""
    return latest_per_key(rows, [*sorted(keys), "_pos"])
