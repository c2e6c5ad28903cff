"""``lake_merge.latest_per_key`` tells float keys apart by their stored bits, as the merge's hash join does: -0.0
and 0.0 are two keys and a NaN is one key with itself (another NaN payload is another key). Grouped by equality,
a key change from -0.0 to 0.0 (a delete of -0.0, an insert of 0.0) lost its delete and left both in ``current``."""
from __future__ import annotations

import struct

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.store.lake_merge import distinct_versions, latest_per_key

WIDTH = {"float64": ("<d", "<Q", pa.float64()), "float32": ("<f", "<I", pa.float32())}
BITS = {"float64": [0x0, 0x8000000000000000, 0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000042,
                    0x3FF8000000000000, 0x7FF0000000000000],  # 0, -0, three NaNs, 1.5, inf
        "float32": [0x0, 0x80000000, 0x7FC00000, 0xFFC00000, 0x7FC00001, 0x3FC00000, 0x7F800000]}  # quiet NaNs


def floats(width: str) -> list[float]:
    """New float objects from bit patterns: a float32 quiet NaN survives the round trip through a double."""
    value, word, _ = WIDTH[width]
    return [struct.unpack(value, struct.pack(word, b))[0] for b in BITS[width]] + [None]


def stored(value, width: str):
    """The plain reference's key part: a float's bytes (a null is one key, as latest_per_key groups nulls)."""
    return None if value is None else struct.pack(WIDTH[width][0], value)


@st.composite
def changes(draw):
    """Rows of a changelog window: a float key (alone or with an int), each row at a distinct ``_pos`` in random
    order, ops insert/update/delete."""
    width, composite = draw(st.sampled_from(sorted(WIDTH))), draw(st.booleans())
    pool = floats(width)
    n = draw(st.integers(1, 40))
    ks = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    ids = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    positions = draw(st.permutations(range(n)))
    ops = draw(st.lists(st.sampled_from("cud"), min_size=n, max_size=n))
    columns = {"k": pa.array(ks, WIDTH[width][2]), "_pos": pa.array([f"{p:08d}" for p in positions]),
               "_op": pa.array(ops)}
    if composite:
        columns["id"] = pa.array(ids, pa.int64())
    return pa.table(columns), width, ["k", "id"] if composite else ["k"]


def reference(rows: pa.Table, width: str, keys: list[str]) -> set:
    """Per key (floats by struct.pack bits) the greatest ``_pos``, in plain Python."""
    latest: dict = {}
    for r in rows.to_pylist():
        key = tuple(stored(r[k], width) if k == "k" else r[k] for k in keys)
        if key not in latest or r["_pos"] > latest[key]["_pos"]:
            latest[key] = r
    return {(*key, r["_pos"], r["_op"]) for key, r in latest.items()}


def found(rows: pa.Table, width: str, keys: list[str]) -> list:
    return [(*(stored(r[k], width) if k == "k" else r[k] for k in keys), r["_pos"], r["_op"]) for r in rows.to_pylist()]


@settings(max_examples=300, deadline=None)
@given(changes())
def test_latest_per_key_groups_float_keys_by_their_bits(case):
    """One row per stored key, the one with the greatest ``_pos``: what a Python dict keyed by the bytes says."""
    rows, width, keys = case
    have = found(latest_per_key(rows, keys), width, keys)
    assert len(have) == len(set(have)) and set(have) == reference(rows, width, keys)


@settings(max_examples=100, deadline=None)
@given(changes())
def test_distinct_versions_keeps_each_float_key_version_once(case):
    """A row version found twice (live by two keys) is kept once, and -0.0's version apart from 0.0's."""
    rows, width, keys = case
    twice = pa.concat_tables([rows, rows])
    want = {(*(stored(r[k], width) if k == "k" else r[k] for k in keys), r["_pos"], r["_op"])
            for r in rows.to_pylist()}
    have = found(distinct_versions(twice, set(keys)), width, keys)
    assert sorted(have, key=repr) == sorted(want, key=repr)


def test_a_key_change_from_negative_zero_to_zero_keeps_the_delete():
    """The case named: the delete of -0.0 and the insert of 0.0 are the latest of two keys."""
    rows = pa.table({"k": pa.array([-0.0, 0.0, -0.0], pa.float64()), "_pos": ["1", "3", "2"], "_op": ["c", "c", "d"]})
    have = latest_per_key(rows, ["k"]).to_pylist()
    assert sorted((repr(r["k"]), r["_op"]) for r in have) == [("-0.0", "d"), ("0.0", "c")]
