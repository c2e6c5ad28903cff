"""A chunk's first read is encoded once and the one file is added to both Delta tables
(``store.shared_file``): what users read from either table is what two separate writes gave (delta-rs and
DuckDB on a local path; no database, no Spark)."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.lake import current_schema, snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables
from tests.support.lakecheck import duckdb_current

SOURCE = pa.schema([pa.field("id", pa.int32(), False), pa.field("day", pa.date32()),
                    pa.field("price", pa.decimal128(15, 2)), pa.field("note", pa.string())])


def _pos(offset: int) -> SourcePosition:
    return SourcePosition.at("mysql-bin.000001", offset)


def _chunk_rows(keys, hw: int, chunk: int, tag: str = "") -> pa.Table:
    rows = pa.table({"id": pa.array(list(keys), pa.int32()),
                     "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=k) for k in keys], pa.date32()),
                     "price": pa.array([Decimal(k) / 100 for k in keys], pa.decimal128(15, 2)),
                     "note": pa.array([f"{tag}{k}" + "x" * 40 if k % 2 else None for k in keys], pa.string())})
    return snapshot_rows(rows, _pos(hw).as_snapshot().encode(), chunk, 0, SOURCE)


def _files(uri: str) -> list[Path]:
    return sorted(p for p in Path(uri).rglob("*.parquet"))


def test_a_first_read_is_one_file_in_both_tables_and_each_reads_as_its_own_columns(tmp_path):
    lake = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
    assert lake.commit_chunk(0, _pos(1000), _chunk_rows(range(0, 50), 1000, 0)) is True
    assert lake.commit_chunk(1, _pos(2000), _chunk_rows(range(50, 100), 2000, 1)) is True

    changelog_files, current_files = _files(lake.changelog_uri), _files(lake.current_uri)
    assert len(changelog_files) == len(current_files) == 2
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert sorted(map(digest, changelog_files)) == sorted(map(digest, current_files))
    assert {p.parent.name for p in current_files} == {"_chunk=0", "_chunk=1"}

    current = DeltaTable(lake.current_uri)
    assert current.transaction_version("dblog-chunk-1") == _pos(2000).boundary().to_version()
    read = current.to_pyarrow_dataset().to_table().sort_by("id")
    assert read.column_names == current_schema(SOURCE).names  # no _kind, no _before
    assert read["id"].to_pylist() == list(range(100))
    assert read["_chunk"].to_pylist() == [0] * 50 + [1] * 50
    assert read["price"].to_pylist()[7] == Decimal("0.07")
    by_duckdb = duckdb_current(str(tmp_path), "db.t", str(tmp_path / "ext")).read_all().sort_by("id")
    assert by_duckdb.column_names == current_schema(SOURCE).names
    assert by_duckdb["note"].to_pylist() == read["note"].to_pylist()
    assert by_duckdb["_chunk"].to_pylist() == read["_chunk"].to_pylist()

    changelog = DeltaTable(lake.changelog_uri)
    log = changelog.to_pyarrow_dataset().to_table()
    assert log.num_rows == 100 and set(log["_kind"].to_pylist()) == {"+I"} and log["_before"].null_count == 100
    # the statistics let readers skip the snapshot files older than a position
    dataset = changelog.to_pyarrow_dataset()
    assert len(list(dataset.get_fragments(filter=pc.field("_pos") > _pos(1500).encode()))) == 1


def test_filtered_reads_of_current_skip_no_file_they_need(tmp_path):
    """The copy's statistics are the changelog file's (delta-rs's own), without the columns ``current``
    does not declare: a filter on any column returns what filtering every row returns."""
    lake = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
    for chunk in range(3):
        lake.commit_chunk(chunk, _pos(1000 + chunk), _chunk_rows(range(chunk * 20, chunk * 20 + 20), 1000 + chunk, chunk))
    current = DeltaTable(lake.current_uri)
    adds = [json.loads(line)["add"] for entry in sorted(Path(lake.current_uri, "_delta_log").glob("*.json"))
            for line in entry.read_text().splitlines() if '"add"' in line]
    assert len(adds) == 3
    for add in adds:
        stats = json.loads(add["stats"])
        assert stats["numRecords"] == 20 and "id" in stats["minValues"] and "note" in stats["maxValues"]
        assert not {"_kind", "_before", "_chunk"} & (set(stats["minValues"]) | set(stats["nullCount"]))
    everything = current.to_pyarrow_dataset().to_table()
    filters = [pc.field("price") > pa.scalar(Decimal("0.25"), pa.decimal128(15, 2)), pc.field("note") > "3",
               pc.field("note").is_null(), pc.field("day") >= pa.scalar(dt.date(2024, 2, 10)),
               pc.field("id") < 7, pc.field("_pos") > _pos(1001).as_snapshot().encode(), pc.field("_op") == "r"]
    for expression in filters:
        want = sorted(everything.filter(expression)["id"].to_pylist())
        assert want, expression
        assert sorted(current.to_pyarrow_dataset().to_table(filter=expression)["id"].to_pylist()) == want, expression


def test_two_first_reads_of_one_chunk_racing_leave_the_later_one(tmp_path):
    """Both pass the first-read check; the one that loses ``current``'s commit is merged (or dropped if
    older), and the changelog holds both reads' rows."""
    for attempt in range(4):
        root = tmp_path / str(attempt)
        barrier = threading.Barrier(2)
        results = {}

        def read(hw: int, tag: str):
            lake = LakeTables(str(root), "db.t", SOURCE, ["id"])
            rows = _chunk_rows(range(0, 40) if tag == "old" else range(0, 30), hw, 0, tag)
            barrier.wait()
            results[tag] = lake.commit_chunk(0, _pos(hw), rows)

        threads = [threading.Thread(target=read, args=(1000, "old")), threading.Thread(target=read, args=(2000, "new"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["new"] is True
        current = DeltaTable(f"{root}/db.t/current").to_pyarrow_dataset().to_table().sort_by("id")
        assert current["id"].to_pylist() == list(range(30))  # the later read: keys 30-39 are gone
        assert all(n is None or n.startswith("new") for n in current["note"].to_pylist())
        changelog = DeltaTable(f"{root}/db.t/changelog").to_pyarrow_dataset().to_table()
        assert pc.sum(pc.equal(changelog["_op"], "r")).as_py() == 70  # each read once
        # when the older read committed first, the later one's removals (keys 30-39) are delete rows
        deleted = changelog.filter(pc.equal(changelog["_op"], "d"))["id"].to_pylist()
        assert sorted(deleted) in ([], list(range(30, 40))), deleted


class LandsThenRaises(LakeTables):
    """A lake whose first changelog append commits and then raises a commit conflict, as delta-rs does
    when an S3 PUT is retried after its answer was lost (the retry finds the commit it made)."""

    raised = 0

    def _append(self, rows, commit=None, checked=None):
        from deltalake.exceptions import CommitFailedError

        changelog = super()._append(rows, commit, checked)
        if not self.raised:
            self.raised += 1
            raise CommitFailedError("Transaction failed: version already exists")
        return changelog


def test_a_chunk_append_that_lands_and_still_raises_is_not_written_twice(tmp_path):
    lake = LandsThenRaises(str(tmp_path), "db.t", SOURCE, ["id"])
    assert lake.commit_chunk(0, _pos(1000), _chunk_rows(range(0, 40), 1000, 0)) is True  # a first read
    names = lambda uri: {Path(f).name for f in DeltaTable(uri).file_uris()}  # noqa: E731
    assert len(names(lake.changelog_uri)) == 1 and names(lake.current_uri) == names(lake.changelog_uri)  # shared
    lake.raised = 0
    assert lake.commit_chunk(0, _pos(2000), _chunk_rows(range(0, 30), 2000, 0, "new")) is True  # a re-read
    assert lake.raised == 1
    changelog = DeltaTable(lake.changelog_uri)
    rows = changelog.to_pyarrow_dataset().to_table()
    assert pc.sum(pc.equal(rows["_op"], "r")).as_py() == 70  # each read once
    assert sorted(rows.filter(pc.equal(rows["_op"], "d"))["id"].to_pylist()) == list(range(30, 40))  # and its removals
    assert len(changelog.file_uris()) == 2
    current = DeltaTable(lake.current_uri).to_pyarrow_dataset().to_table().sort_by("id")
    assert current["id"].to_pylist() == list(range(30))
    assert all(n is None or n.startswith("new") for n in current["note"].to_pylist())


class MetadataChangesMeanwhile(LakeTables):
    """A lake in which another writer commits a metadata change that keeps the columns (as a second
    writer creating the table at the same moment does) while a first read is written."""

    def _append_once(self, what, rows):
        adds = super()._append_once(what, rows)
        DeltaTable(self.current_uri).alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
        return adds


def test_a_first_read_whose_commit_meets_a_metadata_change_is_still_one_file(tmp_path):
    LakeTables(str(tmp_path), "db.t", SOURCE, ["id"]).commit_chunk(0, _pos(1000), _chunk_rows(range(0, 10), 1000, 0))
    lake = MetadataChangesMeanwhile(str(tmp_path), "db.t", SOURCE, ["id"])
    assert lake.commit_chunk(1, _pos(2000), _chunk_rows(range(10, 20), 2000, 1)) is True
    names = lambda uri: {Path(f).name for f in DeltaTable(uri).file_uris()}  # noqa: E731
    assert names(lake.current_uri) == names(lake.changelog_uri) and len(names(lake.current_uri)) == 2
    current = DeltaTable(lake.current_uri)
    assert current.transaction_version("dblog-chunk-1") == _pos(2000).boundary().to_version()
    assert sorted(current.to_pyarrow_dataset().to_table()["id"].to_pylist()) == list(range(20))
