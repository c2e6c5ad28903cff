"""Chunk planning by key, the same for every source; each dialect answers four questions in its own SQL.

* A unique integer leading key column whose values are dense enough (Flink CDC's distribution factor):
  boundaries evenly spaced by value from the leading column's min and max (composite keys: the first whole
  key at or after each spaced leading value, one index probe each).
* Any other key (text under any collation, composite keys, a ``--chunk-key``): a walk along the key's order
  as the database sorts it, each step the key ``n`` rows after the previous boundary (an index scan of one
  chunk's keys), so every chunk holds ``chunk_size`` rows (the last fewer).
"""
from __future__ import annotations

from typing import Protocol

from airflow_provider_dblog.core.chunks import ChunkRange, Key, chunks_from_boundaries, even_boundaries, even_step
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.tables import TableMeta


class KeyQueries(Protocol):
    """What the splitter asks the source about one table's key; the database orders and compares keys."""

    def lead_bounds(self) -> tuple[int | None, int | None]:
        """The smallest and largest value of the key's leading (integer) column; (None, None): no rows."""

    def approximate_rows(self) -> int:
        """The table's row count, estimated where an exact count is costly."""

    def first_key_at_or_after(self, lead: int) -> Key:
        """The first whole key whose leading value is at least ``lead`` (one exists: ``lead`` <= the max)."""

    def key_after(self, previous: Key | None, rows: int) -> Key | None:
        """The key ``rows`` rows past ``previous`` in key order (0: the next one; ``previous`` None: counted
        from the first key, 0-based); None past the last row."""


def split_by_key(queries: KeyQueries, meta: TableMeta, chunk_size: int, integer_lead: bool,
                 factor_bounds: tuple[float, float] = (0.05, 100.0)) -> list[ChunkRange]:
    """The table's chunks of about ``chunk_size`` rows; ``integer_lead``: the key's first column is an integer."""
    if chunk_size <= 0:
        raise DblogError("--chunk-size must be a positive number of rows")
    if integer_lead and meta.key_unique:
        lo, hi = queries.lead_bounds()
        if lo is None:
            return chunks_from_boundaries([])
        step = even_step(int(lo), int(hi), queries.approximate_rows(), chunk_size, *factor_bounds)
        if step is not None:
            leads = even_boundaries(int(lo), int(hi), step)
            if len(meta.key_columns) == 1:
                return chunks_from_boundaries(leads)
            firsts = [tuple(queries.first_key_at_or_after(int(v))) for (v,) in leads]
            return chunks_from_boundaries(list(dict.fromkeys(firsts)))
    boundaries: list[Key] = []
    key = queries.key_after(None, chunk_size)
    while key is not None:
        boundaries.append(tuple(key))
        key = queries.key_after(boundaries[-1], chunk_size - 1)
    return chunks_from_boundaries(boundaries)
