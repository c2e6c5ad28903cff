"""Consecutive row changes of one table as Arrow columns: a source's fast path for a tail's steady state.

A ``ChangeEvent`` per row costs a Python object per row and per value; a block is what the events of the same
messages would say, decoded column by column (``source/postgres/block_decoder.py``). ``store.lake.block_rows``
and ``store.lake.event_rows`` make the same changelog rows of either. A block never holds a key change (a delete
and an insert: ``row_change``) nor a value the source did not send (``ChangeEvent.unchanged``): such messages
come as events. Its rows are in position order and all lie after ``first``, so the emit rule decides a block as
a whole: a source sends one only for rows past the table's largest high watermark and its floor
(``read_changes``' ``blocks_after``).
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from airflow_provider_dblog.core.positions import SourcePosition


@dataclass(frozen=True)
class ChangeBlock:
    """``images``: per row the after image (c, u) or the before image (d), a struct of the table's columns;
    ``before``: the before image (null for an insert; the key alone when the source sent no old row);
    ``ops``: c / u / d; ``positions``: each row's encoded position; ``ts_ms``: its commit time."""

    table: str
    first: SourcePosition
    images: pa.StructArray
    before: pa.StructArray
    ops: pa.Array
    positions: pa.Array
    ts_ms: pa.Array

    def __len__(self) -> int:
        return len(self.ops)

    def keys(self, key_columns: tuple[str, ...]) -> list[tuple]:
        """Each row's key, as ``ChangeEvent.key``."""
        return list(zip(*(self.images.field(name).to_pylist() for name in key_columns)))
