"""``key_ranges.nearest_below``: the file a new key goes to, found for all keys at once, is the one a search
key by key (``bisect`` over the files' lower bounds) finds."""
from __future__ import annotations

import bisect

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.store.key_ranges import RangeFile, nearest_below


def _one_by_one(lows: list, keys: list) -> list[int]:
    ordered = sorted((lo, i) for i, lo in enumerate(lows) if lo is not None)
    if not ordered:
        return [0] * len(keys)
    bounds = [lo for lo, _ in ordered]
    return [ordered[max(bisect.bisect_right(bounds, k) - 1, 0)][1] for k in keys]


def _files(lows: list) -> list[RangeFile]:
    return [RangeFile(f"f{i}", 1, 0, 1, (lo,), (None,)) for i, lo in enumerate(lows)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), max_size=8, unique=True),
       st.lists(st.integers(-2**63, 2**63 - 1), max_size=40))
def test_integer_keys(lows, keys):
    table = pa.table({"id": pa.array(keys, pa.int64())})
    assert nearest_below(_files(lows), table, ["id"]).tolist() == _one_by_one(lows, keys)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=4)), max_size=8, unique=True),
       st.lists(st.text(max_size=4), max_size=40))
def test_text_keys_in_code_point_order(lows, keys):
    table = pa.table({"k": pa.array(keys, pa.string())})
    assert nearest_below(_files(lows), table, ["k"]).tolist() == _one_by_one(lows, keys)


def test_no_bounds_or_no_bounded_column_give_the_first_file():
    table = pa.table({"id": pa.array([5, 1], pa.int64())})
    assert nearest_below(_files([None, None]), table, ["id"]).tolist() == [0, 0]
    assert nearest_below(_files([3, 1]), table, []).tolist() == [0, 0]
    assert nearest_below(_files([30, 10, 20]), table.slice(0, 0), ["id"]).tolist() == []

