"""Values the source did not send (PostgreSQL's unchanged TOASTed values under REPLICA IDENTITY DEFAULT) are
taken from the key's previous image: an earlier row of the range, else the lake's image before the change
(here an in-memory stand-in for ``LakeTables.previous_images``, whose real reads are tested in
tests/integration/test_postgres_stream.py). Random histories of inserts, updates, deletes and key changes are
compared with the truth row by row; a value found nowhere stops in one line."""
from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import row_change
from airflow_provider_dblog.core.exact import exact_key
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.readers.unchanged_values import carry_unchanged, fill_unchanged
from airflow_provider_dblog.store.lake import UNCHANGED, event_rows

SOURCE = pa.schema([pa.field("id", pa.int64()), pa.field("body", pa.string()), pa.field("n", pa.int64())])
KEYS = ("id",)


def history(seed: int, steps: int, lake: dict[int, dict]):
    """Events of a random history over keys 1..6 starting from ``lake``; each event's true after image."""
    rnd = random.Random(seed)
    live = {k: dict(v) for k, v in lake.items()}
    events, truth = [], []
    for i in range(steps):
        pos = SourcePosition(1, 1000 + i, 0, "log.000001")
        key = rnd.randint(1, 6)
        if key not in live:
            row = {"id": key, "body": f"b{i}", "n": i}
            new = row_change("t", pos, KEYS, None, row)
            live[key] = row
        elif rnd.random() < 0.15:
            new = row_change("t", pos, KEYS, dict(live.pop(key)), None)
        else:
            old = live.pop(key)
            target = key
            if rnd.random() < 0.25:  # a key change (to a free key)
                free = [k for k in range(1, 7) if k not in live and k != key]
                target = rnd.choice(free) if free else key
            row = {"id": target, "body": old["body"], "n": i}
            toasted = True
            if rnd.random() < 0.3:
                row["body"], toasted = f"b{i}", False
            sent = dict(row)
            unchanged = ()
            if toasted and rnd.random() < 0.8:
                sent["body"], unchanged = None, ("body",)
            new = row_change("t", pos, KEYS, {"id": key}, sent, 0, unchanged)
            live[target] = row
        for event in new:
            events.append(event)
            truth.append(None if event.op == "d" else live[event.key[0]])
    return events, truth


def lake_lookup(lake: dict[int, dict], asked: list):
    def previous_images(wanted):
        asked.append(dict(wanted))
        return {k: dict(lake[k[0]]) for k in wanted if k[0] in lake}
    return previous_images


def parts_of(events, cuts: list[int]) -> list[pa.Table]:
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(events))), len(events)]
    return [event_rows(events[a:b], [0] * (b - a), SOURCE) for a, b in zip(bounds, bounds[1:]) if b > a]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 40), st.lists(st.integers(0, 40), max_size=3),
       st.sets(st.integers(1, 6)))
def test_every_missing_value_is_the_keys_previous_value(seed, steps, cuts, in_lake):
    lake = {k: {"id": k, "body": f"lake{k}", "n": -k} for k in in_lake}
    events, truth = history(seed, steps, lake)
    parts = parts_of(events, cuts)
    asked = []
    try:
        filled = fill_unchanged("t", parts, KEYS, lake_lookup(lake, asked))
    except DblogError as exc:  # only when a key had no image anywhere: impossible from this lake
        pytest.fail(f"refused a value the lake holds: {exc}")
    rows = [r for t in filled for r in t.to_pylist()]
    assert all(UNCHANGED not in t.schema.names for t in filled)
    assert [r["_pos"] for r in rows] == [e.pos.encode() for e in events]
    for row, want, event in zip(rows, truth, events):
        if want is not None:
            assert (row["id"], row["body"], row["n"]) == (want["id"], want["body"], want["n"]), (event, row)
    for wanted in asked:  # the lake is asked only for keys with no earlier image in the range, before the change
        assert all(isinstance(pos, str) for pos, _ in wanted.values())


def test_the_lake_is_asked_once_per_key_and_only_when_the_range_has_no_earlier_image():
    pos = [SourcePosition(1, 100 + i, 0, "f") for i in range(4)]
    events = [*row_change("t", pos[0], KEYS, {"id": 1}, {"id": 1, "body": None, "n": 1}, 0, ("body",)),
              *row_change("t", pos[1], KEYS, {"id": 1}, {"id": 1, "body": None, "n": 2}, 0, ("body",)),
              *row_change("t", pos[2], KEYS, None, {"id": 2, "body": "two", "n": 0}),
              *row_change("t", pos[3], KEYS, {"id": 2}, {"id": 2, "body": None, "n": 3}, 0, ("body",))]
    asked = []
    filled = fill_unchanged("t", parts_of(events, []), KEYS,
                            lake_lookup({1: {"id": 1, "body": "one", "n": 0}}, asked))
    assert [r["body"] for r in filled[0].to_pylist()] == ["one", "one", "two", "two"]
    assert asked == [{(1,): (events[0].pos.encode(), 0)}]


def test_a_key_change_takes_its_values_from_the_old_key():
    pos = SourcePosition(1, 100, 3, "f")
    events = row_change("t", pos, KEYS, {"id": 1}, {"id": 9, "body": None, "n": 5}, 0, ("body",))
    assert [e.op for e in events] == ["d", "c"] and events[1].unchanged == ("body",)
    asked = []
    filled = fill_unchanged("t", parts_of(events, []), KEYS, lake_lookup({1: {"id": 1, "body": "old", "n": 0}}, asked))
    assert filled[0].to_pylist()[1]["body"] == "old"
    assert list(asked[0]) == [(1,)]


def test_a_value_found_nowhere_stops_in_one_line_naming_the_fix():
    events = row_change("t", SourcePosition(1, 100, 0, "f"), KEYS, {"id": 4}, {"id": 4, "body": None, "n": 1}, 0,
                        ("body",))
    with pytest.raises(DblogError) as exc:
        fill_unchanged("public.t", parts_of(events, []), KEYS, lake_lookup({}, []))
    line = str(exc.value)
    assert "\n" not in line and "left body unchanged" in line and "REPLICA IDENTITY FULL" in line, line
    assert "key (4,)" in line


def test_rows_without_missing_values_pass_untouched():
    events = row_change("t", SourcePosition(1, 100, 0, "f"), KEYS, None, {"id": 1, "body": "x", "n": 1})
    part = event_rows(events, [0], SOURCE)
    assert UNCHANGED not in part.schema.names
    assert fill_unchanged("t", [part], KEYS, lake_lookup({}, [])) == [part]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 40), st.sets(st.integers(1, 6)))
def test_events_carry_missing_values_from_earlier_events_and_name_the_rest(seed, steps, in_lake):
    """``carry_unchanged`` (verify's in-memory view): a missing value comes from an earlier event of the key (a key
    change's insert: the old key's); one no earlier event holds stays missing, naming the key whose lake row
    holds it, and taking that row's value gives the truth."""
    lake = {k: {"id": k, "body": f"lake{k}", "n": -k} for k in in_lake}
    events, truth = history(seed, steps, lake)
    for (event, source), want in zip(carry_unchanged(events), truth):
        if want is None:
            continue
        after = dict(event.after)
        if event.unchanged:
            assert source[0] in lake, (event, source)
            after.update({c: lake[source[0]][c] for c in event.unchanged})
        assert (after["id"], after["body"], after["n"]) == (want["id"], want["body"], want["n"]), event


@pytest.mark.parametrize("key", [float("nan"), -0.0])
def test_a_float_key_is_found_by_its_bits(key):
    """A NaN key equals no float (itself included) and -0.0 equals 0.0, but each is one key of the lake: the
    lake's image (a new float object) and the range's are found for it, and 0.0's are not -0.0's."""
    schema = pa.schema([pa.field("k", pa.float64()), pa.field("body", pa.string()), pa.field("n", pa.int64())])
    fresh = lambda: struct.unpack(">d", struct.pack(">d", key))[0]  # noqa: E731  (never the same object)

    def update(i: int, k: float, body: str | None = None):
        same = fresh() if k is key else k  # one object for the old and new key: not a key change
        return row_change("t", SourcePosition(1, 100 + i, 0, "f"), ("k",), {"k": same},
                          {"k": same, "body": body, "n": i}, 0, () if body else ("body",))[0]
    events = [update(0, key), update(1, key), update(2, 0.5)]
    asked = []

    def previous_images(wanted):
        asked.append(wanted)
        return {exact_key((fresh(),)): {"k": fresh(), "body": "lake", "n": 0},
                exact_key((0.5,)): {"k": 0.5, "body": "half", "n": 0}}
    filled = fill_unchanged("t", [event_rows(events, [0] * 3, schema)], ("k",), previous_images)
    assert [r["body"] for r in filled[0].to_pylist()] == ["lake", "lake", "half"]
    assert len(asked) == 1 and len(asked[0]) == 2  # the second change's value is the first's
    carried = [(e.after["body"], e.unchanged) for e, _ in carry_unchanged([update(0, key, "first"), *events[1:]])]
    assert carried == [("first", ()), ("first", ()), (None, ("body",))]
    if key == 0.0:  # -0.0: 0.0's image is not its image
        with pytest.raises(DblogError, match="holds no earlier image"):
            fill_unchanged("t", [event_rows(events[:1], [0], schema)], ("k",),
                           lambda wanted: {exact_key((0.0,)): {"k": 0.0, "body": "zero", "n": 0}})
