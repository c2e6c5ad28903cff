"""Rows events of one table version decoded column by column into ``ChangeBlock`` s: a tail's steady state.

``rows.py`` compiles a decoder that reads one row image at a time: per row a dict, per value a Python object,
then per row a ``ChangeEvent`` and its conversion back to Arrow. Past a table's largest high watermark every
change is written, so a run of rows events of one table map layout can be read at once instead:

* **where each value lies.** Row images follow each other inside an event, so a row's start is known only
  once the row before it is read. The walk reads the k-th row of every event of the run at the same time
  (one numpy operation per column over all events: the NULL bit, a fixed width or a length prefix), so its
  cost is the number of rows of the longest event times the columns, whatever the number of events.
* **what each value is.** Each column's spans are gathered once and turned into the lake's type with numpy
  and Arrow: integers, floats, DECIMAL (up to 38 digits), DATE / DATETIME / TIMESTAMP (invalid dates are
  NULL, as ``rows.py`` makes them), YEAR, ENUM, BIT, UTF-8 and ASCII text, binary strings.

A layout with a column outside these (TIME, SET, MySQL's binary JSON, DECIMAL wider than 38 digits, BINARY(n), other character sets) gets no
block: ``block_layout`` returns None and its events are decoded one by one as before. An event holding an update
that changes the key goes one by one too (``row_change`` splits it into a delete and an insert), and so does a
run whose bytes are not what the layout says (the per-row decoder then words the error).
``tests/integration/test_mysql_block_decoder.py`` holds the blocks to the per-row path's changelog rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.exact import same_values
from airflow_provider_dblog.core.positions import ROWS_PER_POSITION, SourcePosition, position_prefix
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source import spans
from airflow_provider_dblog.source.mysql.field_types import (
    BIT, BLOB, DATE, DATETIME2, DOUBLE, ENUM, FLOAT, GEOMETRY, INT24, LONG, LONG_BLOB, LONGLONG, MEDIUM_BLOB,
    NEWDECIMAL, SHORT, STRING, TIMESTAMP2, TINY, TINY_BLOB, VAR_STRING, VARCHAR, YEAR,
)
from airflow_provider_dblog.source.mysql.rows import DECIMAL_DIGITS_BYTES
from airflow_provider_dblog.source.mysql.types import BYTES_AS_TEXT, arrow_type, enum_labels, unscaled_decimal

MIN_EVENTS = 8  # a run of fewer rows events is decoded one by one: the walk's per-row cost needs several events
_INT_WIDTHS = {TINY: 1, SHORT: 2, INT24: 3, LONG: 4, LONGLONG: 8}
_BLOBS = (BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, GEOMETRY)
_TEXT_CHARSETS = {"utf8mb4", "utf8mb3", "utf8", "ascii", "latin1"}
_OPS = {"write": "c", "update": "u", "delete": "d"}
Convert = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], pa.Array]


class Uncommon(Exception):
    """Bytes the layout does not explain, or a value the per-row decoder would treat otherwise."""


@dataclass(frozen=True)
class ColumnSpec:
    """How one column's value lies in a row image (``width`` bytes, or a ``prefix``-byte length and the bytes)
    and how its spans become the lake's values."""

    width: int
    prefix: int
    convert: Convert


@dataclass(frozen=True)
class RowsEvent:
    """One rows event of a run: its row images ``body[start:end]``, kind (write / update / delete), the position
    of the event (row 0) and its commit time."""

    body: bytes
    start: int
    end: int
    kind: str
    pos: SourcePosition
    ts_ms: int


def block_layout(columns: Sequence, meta: TableMeta, mariadb: bool = False) -> list[ColumnSpec] | None:
    """The column specs of a table map's ``columns`` (the library's) for ``meta``'s columns, or None when one
    of them is not read column by column (module docstring). ``mariadb``: a FLOAT/DOUBLE -0 is read as 0.0, as
    the per-row decoder reads it there (what MariaDB's SELECT shows: ``rows.positive_zeros``)."""
    specs = []
    for tm, col in zip(columns, meta.columns):
        spec = _spec(tm, col, mariadb)
        if spec is None:
            return None
        specs.append(spec)
    return specs if len(specs) == len(meta.columns) else None


def _spec(tm, col: Column, mariadb: bool) -> ColumnSpec | None:
    t, target = tm.type, arrow_type(col)
    unsigned = bool(getattr(tm, "unsigned", False)) or col.unsigned
    if t in _INT_WIDTHS:
        width = _INT_WIDTHS[t]
        return ColumnSpec(width, 0, lambda d, s, n, v: _array(spans.little_endian(d, s, width, not unsigned), v, target))
    if t in (FLOAT, DOUBLE):
        width, zero = (4 if t == FLOAT else 8), (0.0 if mariadb else None)  # -0.0 + 0.0 is 0.0
        return ColumnSpec(width, 0, lambda d, s, n, v: _array(_floats(spans.gather(d, s, width), width, zero), v,
                                                              target))
    if t == YEAR:
        return ColumnSpec(1, 0, lambda d, s, n, v: _array(_year(d[s]), v, target))
    if t == DATE:
        return ColumnSpec(3, 0, lambda d, s, n, v: _date(spans.little_endian(d, s, 3), v))
    if t == DATETIME2:
        fsp = tm.fsp or 0
        return ColumnSpec(5 + (fsp + 1) // 2, 0, lambda d, s, n, v: _datetime(d, s, v, fsp))
    if t == TIMESTAMP2:
        fsp = tm.fsp or 0
        return ColumnSpec(4 + (fsp + 1) // 2, 0, lambda d, s, n, v: _timestamp(d, s, v, fsp, target))
    if t == NEWDECIMAL:
        if not pa.types.is_decimal(target):  # wider than 38 digits: the lake keeps its text
            return None
        groups = _decimal_groups(tm.precision, tm.decimals)
        return ColumnSpec(sum(g for g, _ in groups), 0, lambda d, s, n, v: _decimal(d, s, v, groups, target))
    if t == ENUM:
        names = pa.array([""] + enum_labels(col), pa.string())
        return ColumnSpec(tm.size, 0, lambda d, s, n, v: _enum(spans.little_endian(d, s, tm.size), v, names))
    if t == BIT:
        return ColumnSpec(tm.bytes, 0, lambda d, s, n, v: _bytes(d, s, np.full(len(s), tm.bytes), v))
    if t in (VARCHAR, VAR_STRING, STRING) + _BLOBS:
        if col.data_type in BYTES_AS_TEXT:  # UUID, INET6, INET4: the per-row decoder prints them
            return None
        prefix = tm.length_size if t in _BLOBS else (2 if tm.max_length > 255 else 1)
        if pa.types.is_string(target):
            charset = col.charset or "utf8mb4"
            if charset not in _TEXT_CHARSETS:
                return None
            return ColumnSpec(0, prefix, lambda d, s, n, v: _text(d, s, n, v, charset))
        if col.data_type == "binary":  # BINARY(n): the per-row decoder pads the bytes the binlog dropped
            return None
        return ColumnSpec(0, prefix, _bytes)
    return None


# ---- where each value lies -----------------------------------------------------------------------------------
def _groups(specs: Sequence[ColumnSpec]) -> list[tuple[int, int, np.ndarray | int]]:
    """The columns as groups the walk advances through at once: (first, end, widths) for consecutive fixed-width
    columns, (column, column + 1, -prefix) for a length-prefixed one."""
    groups: list = []
    for j, spec in enumerate(specs):
        if spec.width and groups and not isinstance(groups[-1][2], int):
            first, _, widths = groups[-1]
            groups[-1] = (first, j + 1, np.append(widths, spec.width))
        elif spec.width:
            groups.append((j, j + 1, np.array([spec.width], np.int64)))
        else:
            groups.append((j, j + 1, -spec.prefix))
    return groups


def _image(data: np.ndarray, cur: np.ndarray, ncols: int, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                           np.ndarray]:
    """One row image at each of ``cur``: (starts, lengths, present) of every column, (n, ncols) each, and the
    offsets after the images."""
    n = len(cur)
    bitmap = (ncols + 7) // 8
    present = np.unpackbits(spans.gather(data, cur, bitmap), axis=1, bitorder="little")[:, :ncols] == 0
    cur = cur + bitmap
    starts, lengths = np.empty((n, ncols), np.int64), np.empty((n, ncols), np.int64)
    for first, end, widths in groups:
        if isinstance(widths, int):  # a length-prefixed value
            prefix, there = -widths, present[:, first]
            length = spans.little_endian(data, cur, prefix) * there
            starts[:, first], lengths[:, first] = cur + prefix, length
            cur = cur + there * (prefix + length)
        else:
            sizes = present[:, first:end] * widths
            ends = np.cumsum(sizes, axis=1)
            starts[:, first:end] = cur[:, None] + ends - sizes
            lengths[:, first:end] = widths
            cur = cur + ends[:, -1]
    return starts, lengths, present, cur


def _walk(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, updates: np.ndarray, specs: Sequence[ColumnSpec]):
    """Every row of every event, events in order and rows in order inside each: (event of each row, row index
    inside its event, the first images' spans, the second images' spans: updates' after images), spans as
    (starts, lengths, present) matrices of (rows, columns)."""
    ncols, groups = len(specs), _groups(specs)
    p = starts.copy()
    active = np.flatnonzero(p < ends)
    steps = []
    while active.size:
        s1, l1, p1, cur = _image(data, p[active], ncols, groups)
        upd = np.flatnonzero(updates[active])
        s2, l2, p2 = np.zeros_like(s1), np.zeros_like(l1), np.zeros_like(p1)
        if upd.size:
            s2[upd], l2[upd], p2[upd], cur[upd] = _image(data, cur[upd], ncols, groups)
        if np.any(cur > ends[active]):
            raise Uncommon
        p[active] = cur
        steps.append((active, (s1, l1, p1), (s2, l2, p2)))
        active = active[cur < ends[active]]
    events = np.concatenate([a for a, _, _ in steps])
    index = np.concatenate([np.full(len(a), k, np.int64) for k, (a, _, _) in enumerate(steps)])
    order = np.lexsort((index, events))

    def image(which: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        s, lengths, present = (np.concatenate([step[which][k] for step in steps])[order] for k in range(3))
        return [(s[:, j], lengths[:, j], present[:, j]) for j in range(ncols)]

    return events[order], index[order], image(1), image(2)


# ---- a run of events as blocks ----------------------------------------------------------------------------------
def decode_run(table: str, meta: TableMeta, specs: Sequence[ColumnSpec], events: Sequence[RowsEvent]
               ) -> list[ChangeBlock | range]:
    """``events`` (one layout, in binlog order) as ``ChangeBlock`` s and ``range`` s of the events the caller
    decodes one by one (an update of the key, an event of more rows than a position orders, or the whole run when
    its bytes are not what the layout says)."""
    if not events:
        return []
    try:
        return _decode(table, meta, specs, events)
    except (Uncommon, IndexError, ValueError, OverflowError, pa.ArrowException):
        return [range(len(events))]


def _decode(table, meta, specs, events: Sequence[RowsEvent]) -> list[ChangeBlock | range]:
    lengths = np.fromiter((e.end - e.start for e in events), np.int64, len(events))
    starts = np.zeros(len(events), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    ends = starts + lengths
    data = np.frombuffer(b"".join(bytes(memoryview(e.body)[e.start:e.end]) for e in events) + bytes(spans.PAD),
                         np.uint8)
    kinds = np.array([e.kind for e in events])
    updates = kinds == "update"
    event_of, index, first, second = _walk(data, starts, ends, updates, specs)
    n = len(event_of)
    if n == 0:
        return [range(len(events))]
    row_update = updates[event_of]
    first_values = [spec.convert(data, *spans_) for spec, spans_ in zip(specs, first)]
    after_values = [spec.convert(data, *spans_) if row_update.any() else pa.nulls(n, arr.type)
                    for spec, spans_, arr in zip(specs, second, first_values)]
    keys = [meta.column_names.index(k) for k in meta.key_columns]
    key_change = np.zeros(n, bool)
    if row_update.any():
        for i in keys:  # by the stored bits (``core.exact``): -0.0 to 0.0 is a key change
            key_change |= row_update & ~same_values(first_values[i], after_values[i])
    names = meta.column_names
    fields = [pa.field(name, arr.type) for name, arr in zip(names, first_values)]
    if row_update.all() or not row_update.any():  # one kind of image per row: no per-value choice
        chosen = after_values if row_update.all() else first_values
    else:
        update_mask = pa.array(row_update)
        chosen = [pc.if_else(update_mask, a, b) for a, b in zip(after_values, first_values)]
    images = pa.StructArray.from_arrays(chosen, fields=fields)
    inserts = kinds[event_of] == "write"
    before = pa.StructArray.from_arrays(first_values, fields=fields, mask=pa.array(inserts) if inserts.any() else None)
    ops = pa.array(np.array([_OPS[k] for k in kinds])[event_of], pa.string())
    prefixes = [position_prefix(e.pos) for e in events]
    unordered = index >= ROWS_PER_POSITION  # rows no position orders: their events go one by one, to be refused
    positions = spans.fixed_strings(prefixes, event_of, spans.decimal_digits(np.where(unordered, 0, index) * 2, 8))
    ts_ms = pa.array(np.array([e.ts_ms for e in events], np.int64)[event_of], pa.int64())
    rows_of = np.bincount(event_of, minlength=len(events))
    row_start = np.zeros(len(events) + 1, np.int64)
    np.cumsum(rows_of, out=row_start[1:])
    bad_events = np.zeros(len(events), bool)
    if key_change.any() or unordered.any():
        bad_events[np.unique(event_of[key_change | unordered])] = True
    pieces: list[ChangeBlock | range] = []
    i = 0
    while i < len(events):
        j = i
        while j < len(events) and bad_events[j] == bad_events[i]:
            j += 1
        if bad_events[i]:
            pieces.append(range(i, j))
        else:
            lo, hi = int(row_start[i]), int(row_start[j])
            if hi > lo:
                pieces.append(ChangeBlock(table, events[i].pos.with_row(0), images.slice(lo, hi - lo),
                                          before.slice(lo, hi - lo), ops.slice(lo, hi - lo),
                                          positions.slice(lo, hi - lo), ts_ms.slice(lo, hi - lo)))
        i = j
    return pieces


# ---- what each value is ----------------------------------------------------------------------------------------
def _floats(raw: np.ndarray, width: int, zero: float | None) -> np.ndarray:
    """Little-endian FLOAT/DOUBLE values; ``zero`` (0.0) added to each turns -0.0 into 0.0."""
    values = np.ascontiguousarray(raw).view(f"<f{width}")[:, 0]
    return values if zero is None else values + np.asarray(zero, values.dtype)


def _array(values: np.ndarray, present: np.ndarray, target: pa.DataType) -> pa.Array:
    return pa.array(values, mask=~present).cast(target)


def _year(raw: np.ndarray) -> np.ndarray:
    values = raw.astype(np.int64)
    return np.where(values > 0, values + 1900, 0)


def _days(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(days since 1970-01-01, valid) of proleptic Gregorian dates; invalid ones (year 0, month or day 0 or out of
    range: what ``datetime.date`` refuses) are marked."""
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    month_days = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)
    ok = (year >= 1) & (year <= 9999) & (month >= 1) & (month <= 12) & (day >= 1)
    m = np.clip(month, 1, 12)
    ok &= day <= month_days[m] + ((m == 2) & leap)
    # days from civil (H. Hinnant): March-based years
    y = year - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468, ok


def _date(x: np.ndarray, present: np.ndarray) -> pa.Array:
    days, ok = _days(x >> 9, (x >> 5) & 15, x & 31)
    return pa.array(days.astype(np.int32), pa.int32(), mask=~(present & ok)).view(pa.date32())


def _fraction(data, starts, fsp: int) -> np.ndarray:
    """Microseconds of a temporal value's fractional part (``rows._fraction_reader``)."""
    width = (fsp + 1) // 2
    if width == 0:
        return np.zeros(len(starts), np.int64)
    micros = spans.big_endian(data, starts, width) // (10 if fsp % 2 else 1) * 10 ** (6 - fsp)
    return micros


def _datetime(data, starts, present, fsp: int) -> pa.Array:
    x = spans.big_endian(data, starts, 5)
    ym = (x >> 22) & 0x1FFFF
    days, ok = _days(ym // 13, ym % 13, (x >> 17) & 31)
    hour, minute, second = (x >> 12) & 31, (x >> 6) & 63, x & 63
    ok &= (hour <= 23) & (minute <= 59) & (second <= 59)
    micros = _fraction(data, starts + 5, fsp)
    if np.any(present & ok & (micros >= 1_000_000)):
        raise Uncommon  # the per-row decoder refuses it
    seconds = days * 86400 + hour * 3600 + minute * 60 + second
    return pa.array(seconds * 1_000_000 + micros, pa.int64(), mask=~(present & ok)).view(pa.timestamp("us"))


def _timestamp(data, starts, present, fsp: int, target: pa.DataType) -> pa.Array:
    seconds = spans.big_endian(data, starts, 4)
    micros = _fraction(data, starts + 4, fsp)  # the zero TIMESTAMP (0 s) is NULL (``rows._timestamp2_reader``)
    return pa.array(seconds * 1_000_000 + micros, pa.int64(), mask=~(present & (seconds != 0))).view(target)


def _decimal_groups(precision: int, scale: int) -> list[tuple[int, int]]:
    """(bytes, base) of each group of MySQL's binary DECIMAL, most significant first (``rows._decimal_code``)."""
    integral = precision - scale
    return (([(DECIMAL_DIGITS_BYTES[integral % 9], 10 ** (integral % 9))] if integral % 9 else [])
            + [(4, 10 ** 9)] * (integral // 9 + scale // 9)
            + ([(DECIMAL_DIGITS_BYTES[scale % 9], 10 ** (scale % 9))] if scale % 9 else []))


def _decimal(data, starts, present, groups, target: pa.DataType) -> pa.Array:
    """DECIMAL as decimal128 (MySQL's binary form: groups of up to 9 digits, the sign bit flipped, negative values
    stored bit-inverted): up to 18 digits from the unscaled integer, wider ones through their text."""
    size = sum(g for g, _ in groups)
    raw = spans.gather(data, starts, size).copy()
    raw[:, 0] ^= 0x80
    negative = (raw[:, 0] & 0x80) != 0
    raw[negative] ^= 0xFF
    values, at = [], 0
    for width, _ in groups:  # each group's digits, as an integer
        wide = np.zeros((len(starts), 8), np.uint8)
        wide[:, 8 - width:] = raw[:, at:at + width]
        values.append(wide.view(">i8")[:, 0])
        at += width
    if target.precision <= 18:  # the unscaled integer fits 64 bits
        digits = np.zeros(len(starts), np.int64)
        for value, (_, base) in zip(values, groups):
            digits = digits * base + value
        return unscaled_decimal(pa.array(np.where(negative, -digits, digits), mask=~present), target)
    # wider: the digits as fixed-width text ("-" or "0", integral digits, ".", scale digits), parsed by Arrow
    text = [np.where(negative, ord("-"), ord("0")).astype(np.uint8)[:, None]]
    text += [spans.decimal_digits(np.where(present, value, 0), len(str(base)) - 1)  # a NULL's bytes are anything
             for value, (_, base) in zip(values, groups)]
    text = np.concatenate(text, axis=1)
    if target.scale:
        cut = text.shape[1] - target.scale
        text = np.concatenate([text[:, :cut], np.full((len(starts), 1), ord("."), np.uint8), text[:, cut:]], axis=1)
    width = text.shape[1]
    strings = pa.Array.from_buffers(pa.string(), len(starts), [
        pa.py_buffer(np.packbits(present, bitorder="little")),
        pa.py_buffer((np.arange(len(starts) + 1, dtype=np.int64) * width).astype(np.int32)),
        pa.py_buffer(np.ascontiguousarray(text).tobytes())], null_count=len(starts) - int(np.count_nonzero(present)))
    return strings.cast(target)


def _enum(index: np.ndarray, present: np.ndarray, names: pa.Array) -> pa.Array:
    if np.any(present & (index >= len(names))):
        raise Uncommon  # the per-row decoder fails on it
    return names.take(pa.array(np.where(present, index, 0), mask=~present))


def _bytes(data, starts, lengths, present) -> pa.Array:
    values = spans.binary(data, starts, lengths, present)
    if values is None:
        raise Uncommon
    return values


def _text(data, starts, lengths, present, charset: str) -> pa.Array:
    raw = _bytes(data, starts, lengths, present)
    if charset == "latin1":
        return _latin1(raw)
    if charset == "ascii" and np.any(np.frombuffer(raw.buffers()[2] or b"", np.uint8) >= 0x80):
        raise Uncommon  # Python's ascii codec refuses it: the per-row decoder words the error
    return raw.cast(pa.string())


def _latin1_table() -> tuple[np.ndarray, np.ndarray]:
    """Per byte of MySQL's latin1 (cp1252, its five undefined bytes as C1 controls: ``rows._text_expression``) its
    UTF-8 length and bytes."""
    lengths, codes = np.zeros(256, np.int64), np.zeros((256, 3), np.uint8)
    for i in range(256):
        char = bytes([i]).decode("cp1252") if i not in b"\x81\x8d\x8f\x90\x9d" else chr(i)
        encoded = char.encode("utf-8")
        lengths[i], codes[i, :len(encoded)] = len(encoded), list(encoded)
    return lengths, codes


_LATIN1_LENGTHS, _LATIN1_CODES = _latin1_table()


def _latin1(raw: pa.Array) -> pa.Array:
    """latin1 bytes as UTF-8 text, byte by byte through the table, for all values at once."""
    n = len(raw)
    offsets = np.frombuffer(raw.buffers()[1], np.int32, n + 1, raw.offset * 4).astype(np.int64)
    data = np.frombuffer(raw.buffers()[2] or b"", np.uint8)[offsets[0]:offsets[-1]]
    offsets -= offsets[0]
    lengths = _LATIN1_LENGTHS[data]
    ends = np.zeros(len(data) + 1, np.int64)
    np.cumsum(lengths, out=ends[1:])
    new_offsets = ends[offsets]
    if new_offsets[-1] >= 1 << 31:
        raise Uncommon
    text = _LATIN1_CODES[data][np.arange(3) < lengths[:, None]]
    return pa.Array.from_buffers(pa.string(), n, [raw.buffers()[0], pa.py_buffer(new_offsets.astype(np.int32)),
                                                  pa.py_buffer(text.tobytes())], null_count=raw.null_count,
                                 offset=0)
