"""``LakeTables.maintain`` (the tail DAG's ``maintain`` task): compaction, a log checkpoint and a full
vacuum leave what both tables read unchanged, with fewer files, and remove the files no log entry
names once they are older than the retention (delta-rs on a local path; no database, no Spark)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from airflow_provider_dblog.store.lake_tables import LakeTables
from tests.unit.test_shared_file import SOURCE, _chunk_rows, _pos


def _read(uri: str) -> pa.Table:
    table = DeltaTable(uri).to_pyarrow_dataset().to_table()
    return table.sort_by([("_chunk", "ascending"), ("id", "ascending"), ("_pos", "ascending")])


def _orphan(uri: str, age_hours: float) -> Path:
    """A Parquet file no log entry names (what a write whose commit failed leaves), ``age_hours`` old."""
    source = sorted(p for p in Path(uri).rglob("*.parquet") if "_delta_log" not in p.parts)[0]  # not a checkpoint
    orphan = source.with_name("part-00000-orphan-c000.snappy.parquet")
    shutil.copyfile(source, orphan)
    then = time.time() - age_hours * 3600
    os.utime(orphan, (then, then))
    return orphan


def test_maintain_compacts_checkpoints_and_vacuums_without_changing_what_is_read(tmp_path):
    lake = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
    for read in range(3):  # first reads, then two re-reads of every chunk: merges leave removed files
        for chunk in range(4):
            hw = 1000 * (read + 1) + chunk
            lake.commit_chunk(chunk, _pos(hw), _chunk_rows(range(chunk * 25, chunk * 25 + 25 - read), hw, chunk, f"r{read}"))
    before = {uri: (_read(uri), len(DeltaTable(uri).file_uris())) for uri in (lake.current_uri, lake.changelog_uri)}
    stale, fresh = _orphan(lake.changelog_uri, 200), _orphan(lake.current_uri, 0)
    files_before = set(Path(tmp_path).rglob("*.parquet"))

    report = lake.maintain(retention_hours=168)

    for uri, (rows, files) in before.items():
        assert _read(uri).equals(rows), f"maintain changed what {uri} reads"
        assert len(DeltaTable(uri).file_uris()) <= files
        assert list(Path(uri, "_delta_log").glob("*.checkpoint.parquet")), f"{uri} has no checkpoint"
    # the changelog's 12 appends are compacted (current holds one file per chunk partition already)
    assert len(DeltaTable(lake.changelog_uri).file_uris()) < before[lake.changelog_uri][1] == 12
    assert not stale.exists() and fresh.exists()  # the 200-hour-old orphan went, the new one stays
    assert report["changelog"]["vacuumed"] >= 1
    # files only older versions need stay within the retention: the version before maintain still reads
    assert DeltaTable(lake.current_uri, version=report["current"]["version"] - 2).to_pyarrow_table().num_rows
    assert set(Path(tmp_path).rglob("*.parquet")) - {stale} >= files_before - {stale}

    lake.maintain(retention_hours=0)  # nothing kept for older versions: only the live files remain
    for uri, (rows, _) in before.items():
        assert _read(uri).equals(rows)
        live = {Path(f).resolve() for f in DeltaTable(uri).file_uris()}
        assert {p.resolve() for p in Path(uri).rglob("*.parquet") if "_delta_log" not in p.parts} == live
