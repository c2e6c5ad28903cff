"""Where the streaming source starts each table (``spark.change_source.BinlogStreamReader``, against the
in-memory dialect): from the state's records, without opening every table's lake (a whole database's
start-up); when the state is behind the lake (a crash between a commit and its record) the range is read
again and the commit keeps only what the lake lacks; when the source no longer has the log from the
state's position, from the lake's own. The same source runs on Spark against MariaDB in tests/e2e."""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.local.chunk_readers import snapshot_table
from airflow_provider_dblog.readers.change_reader import ChangeReader
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.spark.change_source import BinlogStreamReader, open_envelopes
from airflow_provider_dblog.steps.plan import plan_table
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.store.lake import changelog_schema, changelog_uri
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir
from tests.unit.test_steps_on_fake_dialect import TABLE, server_with_rows


def _commit(reader: BinlogStreamReader, state: StateDir, sink: str, end: SourcePosition) -> None:
    """One micro-batch as the lake sink commits it, from the floors the source gives."""
    meta = state.table(TABLE).meta
    dialect = open_dialect(state.source())
    batches = [b for _, b in ChangeReader(reader.streams(), dialect).batches(end)]
    lake = LakeTables(sink, TABLE, dialect.arrow_schema(meta), meta.key_columns)
    lake.commit_stream(pa.Table.from_batches(batches, schema=changelog_schema(dialect.arrow_schema(meta))), end)


def test_floors_come_from_the_state_and_from_the_lake_only_when_the_source_lost_the_log(tmp_path):
    server = server_with_rows(12)
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=4)
    snapshot_table(state_dir, sink, TABLE, None, spark=None, driver_threads=1)
    build_offsets(state_dir)
    state = StateDir(state_dir)
    server.transaction((TABLE, "update", {"id": 1, "v": 10, "note": "a"}))
    first = server.position()
    reader = BinlogStreamReader(state, sink, "*", 0)
    _commit(reader, state, sink, first)
    state.record_tail_positions({TABLE: first})
    server.transaction((TABLE, "update", {"id": 2, "v": 20, "note": "b"}))
    second = server.position()
    _commit(BinlogStreamReader(state, sink, "*", 0), state, sink, second)  # a crash before its record

    behind = BinlogStreamReader(state, sink, "*", 0)
    assert SourcePosition.from_dict(behind.initialOffset()) == first  # the state's record: no lake opened
    server.transaction((TABLE, "update", {"id": 3, "v": 30, "note": "c"}))
    _commit(behind, state, sink, server.position())  # reads (first, now] again: the lake keeps each change once
    stream = [r for r in DeltaTable(changelog_uri(sink, TABLE)).to_pyarrow_table().to_pylist() if r["_op"] != "r"]
    assert sorted((r["id"], r["v"]) for r in stream) == [(1, 10), (2, 20), (3, 30)]

    server.purged_before = second  # the log from the state's record is gone: the lake's position is taken
    lost = BinlogStreamReader(state, sink, "*", 0)
    assert SourcePosition.from_dict(lost.initialOffset()) == server.position()
    assert lost.streams()[TABLE].floor == server.position()


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["insert", "update", "delete", "key"]), st.integers(0, 30),
                              st.integers(0, 30), st.integers(-5, 5)), min_size=3, max_size=40),
       parts=st.integers(2, 4), second_floor=st.booleans())
def test_a_range_read_in_pieces_gives_the_rows_of_one_read(tmp_path_factory, ops, parts, second_floor):
    """The streaming source cuts a micro-batch's range at transaction boundaries (``split_range``) into one piece
    per task: the pieces' rows together are the rows of one read of the range, each once, whatever the cuts and
    the tables' floors (a second table whose floor lies inside the range)."""
    from tests.unit.test_steps_on_fake_dialect import apply

    tmp_path = tmp_path_factory.mktemp("pieces")
    server = server_with_rows(6)
    other = "shop.other"
    server.create(other, [("id", "bigint"), ("v", "bigint")], ["id"])
    server.transaction((other, "insert", {"id": 1, "v": 1}))
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    for table in (TABLE, other):
        plan_table(SourceConfig.parse(server.uri), table, state_dir, chunk_size=4)
        snapshot_table(state_dir, sink, table, None, spark=None, driver_threads=1)
    build_offsets(state_dir)
    state = StateDir(state_dir)
    apply(server, ops[: len(ops) // 2])
    if second_floor:  # the other table's tail already went past the middle of the range
        server.transaction((other, "update", {"id": 1, "v": 2}))
        state.record_tail_positions({other: server.position()})
    apply(server, ops[len(ops) // 2:])
    for k in range(4):  # enough transactions for every cut
        server.transaction((TABLE, "update", {"id": 1000 + k, "v": k, "note": "w"}))
    server.transaction((other, "update", {"id": 1, "v": 3}))
    end = server.position().to_dict()

    def rows(reader: BinlogStreamReader) -> dict[str, list]:
        envelopes = [e for p in reader.partitions({}, end) for e in reader.read(p)]
        batch = open_envelopes(pa.Table.from_batches(envelopes))
        assert SourcePosition.from_dict(end) == batch.end
        return {t: sorted(r["_pos"] for p in ps for r in p.to_pylist()) for t, ps in batch.parts.items()}

    whole = rows(BinlogStreamReader(state, sink, "*", 0, parallelism=1))
    pieces_reader = BinlogStreamReader(state, sink, "*", 0, parallelism=parts)
    cut = pieces_reader.partitions({}, end)
    assert len(cut) > 1 and cut[0].begin is None and all(p.begin is not None for p in cut[1:])
    pieces = rows(pieces_reader)
    assert pieces == whole
    assert all(len(v) == len(set(v)) for v in pieces.values())
