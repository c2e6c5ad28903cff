"""Chunk checksums: one value per chunk that the source computes in SQL and the lake in Arrow, equal
exactly when the chunk's rows are (drift detection without moving rows).

Each row is written as one canonical text, the same in both places: its values in column order joined
by ``\\x1f`` (a NULL leaves its value out), then one ``0``/``1`` per column saying which are NULL. A
value's text follows its lake type: integers and decimals as their digits (every digit of the scale),
dates as days and timestamps as microseconds since 1970 (no time zone or format in play), text as its
UTF-8, binary values as the hex MD5 of their bytes. A chunk's checksum is its row count, the sum of the
first 64 bits of each row text's MD5 (a sum, not an XOR: a duplicated row does not cancel out), and for
FLOAT/DOUBLE columns, whose text differs between engines, the sum of their finite values, compared with a
relative tolerance: a float is checked for being there and for its magnitude, not to the last bit. NaN and
the infinities (PostgreSQL's) are in the row's text instead (``n``, ``+i``, ``-i``; a finite float has no
text): in a sum, one NaN made every sum NaN, and the chunk differed forever.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEPARATOR = "\x1f"
FLOAT_TOLERANCE = 1e-6  # relative to the sum of magnitudes: float32 has 24 bits of mantissa


@dataclass(frozen=True)
class ChunkChecksum:
    rows: int
    digest: int                         # sum of each row's 64-bit hash (exact)
    floats: tuple[float, ...] = ()      # per FLOAT/DOUBLE column: sum of values
    magnitudes: tuple[float, ...] = ()  # per FLOAT/DOUBLE column: sum of absolute values

    def matches(self, other: "ChunkChecksum") -> bool:
        if (self.rows, self.digest, len(self.floats)) != (other.rows, other.digest, len(other.floats)):
            return False
        return all(math.isclose(a, b, rel_tol=0, abs_tol=FLOAT_TOLERANCE * max(m, n, 1e-300))
                   for a, b, m, n in zip(self.floats, other.floats, self.magnitudes, other.magnitudes))

    def to_dict(self) -> dict:
        return {"rows": self.rows, "digest": str(self.digest), "floats": list(self.floats)}


def is_float(type_: pa.DataType) -> bool:
    return pa.types.is_floating(type_)


def _md5_hex(values: pa.Array) -> pa.Array:
    return pa.array([None if v is None else hashlib.md5(v).hexdigest() for v in values.to_pylist()], pa.string())


def value_text(array: pa.ChunkedArray | pa.Array) -> pa.Array | None:
    """A column's canonical text (FLOAT/DOUBLE: only NaN and the infinities; finite values are summed apart)."""
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    t = array.type
    if is_float(t):
        as_double = array.cast(pa.float64())
        return pc.if_else(pc.is_nan(as_double), "n", pc.if_else(pc.is_inf(as_double), pc.if_else(
            pc.greater(as_double, 0), "+i", "-i"), pa.scalar(None, pa.string())))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return array.cast(pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return _md5_hex(array.cast(pa.binary()))
    if pa.types.is_date32(t):
        return array.cast(pa.int32()).cast(pa.string())
    if pa.types.is_timestamp(t):
        return array.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).cast(pa.string())
    return array.cast(pa.string())  # integers, decimals


def row_texts(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Each row's canonical text (UTF-8)."""
    n = table.num_rows
    values, flags = [], []
    for name in columns:
        column = table.column(name)
        text = value_text(column)
        if text is not None:
            values.append(text)
        null = column.is_null().combine_chunks() if isinstance(column, pa.ChunkedArray) else column.is_null()
        flags.append(pc.if_else(null, "1", "0"))
    flag_text = pc.binary_join_element_wise(*flags, "") if flags else pa.array([""] * n)
    return pc.binary_join_element_wise(*values, flag_text, SEPARATOR, null_handling="skip")


def row_hashes(texts: pa.Array) -> np.ndarray:
    """The first 64 bits of each text's MD5, as unsigned integers."""
    digests = b"".join(hashlib.md5(t).digest()[:8] for t in texts.cast(pa.binary()).to_pylist())
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64)


def exact_sum(hashes: np.ndarray) -> int:
    """Sum of 64-bit values without overflow (two 32-bit halves summed apart)."""
    high = int(np.sum(hashes >> np.uint64(32), dtype=np.uint64))
    low = int(np.sum(hashes & np.uint64(0xFFFFFFFF), dtype=np.uint64))
    return (high << 32) + low


def table_checksum(table: pa.Table, columns: Sequence[str]) -> ChunkChecksum:
    """The checksum of ``table``'s rows over ``columns`` (the source's columns, in its order)."""
    if table.num_rows == 0:
        floats = sum(1 for c in columns if is_float(table.schema.field(c).type))
        return ChunkChecksum(0, 0, (0.0,) * floats, (0.0,) * floats)
    digest = exact_sum(row_hashes(row_texts(table, columns)))
    sums, magnitudes = [], []
    for name in columns:
        column = table.column(name)
        if is_float(column.type):
            as_double = column.cast(pa.float64())
            as_double = pc.if_else(pc.is_finite(as_double), as_double, 0.0)  # NaN and infinities: in the text
            sums.append(float(pc.sum(as_double).as_py() or 0.0))
            magnitudes.append(float(pc.sum(pc.abs(as_double)).as_py() or 0.0))
    return ChunkChecksum(table.num_rows, digest, tuple(sums), tuple(magnitudes))
