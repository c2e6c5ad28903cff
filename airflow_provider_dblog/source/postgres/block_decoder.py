"""pgoutput row messages of one table version decoded column by column into a ``ChangeBlock``.

``row_decoder`` reads a message at a time: per row a dict, per value a Python object, then per row an event and
its conversion back to Arrow. For a run of messages of one table version this module walks the TupleData of
every message at once with numpy (column ``i``'s kind byte, length and value span in all rows, one array
operation each), gathers each column's value bytes into one Arrow binary array and lets Arrow parse them into the
lake's type (``values.arrow_type``: integers, floats, exact decimals, dates, timestamps, text; ``bool`` from its
one byte; any other type through its ``values.converter``, the one definition of each type's meaning).

It gives up (``None``: the caller decodes the messages one by one with ``row_decoder``, which also words every
error) on anything outside the common shape: an unchanged TOASTed value (``u``), a key change (an Update with an
old key, or an old row whose key differs from the new one), binary values, a value Arrow does not parse exactly as
the converter would (infinity, BC dates, NaN in a bounded numeric, an offset missing: the converter refuses them
with one line), or bytes out of the protocol. ``tests/unit/test_pg_block_decoder.py`` holds it to the same rows as
``row_decoder`` + ``row_change`` + ``event_rows``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.exact import same_values
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source import spans
from airflow_provider_dblog.source.postgres import values

_I, _U, _D = ord("I"), ord("U"), ord("D")
_T, _N, _TOAST, _K, _O, _NEW = ord("t"), ord("n"), ord("u"), ord("K"), ord("O"), ord("N")
_PAD = 8  # zero bytes after the last message: a length read past a NULL's kind byte stays inside the array
_OPS = np.array(["c", "u", "d"])
_PARSED_BY_ARROW = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_date,
                    pa.types.is_timestamp)  # Arrow reads their text as the converters do, and refuses what they refuse


MIN_BLOCK = 32  # fewer messages are decoded one by one: a block's array work would cost more


class _Uncommon(Exception):
    """Messages outside the shape this decoder reads; ``common``: the rows that are not, when known."""

    def __init__(self, common: np.ndarray | None = None):
        super().__init__()
        self.common = common


def decode_blocks(table: str, meta: TableMeta, payloads: Sequence[bytes], first: Callable[[int], SourcePosition],
                  positions: Sequence[str], ts_ms: Sequence[int]) -> list[ChangeBlock | range]:
    """Insert / Update / Delete ``payloads`` of ``meta``'s version, in order: ``ChangeBlock`` s, and ``range`` s of
    the messages outside the common shape (see the module) for the caller to decode one by one. ``first(i)``: the
    position of message ``i``'s change."""
    try:
        return [_decode(table, meta, payloads, first(0), positions, ts_ms)]
    except _Uncommon as exc:
        if exc.common is None:
            return [range(len(payloads))]
        pieces: list[ChangeBlock | range] = []
        for i, j, common in _runs(exc.common):
            if common and j - i >= MIN_BLOCK:
                block = decode_block(table, meta, payloads[i:j], first(i), positions[i:j], ts_ms[i:j])
                if block is not None:
                    pieces.append(block)
                    continue
            if pieces and isinstance(pieces[-1], range):
                pieces[-1] = range(pieces[-1].start, j)
            else:
                pieces.append(range(i, j))
        return pieces
    except (IndexError, ValueError, pa.ArrowException, values.UnrepresentableValue):
        return [range(len(payloads))]


def decode_block(table: str, meta: TableMeta, payloads: Sequence[bytes], first: SourcePosition,
                 positions: Sequence[str], ts_ms: Sequence[int]) -> ChangeBlock | None:
    """The ``ChangeBlock`` of ``payloads`` when every one is in the common shape, else ``None``."""
    try:
        return _decode(table, meta, payloads, first, positions, ts_ms)
    except (_Uncommon, IndexError, ValueError, pa.ArrowException, values.UnrepresentableValue):
        return None


def _runs(common: np.ndarray) -> list[tuple[int, int, bool]]:
    """``(start, end, value)`` of each run of equal values of ``common``."""
    edges = [0, *(np.flatnonzero(common[1:] != common[:-1]) + 1).tolist(), len(common)]
    return [(i, j, bool(common[i])) for i, j in zip(edges, edges[1:])]


def _decode(table, meta, payloads, first, positions, ts_ms) -> ChangeBlock:
    n, ncols = len(payloads), len(meta.columns)
    lengths = np.fromiter(map(len, payloads), np.int64, n)
    starts = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    data = np.frombuffer(b"".join(payloads) + bytes(_PAD), np.uint8)
    tag, kind = data[starts], data[starts + 5]
    insert, update, delete = tag == _I, tag == _U, tag == _D
    old_row = kind == _O
    # an Update with an old key is a key change (``row_change`` splits it); other bytes are out of the protocol
    bad = ~((insert & (kind == _NEW)) | (update & ((kind == _NEW) | old_row)) | (delete & ((kind == _K) | old_row)))
    has_old = ~bad & (delete | (update & old_row))
    has_new = ~bad & (insert | update)
    old, old_end = _tuples(data, starts + 6, has_old, ncols, bad)
    updated_old = has_old & update
    bad |= updated_old & (data[old_end] != _NEW)
    new, new_end = _tuples(data, np.where(updated_old, old_end + 1, starts + 6), has_new & ~bad, ncols, bad)
    bad |= np.where(has_new, new_end, old_end) != starts + lengths  # trailing bytes
    types = [values.arrow_type(c.type_oid or 0, -1 if c.typmod is None else c.typmod) for c in meta.columns]
    keys = [meta.column_names.index(k) for k in meta.key_columns]
    decoded: dict[tuple[int, bool], pa.Array] = {}  # (column, old image) -> its values, each column decoded once

    def column(i: int, old_image: bool) -> pa.Array:
        if (i, old_image) not in decoded:
            decoded[i, old_image] = _column(data, meta.columns[i], types[i], (old if old_image else new)[i])
        return decoded[i, old_image]

    if np.any(updated_old & ~bad):  # REPLICA IDENTITY FULL: a key change is a delete and an insert (``row_change``)
        for i in keys:  # by the stored bits (``core.exact``): -0.0 to 0.0 is a key change, NaN to NaN is not
            bad |= updated_old & ~same_values(column(i, True), column(i, False))
    if np.any(bad):
        raise _Uncommon(~bad)
    # an image no message of the run carries (no old rows: inserts, and updates under REPLICA IDENTITY DEFAULT
    # that keep their key; no new rows: deletes) is nulls, not decoded
    any_new, any_old = bool(has_new.any()), bool(has_old.any())
    new_values = [column(i, False) if any_new else pa.nulls(n, t) for i, t in enumerate(types)]
    old_values = [column(i, True) if any_old else pa.nulls(n, t) for i, t in enumerate(types)]
    new_mask = pa.array(has_new)
    images = new_values if has_new.all() else [pc.if_else(new_mask, a, b) for a, b in zip(new_values, old_values)]
    # the before image: the old row, or (an Update without one) the key of the new row, or null (an Insert)
    key_only = pa.array(update & ~old_row)
    before = [pc.if_else(key_only, new_values[i] if i in keys else pa.nulls(n, t), old_values[i])
              for i, t in enumerate(types)]
    fields = [pa.field(c.name, t) for c, t in zip(meta.columns, types)]
    return ChangeBlock(
        table, first, pa.StructArray.from_arrays(images, fields=fields),
        pa.StructArray.from_arrays(before, fields=fields, mask=pa.array(insert)),
        pa.array(_OPS[np.where(insert, 0, np.where(update, 1, 2))], pa.string()),
        pa.array(positions, pa.string()), pa.array(ts_ms, pa.int64()))


def _tuples(data: np.ndarray, at: np.ndarray, present: np.ndarray, ncols: int, bad: np.ndarray
            ) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray]:
    """The TupleData at ``at`` of the rows ``present`` (the others read as all NULL): per column ``(sent, value
    start, value length)`` and the offsets after the tuples. Marks in ``bad`` (in place) the rows whose tuple
    is not in the common shape (an unchanged TOASTed value, a binary value, a wrong count or length); their
    offsets stay in bounds."""
    last = len(data) - _PAD
    count = (data[at].astype(np.int64) << 8) | data[at + 1]
    bad |= present & (count != ncols)
    present = present & ~bad
    p = np.where(present, at + 2, at)
    columns = []
    for _ in range(ncols):
        k = np.where(present, data[p], _N)
        sent = k == _T
        length = np.where(sent, _int32(data, p + 1), 0)
        wrong = present & (~(sent | (k == _N)) | (sent & ((length < 0) | (p + 5 + length > last))))
        if np.any(wrong):  # 'u' (unchanged TOASTed), 'b' (binary), a length out of the message: stop reading it
            bad |= wrong
            present, sent, length = present & ~wrong, sent & ~wrong, np.where(wrong, 0, length)
        columns.append((sent, p + 5, length))
        p = np.where(sent, p + 5 + length, np.where(present, p + 1, p))
    return columns, p


def _int32(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The big-endian Int32 at each offset ``at``."""
    b = [data[at + i].astype(np.int64) for i in range(4)]
    value = (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
    return np.where(value >= 1 << 31, value - (1 << 32), value)


def _column(data: np.ndarray, column, arrow_type: pa.DataType, located) -> pa.Array:
    """One column's values from their spans (``located``: sent, start, length), typed as the lake types them."""
    sent, start, length = located
    if column.type_oid == values.BOOL:
        return pa.array(data[start] == _T, pa.bool_(), mask=~sent)
    raw = spans.binary(data, start, length, sent)
    if raw is None:
        raise _Uncommon
    convert = values.converter(column.type_oid or 0, -1 if column.typmod is None else column.typmod)
    if convert is str:
        return raw.cast(pa.string())
    if any(kind(arrow_type) for kind in _PARSED_BY_ARROW):
        if arrow_type == pa.float32():  # as float(text) then float32, the converter's rounding
            return raw.cast(pa.string()).cast(pa.float64()).cast(pa.float32())
        return raw.cast(pa.string()).cast(arrow_type)
    return pa.array([None if v is None else convert(v.decode()) for v in raw.to_pylist()], arrow_type)
