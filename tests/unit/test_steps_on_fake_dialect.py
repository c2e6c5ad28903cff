"""Readers and steps against the in-memory dialect (tests/support/fake_dialect.py): the watermark
window merge, plan -> snapshot -> report -> binlog reader (the tail's emit rule), chunk reruns, the
re-snapshot selection and the tail's skip check, all without MariaDB or Spark. The same behaviours run
against a real MariaDB and Spark in tests/integration and tests/e2e."""
from __future__ import annotations

import itertools
import random

import pyarrow as pa
from deltalake import DeltaTable
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.local.chunk_readers import snapshot_table
from airflow_provider_dblog.readers.change_reader import ChangeReader, TableStream
from airflow_provider_dblog.readers.chunk_reader import failed_chunk, persist_reports, read_chunk, run_chunk
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.steps.plan import plan_table
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.resnapshot import select_chunks
from airflow_provider_dblog.steps.tail import skip_catch_up
from airflow_provider_dblog.store.lake import changelog_schema, changelog_uri, snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir
from tests.support.fake_dialect import InMemoryDialect, InMemoryServer

TABLE = "shop.t"
_servers = itertools.count()
changes = st.lists(st.tuples(st.sampled_from(["insert", "update", "delete", "key"]), st.integers(0, 60),
                             st.integers(0, 60), st.integers(-1000, 1000)), max_size=25)


def random_ops(rnd: random.Random, n: int = 8) -> list[tuple]:
    return [(rnd.choice(["insert", "update", "delete", "key"]), rnd.randrange(90), rnd.randrange(90),
             rnd.randrange(-1000, 1000)) for _ in range(n)]


def server_with_rows(n: int) -> InMemoryServer:
    server = InMemoryServer(f"s{next(_servers)}")
    server.create(TABLE, [("id", "bigint"), ("v", "bigint"), ("note", "varchar")], ["id"])
    for i in range(0, n * 2, 2):
        server.transaction((TABLE, "insert", {"id": i, "v": i, "note": f"row {i}"}))
    return server


def apply(server: InMemoryServer, ops) -> None:
    """Random writes: inserts, updates, deletes and primary-key changes (some in one transaction)."""
    rows = server.rows[TABLE]
    for op, k1, k2, value in ops:
        if op == "insert" and (k1,) not in rows:
            server.transaction((TABLE, "insert", {"id": k1, "v": value, "note": None}))
        elif op == "update" and (k1,) in rows:
            server.transaction((TABLE, "update", {**rows[(k1,)], "v": value}),
                               (TABLE, "upsert", {"id": k2, "v": -value, "note": "pair"}))
        elif op == "delete" and (k1,) in rows:
            server.transaction((TABLE, "delete", rows[(k1,)]))
        elif op == "key" and (k1,) in rows and (k2,) not in rows:
            server.change_key(TABLE, (k1,), {**rows[(k1,)], "id": k2})


@settings(max_examples=60)
@given(st.integers(0, 25), changes, changes, st.integers(0, 3))
def test_a_chunk_read_is_its_range_at_the_high_watermark(n, before_select, after_select, pick):
    server = server_with_rows(n)
    server.on_low.append(lambda: apply(server, before_select))
    server.on_select.append(lambda: apply(server, after_select))
    dialect = InMemoryDialect(server)
    meta = server.metas[TABLE]
    chunk = dialect.split_chunks(meta, 5)[pick % max(1, len(dialect.split_chunks(meta, 5)))]

    read = read_chunk(dialect, meta, chunk, "position")

    def inside(key):
        return (chunk.lo is None or key >= chunk.lo) and (chunk.hi is None or key < chunk.hi)
    assert sorted(read.rows.to_pylist(), key=lambda r: r["id"]) == [
        r for k, r in sorted(server.rows[TABLE].items()) if inside(k)]
    assert read.hw == server.position() and read.lw <= read.hw


def tail_to_now(state: StateDir, sink, dialect, end=None) -> None:
    """What a tail micro-batch does: the binlog reader's rows from the lake's position to ``end`` (default
    now), committed."""
    offsets = state.offsets()[TABLE]
    meta = state.table(TABLE).meta
    lake = LakeTables(sink, TABLE, dialect.arrow_schema(meta), meta.key_columns)
    start = max(offsets.min_hw, lake.tail_position() or offsets.min_hw)
    end = end or dialect.current_position()
    batches = [b for _, b in ChangeReader({TABLE: TableStream(meta, offsets, start)}, dialect).batches(end)]
    lake.commit_stream(pa.Table.from_batches(batches, schema=changelog_schema(dialect.arrow_schema(meta))), end)


def snapshot_hws(state: StateDir) -> dict[int, str]:
    return {c: r["hw_encoded"] for c, r in state.reports(TABLE).items()}


def current(state: StateDir, sink, dialect) -> dict:
    meta = state.table(TABLE).meta
    rows = LakeTables(sink, TABLE, dialect.arrow_schema(meta), meta.key_columns).read_current()
    return {(r["id"],): {c: r[c] for c in meta.column_names} for r in rows.to_pylist()}


def test_plan_snapshot_report_and_binlog_reader_converge_under_writes(tmp_path):
    server = server_with_rows(40)
    rnd = random.Random(7)
    ops = (random_ops(rnd) for _ in itertools.count())
    server.on_low.append(lambda: apply(server, next(ops)))
    server.on_select.append(lambda: apply(server, next(ops)))
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan = plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=6, batch_size=3)
    assert plan["tables"][TABLE]["chunks"] == 7 and len(plan["batches"]) == 3

    def no_spark(batch, groups):
        raise AssertionError("the driver's reader reads every chunk when no Spark is given")
    snapshot_table(state_dir, sink, TABLE, no_spark, spark=None, driver_threads=1)
    apply(server, random_ops(rnd, 40))
    summary = build_offsets(state_dir)
    assert summary["chunks"] == 7 and summary["rows"] > 0

    state = StateDir(state_dir)
    dialect = open_dialect(state.source())
    tail_to_now(state, sink, dialect)
    assert current(state, sink, dialect) == server.rows[TABLE]
    # the emit rule: no stream row at or before its chunk's HW (the snapshot already holds it)
    changelog = DeltaTable(changelog_uri(sink, TABLE)).to_pyarrow_table().to_pylist()
    hws = snapshot_hws(state)
    stream = [r for r in changelog if r["_op"] != "r"]
    assert stream and all(r["_pos"] > hws[r["_chunk"]] for r in stream)
    # every committed change exactly once, in the changelog's positions
    assert len({r["_pos"] for r in stream}) == len(stream)
    tail_to_now(state, sink, dialect)  # nothing new: a replay adds nothing
    assert len(DeltaTable(changelog_uri(sink, TABLE)).to_pyarrow_table()) == len(changelog)


def test_a_chunk_rerun_replaces_its_range_and_later_stream_rows_still_win(tmp_path):
    server = server_with_rows(30)
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=10, batch_size=8)
    snapshot_table(state_dir, sink, TABLE, None, spark=None, driver_threads=1)
    build_offsets(state_dir)
    state = StateDir(state_dir)
    dialect = open_dialect(state.source())
    apply(server, [("delete", 2, 0, 0), ("update", 4, 50, 7), ("key", 6, 61, 0), ("insert", 1, 0, 9)])
    tail_to_now(state, sink, dialect)
    apply(server, [("delete", 0, 0, 0), ("insert", 3, 0, 9)])
    run_chunk(sink, state.table(TABLE), 0, dialect)  # the repair: chunk 0 again, at a new HW
    apply(server, [("update", 8, 51, 3), ("delete", 4, 0, 0), ("insert", 5, 0, 1)])
    tail_to_now(state, sink, dialect)  # commits the changes before the rerun's HW too: they change nothing
    assert current(state, sink, dialect) == server.rows[TABLE]


def test_the_driver_persists_only_reports_whose_commit_is_in_the_lake(tmp_path):
    """Executors return reports; the driver checks each chunk's commit in ``current`` before persisting:
    a chunk committed to another lake (an executor's own disk), a failed chunk and a chunk never returned
    are one line, and the good reports are persisted first (a rerun reads only the rest)."""
    server = server_with_rows(40)
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=10, batch_size=8)
    state = StateDir(state_dir)
    plan, dialect = state.table(TABLE), open_dialect(state.source())
    good = run_chunk(sink, plan, 0, dialect)
    elsewhere = run_chunk(str(tmp_path / "executor-disk"), plan, 1, dialect)
    failed = failed_chunk(2, ConnectionError("injected: lost connection\nsecond line"))
    with pytest.raises(DblogError) as raised:
        persist_reports(state, sink, plan, [0, 1, 2, 3], [good, elsewhere, failed])
    message = str(raised.value)
    assert "chunk 2 failed: ConnectionError: injected: lost connection" in message and "second line" not in message
    assert "chunks 1 reported a commit" in message and "--sink" in message and "chunks 3 were not read" in message
    assert set(state.reports(TABLE)) == {0}
    assert persist_reports(state, sink, plan, [1], [run_chunk(sink, plan, 1, dialect)])[0]["chunk"] == 1
    assert set(state.reports(TABLE)) == {0, 1}


def test_commits_in_any_order_leave_the_greatest_position_per_key(tmp_path):
    """A slow chunk read commits after the tail already applied later changes (and deletes) of its keys;
    a stale re-read commits after a newer one: ``current`` still holds, per key, the latest state."""
    server = server_with_rows(20)
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=100)
    state = StateDir(state_dir)
    plan, dialect = state.table(TABLE), open_dialect(state.source())
    meta = plan.meta
    old = read_chunk(dialect, meta, plan.chunk(0), "position")  # read at HW h1, committed later
    apply(server, [("delete", 2, 0, 0), ("update", 4, 0, 5), ("insert", 7, 0, 1)])
    after_insert = server.position()
    apply(server, [("delete", 7, 0, 0)])
    newer = read_chunk(dialect, meta, plan.chunk(0), "position")  # HW h2 > h1
    schema = dialect.arrow_schema(meta)
    lake = LakeTables(sink, TABLE, schema, meta.key_columns)
    assert lake.commit_chunk(0, newer.hw, snapshot_rows(newer.rows, newer.hw.as_snapshot().encode(), 0, 0, schema))
    apply(server, [("delete", 4, 0, 0), ("insert", 2, 0, 3)])
    build_offsets_from(state, {0: old.hw})  # the tail's offset map holds the first read's HW
    tail_to_now(state, sink, dialect, after_insert)  # a lagging tail: the insert of 7 (deleted before h2)
    assert (7,) not in current(state, sink, dialect)  # ... must not bring 7 back
    tail_to_now(state, sink, dialect)  # changes between h1 and h2 change nothing; later ones apply
    assert not lake.commit_chunk(0, old.hw, snapshot_rows(old.rows, old.hw.as_snapshot().encode(), 0, 0, schema))
    assert current(state, sink, dialect) == server.rows[TABLE]


def build_offsets_from(state: StateDir, hws: dict) -> None:
    from airflow_provider_dblog.core.offsets import TableOffsets

    plan = state.table(TABLE)
    state.write_offsets({TABLE: TableOffsets.from_chunks(TABLE, plan.chunks, hws)})


def test_resnapshot_selects_the_chunks_a_key_range_overlaps(tmp_path):
    server = server_with_rows(30)  # keys 0, 2, .., 58; chunks of 10 keys: [-inf,20) [20,40) [40,inf)
    state_dir = str(tmp_path / "state")
    plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=10, batch_size=2)
    assert select_chunks(state_dir, TABLE, key_lo=19, key_hi=20)["chunks"] == [0, 1]
    assert select_chunks(state_dir, TABLE, key_lo=40)["batches"] == [
        {"batch": 1, "table": TABLE, "chunks": [2], "label": f"re-snapshot {TABLE} chunks 2 [40, ∞)"}]
    assert select_chunks(state_dir, TABLE, chunk_ids="0-1", key_hi=5)["chunks"] == [0]
    with pytest.raises(DblogError, match="no chunk 7"):
        select_chunks(state_dir, TABLE, chunk_ids="7")
    with pytest.raises(DblogError, match="not a column"):
        select_chunks(state_dir, TABLE, filter="nope = 1")


def test_the_tail_skips_a_table_without_changes_and_records_how_far(tmp_path):
    server = server_with_rows(10)
    other = "shop.other"
    server.create(other, [("id", "bigint")], ["id"])
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=4)
    snapshot_table(state_dir, sink, TABLE, None, spark=None, driver_threads=1)
    build_offsets(state_dir)
    state = StateDir(state_dir)
    dialect, min_hw = open_dialect(state.source()), state.offsets()[TABLE].min_hw
    server.transaction((other, "insert", {"id": 1}))
    now = server.position()
    assert skip_catch_up(state, dialect, TABLE, min_hw, now)
    assert state.caught_up(TABLE, min_hw)[0] == now and state.resume_position(TABLE, min_hw) == now
    server.transaction((TABLE, "update", {"id": 0, "v": 1, "note": "x"}))
    assert not skip_catch_up(state, dialect, TABLE, min_hw, server.position())
