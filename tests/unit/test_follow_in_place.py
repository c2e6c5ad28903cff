"""Following schema changes in one rewrite of ``current`` applies the changelog exactly as the MERGE does
(delta-rs on a local path; no database, no Spark)."""
from __future__ import annotations

import random
import shutil

import pyarrow as pa
import pytest

from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.lake import event_rows, snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables

SOURCE = pa.schema([pa.field("id", pa.int32(), False), pa.field("v", pa.int64())])


def _pos(offset: int) -> SourcePosition:
    return SourcePosition.at("mysql-bin.000001", offset)


def _lake(path, seed: int) -> tuple[LakeTables, SourcePosition]:
    """Two chunks read at different HWs, then random changes (some before a chunk's HW) in the changelog only."""
    rnd = random.Random(seed)
    lake = LakeTables(str(path), "db.t", SOURCE, ["id"])
    for chunk, (keys, hw) in enumerate([(range(0, 20), 1000), (range(20, 40), 3000)]):
        rows = pa.table({"id": pa.array(list(keys), pa.int32()), "v": pa.array([k * 10 for k in keys], pa.int64())})
        lake.commit_chunk(chunk, _pos(hw), snapshot_rows(rows, _pos(hw).as_snapshot().encode(), chunk, 0, SOURCE))
    events, chunks = [], []
    for offset in range(500, 6000, 37):
        key = rnd.randrange(0, 45)
        op = rnd.choice("cud")
        image = {"id": key, "v": offset}
        events.append(ChangeEvent("db.t", op, _pos(offset), (key,), None if op == "d" else image,
                                  image if op != "c" else None))
        chunks.append(0 if key < 20 else 1)
    end = _pos(6000)
    lake.commit_stream(event_rows(events, chunks, SOURCE), end, update_current=False)
    return lake, end


@pytest.mark.parametrize("seed", range(5))
def test_one_rewrite_applies_the_changelog_like_the_merge(tmp_path, seed):
    merged, end = _lake(tmp_path / "a", seed)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    in_place = LakeTables(str(tmp_path / "b"), "db.t", SOURCE, ["id"])
    merged.update_current(end)
    # a "schema change" that changes nothing, in the middle: the rows are applied in two windows
    in_place.follow_in_place([(_pos(2500), _pos(2510), SOURCE, {}, {})], end)

    def rows(lake):
        return sorted(lake.read_current(["id", "v", "_op", "_pos"]).to_pylist(), key=lambda r: r["id"])

    assert rows(in_place) == rows(merged)
    assert in_place.tail_position() is not None and in_place.reread_position() == _pos(2510).boundary()


def test_an_added_column_gets_its_default_for_rows_from_before(tmp_path):
    lake, end = _lake(tmp_path, 1)
    wider = pa.schema([*SOURCE, pa.field("d", pa.string())])
    lake.follow_in_place([(_pos(2500), _pos(2510), wider, {}, {"d": pa.scalar("dflt")})], end)
    rows = lake.read_current(["id", "d", "_pos"]).to_pylist()
    assert rows and all((r["d"] == "dflt") == (r["_pos"] <= _pos(2510).as_snapshot().encode()) for r in rows)
