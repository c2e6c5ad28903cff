"""Property tests of the pure algorithm: positions, chunk math, the window merge, the emit rule."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.chunks import (
    ChunkRange, batches, chunks_from_boundaries, decode_key, encode_key, even_boundaries, even_step, locate,
)
from airflow_provider_dblog.core.events import row_change
from airflow_provider_dblog.core.window import merge_window
from airflow_provider_dblog.core.offsets import TableOffsets, is_after
from airflow_provider_dblog.core.positions import SNAPSHOT_ROW, SourcePosition

positions = st.builds(SourcePosition, st.integers(1, 999_999), st.integers(4, 10**11), st.integers(0, 10**6))


@given(positions, positions)
def test_encoded_positions_sort_like_positions(a, b):
    assert (a < b) == (a.encode() < b.encode())
    assert SourcePosition.decode(a.encode()) == a


def test_snapshot_position_sits_between_included_and_later_events():
    hw = SourcePosition.at("mysql-bin.000003", 1000)
    assert SourcePosition.at("mysql-bin.000003", 1000, 7) < hw.as_snapshot()  # event ending at HW: included
    assert hw.as_snapshot() < SourcePosition.at("mysql-bin.000003", 1001)     # next event: after
    assert hw.as_snapshot() < SourcePosition.at("mysql-bin.000004", 4)        # rotation keeps the order
    assert hw.as_snapshot().row == SNAPSHOT_ROW


@given(st.lists(st.integers(-10**12, 10**12), unique=True, max_size=30), st.lists(st.integers(-10**12, 10**12)))
def test_chunks_cover_every_key_exactly_once(bounds, keys):
    chunks = chunks_from_boundaries([(b,) for b in sorted(bounds)])
    assert chunks[0].lo is None and chunks[-1].hi is None
    for key in keys:
        holders = [c for c in chunks if (c.lo is None or (key,) >= c.lo) and (c.hi is None or (key,) < c.hi)]
        assert len(holders) == 1
        assert locate((key,), [(b,) for b in sorted(bounds)]) == holders[0].id


@given(st.integers(-10**9, 10**9), st.integers(0, 10**7), st.integers(1, 10**6), st.integers(1, 10**5))
def test_even_split_is_strictly_increasing_inside_the_key_range(lo, width, rows, chunk_size):
    hi = lo + width
    step = even_step(lo, hi, rows, chunk_size)
    if step is None:
        factor = (hi - lo + 1) / rows
        assert factor < 0.05 or factor > 100
        return
    bounds = [b for (b,) in even_boundaries(lo, hi, step)]
    assert bounds == sorted(set(bounds))
    assert all(lo < b <= hi for b in bounds)


@given(st.lists(st.integers(), max_size=50), st.integers(1, 9))
def test_batches_keep_order_and_cover_all(ids, size):
    groups = batches(ids, size)
    assert [i for g in groups for i in g] == ids
    assert all(1 <= len(g) <= size for g in groups)


def test_key_values_round_trip_through_json():
    import datetime as dt
    from decimal import Decimal

    key = (1, "Abc", Decimal("18446744073709551615"), dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.date(2024, 1, 2),
           b"\x00\xff")
    assert decode_key(encode_key(key)) == key


def test_primary_key_change_is_delete_plus_insert_with_distinct_positions():
    pos = SourcePosition.at("b.000001", 500, 3)
    events = row_change("d.t", pos, ("id",), {"id": 1, "v": "a"}, {"id": 2, "v": "a"})
    assert [(e.op, e.key) for e in events] == [("d", (1,)), ("c", (2,))]
    assert events[0].pos < events[1].pos
    # a change of case only is a key change too: the stored value differs
    assert [e.op for e in row_change("d.t", pos, ("k",), {"k": "abc"}, {"k": "ABC"})] == ["d", "c"]
    assert [e.op for e in row_change("d.t", pos, ("id",), {"id": 1, "v": "a"}, {"id": 1, "v": "b"})] == ["u"]


# --- the window merge, checked against a model of the database -------------------------------
ops = st.lists(st.tuples(st.sampled_from("iudk"), st.integers(0, 30), st.integers(0, 30), st.integers(-2**63, 2**63 - 1)),
               max_size=40)


@settings(max_examples=300)
@given(st.dictionaries(st.integers(0, 30), st.integers(-2**63, 2**63 - 1), max_size=25), ops, st.data(),
       st.integers(0, 30), st.integers(0, 30))
def test_merge_yields_the_chunk_state_at_high_watermark(initial, operations, data, lo, width):
    """Whatever moment of the window the SELECT saw, merged rows == the chunk's rows at HW."""
    state = dict(initial)
    history = [dict(state)]
    events = []
    for n, (op, k1, k2, value) in enumerate(operations):
        pos = SourcePosition(1, 1000 + n, 0, "b.000001")
        if op == "i" and k1 not in state:
            state[k1] = value
            events += row_change("t", pos, ("id",), None, {"id": k1, "v": value})
        elif op == "u" and k1 in state:
            before = {"id": k1, "v": state[k1]}
            state[k1] = value
            events += row_change("t", pos, ("id",), before, {"id": k1, "v": value})
        elif op == "d" and k1 in state:
            events += row_change("t", pos, ("id",), {"id": k1, "v": state.pop(k1)}, None)
        elif op == "k" and k1 in state and k2 not in state:
            before = {"id": k1, "v": state.pop(k1)}
            state[k2] = before["v"]
            events += row_change("t", pos, ("id",), before, {"id": k2, "v": before["v"]})
        history.append(dict(state))
    hi = lo + width
    seen = data.draw(st.sampled_from(history))  # the SELECT's read view: any point in the window
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.int64())])
    selected = pa.Table.from_pylist([{"id": k, "v": v} for k, v in seen.items() if lo <= k < hi], schema=schema)
    chunk = ChunkRange(0, (lo,), (hi,))
    merged = merge_window(selected, ("id",), chunk, data.draw(st.permutations(events)), lambda keys: list(keys))
    assert sorted((r["id"], r["v"]) for r in merged.to_pylist()) == sorted(
        (k, v) for k, v in state.items() if lo <= k < hi)


# --- the emit rule ---------------------------------------------------------------------------
@given(st.lists(st.integers(100, 10_000), min_size=1, max_size=8), st.integers(0, 20_000), st.integers(0, 3),
       st.integers(0, 7))
def test_should_emit_only_after_the_chunk_high_watermark(hw_offsets, event_offset, row, pick):
    hws = tuple(SourcePosition.at("b.000002", o) for o in hw_offsets)
    offsets = TableOffsets("d.t", tuple((i * 10,) for i in range(1, len(hws))), hws)
    chunk = pick % len(hws)
    pos = SourcePosition.at("b.000002", event_offset, row)
    expected = pos > hws[chunk].as_snapshot()
    decided_without_key = not offsets.needs_key(pos)
    assert offsets.should_emit(pos, chunk) == expected
    if decided_without_key:
        assert offsets.should_emit(pos) == expected
    assert is_after(pos, hws[chunk]) == expected


def test_offset_map_round_trips():
    chunks = chunks_from_boundaries([("a", 1), ("m", 2)])
    hws = {c.id: SourcePosition.at("b.000001", 100 + c.id) for c in chunks}
    offsets = TableOffsets.from_chunks("d.t", chunks, hws)
    assert TableOffsets.from_dict(offsets.to_dict()) == offsets
    assert offsets.min_hw.offset == 100 and offsets.max_hw.offset == 102
    assert isinstance(chunks[1], ChunkRange) and chunks[1].lo == ("a", 1)


KEY_TYPES = {"int": (pa.int64(), st.integers(-2**63, 2**63 - 1)),
             "text": (pa.string(), st.text(max_size=3)),
             "bytes": (pa.binary(), st.binary(max_size=3)),
             "decimal": (pa.decimal128(5, 2), st.decimals(min_value=-999, max_value=999, places=2))}


@given(data=st.data(), kinds=st.lists(st.sampled_from(sorted(KEY_TYPES)), min_size=1, max_size=2),
       chunks=st.integers(1, 3))
def test_rows_with_keys_is_exact_tuple_membership(data, kinds, chunks):
    from airflow_provider_dblog.core.window import rows_with_keys

    columns = [f"k{i}" for i in range(len(kinds))]
    rows = data.draw(st.lists(st.tuples(*(KEY_TYPES[k][1] for k in kinds)), max_size=30))
    keys = set(data.draw(st.lists(st.one_of(st.sampled_from(rows), st.tuples(*(KEY_TYPES[k][1] for k in kinds)))
                                  if rows else st.tuples(*(KEY_TYPES[k][1] for k in kinds)), max_size=8)))
    keys.add((2**64,) + tuple(r for r in (rows[0][1:] if rows else ())))  # a value no column can hold
    table = pa.table({c: pa.array([r[i] for r in rows], KEY_TYPES[k][0]) for i, (c, k) in enumerate(zip(columns, kinds))})
    step = max(1, len(rows) // chunks)
    table = pa.concat_tables([table.slice(i, step) for i in range(0, len(rows), step)] or [table])
    assert pa.chunked_array(rows_with_keys(table, columns, keys)).to_pylist() == [r in keys for r in rows]


_positions = st.builds(lambda epoch, seq, offset, row: SourcePosition.at(f"mysql-bin.{seq:06d}", offset, row, epoch),
                       st.integers(0, 7), st.integers(1, 999_999), st.integers(4, 2**36), st.integers(0, SNAPSHOT_ROW))


@given(_positions, _positions)
def test_positions_of_a_later_server_sort_after_and_every_codec_keeps_the_epoch(a, b):
    """After failovers (``steps.failover``) positions of the capture's later servers sort after every
    position of an earlier one, whatever the file numbers; each codec round-trips the epoch and the
    server's own file name."""
    if a.epoch != b.epoch:
        assert (a < b) == (a.epoch < b.epoch)
        assert (a.encode() < b.encode()) == (a.epoch < b.epoch)
    for p in (a, b):
        assert SourcePosition.from_dict(p.to_dict()) == p.boundary() and SourcePosition.from_dict(p.to_dict()).file == p.file
        assert SourcePosition.decode(p.encode(), "mysql-bin").file == p.file
        assert SourcePosition.from_version(p.boundary().to_version(), "mysql-bin") == p.boundary()
        assert p.boundary().to_version() < 2**63
        assert SourcePosition.decode(p.encode()).in_file_of(p).file == p.file


def test_a_gtid_state_moves_on_by_the_gtids_passed_per_domain():
    from airflow_provider_dblog.core.positions import merge_gtids

    assert merge_gtids("0-1-5", ["0-1-6", "0-2-7"]) == "0-2-7"
    assert merge_gtids("0-1-5,1-3-9", ["1-3-10"]) == "0-1-5,1-3-10"
    assert merge_gtids("", ["2-1-1", "0-1-4"]) == "0-1-4,2-1-1"
    assert merge_gtids("0-1-5", []) == "0-1-5"


def test_a_key_keeps_its_order_until_what_orders_it_changes():
    from dataclasses import replace as changed

    from airflow_provider_dblog.core.tables import Column, TableMeta

    def meta(*columns):
        return TableMeta("db", "t", tuple(columns), ("k", "id"), "primary")

    planned = meta(Column("k", "enum", "enum('b','a')", collation="utf8mb4_general_ci"), Column("id", "int", "int"))
    assert planned.keeps_key_order(planned)
    assert not planned.keeps_key_order(meta(Column("k", "enum", "enum('a','b')", collation="utf8mb4_general_ci"),
                                            Column("id", "int", "int")))  # MySQL: the declared list orders it
    assert not planned.keeps_key_order(changed(planned, key_columns=("id",)))
    text = meta(Column("k", "varchar", "varchar(5)", collation="utf8mb4_bin"), Column("id", "int", "int"))
    assert not text.keeps_key_order(meta(Column("k", "varchar", "varchar(5)", collation="utf8mb4_general_ci"),
                                         Column("id", "int", "int")))
    enum = meta(Column("k", "mood", "mood", type_oid=16400), Column("id", "integer", "integer"))
    labelled = meta(Column("k", "mood", "mood", type_oid=16400, order="h1"), Column("id", "integer", "integer"))
    assert enum.keeps_key_order(labelled)  # a plan from before orders were recorded: compared from its next plan on
    assert labelled.keeps_key_order(labelled)
    assert not labelled.keeps_key_order(changed(labelled, columns=(changed(labelled.columns[0], order="h2"),
                                                                   labelled.columns[1])))  # a label renamed
    assert "order" not in enum.to_dict()["columns"][0] and labelled.to_dict()["columns"][0]["order"] == "h1"
    assert TableMeta.from_dict(labelled.to_dict()) == labelled
