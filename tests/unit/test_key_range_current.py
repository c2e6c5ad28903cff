"""``current`` in key-range files: an update rewrites only the files whose keys changed, and gives the same
``current`` as one delta-rs MERGE of the same changes (the old path); a chunk read committed meanwhile makes
it retry; compaction keeps the ranges (delta-rs on a local path; no database, no Spark)."""
from __future__ import annotations

import struct
import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store import key_ranges
from airflow_provider_dblog.store.lake import event_rows, snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables

SOURCE = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.int64()), pa.field("s", pa.string())])
CHUNKS = {0: (0, 100), 1: (100, 200), 2: (200, 300)}  # chunk 2 is the last: keys past 299 fall in it
HWS = {0: 40, 1: 60, 2: 80}  # changes start at position 20: some come before their chunk's HW


def _pos(offset: int) -> SourcePosition:
    return SourcePosition.at("mysql-bin.000001", offset)


def _chunk_of(key: int) -> int:
    return min(2, key // 100)


def _snapshotted(path, file_rows: int = 10, apply_mode: str = "files") -> LakeTables:
    lake = LakeTables(str(path), "db.t", SOURCE, ["id"])
    lake.file_rows, lake.apply_mode = file_rows, apply_mode
    for chunk, (lo, hi) in CHUNKS.items():
        rows = pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": pa.array(range(lo, hi), pa.int64()),
                         "s": pa.array([f"r{k}" for k in range(lo, hi)])}, schema=SOURCE)
        hw = _pos(HWS[chunk])
        lake.commit_chunk(chunk, hw, snapshot_rows(rows, hw.as_snapshot().encode(), chunk, 0, SOURCE))
    return lake


def _events(changes: list[tuple[int, str, int]], first: int) -> pa.Table:
    events, chunks = [], []
    for i, (key, op, value) in enumerate(changes):
        image = {"id": key, "v": value, "s": f"s{value}"}
        before, after = (None, image) if op == "c" else (image, None) if op == "d" else (image, image)
        events.append(ChangeEvent("db.t", op, _pos(first + i), (key,), after, before))
        chunks.append(_chunk_of(key))
    return event_rows(events, chunks, SOURCE)


def _current(lake: LakeTables) -> list[tuple]:
    table = DeltaTable(lake.current_uri).to_pyarrow_table(columns=["id", "v", "s", "_op", "_pos", "_chunk"])
    return sorted(zip(*(table[c].to_pylist() for c in table.column_names)))


def _ranges(lake: LakeTables) -> dict[int, list[tuple]]:
    """Per chunk the (min, max) key of each file, sorted."""
    files = key_ranges.range_files(DeltaTable(lake.current_uri), ["id"])
    out: dict[int, list[tuple]] = {}
    for f in files:
        out.setdefault(f.chunk, []).append((f.low[0], f.high[0], f.rows))
    return {c: sorted(r) for c, r in out.items()}


def _assert_disjoint(lake: LakeTables) -> None:
    for chunk, ranges in _ranges(lake).items():
        assert all(lo is not None and hi is not None for lo, hi, _ in ranges), f"chunk {chunk}: a file has no key stats"
        for (_, hi, _), (lo, _, _) in zip(ranges, ranges[1:]):
            assert hi < lo, f"chunk {chunk}: files' key ranges overlap: {ranges}"


change = st.tuples(st.integers(0, 340), st.sampled_from("cud"), st.integers(0, 10**6))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(change, min_size=1, max_size=60), min_size=1, max_size=4),
       first=st.sampled_from([20, 90]))  # 90: every change after every chunk's HW
def test_key_range_update_gives_the_lake_of_one_merge(tmp_path_factory, batches, first):
    """Random inserts, updates and deletes (keys past the last chunk's end included, some before their
    chunk's HW) in several micro-batches: ``current`` equals what the old MERGE path makes, and its files
    stay disjoint key ranges."""
    root = tmp_path_factory.mktemp("lakes")
    files, merged = _snapshotted(root / "files"), _snapshotted(root / "merge", apply_mode="merge")
    scanned = _snapshotted(root / "scanned")  # ``current`` updated by another object: from the changelog's rows
    for batch in batches:
        rows, end = _events(batch, first), _pos(first + len(batch) + 1)
        first += len(batch) + 2
        for lake in (files, merged):
            lake.commit_stream(rows, end)  # ``current`` from the rows this object just appended
        scanned.commit_stream(rows, end, update_current=False)
        other = LakeTables(str(root / "scanned"), "db.t", SOURCE, ["id"])
        other.file_rows = scanned.file_rows
        other.update_current(end)
        assert _current(files) == _current(merged) == _current(scanned)
        ids = [r[0] for r in _current(files)]
        assert len(ids) == len(set(ids)), "a key is in current twice"
        _assert_disjoint(files)
        assert DeltaTable(files.current_uri).transaction_version("dblog-tail") == end.boundary().to_version()


def test_an_update_rewrites_only_the_files_whose_keys_changed(tmp_path):
    lake = _snapshotted(tmp_path, file_rows=10)
    lake.commit_stream(_events([(0, "u", 1), (150, "u", 1), (250, "u", 1)], 100), _pos(200))
    assert lake.rewritten == (3, 300), "the first update of a chunk rewrites its one snapshot file"
    assert [len(r) for r in _ranges(lake).values()] == [10, 10, 10], "each chunk split into 10-row key ranges"
    before = set(DeltaTable(lake.current_uri).file_uris())

    # an update of key 155 and a delete of 157 (one file), an insert past the end (the last file)
    lake.commit_stream(_events([(155, "u", 7), (157, "d", 0), (305, "c", 9)], 300), _pos(400))
    after = set(DeltaTable(lake.current_uri).file_uris())
    assert lake.rewritten == (2, 9 + 11)
    assert len(before - after) == 2 and len(after - before) == 2, "only the two touched files were replaced"
    ranges = _ranges(lake)
    assert (150, 159, 9) in ranges[1] and (290, 305, 11) in ranges[2]
    rows = {r[0]: r for r in _current(lake)}
    assert rows[155][1] == 7 and 157 not in rows and rows[305][1] == 9 and rows[154][1] == 154

    # a key inside a gap goes to the file below it; a file that grows past twice file_rows is split
    lake.commit_stream(_events([(306 + i, "c", i) for i in range(12)], 500), _pos(600))
    ranges = _ranges(lake)[2]
    assert sum(r for _, _, r in ranges) == 100 + 1 + 12
    assert max(r for _, _, r in ranges) <= 20 and ranges[-1][1] == 317
    _assert_disjoint(lake)


def test_a_rewrite_that_fails_part_way_leaves_current_as_it_was(tmp_path, monkeypatch):
    """The files of every touched chunk are rewritten on one pool: one rewrite failing (a full disk, a killed
    write) after others staged theirs fails the update with nothing committed to ``current``; the same batch
    committed again gives the lake of one merge."""
    lake, merged = _snapshotted(tmp_path / "files"), _snapshotted(tmp_path / "merge", apply_mode="merge")
    changes = [(k, "u", 10_000 + k) for k in range(0, 300, 7)] + [(k, "d", 0) for k in (3, 150, 299)]
    rows, end = _events(changes, 100), _pos(100 + len(changes) + 1)
    lake.commit_stream(_events([(0, "u", 1), (150, "u", 1), (250, "u", 1)], 90), _pos(99))  # key-range files
    merged.commit_stream(_events([(0, "u", 1), (150, "u", 1), (250, "u", 1)], 90), _pos(99))
    before, version = _current(lake), DeltaTable(lake.current_uri).version()
    stage_sorted, calls = LakeTables._stage_sorted, []

    def failing(self, rows, partition):
        calls.append(partition["_chunk"])
        if partition["_chunk"] == "2":  # the last chunk's: the other chunks' files are staged, or being staged
            raise OSError("No space left on device")
        return stage_sorted(self, rows, partition)

    monkeypatch.setattr(LakeTables, "_stage_sorted", failing)
    try:
        lake.commit_stream(rows, end)
        raise AssertionError("the failed rewrite went unseen")
    except OSError:
        pass
    assert {"0", "1"} <= set(calls), f"the failure came before the other chunks' rewrites: {calls}"
    assert DeltaTable(lake.current_uri).version() == version and _current(lake) == before, "current changed"
    monkeypatch.setattr(LakeTables, "_stage_sorted", stage_sorted)
    again = LakeTables(str(tmp_path / "files"), "db.t", SOURCE, ["id"])
    again.file_rows = lake.file_rows
    assert again.commit_stream(rows, end) == "replayed"  # the changelog has the batch; ``current`` catches up
    merged.commit_stream(rows, end)
    assert _current(again) == _current(merged)
    assert DeltaTable(again.current_uri).transaction_version("dblog-tail") == end.boundary().to_version()
    _assert_disjoint(again)


def test_a_chunk_read_committed_meanwhile_makes_the_update_retry(tmp_path):
    """A chunk read that commits between the update's read of ``current`` and its commit conflicts with it
    (the update carries the chunk's HW again): retried, no row lost or doubled, the later read kept."""
    lake = _snapshotted(tmp_path)
    lake.commit_stream(_events([(k, "u", -k) for k in range(100, 300, 3)], 100), _pos(800), update_current=False)
    reread = pa.table({"id": pa.array(range(100, 200), pa.int64()), "v": pa.array([-1] * 100, pa.int64()),
                       "s": pa.array(["again"] * 100)}, schema=SOURCE)
    hw = _pos(900)
    original, calls = lake._apply_to_files, []

    def read_commits_in_between(current, changes, hws, end):
        calls.append(1)
        if len(calls) == 1:
            other = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
            thread = threading.Thread(target=lambda: other.commit_chunk(
                1, hw, snapshot_rows(reread, hw.as_snapshot().encode(), 1, 0, SOURCE)))
            thread.start()
            thread.join()
        return original(current, changes, hws, end)

    lake._apply_to_files = read_commits_in_between
    lake.update_current(_pos(800))
    assert len(calls) == 2, "the update that read current before the chunk read committed was not retried"
    current = DeltaTable(lake.current_uri).to_pyarrow_table()
    ids = current["id"].to_pylist()
    assert len(ids) == len(set(ids)) == 300
    chunk1 = current.filter(pc.equal(current["_chunk"], 1))
    assert set(chunk1["v"].to_pylist()) == {-1}, "the chunk read at a later HW was overwritten"
    chunk2 = current.filter(pc.equal(current["_chunk"], 2))
    assert sorted(chunk2.filter(pc.less(chunk2["v"], 0))["id"].to_pylist()) == list(range(202, 300, 3))


def test_a_never_read_chunk_takes_the_merge(tmp_path):
    """Changes in a chunk with no HW recorded (never read) go through delta-rs's MERGE, whose conflict
    check covers a first read committed meanwhile: same rows as ever."""
    lake = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
    hw = _pos(40)
    rows = pa.table({"id": pa.array(range(0, 100), pa.int64()), "v": pa.array(range(100), pa.int64()),
                     "s": pa.array(["r"] * 100)}, schema=SOURCE)
    lake.commit_chunk(0, hw, snapshot_rows(rows, hw.as_snapshot().encode(), 0, 0, SOURCE))
    lake.commit_stream(_events([(5, "u", 50), (150, "c", 51), (250, "c", 52)], 100), _pos(200))
    got = {r[0]: r[1] for r in _current(lake)}
    assert got[5] == 50 and got[150] == 51 and got[250] == 52 and len(got) == 102


def test_compaction_merges_small_neighbours_and_keeps_ranges(tmp_path):
    lake = _snapshotted(tmp_path, file_rows=10)
    lake.commit_stream(_events([(0, "u", 1), (150, "u", 1), (250, "u", 1)], 100), _pos(200))
    # deletes leave small files in chunk 1
    lake.commit_stream(_events([(k, "d", 0) for k in range(100, 200) if k % 10 > 2], 300), _pos(500))
    before = _current(lake)
    small = sum(1 for lo, hi, rows in _ranges(lake)[1] if rows < 5)
    assert small == 10
    lake.maintain(retention_hours=168)
    assert _current(lake) == before
    assert [rows for _, _, rows in _ranges(lake)[1]] == [9, 9, 9, 3], \
        "the 3-row files of chunk 1 were not merged into files of at most 10 rows"
    assert len(_ranges(lake)[0]) == 10, "full files were rewritten"
    _assert_disjoint(lake)
    lake.commit_stream(_events([(55, "u", 5)], 600), _pos(700))
    assert lake.rewritten[0] == 1, "after compaction an update still rewrites one file"


MERGE_ON_READ = """
SELECT * EXCLUDE (_rn) FROM (
  SELECT *, row_number() OVER (PARTITION BY id ORDER BY _pos DESC) AS _rn FROM (
    SELECT id, v, s, _op, _pos FROM delta_scan('{lake}/current')
    UNION ALL
    SELECT id, v, s, _op, _pos FROM delta_scan('{lake}/changelog') WHERE _pos > '{since}'))
WHERE _rn = 1 AND _op <> 'd'
"""


def test_merge_on_read_in_duckdb_gives_the_current_of_the_changelog_head(tmp_path):
    """docs/lake.md's merge-on-read view: ``current`` plus the changelog after the position ``current``
    records (read from its Delta log with delta-rs alone, as docs/lake.md shows), newest ``_pos`` per key,
    deletes dropped: equals ``current`` once it has caught up; with no position (the whole changelog) too."""
    import duckdb
    from duckdb_extensions import import_extension

    lake = _snapshotted(tmp_path)
    lake.commit_stream(_events([(k, "u", k + 1000) for k in range(0, 300, 7)], 100), _pos(200))
    behind = _events([(5, "d", 0), (7, "u", -7), (150, "u", -150), (320, "c", 320), (7, "d", 0), (7, "c", 77)], 300)
    lake.commit_stream(behind, _pos(400), update_current=False)  # a merge interval: current lags

    v = DeltaTable(lake.current_uri).transaction_version("dblog-tail")
    since = f"{v >> 40:08d}.{v & ((1 << 40) - 1):012d}"  # docs/lake.md: the position current records
    con = duckdb.connect(config={"extension_directory": str(tmp_path / "ext")})
    import_extension("delta", con=con)
    con.sql("LOAD delta")
    table = f"{tmp_path}/db.t"
    fresh = con.sql(MERGE_ON_READ.format(lake=table, since=since)).arrow().read_all()
    replayed = con.sql(MERGE_ON_READ.format(lake=table, since="")).arrow().read_all()
    stale = {r[0]: r[1] for r in _current(lake)}
    assert stale[5] == 5 and 320 not in stale, "current was expected to lag in this test"

    lake.update_current()
    caught_up = [(r[0], r[1], r[2], r[3], r[4]) for r in _current(lake)]
    for view in (fresh, replayed):
        got = sorted(zip(*(view[c].to_pylist() for c in ("id", "v", "s", "_op", "_pos"))))
        assert got == caught_up
    assert {r[0]: r[1] for r in caught_up}[7] == 77


@pytest.mark.parametrize("apply_mode", ["files", "merge"])
def test_float_keys_are_matched_by_their_bits(tmp_path, apply_mode):
    """delta-rs's MERGE matches ``t.k = s.k`` with -0.0 = 0.0 (checked on delta-rs: a change of 0.0 updated the
    -0.0 row too, leaving two -0.0 rows): every MERGE of ``current`` (a tail's, a chunk read again) matches float
    keys by their bits, as the files path does; NaN payloads stay apart."""
    source = pa.schema([pa.field("k", pa.float64(), False), pa.field("v", pa.int64())])
    lake = LakeTables(str(tmp_path), "db.f", source, ["k"])
    lake.apply_mode = apply_mode
    other_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    keys = [-0.0, 0.0, float("nan"), other_nan, 1.0]

    def bits(values: list) -> list[tuple]:
        return sorted((struct.pack(">d", k).hex(), v) for k, v in values)

    def read(chunk: int, at: int, v: int):
        hw = _pos(at)
        rows = pa.table({"k": pa.array(keys, pa.float64()), "v": pa.array([v] * len(keys))}, schema=source)
        lake.commit_chunk(chunk, hw, snapshot_rows(rows, hw.as_snapshot().encode(), chunk, 0, source))

    read(0, 10, 0)
    events = [ChangeEvent("db.f", "u", _pos(20 + i), (k,), {"k": k, "v": v}, {"k": k, "v": 0})
              for i, (k, v) in enumerate([(0.0, 1), (float("nan"), 2)])]
    lake.commit_stream(event_rows(events, [0, 0], source), _pos(30))
    table = DeltaTable(lake.current_uri).to_pyarrow_table(columns=["k", "v"])
    assert bits(zip(table["k"].to_pylist(), table["v"].to_pylist())) == bits(zip(keys, [0, 1, 2, 0, 0]))
    read(0, 40, 5)  # the chunk read again: a MERGE of its rows
    table = DeltaTable(lake.current_uri).to_pyarrow_table(columns=["k", "v"])
    assert bits(zip(table["k"].to_pylist(), table["v"].to_pylist())) == bits(zip(keys, [5] * 5))


def _reread_losing_once_to(lake: LakeTables, tmp_path, chunk: int, hw: SourcePosition, rows: pa.Table, tail) -> int:
    """``lake`` reads ``chunk`` again at ``hw``; between its first read of the changelog and its commit to ``current``,
    ``tail(other)`` commits with another object of the same tables (a tail in another process). Returns the read's
    commit attempts."""
    original, calls = lake._write_chunk, []

    def tail_commits_in_between(current, chunk_id, live, version):
        calls.append(1)
        if len(calls) == 1:
            other = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
            other.apply_mode = lake.apply_mode
            thread = threading.Thread(target=tail, args=(other,))
            thread.start()
            thread.join()
        return original(current, chunk_id, live, version)

    lake._write_chunk = tail_commits_in_between
    lake.commit_chunk(chunk, hw, snapshot_rows(rows, hw.as_snapshot().encode(), chunk, 0, SOURCE))
    return len(calls)


def _chunk_rows(chunk: int, value: int) -> pa.Table:
    lo, hi = CHUNKS[chunk]
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": pa.array([value] * (hi - lo), pa.int64()),
                     "s": pa.array(["again"] * (hi - lo))}, schema=SOURCE)


@pytest.mark.parametrize("apply_mode", ["files", "merge"])
def test_a_reread_that_loses_to_a_tail_batch_keeps_the_batchs_changes_of_its_chunk(tmp_path, apply_mode):
    """A chunk read again overwrites the chunk's partition in one short commit; a tail batch committed between its
    read of the changelog and that commit conflicts with it (a rewrite of the chunk's files, or a MERGE's, ``apply_mode``
    merge), and the retry reads the changelog's files added since: the batch's changes of the chunk after the read's
    HW are kept, none doubled."""
    lake = _snapshotted(tmp_path, apply_mode=apply_mode)
    lake.commit_stream(_events([(110, "u", -110)], 100), _pos(200))
    batch = _events([(120, "u", -120), (130, "d", 0), (199, "c", -199), (120, "u", -121)], 950)

    attempts = _reread_losing_once_to(lake, tmp_path, 1, _pos(900), _chunk_rows(1, 7),
                                      lambda other: other.commit_stream(batch, _pos(960)))
    assert attempts == 2, "the read committed over the tail's batch without a conflict"
    current = DeltaTable(lake.current_uri).to_pyarrow_table()
    ids = current["id"].to_pylist()
    assert len(ids) == len(set(ids)), "a key is held twice"
    chunk1 = {r["id"]: r["v"] for r in current.filter(pc.equal(current["_chunk"], 1)).to_pylist()}
    assert chunk1.pop(120) == -121 and chunk1.pop(199) == -199 and 130 not in chunk1, "a change after the HW was lost"
    assert set(chunk1.values()) == {7}  # the read, over the change at 200 (before its HW)
    assert DeltaTable(lake.current_uri).transaction_version("dblog-chunk-1") == _pos(900).boundary().to_version()
    _assert_disjoint(lake)


def test_a_tail_merge_that_only_inserts_into_a_read_chunk_conflicts_with_its_reread(tmp_path):
    """A tail's MERGE (the path of a batch with a change in a chunk never read) that only inserts keys adds a file
    and removes none: a commit of files removing the chunk's (``create_write_transaction``) does not conflict with
    it, and kept the MERGE's file beside its own rows (the key twice); the overwrite of the partition does."""
    lake = _snapshotted(tmp_path, apply_mode="merge")
    lake.commit_stream(_events([(150, "d", 0)], 100), _pos(200))  # not in current, nor in the read
    rows = _chunk_rows(1, 7).filter(pc.not_equal(_chunk_rows(1, 7)["id"], 150))
    inserts = _events([(150, "c", -150), (350, "c", -350)], 950)  # new keys only: the MERGE removes no file

    attempts = _reread_losing_once_to(lake, tmp_path, 1, _pos(900), rows,
                                      lambda other: other.commit_stream(inserts, _pos(960)))
    assert attempts == 2, "the read committed over the tail's MERGE without a conflict"
    ids = DeltaTable(lake.current_uri).to_pyarrow_table()["id"].to_pylist()
    assert ids.count(150) == 1 and ids.count(350) == 1 and len(ids) == len(set(ids)) == 301, sorted(ids)


def test_a_reread_does_not_conflict_with_a_tail_batch_in_other_chunks(tmp_path):
    """The read's overwrite conflicts only with commits that touched its chunk: a tail batch changing other chunks
    in between costs it no retry (a commit of files conflicted with any removal, and lost every race to a tail
    committing every half second: ``gave up after 30 commit conflicts``)."""
    lake = _snapshotted(tmp_path)
    lake.commit_stream(_events([(110, "u", -110)], 100), _pos(200))
    batch = _events([(5, "u", -5), (250, "d", 0), (305, "c", -305)], 950)
    attempts = _reread_losing_once_to(lake, tmp_path, 1, _pos(900), _chunk_rows(1, 7),
                                      lambda other: other.commit_stream(batch, _pos(960)))
    assert attempts == 1
    current = {r["id"]: r["v"] for r in DeltaTable(lake.current_uri).to_pyarrow_table().to_pylist()}
    assert current[5] == -5 and 250 not in current and current[305] == -305 and current[110] == 7, current


def test_a_first_read_beside_the_tails_first_batch_leaves_no_key_twice(tmp_path, monkeypatch):
    """A chunk's first read adds its file to ``current`` (``store.shared_file``) from a version with no tail batch;
    a tail's first batch committed in between inserted a changed key of that chunk (its MERGE: the chunk had no HW
    yet) and does not conflict with an added file: the key was held twice. The read sees the tail's commit and
    writes the chunk again over its partition."""
    from airflow_provider_dblog.store import shared_file

    lake = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
    rows = {c: _chunk_rows(c, 1) for c in CHUNKS}
    lake.commit_chunk(0, _pos(40), snapshot_rows(rows[0], _pos(40).as_snapshot().encode(), 0, 0, SOURCE))
    original, calls = shared_file.commit_added, []

    def tail_commits_in_between(table, actions, partition_by, commit=None):
        calls.append(1)
        if len(calls) == 1:
            other = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
            thread = threading.Thread(target=other.commit_stream, args=(_events([(150, "u", -150)], 950), _pos(960)))
            thread.start()
            thread.join()
        return original(table, actions, partition_by, commit)

    monkeypatch.setattr(shared_file, "commit_added", tail_commits_in_between)
    assert lake.commit_chunk(1, _pos(60), snapshot_rows(rows[1], _pos(60).as_snapshot().encode(), 1, 0, SOURCE))
    assert calls, "the first read did not take the shared file"
    current = DeltaTable(lake.current_uri).to_pyarrow_table()
    ids = current["id"].to_pylist()
    assert ids.count(150) == 1 and len(ids) == len(set(ids)) == 200, sorted(ids)
    assert current.filter(pc.equal(current["id"], 150))["v"].to_pylist() == [-150]


def _change(op: str, at: int, key: int, value: int) -> ChangeEvent:
    image = {"id": key, "v": value, "s": "x"}
    return ChangeEvent("db.t", op, _pos(at), (key,), None if op == "d" else image, image if op != "c" else None)


@pytest.mark.parametrize("chunk", [1, 3], ids=["read-chunk", "never-read-chunk"])
def test_a_tail_update_that_changes_no_row_of_the_chunk_still_conflicts_with_its_read(tmp_path, chunk):
    """``current`` lags its changelog and lacks key K; a read of K's chunk (again, or its first after tail batches)
    holds K; between its read of the changelog and its commit, the tail deletes K after the read's HW and updates
    ``current``: a no-op there (no file of the chunk touched: K is not in ``current``), yet past the delete. Had the
    read's overwrite committed without a conflict, K stayed live for good (found by review of the overwrite)."""
    lake = _snapshotted(tmp_path, apply_mode="merge")
    key = 150 if chunk == 1 else 950  # chunk 3: keys past 299 with a chunk of their own, never read
    lake.commit_stream(event_rows([_change("d", 100, key, 0), _change("u", 101, 10, -1)], [chunk, 0], SOURCE), _pos(200))
    lake.commit_stream(event_rows([_change("c", 300, key, -key)], [chunk], SOURCE), _pos(310), update_current=False)
    rows = (pa.table({"id": pa.array([950], pa.int64()), "v": pa.array([-950], pa.int64()), "s": ["x"]}, schema=SOURCE)
            if chunk == 3 else _chunk_rows(1, 7))
    gone = event_rows([_change("d", 500, key, 0), _change("u", 501, 10, -10)], [chunk, 0], SOURCE)

    attempts = _reread_losing_once_to(lake, tmp_path, chunk, _pos(400), rows,
                                      lambda other: other.commit_stream(gone, _pos(510)))
    lake.update_current()
    ids = DeltaTable(lake.current_uri).to_pyarrow_table()["id"].to_pylist()
    assert key not in ids and attempts == 2, f"the delete of {key} after the read's HW was lost ({attempts} attempts)"


def test_a_reads_retry_after_a_column_dropped_without_a_changelog_file_takes_the_lakes_columns(tmp_path):
    """The lake drops a column (no changelog file written) between a re-read's read of the changelog and its commit:
    the retry takes ``current``'s columns (before, a raw KeyError of the dropped column)."""
    lake = _snapshotted(tmp_path)
    lake.commit_stream(_events([(110, "u", -110)], 100), _pos(200))
    fewer = pa.schema([SOURCE.field("id"), SOURCE.field("v")])
    attempts = _reread_losing_once_to(lake, tmp_path, 1, _pos(900), _chunk_rows(1, 7),
                                      lambda other: other.evolve(fewer, _pos(950), log_rows=False))
    current = DeltaTable(lake.current_uri).to_pyarrow_table()
    assert attempts == 2 and "s" not in current.column_names
    assert set(current.filter(pc.equal(current["_chunk"], 1))["v"].to_pylist()) == {7}


ADDED = pa.schema([*SOURCE, pa.field("w", pa.int32())])


def _added_rows(chunk: int) -> pa.Table:
    rows = _chunk_rows(chunk, 7)
    return rows.append_column(ADDED.field("w"), pa.array([7] * rows.num_rows, pa.int32()))


@pytest.mark.parametrize("first_read", [False, True])
def test_a_read_a_column_added_overtakes_while_it_commits_is_read_again(tmp_path, first_read):
    """The tail follows ADD COLUMN w DEFAULT 7 at 950 while a chunk read at 900 commits, after the read's column check
    and before its commit to ``current``. Before: the retry conformed the rows to the lake's columns, w null in
    ``current`` (the changelog's replay said 7 for a re-read; nothing gave a first read's rows the DEFAULT). Now each
    attempt checks the columns again and the read is refused (``SchemaChangedError``: ``run_chunk`` reads the chunk
    again); the read again, with w, leaves ``current`` equal to the changelog's replay, w 7 everywhere."""
    from airflow_provider_dblog.core.errors import SchemaChangedError
    from tests.support.lakecheck import assert_replay_equals_current

    def follow(other: LakeTables) -> None:
        other.current(), other.changelog()
        assert other.evolve(ADDED, _pos(950), defaults={"w": pa.scalar(7, pa.int32())})

    hw = _pos(900)
    if first_read:  # chunk 1 never read: only chunk 0 in the lake; the tail follows during the read's changelog append
        lake = LakeTables(str(tmp_path), "db.t", SOURCE, ["id"])
        lake.commit_chunk(0, _pos(40), snapshot_rows(_chunk_rows(0, 0), _pos(40).as_snapshot().encode(), 0, 0, SOURCE))
        append, fired = lake._append_once, []

        def tail_follows_in_between(*args):
            if not fired:
                fired.append(1)
                follow(LakeTables(str(tmp_path), "db.t", SOURCE, ["id"]))
            return append(*args)

        lake._append_once = tail_follows_in_between
        with pytest.raises(SchemaChangedError, match="reading the chunk again"):
            lake.commit_chunk(1, hw, snapshot_rows(_chunk_rows(1, 7), hw.as_snapshot().encode(), 1, 0, SOURCE))
        assert fired
    else:
        lake = _snapshotted(tmp_path)
        with pytest.raises(SchemaChangedError, match="reading the chunk again"):
            _reread_losing_once_to(lake, tmp_path, 1, hw, _chunk_rows(1, 7), follow)
    current = DeltaTable(lake.current_uri).to_pyarrow_table()
    assert set(current["w"].to_pylist()) <= {7}  # nothing of the read in current with w null

    again = LakeTables(str(tmp_path), "db.t", ADDED, ["id"])  # the read again, after the statement
    at = _pos(1000)
    assert again.commit_chunk(1, at, snapshot_rows(_added_rows(1), at.as_snapshot().encode(), 1, 0, ADDED))
    current = DeltaTable(lake.current_uri).to_pyarrow_table()
    assert set(current["w"].to_pylist()) == {7} and set(current.filter(pc.equal(current["_chunk"], 1))["v"].to_pylist()) == {7}
    assert_replay_equals_current(str(tmp_path), "db.t")
