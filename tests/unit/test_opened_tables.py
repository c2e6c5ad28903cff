"""Opened Delta tables handed from one ``LakeTables`` to the next (``store.opened_tables``), the log
checkpointed every ``CHECKPOINT_INTERVAL`` commits, and a micro-batch's changelog rows added as one staged
file: what the lake holds stays exactly what the commits wrote (delta-rs on a local path; no database, no
Spark)."""
from __future__ import annotations

import gc
import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from airflow_provider_dblog.store import lake_tables
from airflow_provider_dblog.store.lake_tables import CHECKPOINT_INTERVAL, LakeTables
from airflow_provider_dblog.store.lake import snapshot_rows
from tests.unit.test_tail_fence import SOURCE, _batch, _pos


def _lake(path: Path) -> LakeTables:
    return LakeTables(str(path), "db.t", SOURCE, ["id"])


def _snapshot(lake: LakeTables) -> None:
    keys = pa.table({"id": pa.array(range(20), pa.int32()), "v": pa.array([0] * 20, pa.int64())})
    lake.commit_chunk(0, _pos(100), snapshot_rows(keys, _pos(100).as_snapshot().encode(), 0, 0, SOURCE))


def _expected(batches: list[tuple[int, int]]) -> dict[int, int]:
    latest = {k: 0 for k in range(20)}
    for first, last in batches:
        latest.update({o % 20: o for o in range(first + 5, last, 10)})
    return latest


def _current(lake: LakeTables) -> dict[int, int]:
    return {r["id"]: r["v"] for r in lake.read_current(["id", "v"]).to_pylist()}


def test_a_holder_gone_hands_its_tables_to_the_next_which_sees_every_commit_since(tmp_path, monkeypatch):
    opened = []
    real = LakeTables._open_or_create
    monkeypatch.setattr(LakeTables, "_open_or_create", lambda self, uri, *a: opened.append(uri) or real(self, uri, *a))
    first = _lake(tmp_path)
    _snapshot(first)
    first.commit_stream(_batch(200, 400), _pos(400))
    del first
    gc.collect()
    other = _lake(tmp_path)
    assert other.tail_position() == _pos(400).boundary() and _current(other) == _expected([(200, 400)])
    assert len(opened) == 2  # it took the idle objects: no new open
    writer = _lake(tmp_path)  # held at the same time as ``other``: opens its own
    writer.commit_stream(_batch(400, 600), _pos(600))
    assert len(opened) == 4
    # ``other``'s objects were opened before that commit: its next use reads the entries added since
    assert other.tail_position() == _pos(600).boundary()
    assert _current(other) == _expected([(200, 400), (400, 600)])
    other.commit_stream(_batch(600, 800), _pos(800))
    assert _current(_lake(tmp_path)) == _expected([(200, 400), (400, 600), (600, 800)])


def test_a_table_deleted_and_made_again_at_the_same_path_is_opened_anew(tmp_path):
    lake = _lake(tmp_path)
    _snapshot(lake)
    for k in range(3):
        lake.commit_stream(_batch(200 + 200 * k, 400 + 200 * k), _pos(400 + 200 * k))
    del lake
    gc.collect()
    shutil.rmtree(tmp_path / "db.t")  # a user starting over: the idle objects stand at versions now gone
    again = _lake(tmp_path)
    _snapshot(again)
    assert again.tail_position() is None
    again.commit_stream(_batch(200, 400), _pos(400))
    assert _current(again) == _expected([(200, 400)])
    assert DeltaTable(again.changelog_uri).version() == 2  # created, the chunk, the batch


def test_tables_are_checkpointed_every_interval_and_maintain_sets_it_on_older_tables(tmp_path, monkeypatch):
    lake = _lake(tmp_path / "new")
    _snapshot(lake)
    for k in range(CHECKPOINT_INTERVAL + 2):
        lake.commit_stream(_batch(200 + 200 * k, 400 + 200 * k), _pos(400 + 200 * k))
    for uri in (lake.changelog_uri, lake.current_uri):
        assert DeltaTable(uri).metadata().configuration["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL)
        assert list(Path(uri, "_delta_log").glob("*.checkpoint.parquet")), f"{uri}: no checkpoint after " \
                                                                           f"{CHECKPOINT_INTERVAL + 2} commits"
    assert _current(lake) == _expected([(200 + 200 * k, 400 + 200 * k) for k in range(CHECKPOINT_INTERVAL + 2)])

    monkeypatch.setattr(lake_tables, "TABLE_PROPERTIES", {})  # a lake made before the interval was set
    old = _lake(tmp_path / "old")
    _snapshot(old)
    old.commit_stream(_batch(200, 400), _pos(400))
    assert "delta.checkpointInterval" not in DeltaTable(old.current_uri).metadata().configuration
    monkeypatch.undo()
    old.maintain(retention_hours=168)
    for uri in (old.changelog_uri, old.current_uri):
        assert DeltaTable(uri).metadata().configuration["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL)
    assert _current(old) == _expected([(200, 400)])


def test_a_micro_batch_is_one_staged_file_with_key_and_position_statistics(tmp_path):
    lake = _lake(tmp_path)
    _snapshot(lake)
    lake.commit_stream(_batch(200, 400), _pos(400))
    changelog = DeltaTable(lake.changelog_uri)
    adds = pa.table(changelog.get_add_actions(flatten=True))
    newest = adds.sort_by([("modification_time", "descending")]).slice(0, 1).to_pylist()[0]
    rows = changelog.to_pyarrow_table().filter(pa.compute.field("_op") != "r")
    assert newest["num_records"] == rows.num_rows == 20
    assert (newest["min.id"], newest["max.id"]) == (5, 15)  # the batch updates keys 5 and 15
    assert (newest["min._pos"], newest["max._pos"]) == (min(rows["_pos"].to_pylist()), max(rows["_pos"].to_pylist()))
    # readers skip it by position like any other file
    dataset = changelog.to_pyarrow_dataset()
    after = pa.compute.field("_pos") > _pos(150).as_snapshot().encode()
    assert sum(f.count_rows(filter=after) for f in dataset.get_fragments(filter=after)) == 20


def test_current_reads_the_changelog_when_another_writer_committed_right_after_the_append(tmp_path):
    """The append's rows stand in for the changelog's window only while the changelog is at the append's
    version: a commit right after it (another tail's next batch) makes ``current`` read the window."""
    lake = _lake(tmp_path)
    _snapshot(lake)
    lake.commit_stream(_batch(200, 400), _pos(400), update_current=False)
    _lake(tmp_path).commit_stream(_batch(400, 600), _pos(600), update_current=False)
    lake.update_current(_pos(400))
    assert _current(lake) == _expected([(200, 400)])
    lake.update_current()
    assert _current(lake) == _expected([(200, 400), (400, 600)])


def test_an_opened_table_reads_its_log_again_only_when_another_commit_came_since(tmp_path, monkeypatch):
    """A held table is brought up to date when the next log entry exists (one stat), not by delta-rs's update
    on every use; what another writer committed is seen all the same, app versions included."""
    updates = []
    real = DeltaTable.update_incremental
    monkeypatch.setattr(DeltaTable, "update_incremental", lambda self: updates.append(1) or real(self))
    lake = _lake(tmp_path)
    _snapshot(lake)
    lake.commit_stream(_batch(200, 400), _pos(400))
    assert lake.current_behind() is None  # both objects read their own commits once
    updates.clear()
    for _ in range(3):  # nothing committed since: no read of the log
        assert lake.tail_position() == _pos(400).boundary() and lake.current_behind() is None
    assert updates == []
    _lake(tmp_path).commit_stream(_batch(400, 600), _pos(600))  # another holder commits to both tables
    assert lake.tail_position() == _pos(600).boundary()  # the app version cached at the old version is not used
    assert lake.current_behind() is None and _current(lake) == _expected([(200, 400), (400, 600)])
    assert len(updates) == 2  # changelog and current, once each


def test_a_file_of_current_is_read_with_the_columns_it_lacks_as_null_and_a_value_that_does_not_fit_fails(tmp_path):
    import pyarrow.parquet as pq
    import pytest

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64()), pa.field("added", pa.string()),
                        pa.field("_chunk", pa.int64())])
    folder = tmp_path / "_chunk=3"
    folder.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "v": pa.array([7, None], pa.int32())}),
                   folder / "old.parquet")
    read = lake_tables._file_reader(str(tmp_path), schema, 3)
    rows = read("_chunk=3/old.parquet")
    assert rows.schema == schema  # widened to the table's types, the partition value filled in
    assert rows.to_pylist() == [{"id": 1, "v": 7, "added": None, "_chunk": 3},
                                {"id": 2, "v": None, "added": None, "_chunk": 3}]
    assert read("_chunk%3D3/old.parquet", ["id"]).to_pylist() == [{"id": 1}, {"id": 2}]  # a path as the log escapes it
    pq.write_table(pa.table({"id": pa.array([1]), "v": pa.array(["not a number"])}), folder / "bad.parquet")
    with pytest.raises(pa.ArrowInvalid):
        read("_chunk=3/bad.parquet")
