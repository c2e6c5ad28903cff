"""Two tails of one capture (two hosts, no shared lock) committing the same micro-batch: the lake fences
them, so each change is in the changelog once. The second tail reads the recorded position, the first
commits in that moment, and the second's append must conflict on ``dblog-tail`` instead of going
through (delta-rs on a local path; no database, no Spark)."""
from __future__ import annotations

import threading

import pyarrow as pa
from deltalake import DeltaTable

from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.lake import event_rows, snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables

SOURCE = pa.schema([pa.field("id", pa.int32(), False), pa.field("v", pa.int64())])


def _pos(offset: int) -> SourcePosition:
    return SourcePosition.at("mysql-bin.000001", offset)


def _batch(first: int, last: int) -> pa.Table:
    """Updates at first+5, first+15, ... (inside the batch ``[first, last)``)."""
    events = [ChangeEvent("db.t", "u", _pos(o), (o % 20,), {"id": o % 20, "v": o}, {"id": o % 20, "v": 0})
              for o in range(first + 5, last, 10)]
    return event_rows(events, [0] * len(events), SOURCE)


class OtherTailCommitsInBetween(LakeTables):
    """A tail on another host commits ``other`` (from its own thread: its own opened tables) after this
    tail read the recorded position and before its append."""

    other = None

    def _append(self, rows, commit=None, checked=None, **options):
        if self.other is not None:
            other, self.other = self.other, None
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
        return super()._append(rows, commit, checked, **options)


def test_a_batch_another_tail_committed_meanwhile_is_not_appended_twice(tmp_path):
    lake = OtherTailCommitsInBetween(str(tmp_path), "db.t", SOURCE, ["id"])
    keys = pa.table({"id": pa.array(range(20), pa.int32()), "v": pa.array([0] * 20, pa.int64())})
    lake.commit_chunk(0, _pos(100), snapshot_rows(keys, _pos(100).as_snapshot().encode(), 0, 0, SOURCE))
    lake.commit_stream(_batch(200, 400), _pos(400))

    def other_host():
        LakeTables(str(tmp_path), "db.t", SOURCE, ["id"]).commit_stream(_batch(400, 700), _pos(700))

    lake.other = other_host
    outcome = lake.commit_stream(_batch(400, 600), _pos(600))  # the same changes, a shorter batch
    assert outcome == "replayed"
    changes = DeltaTable(lake.changelog_uri).to_pyarrow_table().filter(pa.compute.field("_op") != "r")
    positions = changes["_pos"].to_pylist()
    assert len(positions) == len(set(positions)) == 50, "a change was committed twice"
    assert lake.tail_position() == _pos(700).boundary()
    latest = {o % 20: o for o in range(205, 700, 10)}  # the last update of each key
    current = lake.read_current(["id", "v"]).to_pylist()
    assert {r["id"]: r["v"] for r in current} == {k: latest.get(k, 0) for k in range(20)}
