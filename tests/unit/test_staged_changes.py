"""A change range larger than memory: staged files committed in one Delta version, and ``current`` brought
up to date chunk by chunk, give the same lake as the in-memory path (delta-rs on a local path; no
database, no Spark). The e2e test of a huge transaction through the tail is in tests/e2e/test_end_to_end.py."""
from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.readers.staging import ChangeStager
from airflow_provider_dblog.store.lake import event_rows, snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.staged import StagedFile

SOURCE = pa.schema([pa.field("id", pa.int32(), False), pa.field("v", pa.int64()), pa.field("s", pa.string())])
CHUNKS = {0: (0, 100), 1: (100, 200), 2: (200, 300)}


def _pos(offset: int) -> SourcePosition:
    return SourcePosition.at("mysql-bin.000001", offset)


def _changes(seed: int, first: int, count: int) -> pa.Table:
    """Random inserts, updates and deletes of keys 0..349 (keys past 299 are new rows in chunk 2)."""
    rnd = random.Random(seed)
    events, chunks = [], []
    for i in range(count):
        key = rnd.randrange(350)
        op = rnd.choice("cud")
        image = {"id": key, "v": rnd.randrange(10**6), "s": f"s{rnd.randrange(99)}"}
        before, after = (None, image) if op == "c" else (image, None) if op == "d" else (image, image)
        events.append(ChangeEvent("db.t", op, _pos(first + i), (key,), after, before))
        chunks.append(min(2, key // 100))
    return event_rows(events, chunks, SOURCE)


def _snapshotted(path) -> LakeTables:
    lake = LakeTables(str(path), "db.t", SOURCE, ["id"])
    for chunk, (lo, hi) in CHUNKS.items():
        rows = pa.table({"id": pa.array(range(lo, hi), pa.int32()), "v": pa.array(range(lo, hi), pa.int64()),
                         "s": pa.array([f"r{k}" for k in range(lo, hi)])}, schema=SOURCE)
        hw = _pos(10 + chunk)
        lake.commit_chunk(chunk, hw, snapshot_rows(rows, hw.as_snapshot().encode(), chunk, 0, SOURCE))
    return lake


def _current(lake: LakeTables) -> list[tuple]:
    table = DeltaTable(lake.current_uri).to_pyarrow_table(columns=["id", "v", "s", "_pos", "_chunk"])
    return sorted(zip(*(table[c].to_pylist() for c in table.column_names)))


def _staged(sink: str, rows: pa.Table) -> tuple[pa.Table, list[StagedFile]]:
    """Rows through a stager that keeps 4 KiB inline and stages the rest in ~8 KiB files: (inline, staged)."""
    out = list(ChangeStager(sink, inline_bytes=4096, file_bytes=8192).items(("db.t", b) for b in rows.to_batches(20)))
    inline = [i for _, i in out if isinstance(i, pa.RecordBatch)]
    return pa.Table.from_batches(inline, rows.schema), [i for _, i in out if isinstance(i, StagedFile)]


def test_staged_files_commit_in_one_version_and_current_matches_the_in_memory_path(tmp_path):
    plain, staged = _snapshotted(tmp_path / "plain"), _snapshotted(tmp_path / "staged")
    staged.memory_bytes = 1  # every update of current goes chunk by chunk
    for round_, (first, count) in enumerate([(100, 1500), (2000, 40), (3000, 2500)]):
        rows, end = _changes(round_, first, count), _pos(first + count + 1)
        plain.commit_stream(rows, end)
        inline, files = _staged(str(tmp_path / "staged"), rows)
        assert bool(files) == (count > 100), "a small range is handed over in memory, a large one staged"
        assert sum(f.rows for f in files) + inline.num_rows == rows.num_rows
        before = DeltaTable(staged.changelog_uri).version()
        assert staged.commit_stream(inline, end, staged=files) == "committed"
        changelog = DeltaTable(staged.changelog_uri)
        assert changelog.version() == before + 1, "the staged range took more than one commit"
        assert sorted(changelog.to_pyarrow_table()["_pos"].to_pylist()) == \
            sorted(DeltaTable(plain.changelog_uri).to_pyarrow_table()["_pos"].to_pylist())
        assert _current(staged) == _current(plain)


def test_a_replayed_staged_range_adds_nothing_and_its_files_go(tmp_path):
    lake = _snapshotted(tmp_path)
    rows, end = _changes(7, 100, 800), _pos(1000)
    inline, files = _staged(str(tmp_path), rows)
    lake.commit_stream(inline, end, staged=files)
    committed = DeltaTable(lake.changelog_uri).to_pyarrow_table().num_rows
    again_inline, again = _staged(str(tmp_path), rows)  # the same micro-batch read again after a crash
    assert lake.commit_stream(again_inline, end, staged=again) == "replayed"
    assert DeltaTable(lake.changelog_uri).to_pyarrow_table().num_rows == committed
    assert not any((tmp_path / "db.t" / "changelog" / f.path).exists() for f in again)


def test_chunk_by_chunk_keeps_a_chunk_read_committed_meanwhile(tmp_path):
    """A chunk read that commits between the chunk-by-chunk update's read of ``current`` and its commit
    conflicts with it (the update carries the chunk's HW again): retried, no row is lost or doubled."""
    lake = _snapshotted(tmp_path)
    lake.memory_bytes = 1
    rows = _changes(3, 100, 600)
    lake.commit_stream(rows, _pos(800), update_current=False)
    reread = pa.table({"id": pa.array(range(100, 200), pa.int32()), "v": pa.array([-1] * 100, pa.int64()),
                       "s": pa.array(["again"] * 100)}, schema=SOURCE)
    hw = _pos(900)
    original = lake._apply_by_chunk
    calls = []

    def read_commits_in_between(current, window, end):
        calls.append(1)
        if len(calls) == 1:
            other = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
            import threading
            thread = threading.Thread(target=lambda: other.commit_chunk(
                1, hw, snapshot_rows(reread, hw.as_snapshot().encode(), 1, 0, SOURCE)))
            thread.start()
            thread.join()
        return original(current, window, end)

    lake._apply_by_chunk = read_commits_in_between
    lake.update_current(_pos(800))
    assert len(calls) == 2, "the update that read current before the chunk read committed was not retried"
    current = DeltaTable(lake.current_uri).to_pyarrow_table()
    ids = current["id"].to_pylist()
    assert len(ids) == len(set(ids)), "a key is in current twice"
    chunk1 = current.filter(pc.equal(current["_chunk"], 1))
    assert sorted(chunk1["id"].to_pylist()) == list(range(100, 200))
    assert set(chunk1["v"].to_pylist()) == {-1}, "the chunk read at a later HW was overwritten"
