"""Chunk math: half-open primary-key ranges ``[lo, hi)`` that cover the key space exactly once.

Boundaries are key tuples chosen and compared by the database; here they are only carried
around, serialised, and located by *sort keys* (values whose Python order is the database's
order, see ``DataSourceDialect.sort_keys``).
"""
from __future__ import annotations

import base64
import bisect
import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Sequence

Key = tuple


@dataclass(frozen=True)
class ChunkRange:
    """Chunk ``id`` holds keys k with ``lo <= k < hi``; ``None`` is unbounded on that side."""

    id: int
    lo: Key | None
    hi: Key | None

    def to_dict(self) -> dict:
        return {"id": self.id, "lo": encode_key(self.lo), "hi": encode_key(self.hi)}

    @classmethod
    def from_dict(cls, data: dict) -> "ChunkRange":
        return cls(int(data["id"]), decode_key(data["lo"]), decode_key(data["hi"]))

    def describe(self) -> str:
        show = lambda k: "∞" if k is None else ",".join(map(str, k))  # noqa: E731
        return f"[{show(self.lo) if self.lo is not None else '-∞'}, {show(self.hi)})"


def chunks_from_boundaries(boundaries: Sequence[Key]) -> list[ChunkRange]:
    """n strictly increasing boundaries give n+1 chunks, the first and last open."""
    edges: list[Key | None] = [None, *boundaries, None]
    return [ChunkRange(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def even_boundaries(lo: int, hi: int, step: int) -> list[Key]:
    """Boundaries ``lo+step, lo+2*step, ...`` strictly inside ``(lo, hi]`` for an evenly spread key."""
    if step <= 0:
        raise ValueError("step must be positive")
    return [(b,) for b in range(lo + step, hi + 1, step)]


def distribution_factor(lo: int, hi: int, row_count: int) -> float:
    """Flink CDC's measure of how dense a numeric key is: 1.0 means no gaps."""
    return (hi - lo + 1) / max(row_count, 1)


def even_step(lo: int, hi: int, row_count: int, chunk_size: int,
              factor_lower: float = 0.05, factor_upper: float = 100.0) -> int | None:
    """The key step for an even split, or None when the key is too sparse or too dense for one."""
    factor = distribution_factor(lo, hi, row_count)
    if not factor_lower <= factor <= factor_upper:
        return None
    return max(1, int(chunk_size * factor))


def batches(chunk_ids: Sequence[int], batch_size: int) -> list[list[int]]:
    """Consecutive groups of ``batch_size`` chunks: one Spark application (mapped task) each."""
    if batch_size <= 0:
        raise ValueError("batch size must be positive")
    return [list(chunk_ids[i:i + batch_size]) for i in range(0, len(chunk_ids), batch_size)]


def locate(sort_key: Sequence, boundary_sort_keys: Sequence[Sequence]) -> int:
    """Index of the chunk whose range holds ``sort_key`` (boundaries as database sort keys)."""
    return bisect.bisect_right(boundary_sort_keys, tuple(sort_key))


# JSON form of key values: plain JSON where it is exact, tagged otherwise.
def encode_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str, float)):
        return value
    if isinstance(value, Decimal):
        return {"$dec": str(value)}
    if isinstance(value, dt.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$td": value.total_seconds()}
    if isinstance(value, (bytes, bytearray)):
        return {"$b64": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"cannot encode key value of type {type(value).__name__}")


def decode_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    (tag, text), = value.items()
    return {
        "$dec": Decimal,
        "$dt": dt.datetime.fromisoformat,
        "$date": dt.date.fromisoformat,
        "$td": lambda s: dt.timedelta(seconds=s),
        "$b64": base64.b64decode,
    }[tag](text)


def encode_key(key: Key | None) -> list | None:
    return None if key is None else [encode_value(v) for v in key]


def decode_key(data: list | None) -> Key | None:
    return None if data is None else tuple(decode_value(v) for v in data)
