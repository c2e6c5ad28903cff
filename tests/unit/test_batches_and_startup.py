"""Packing chunks of many tables into batches, startup modes, and both through the plan on the fake dialect."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_dblog.core.batches import Batch, BatchGroup, ChunkWeight, chunk_weights, pack_batches, spread
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.readers.progress import progress_lines
from airflow_provider_dblog.steps.plan import plan_tables
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.store.state import StateDir
from tests.support.fake_dialect import InMemoryServer

tables_st = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 5000)), min_size=1, max_size=12)


def weights_of(tables, chunk_size=1000):
    return [w for i, (n, rows) in enumerate(tables) for w in chunk_weights(f"db.t{i}", list(range(n)), rows, chunk_size)]


@given(tables_st, st.integers(1, 9000))
def test_every_chunk_is_in_exactly_one_batch_and_budgets_hold(tables, budget):
    weights = weights_of(tables)
    batches = pack_batches(weights, budget, first_index=3)
    packed = [(g.table, c) for b in batches for g in b.groups for c in g.chunk_ids]
    assert packed == [(w.table, w.chunk_id) for w in weights]  # each once, in order
    assert [b.index for b in batches] == list(range(3, 3 + len(batches)))
    by_key = {(w.table, w.chunk_id): w.rows for w in weights}
    for batch in batches:
        rows = sum(by_key[(g.table, c)] for g in batch.groups for c in g.chunk_ids)
        assert rows == batch.rows
        assert rows <= budget or batch.chunks == 1  # only a chunk bigger than the budget exceeds it
    for before, after in zip(batches, batches[1:]):  # next fit: a batch closes only when the next chunk overflows
        first = after.groups[0]
        assert before.rows + by_key[(first.table, first.chunk_ids[0])] > budget


def test_many_small_tables_share_a_batch_and_a_big_table_spreads():
    weights = weights_of([(1, 50)] * 200 + [(10, 9500)], chunk_size=1000)  # a big table's chunk: 1000 rows
    batches = pack_batches(weights, 8 * 1000)
    assert [b.chunks for b in batches] == [160, 46, 4] and [len(b.groups) for b in batches] == [160, 41, 1]


@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=60), st.integers(1, 16))
def test_spread_balances_and_keeps_every_item_once(weights, bins):
    groups = spread(weights, bins)
    assert sorted(i for g in groups for i in g) == list(range(len(weights)))
    assert len(groups) <= bins
    totals = [sum(weights[i] for i in g) for g in groups]
    assert max(totals) - min(totals) <= max(weights)


def test_batch_labels_and_old_plans():
    one = Batch(0, (BatchGroup("shop.orders", (0, 1, 2)),))
    assert one.label(lambda t, ids: "[-∞, 30)") == "shop.orders chunks 0-2 [-∞, 30)"
    many = Batch(1, tuple(BatchGroup(f"shop.table_{i:03d}", (0,)) for i in range(60)))
    assert many.label().startswith("60 tables, 60 chunks: shop.table_000, ") and many.label().endswith("shop.table_059")
    assert len(many.label()) <= 200
    assert Batch.from_dict(4, {"table": "a.b", "chunks": [1, 2]}) == Batch(4, (BatchGroup("a.b", (1, 2)),))
    assert Batch.from_dict(2, many.to_dict()) == Batch(2, many.groups)
    assert many.chunk_ids("shop.table_007") == (0,) and many.chunk_ids("nope.x") == ()


def test_progress_lines_name_the_tables_that_moved():
    assert progress_lines({"a.x": 4, "a.y": 1}, {"a.x": 1}, {"a.x": 1, "a.y": 1}) == [
        "a.y: 1/1 chunks (all tables: 2/5)"]
    assert progress_lines({"a.x": 4}, {"a.x": 2}, {"a.x": 2}) == []


@pytest.mark.parametrize("text, expected", [
    (None, StartupMode("initial")), ("snapshot-only", StartupMode("snapshot-only")), ("latest", StartupMode("latest")),
    ("position:mysql-bin.000003:154", StartupMode("position", position=SourcePosition.at("mysql-bin.000003", 154))),
    ("gtid:0-1-1500", StartupMode("gtid", gtid="0-1-1500")),
    ("timestamp:1767225600000", StartupMode("timestamp", timestamp_ms=1767225600000)),
])
def test_startup_modes_parse_and_print_back(text, expected):
    mode = StartupMode.parse(text)
    assert mode == expected and StartupMode.parse(str(mode)) == mode
    assert mode.snapshots == (mode.kind in ("initial", "snapshot-only")) and mode.tails == (mode.kind != "snapshot-only")


@pytest.mark.parametrize("text, message", [
    ("everything", "unknown startup mode"), ("latest:now", "unknown startup mode"),
    ("position:mysql-bin:4", "bad startup mode"), ("position:mysql-bin.000001:x", "bad startup mode"),
    ("timestamp:yesterday", "timestamp:EPOCH_MS"), ("gtid:", "gtid:SET"),
])
def test_bad_startup_modes_are_one_line(text, message):
    with pytest.raises(DblogError, match=message):
        StartupMode.parse(text)


def _server(name, tables):
    server = InMemoryServer(name)
    for table, rows in tables.items():
        server.create(table, [("id", "bigint"), ("v", "varchar")], ["id"])
        for i in range(rows):
            server.transaction((table, "insert", {"id": i, "v": f"{table} {i}"}))
    return server


def test_a_plan_packs_small_tables_and_appends_a_later_table_after_them(tmp_path):
    server = _server("packing", {**{f"shop.t{i}": 3 for i in range(9)}, "crm.big": 40})
    source, state = SourceConfig.parse(server.uri), str(tmp_path / "state")
    plan = plan_tables(source, [f"shop.t{i}" for i in range(9)] + ["crm.big"], state, chunk_size=10, batch_size=2,
                       save_password=False)
    assert plan["tables"]["crm.big"]["chunks"] == 4
    assert [b["tables"] for b in plan["batches"]] == [["shop.t0", "shop.t1", "shop.t2", "shop.t3", "shop.t4",
                                                       "shop.t5"], ["shop.t6", "shop.t7", "shop.t8", "crm.big"],
                                                      ["crm.big"], ["crm.big"]]
    server.create("shop.later", [("id", "bigint")], ["id"])
    again = plan_tables(source, ["shop.later"], state, chunk_size=10, batch_size=2, save_password=False)
    assert again["batches"][:4] == plan["batches"] and again["batches"][4]["tables"] == ["shop.later"]
    with pytest.raises(DblogError, match="holds chunks of 4 tables: name the table of --chunks"):
        StateDir(state).pending_chunks(1, chunk_ids=[0])
    assert [(g.table, g.chunk_ids) for g in StateDir(state).pending_chunks(1, chunk_ids=[0], table="crm.big")] == [
        ("crm.big", (0,))]


def test_latest_plans_no_batch_and_the_offsets_start_at_the_plan(tmp_path):
    server = _server("latest", {"shop.orders": 12})
    state = str(tmp_path / "state")
    plan = plan_tables(SourceConfig.parse(server.uri), ["shop.orders"], state, chunk_size=5, startup="latest",
                       save_password=False)
    start = server.position()
    assert plan["batches"] == [] and plan["tables"]["shop.orders"] == {
        "chunks": 1, "rows": 12, "key": ["id"], "watermark": "position", "startup": "latest", "start_at": str(start)}
    offsets = build_offsets(state)
    assert offsets["tables"]["shop.orders"]["min_hw"] == str(start) and offsets["chunks"] == 0
    table_offsets = StateDir(state).offsets()["shop.orders"]
    server.transaction(("shop.orders", "update", {"id": 3, "v": "after"}))
    assert not table_offsets.should_emit(SourcePosition.at(start.file, start.offset, 0), 0)
    assert table_offsets.should_emit(server.binlog[-1].event_position(0), 0)


def test_a_bad_startup_mode_fails_before_the_source_is_touched(tmp_path):
    with pytest.raises(DblogError, match="unknown startup mode 'soon'"):
        plan_tables(SourceConfig.parse("memory://x@nowhere:1"), ["a.b"], str(tmp_path), startup="soon")
    assert not (tmp_path / "plan.json").exists()
