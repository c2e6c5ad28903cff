"""Chunk checksums: one value per chunk that the source computes in SQL and the lake in Arrow, equal
exactly when the chunk's rows are (drift detection without moving rows).

Each row is written as one canonical text, the same in both places: its values in column order joined
by ``\\x1f`` (a NULL leaves its value out), then one ``0``/``1`` per column saying which are NULL. A
value's text follows its lake type: integers and decimals as their digits (every digit of the scale),
dates as days and timestamps as microseconds since 1970 (no time zone or format in play), text as its
UTF-8, binary values as the hex MD5 of their bytes. A chunk's checksum is its row count and the sum of
the first 64 bits of each row text's MD5 (a sum, not an XOR: a duplicated row does not cancel out).

FLOAT/DOUBLE values print differently in every engine, so their text is not a print of them: it is the value's
exact binary form, ``[-]MpE`` with ``M`` the 53-bit integer significand and ``E`` the power of two (``value = M *
2**E``), ``0`` for both zeros, and ``n``, ``+i``, ``-i`` for NaN and the infinities (PostgreSQL's). Both sides
compute it with exact arithmetic (a division by a power of two, a multiplication by 2**52), so a float is
compared to its last bit. Before, a FLOAT/DOUBLE column only added its chunk's sum, compared within 1e-6 of the
sum of magnitudes: a DOUBLE changed from 100 to 105 in a chunk of 100,000 such values, or two rows' floats
swapped, went unseen.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEPARATOR = "\x1f"
SIGNIFICAND_BITS = 53  # of a float64; a float32 widens to it exactly


@dataclass(frozen=True)
class ChunkChecksum:
    rows: int
    digest: int  # sum of each row's 64-bit hash (exact)

    def matches(self, other: "ChunkChecksum") -> bool:
        return (self.rows, self.digest) == (other.rows, other.digest)

    def to_dict(self) -> dict:
        return {"rows": self.rows, "digest": str(self.digest)}


def is_float(type_: pa.DataType) -> bool:
    return pa.types.is_floating(type_)


def _md5_hex(values: pa.Array) -> pa.Array:
    return pa.array([None if v is None else hashlib.md5(v).hexdigest() for v in values.to_pylist()], pa.string())


def float_text(array: pa.Array) -> pa.Array:
    """FLOAT/DOUBLE values as their exact binary form (the module's docstring): ``frexp`` splits each into a
    significand in [0.5, 1) and a power of two, exactly, subnormals included. NULL stays NULL."""
    doubles = array.cast(pa.float64())
    with np.errstate(invalid="ignore"):
        significand, exponent = np.frexp(np.abs(doubles.to_numpy(zero_copy_only=False)))
        integral = np.where(np.isfinite(significand), significand * 2.0 ** SIGNIFICAND_BITS, 0).astype(np.int64)
    exact = pc.binary_join_element_wise(pc.if_else(pc.less(doubles, 0), "-", ""), pa.array(integral).cast(pa.string()),
                                        "p", pa.array(exponent - SIGNIFICAND_BITS).cast(pa.string()), "")
    return pc.if_else(pc.is_nan(doubles), "n", pc.if_else(pc.is_inf(doubles), pc.if_else(
        pc.greater(doubles, 0), "+i", "-i"), pc.if_else(pc.equal(doubles, 0), "0", exact)))


def value_text(array: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column's canonical text."""
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    t = array.type
    if is_float(t):
        return float_text(array)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return array.cast(pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return _md5_hex(array.cast(pa.binary()))
    if pa.types.is_date32(t):
        return array.cast(pa.int32()).cast(pa.string())
    if pa.types.is_timestamp(t):
        return array.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).cast(pa.string())
    if pa.types.is_decimal(t):
        return decimal_text(array)
    return array.cast(pa.string())  # integers


def decimal_text(array: pa.Array) -> pa.Array:
    """DECIMAL/NUMERIC values as the database prints them: every digit of the column's scale, never an exponent
    (Arrow prints 0 and values below 1e-6 of a scale past six as ``0E-8``, ``1E-7``: a false drift before)."""
    text = array.cast(pa.string())
    exponent = pc.match_substring(text, "E")
    if not pc.any(exponent).as_py():
        return text
    plain = [None if v is None else format(v, "f") for v in array.filter(exponent).to_pylist()]
    return pc.replace_with_mask(text, exponent, pa.array(plain, pa.string()))


def row_texts(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Each row's canonical text (UTF-8)."""
    n = table.num_rows
    values, flags = [], []
    for name in columns:
        column = table.column(name)
        values.append(value_text(column))
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
        return ChunkChecksum(0, 0)
    return ChunkChecksum(table.num_rows, exact_sum(row_hashes(row_texts(table, columns))))
