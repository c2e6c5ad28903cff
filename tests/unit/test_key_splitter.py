"""``source.key_splitter`` on an in-memory table (``SortedKeysInMemory``: a fake of the four questions a
dialect answers; the real ones are exercised on MariaDB and PostgreSQL by tests/integration/test_planner.py
and test_postgres_snapshot.py): every key lands in exactly one chunk, whichever path the split takes."""
from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.key_splitter import split_by_key


class SortedKeysInMemory:
    """The answers of ``KeyQueries`` for a sorted list of distinct keys (tuples), counting the questions."""

    def __init__(self, keys: list[tuple]):
        self.keys = sorted(keys)
        self.asked = 0

    def lead_bounds(self):
        return (self.keys[0][0], self.keys[-1][0]) if self.keys else (None, None)

    def approximate_rows(self) -> int:
        return len(self.keys)

    def first_key_at_or_after(self, lead: int):
        self.asked += 1
        return self.keys[bisect.bisect_left(self.keys, (lead,))]

    def key_after(self, previous, rows: int):
        self.asked += 1
        at = 0 if previous is None else bisect.bisect_right(self.keys, tuple(previous))
        return self.keys[at + rows] if at + rows < len(self.keys) else None


def _meta(width: int, source: str = "primary") -> TableMeta:
    columns = tuple(Column(f"k{i}", "int", "int", nullable=False) for i in range(width))
    return TableMeta("db", "t", columns, tuple(c.name for c in columns), source)


def _holders(chunks, key) -> list[int]:
    return [c.id for c in chunks if (c.lo is None or c.lo <= key) and (c.hi is None or key < c.hi)]


keys_1 = st.lists(st.integers(-10_000, 10_000), unique=True, max_size=300).map(lambda ks: [(k,) for k in ks])
keys_2 = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), unique=True, max_size=300)


@settings(max_examples=200, deadline=None)
@given(keys=st.one_of(keys_1, keys_2), chunk_size=st.integers(1, 40), integer_lead=st.booleans(),
       chunk_key=st.booleans())
def test_every_key_is_in_exactly_one_chunk(keys, chunk_size, integer_lead, chunk_key):
    table = SortedKeysInMemory(keys)
    meta = _meta(len(keys[0]) if keys else 1, "chunk_key" if chunk_key else "primary")
    chunks = split_by_key(table, meta, chunk_size, integer_lead)
    assert [c.id for c in chunks] == list(range(len(chunks)))
    assert chunks[0].lo is None and chunks[-1].hi is None
    assert all(a.hi == b.lo for a, b in zip(chunks, chunks[1:]))  # contiguous
    assert all(c.lo < c.hi for c in chunks if c.lo is not None and c.hi is not None)  # strictly increasing
    for key in table.keys:
        assert len(_holders(chunks, key)) == 1, (key, chunks)


@settings(max_examples=100, deadline=None)
@given(keys=st.one_of(keys_1, keys_2), chunk_size=st.integers(1, 40))
def test_a_walk_gives_chunks_of_exactly_chunk_size_rows(keys, chunk_size):
    """Not an integer lead (or a sparse one): every chunk but the last holds ``chunk_size`` rows."""
    table = SortedKeysInMemory(keys)
    chunks = split_by_key(table, _meta(len(keys[0]) if keys else 1), chunk_size, integer_lead=False)
    sizes = [sum(1 for k in table.keys if _holders(chunks, k) == [c.id]) for c in chunks]
    assert all(s == chunk_size for s in sizes[:-1]) and sizes[-1] <= chunk_size
    assert table.asked == len(chunks)  # one question per boundary, and one past the last


def test_a_dense_integer_key_is_split_by_value_without_reading_keys():
    table = SortedKeysInMemory([(k,) for k in range(1, 1001)])
    chunks = split_by_key(table, _meta(1), 100, integer_lead=True)
    assert [c.hi for c in chunks[:-1]] == [(k,) for k in range(101, 1001, 100)]
    assert table.asked == 0


def test_a_composite_dense_key_probes_once_per_boundary():
    table = SortedKeysInMemory([(o, line) for o in range(1, 201) for line in range(3)])
    chunks = split_by_key(table, _meta(2), 60, integer_lead=True)
    assert [c.hi for c in chunks[:-1]] == [(o, 0) for o in range(21, 201, 20)]
    assert table.asked == len(chunks) - 1


def test_a_bad_chunk_size_is_one_line():
    with pytest.raises(DblogError, match="--chunk-size must be a positive number of rows"):
        split_by_key(SortedKeysInMemory([(1,)]), _meta(1), 0, integer_lead=True)
