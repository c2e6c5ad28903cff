"""The column-by-column value readers of ``source/mysql/block_decoder.py`` against the per-row decoder's own readers
(``rows.py``) on random bytes: dates and datetimes (zero and impossible ones included), DECIMAL, latin1 text and the
span helpers. The real binlog comparison is ``tests/integration/test_mysql_block_decoder.py``."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.source import spans
from airflow_provider_dblog.source.mysql import block_decoder as bd
from airflow_provider_dblog.source.mysql import rows


def _buffer(values: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    starts = np.cumsum([0] + [len(v) for v in values[:-1]]).astype(np.int64)
    return np.frombuffer(b"".join(values) + bytes(spans.PAD), np.uint8), starts


@settings(max_examples=200)
@given(st.lists(st.integers(0, 2 ** 24 - 1), min_size=1, max_size=50))
def test_dates_are_the_per_row_readers(values):
    data, starts = _buffer([v.to_bytes(3, "little") for v in values])
    got = bd._date(spans.little_endian(data, starts, 3), np.ones(len(values), bool)).to_pylist()
    assert got == [rows._date(v) for v in values]


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 2 ** 40 - 1), st.integers(0, 2 ** 24 - 1)), min_size=1, max_size=50),
       st.integers(0, 6))
def test_datetimes_are_the_per_row_readers(values, fsp):
    width = (fsp + 1) // 2
    # fractions the server writes: below 10**6 once read
    cut = [(x, f % (10 ** fsp if fsp else 1) * (10 if fsp % 2 else 1)) for x, f in values]
    raw = [x.to_bytes(5, "big") + (f.to_bytes(width, "big") if width else b"") for x, f in cut]
    data, starts = _buffer(raw)
    size, read = rows._datetime2_reader(fsp)
    got = bd._datetime(data, starts, np.ones(len(raw), bool), fsp).to_pylist()
    assert got == [read(r, 0) for r in raw]


@settings(max_examples=200)
@given(st.data(), st.integers(1, 38))
def test_decimals_are_the_per_row_readers(data, precision):
    scale = data.draw(st.integers(0, precision))
    size, read = rows._decimal_reader(precision, scale, False)
    # random bytes are not always valid DECIMALs: draw values and write them as the server does
    digits = data.draw(st.lists(st.integers(-(10 ** precision - 1), 10 ** precision - 1), min_size=1, max_size=30))
    raw = [_mysql_decimal(v, precision, scale) for v in digits]
    assert all(len(r) == size for r in raw)
    buffer, starts = _buffer(raw)
    target = pa.decimal128(precision, scale)
    got = bd._decimal(buffer, starts, np.ones(len(raw), bool), bd._decimal_groups(precision, scale), target)
    assert got.to_pylist() == [read(r, 0) for r in raw]


def _mysql_decimal(unscaled: int, precision: int, scale: int) -> bytes:
    """MySQL's binary DECIMAL of ``unscaled`` * 10**-scale (strings/decimal.c: decimal2bin)."""
    groups = bd._decimal_groups(precision, scale)
    number, out = abs(unscaled), []
    for width, base in reversed(groups):
        number, part = divmod(number, base)
        out.append(part.to_bytes(width, "big"))
    raw = bytearray(b"".join(reversed(out)))
    if unscaled < 0:
        raw = bytearray(b ^ 0xFF for b in raw)
    raw[0] ^= 0x80
    return bytes(raw)


@given(st.lists(st.none() | st.binary(max_size=20), min_size=1, max_size=30))
def test_latin1_text_is_pythons_cp1252_with_c1_controls(values):
    data, starts = _buffer([v or b"" for v in values])
    lengths = np.array([len(v or b"") for v in values], np.int64)
    present = np.array([v is not None for v in values])
    got = bd._text(data, starts, lengths, present, "latin1").to_pylist()

    def expected(v: bytes) -> str:
        return "".join(bytes([b]).decode("cp1252") if b not in b"\x81\x8d\x8f\x90\x9d" else chr(b) for b in v)
    assert got == [None if v is None else expected(v) for v in values]


@given(st.lists(st.integers(0, 2 ** 64 - 1), min_size=1, max_size=30), st.sampled_from([1, 2, 3, 4, 8]),
       st.booleans())
def test_little_endian_integers(values, width, signed):
    raw = [(v % (1 << 8 * width)).to_bytes(width, "little") for v in values]
    data, starts = _buffer(raw)
    got = spans.little_endian(data, starts, width, signed).tolist()
    assert got == [int.from_bytes(r, "little", signed=signed) for r in raw]


def test_fixed_strings_are_prefix_and_digits():
    got = spans.fixed_strings([b"00000001.000000000004.", b"00000002.000000000123."], np.array([0, 1, 1]),
                              spans.decimal_digits(np.array([0, 2, 40]), 8))
    assert got.to_pylist() == ["00000001.000000000004.00000000", "00000002.000000000123.00000002",
                               "00000002.000000000123.00000040"]
    assert dt.date(1970, 1, 1) + dt.timedelta(days=int(bd._days(np.array([2024]), np.array([2]),
                                                                   np.array([29]))[0][0])) == dt.date(2024, 2, 29)
