"""Key values compared as the lake's merge matches them: by the stored value, bit for bit, not by equality.

Python, Arrow and SQL say -0.0 == 0.0 and NaN != NaN, but the two zeros are two keys in the lake and a NaN key is
one: whether an update changed its key (``core.events.row_change``, the sources' block decoders) is decided here,
so a float key updated from -0 to 0 is a delete of the old key and an insert, and a NaN key's update an update.
"""
from __future__ import annotations

import struct
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_BITS = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}  # a float's width -> the integer its bits are read as


def exact_key(values: Iterable) -> tuple:
    """A key's values as a dict key that tells keys apart as the lake does: a float by its bits, so a NaN key finds
    itself (NaN equals no float, and hashes by identity) and -0.0 is not 0.0."""
    return tuple(struct.pack(">d", v) if isinstance(v, float) else v for v in values)


def unpacked(parts: Iterable, floating: bool) -> list:
    """The values of one column's parts of ``exact_key`` s (a float column's are its packed bits; a null stays
    null, never a TypeError in the middle of a commit)."""
    if not floating:
        return list(parts)
    return [None if p is None else struct.unpack(">d", p)[0] for p in parts]


def same_key(old: tuple, new: tuple) -> bool:
    """The two keys are the same stored values: each part of the same type and equal, floats by their bits."""
    return (len(old) == len(new) and all(type(a) is type(b) for a, b in zip(old, new))
            and exact_key(old) == exact_key(new))


def bits_view(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A float column as the integers of its bits (nulls kept), so that equality, grouping and sorting go by the
    stored value: -0.0 apart from 0.0, a NaN equal to the same NaN bits; any other column as it is (no copy)."""
    if not pa.types.is_floating(column.type):
        return column
    bits = _BITS[column.type.bit_width]
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([c.view(bits) for c in column.chunks], bits)
    return column.view(bits)


def same_values(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per row: ``a`` and ``b`` hold the same stored value (floats by their bits; a null is never the same)."""
    if a.type == b.type:
        a, b = bits_view(a), bits_view(b)
    return pc.equal(a, b).fill_null(False).to_numpy(zero_copy_only=False)
