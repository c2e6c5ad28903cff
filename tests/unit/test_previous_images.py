"""``LakeTables.previous_images``: a key's latest image before a position, what a value the source did not send
is taken from (``readers.unchanged_values``). Compared with the truth of random histories on a real delta-rs
lake: changes committed with and without updating ``current`` (a merge interval leaves it behind the
changelog), and a chunk read again at a later position than the asked one (``current``'s row is then newer)."""
from __future__ import annotations

import random
import struct

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.exact import exact_key
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.lake import event_rows, snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables

SOURCE = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.int64()), pa.field("s", pa.string())])
CHUNKS = {0: (0, 20), 1: (20, 40)}


def _pos(offset: int) -> SourcePosition:
    return SourcePosition.at("mysql-bin.000001", offset)


def _rows(state: dict[int, dict], chunk: int) -> pa.Table:
    lo, hi = CHUNKS[chunk]
    keys = [k for k in sorted(state) if lo <= k < hi]
    return pa.table({"id": pa.array(keys, pa.int64()), "v": pa.array([state[k]["v"] for k in keys], pa.int64()),
                     "s": pa.array([state[k]["s"] for k in keys])}, schema=SOURCE)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), batches=st.integers(1, 4), reread=st.sampled_from([None, 0, 1]))
def test_the_image_before_a_position_is_the_truths(tmp_path_factory, seed, batches, reread):
    rnd = random.Random(seed)
    lake = LakeTables(str(tmp_path_factory.mktemp("lake")), "db.t", SOURCE, ["id"])
    state = {k: {"id": k, "v": k, "s": f"r{k}"} for k in range(40) if k % 7}
    for chunk in CHUNKS:
        hw = _pos(10 + chunk)
        lake.commit_chunk(chunk, hw, snapshot_rows(_rows(state, chunk), hw.as_snapshot().encode(), chunk, 0, SOURCE))
    offset = 100
    for _ in range(batches):
        events, chunks = [], []
        for _ in range(rnd.randint(1, 30)):
            key = rnd.randint(0, 39)
            if key in state and rnd.random() < 0.2:
                events.append(ChangeEvent("db.t", "d", _pos(offset), (key,), None, dict(state.pop(key))))
            else:
                image = {"id": key, "v": offset, "s": f"s{offset}"}
                op = "u" if key in state else "c"
                events.append(ChangeEvent("db.t", op, _pos(offset), (key,), image, state.get(key)))
                state[key] = image
            chunks.append(0 if key < 20 else 1)
            offset += 1
        lake.commit_stream(event_rows(events, chunks, SOURCE), _pos(offset), update_current=rnd.random() < 0.5)
        offset += 1
    asked = _pos(offset + 5).encode()  # after every committed change
    if reread is not None:  # a re-read at a later position than the asked one is in ``current``
        hw = _pos(offset + 10)
        lake.commit_chunk(reread, hw, snapshot_rows(_rows(state, reread), hw.as_snapshot().encode(), reread, 0,
                                                    SOURCE))
    wanted = {(k,): (asked, 0 if k < 20 else 1) for k in range(40)}
    found = lake.previous_images(wanted)
    assert sorted(found) == sorted((k,) for k in state)
    for (key,), image in found.items():
        assert (image["id"], image["v"], image["s"]) == (key, state[key]["v"], state[key]["s"]), key


def test_a_float_key_is_found_by_its_bits(tmp_path):
    """Keys are asked and found by their ``exact_key``: a NaN key finds its image (NaN equals no float, and the
    files' statistics leave NaN out), another NaN payload is another key, and -0.0 is not 0.0, in ``current`` and
    in the changelog it is behind. Before, a NaN key had no earlier image (a false stop of the tail)."""
    source = pa.schema([pa.field("k", pa.float64(), False), pa.field("v", pa.int64())])
    lake = LakeTables(str(tmp_path), "db.f", source, ["k"])
    nan, other_nan = float("nan"), struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    for chunk, keys in enumerate([[1.0, nan, 2.5], [other_nan], [-0.0]]):  # a NaN among other keys, a NaN alone
        hw = _pos(10 + chunk)
        rows = pa.table({"k": pa.array(keys, pa.float64()), "v": pa.array([chunk] * len(keys))}, schema=source)
        lake.commit_chunk(chunk, hw, snapshot_rows(rows, hw.as_snapshot().encode(), chunk, 0, source))
    update = ChangeEvent("db.f", "u", _pos(100), (nan,), {"k": nan, "v": 7}, {"k": nan, "v": 0})
    lake.commit_stream(event_rows([update], [0], source), _pos(101), update_current=False)
    asked = _pos(200).encode()
    found = lake.previous_images({exact_key((float("nan"),)): (asked, 0), exact_key((other_nan,)): (asked, 1),
                                  exact_key((-0.0,)): (asked, 2)})
    assert {k: (image["_chunk"], image["v"]) for k, image in found.items()} == {
        exact_key((nan,)): (0, 7), exact_key((other_nan,)): (1, 1), exact_key((-0.0,)): (2, 2)}
    assert lake.previous_images({exact_key((0.0,)): (asked, 2)}) == {}
