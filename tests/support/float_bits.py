"""Floats for the checksum's exact float text: random bit patterns with the edges, and the check that a source's
``float_sql`` (each dialect's checksum) gives the lake's ``core.checksums.float_text`` for each of them."""
from __future__ import annotations

import random
import struct
from typing import Callable, Sequence

import pyarrow as pa

from airflow_provider_dblog.core.checksums import float_text


def random_floats(count: int, seed: int) -> list[float]:
    """``count`` doubles from random bit patterns (every exponent, subnormals included), finite, and the edges."""
    rnd = random.Random(seed)
    values = [struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0] for _ in range(count)]
    edges = [5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308, -0.0, 1.0, 2.0,
             0.5, 2.0 ** 53 - 1, 0.1, 1 / 3, 2.0 ** 1023, 1.9999999999999998, 0.9999999999999999]
    return [v for v in values if v == v and abs(v) != float("inf")] + edges


def assert_float_text_is_the_lakes(cur, table: str, float_sql: Callable[[str], str], doubles: Sequence[float],
                                   singles: Sequence[float]) -> None:
    """``table`` (id, d: double, f: single, created by the caller) filled with ``doubles`` and ``singles`` and a
    row of NULLs: the source's text of each value is the lake's, in order."""
    cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s)",
                    [(i, d, f) for i, (d, f) in enumerate(zip(doubles, singles))] + [(len(doubles), None, None)])
    cur.execute(f"SELECT {float_sql('d')}, {float_sql('f')} FROM {table} ORDER BY id")
    source = cur.fetchall()
    assert [r[0] for r in source] == float_text(pa.array([*doubles, None], pa.float64())).to_pylist()
    assert [r[1] for r in source] == float_text(pa.array([*singles, None], pa.float32())).to_pylist()
