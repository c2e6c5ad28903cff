"""Key values compared as the lake's merge matches them: by the stored value, bit for bit, not by equality.

Python, Arrow and SQL say -0.0 == 0.0 and NaN != NaN, but the two zeros are two keys in the lake and a NaN key is
one: whether an update changed its key (``core.events.row_change``, the sources' block decoders) is decided here,
so a float key updated from -0 to 0 is a delete of the old key and an insert, and a NaN key's update an update.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_BITS = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}  # a float's width -> the integer its bits are read as


def _stored(value: Any) -> Any:
    return struct.pack("<d", value) if isinstance(value, float) else value


def same_key(old: tuple, new: tuple) -> bool:
    """The two keys are the same stored values: each part of the same type and equal, floats by their bits."""
    return len(old) == len(new) and all(a is b or (type(a) is type(b) and _stored(a) == _stored(b))
                                        for a, b in zip(old, new))


def same_values(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per row: ``a`` and ``b`` hold the same stored value (floats by their bits; a null is never the same)."""
    if pa.types.is_floating(a.type) and a.type == b.type:
        a, b = a.view(_BITS[a.type.bit_width]), b.view(_BITS[b.type.bit_width])
    return pc.equal(a, b).fill_null(False).to_numpy(zero_copy_only=False)
