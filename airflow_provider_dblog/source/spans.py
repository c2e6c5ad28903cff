"""Values found at byte spans of one buffer, read for many rows at once (the column-by-column decoders').

A column-by-column decoder (``postgres/block_decoder``, ``mysql/block_decoder``) first finds, for every row of a
run, where each column's value lies in the run's bytes: a start, a length and whether the value is there at all.
These functions turn such spans into numpy integers or one Arrow binary array without a Python object per value.
The buffer must hold a few zero bytes past its last span (``PAD``): a fixed-width read at a missing value's start
stays inside it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PAD = 16  # zero bytes after the last value: every fixed-width read (at most 16 bytes) stays in the buffer


def gather(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each of ``starts``: an (n, width) uint8 array."""
    return data[starts[:, None] + np.arange(width, dtype=np.int64)]


def little_endian(data: np.ndarray, starts: np.ndarray, width: int, signed: bool = False) -> np.ndarray:
    """The little-endian integer of ``width`` bytes (1-8) at each of ``starts``, as int64 (uint64 for an
    unsigned 8-byte one)."""
    if width == 1:  # length prefixes and small integers: straight indexing, no (n, width) gather
        return (data[starts].view(np.int8) if signed else data[starts]).astype(np.int64)
    if width == 2:
        values = data[starts].astype(np.int64) | (data[starts + 1].astype(np.int64) << 8)
        return np.where(values >= 1 << 15, values - (1 << 16), values) if signed else values
    raw = gather(data, starts, width)
    if width in (4, 8):
        values = np.ascontiguousarray(raw).view(f"<{'i' if signed else 'u'}{width}")[:, 0]
        return values if width == 8 and not signed else values.astype(np.int64)
    wide = np.zeros((len(starts), 8), np.uint8)
    wide[:, :width] = raw
    values = wide.view("<i8")[:, 0]
    if signed:
        sign = np.int64(1) << np.int64(8 * width - 1)
        values = (values ^ sign) - sign
    return values


def big_endian(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The big-endian unsigned integer of ``width`` bytes (0-7) at each of ``starts``, as int64."""
    if width == 0:
        return np.zeros(len(starts), np.int64)
    wide = np.zeros((len(starts), 8), np.uint8)
    wide[:, 8 - width:] = gather(data, starts, width)
    return wide.view(">i8")[:, 0].astype(np.int64)


def binary(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray) -> pa.Array | None:
    """One Arrow binary array of the spans (null where not ``valid``); None past 2 GB of values (a 32-bit
    offsets array cannot hold them)."""
    valid = np.asarray(valid, bool)
    lengths = np.where(valid, lengths, 0).astype(np.int64)
    total = int(lengths.sum())
    if total >= 1 << 31:
        return None
    # Arrow's take costs ≈40 ns a value and ≈25 µs a call, the gather ≈3 ns a byte: take long values only
    in_order = _spans_in_order(data, starts, lengths, valid) if total > 12 * len(starts) + 8192 else None
    return in_order if in_order is not None else _gathered(data, starts, lengths, valid)


def _spans_in_order(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray) -> pa.Array | None:
    """``binary`` when the valid spans follow each other in ``data`` (the values of one column, row after row): the
    values and the gaps between them are one binary array over ``data`` as it is, and Arrow's ``take`` copies the
    values out (no index per byte); None when they do not."""
    n = len(starts)
    if n == 0 or len(data) >= 1 << 31:
        return None
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = np.where(valid, starts, 0)
    bounds[1::2] = bounds[0::2] + lengths
    following = np.maximum.accumulate(bounds)  # a missing value: an empty span where the one before it ends
    pair = np.repeat(valid, 2)
    if not np.array_equal(following[pair], bounds[pair]) or following[-1] > len(data):
        return None
    present = np.ones(2 * n - 1, bool)
    present[0::2] = valid
    spread = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [pa.py_buffer(np.packbits(present, bitorder="little")),
                                                          pa.py_buffer(following.astype(np.int32)),
                                                          pa.py_buffer(data)],
                                   null_count=n - int(np.count_nonzero(valid)))
    return spread.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))


def _gathered(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray) -> pa.Array:
    """``binary`` of spans in any order: every value byte gathered through an index."""
    n = len(starts)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1] - starts, lengths)
    return pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(np.packbits(valid, bitorder="little")),
                                                 pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data[index])],
                                 null_count=n - int(np.count_nonzero(valid)))


def fixed_strings(prefixes: list[bytes], which: np.ndarray, suffixes: np.ndarray) -> pa.Array:
    """Strings of equal width: ``prefixes[which[i]]`` followed by the bytes ``suffixes[i]`` (an (n, k) uint8
    array), as one Arrow string array (positions of a block's rows: the event's part, then the row's)."""
    n = len(which)
    head = np.frombuffer(b"".join(prefixes), np.uint8).reshape(len(prefixes), -1) if prefixes else \
        np.zeros((0, 0), np.uint8)
    rows = np.concatenate([head[which], suffixes], axis=1) if n else np.zeros((0, 0), np.uint8)
    width = rows.shape[1] if n else 0
    offsets = (np.arange(n + 1, dtype=np.int64) * width).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(rows.tobytes())])


def decimal_digits(values: np.ndarray, digits: int) -> np.ndarray:
    """The ``digits`` decimal digits of ``values`` (each in ``[0, 10 ** digits)``: ``ValueError`` for any other,
    never wrapped) as ASCII, zero-padded: an (n, digits) uint8 array. Arrow prints them (4x numpy's digit by digit
    division), and the text of ``n`` values of ``digits`` characters each is the array's bytes as they are."""
    values = np.asarray(values, np.int64)
    n = len(values)
    if n == 0:
        return np.zeros((0, digits), np.uint8)
    if values.min() < 0 or values.max() >= 10 ** digits:
        raise ValueError(f"a value outside [0, 10 ** {digits}) has no {digits} decimal digits")
    text = pc.utf8_lpad(pa.array(values).cast(pa.string()), digits, "0")
    return np.frombuffer(text.buffers()[2], np.uint8, n * digits).reshape(n, digits)