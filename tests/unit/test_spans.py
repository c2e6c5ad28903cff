"""``spans.binary``: the values at byte spans of one buffer, as one Arrow binary array. Long values whose spans
follow each other (a column's values, row after row) are copied out by Arrow's ``take``; any others through an
index per byte: the same array either way, nulls where a value is missing whatever its span says."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.source import spans


def _expected(data: bytes, starts, lengths, valid) -> pa.Array:
    return pa.array([data[s:s + n] if v else None for s, n, v in zip(starts, lengths, valid)], pa.binary())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9), st.booleans(), st.integers(0, 50)), max_size=30),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_binary_is_the_bytes_of_each_span(rows, shuffled, seed):
    """Spans with gaps between them, some missing (with any start: a decoder's missing value points anywhere),
    in order or shuffled."""
    starts, lengths, valid, at = [], [], [], 0
    for gap, length, present, garbage in rows:
        at += gap
        starts.append(at if present else garbage)
        lengths.append(length)
        valid.append(present)
        at += length if present else 0
    if shuffled:
        order = np.random.default_rng(seed).permutation(len(rows))
        starts, lengths, valid = ([x[i] for i in order] for x in (starts, lengths, valid))
    raw = bytes(np.random.default_rng(seed).integers(0, 256, at + 60, dtype=np.uint8))
    data = np.frombuffer(raw + bytes(spans.PAD), np.uint8)
    starts, lengths, valid = np.array(starts, np.int64), np.array(lengths, np.int64), np.array(valid, bool)
    expected = _expected(raw, starts.tolist(), lengths.tolist(), valid.tolist())
    assert spans.binary(data, starts, lengths, valid).equals(expected)
    lengths = np.where(valid, lengths, 0)
    assert spans._gathered(data, starts, lengths, valid).equals(expected)
    taken = spans._spans_in_order(data, starts, lengths, valid)
    assert (taken is not None) == (len(starts) > 0 and bool(np.all(np.diff(starts[valid]) >= 0)))
    assert taken is None or taken.equals(expected)


def test_spans_in_order_are_taken_and_others_gathered():
    data = np.frombuffer(b"abcdefgh" + bytes(spans.PAD), np.uint8)
    starts, lengths, valid = np.array([0, 3, 6]), np.array([2, 2, 2]), np.array([True, False, True])
    assert spans._spans_in_order(data, starts, lengths * valid, valid).to_pylist() == [b"ab", None, b"gh"]
    assert spans._spans_in_order(data, starts[::-1], lengths, np.ones(3, bool)) is None  # out of order
    assert spans._spans_in_order(data, np.array([0, 1]), np.array([3, 3]), np.ones(2, bool)) is None  # overlapping
    assert spans.binary(data, starts[::-1], lengths, np.ones(3, bool)).to_pylist() == [b"gh", b"de", b"ab"]


@given(st.lists(st.integers(0, 99_999_999), max_size=300), st.integers(8, 12))
def test_decimal_digits_are_each_values_zero_padded_text(values, digits):
    out = spans.decimal_digits(np.array(values, np.int64), digits)
    assert out.shape == (len(values), digits)
    assert [bytes(row).decode() for row in out] == [f"{v:0{digits}d}" for v in values]


@pytest.mark.parametrize("value", [-1, 10 ** 8, 2 ** 62])
def test_a_value_with_more_digits_is_refused_not_wrapped(value):
    with pytest.raises(ValueError):
        spans.decimal_digits(np.array([0, value, 5], np.int64), 8)
