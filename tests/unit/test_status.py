"""`dblog status` (issue 28): the phase rule and the text table (core/status.py), and the status step over the
in-memory dialect through a capture's life: planned, snapshotting, streaming, lag, stopped, needs re-snapshot.
The same runs against a real MariaDB in tests/integration/test_status.py."""
from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.retention import BinlogFile, BinlogRetention
from airflow_provider_dblog.core.status import (
    NEEDS_RESNAPSHOT, PHASES, PLANNED, SNAPSHOTTING, STOPPED, STREAMING, render, summarize, table_phase,
)
from airflow_provider_dblog.local.catch_up import catch_up_tables_in_driver
from airflow_provider_dblog.local.chunk_readers import snapshot_batches
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.steps.plan import plan_table
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.status import capture_status
from airflow_provider_dblog.steps.tail import BATCH_MEMORY_BYTES, table_committers
from airflow_provider_dblog.store.lake import changelog_uri
from airflow_provider_dblog.store.state import StateDir
from tests.support.fake_dialect import BINLOG, InMemoryServer

TABLE = "shop.t"


@pytest.mark.parametrize("total, done, in_map, stalled, purged, phase", [
    (4, 0, False, False, False, PLANNED),
    (4, 1, False, False, False, SNAPSHOTTING),
    (4, 4, False, False, False, SNAPSHOTTING),  # every chunk read, no offset map yet: `dblog report` is next
    (0, 0, False, False, False, PLANNED),  # a startup mode that reads no snapshot, not reported yet
    (4, 4, True, False, False, STREAMING),
    (0, 0, True, False, False, STREAMING),
    (4, 4, True, True, False, STOPPED),
    (4, 4, True, True, True, NEEDS_RESNAPSHOT),  # a purge outranks a stall: the stall cannot end without a re-read
    (4, 4, True, False, True, NEEDS_RESNAPSHOT),
    (4, 0, True, False, False, SNAPSHOTTING),  # planned again (a new key): its chunks are being read again
    (4, 2, False, True, True, SNAPSHOTTING),  # not in the offset map: no tail, so no stall nor purge applies
])
def test_the_phase_of_a_table(total, done, in_map, stalled, purged, phase):
    assert table_phase(total, done, in_map, stalled, purged) == phase


def entry(phase, lag_seconds=None, lag_bytes=None, **more) -> dict:
    return {"phase": phase, "chunks_done": 1, "chunks_total": 2, "lag_seconds": lag_seconds, "lag_bytes": lag_bytes,
            **more}


def test_the_summary_counts_every_phase_and_the_greatest_lag():
    tables = {"a.x": entry(STREAMING, 3.0, 100), "a.y": entry(STREAMING, 0.0, 0), "a.z": entry(PLANNED),
              "a.w": entry(STOPPED, 4000.0, 50)}
    summary = summarize(tables)
    assert summary["tables"] == 4 and list(summary["phases"]) == list(PHASES)
    assert summary["phases"] == {PLANNED: 1, SNAPSHOTTING: 0, STREAMING: 2, STOPPED: 1, NEEDS_RESNAPSHOT: 0}
    assert summary["max_lag_seconds"] == 4000.0 and summary["max_lag_bytes"] == 100
    assert summarize({"a.z": entry(PLANNED)})["max_lag_seconds"] is None


def test_the_text_has_one_aligned_line_per_table_the_summary_and_what_needs_attention():
    tables = {
        "shop.orders": entry(STREAMING, 2.0, 2048, lake_position="mysql-bin.000003:1234", rows_current=1500,
                             last_commit_at="2025-01-02T03:04:05Z", binlog_needed="mysql-bin.000003",
                             purge_in_seconds=86400 * 3.0),
        "shop.items": entry(SNAPSHOTTING, chunk_hw_min="mysql-bin.000002:10", chunk_hw_max="mysql-bin.000002:99",
                            rows_current=20),
        "shop.gone": entry(NEEDS_RESNAPSHOT, 90.0, None, binlog_needed="mysql-bin.000001", binlog_purged=True,
                           purge_warning="shop.gone needs binlog mysql-bin.000001 (...), which the server already "
                                         "purged"),
    }
    report = {"tables": tables, "summary": {**summarize(tables), "source_position": "mysql-bin.000003:1300"}}
    lines = render(report).splitlines()
    header, rows = lines[0], lines[1:4]
    assert header.split()[:3] == ["TABLE", "PHASE", "CHUNKS"]
    assert [r.split()[0] for r in rows] == list(tables)
    assert len({r.index(" 1/2 ") for r in rows}) == 1  # the columns line up
    orders, items, gone = rows
    assert "streaming" in orders and "mysql-bin.000003:1234" in orders and "2.0 KiB" in orders
    assert "2025-01-02 03:04:05" in orders and "3.0 days" in orders and orders.endswith("1500")
    assert "hw mysql-bin.000002:10..mysql-bin.000002:99" in items and items.endswith("20")
    assert "needs re-snapshot" in gone and "purged" in gone and "90 s" in gone
    assert lines[4] == ""
    assert lines[5] == ("3 tables: 1 snapshotting, 1 streaming, 1 needs re-snapshot; max lag 90 s / 2.0 KiB; "
                        "source at mysql-bin.000003:1300")
    assert lines[6].startswith("! shop.gone needs binlog mysql-bin.000001") and len(lines) == 7


def test_status_through_a_capture_on_the_in_memory_source(tmp_path):
    server = InMemoryServer("status")
    server.create(TABLE, [("id", "bigint"), ("v", "bigint")], ["id"])
    for i in range(40):
        server.transaction((TABLE, "insert", {"id": i, "v": i}))
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=10, batch_size=1)
    state = StateDir(state_dir)
    batches = state.batches()
    assert len(batches) == 4

    def status(**kwargs) -> dict:
        return capture_status(state_dir, sink, **kwargs)["tables"][TABLE]

    planned = status()
    assert (planned["phase"], planned["chunks_done"], planned["chunks_total"]) == (PLANNED, 0, 4)
    assert planned["rows_current"] is None and planned["lake_position"] is None and planned["lag_bytes"] is None

    snapshot_batches(state_dir, sink, batches[:1], [TABLE], read_on_spark=None, driver_threads=1)
    first = status()
    assert (first["phase"], first["chunks_done"]) == (SNAPSHOTTING, 1) and first["rows_current"] == 10
    assert first["chunk_hw_min"] == first["chunk_hw_max"] == str(server.position())
    assert first["last_commit_at"] is not None  # the chunk's commit to the lake

    snapshot_batches(state_dir, sink, batches[1:], [TABLE], read_on_spark=None, driver_threads=1)
    assert (status()["phase"], status()["chunks_done"]) == (SNAPSHOTTING, 4)  # `dblog report` is next
    build_offsets(state_dir)
    reported = status()
    assert reported["phase"] == STREAMING and reported["lag_seconds"] == 0.0 and reported["lag_bytes"] == 0
    assert reported["lake_position"] is None and reported["rows_current"] == 40
    assert reported["binlog_needed"] == BINLOG and reported["binlog_purged"] is False

    server.transaction((TABLE, "insert", {"id": 100, "v": 1}), (TABLE, "delete", {"id": 0, "v": 0}))
    server.transaction((TABLE, "insert", {"id": 101, "v": 1}))
    behind = status(now=time.time() + 60)  # a minute later
    assert behind["phase"] == STREAMING and behind["behind"] and behind["lag_bytes"] == 200
    assert behind["lag_seconds"] == behind["seconds_since_progress"] >= 60
    stopped = capture_status(state_dir, sink, max_stall_seconds=0)
    assert stopped["tables"][TABLE]["phase"] == STOPPED
    assert stopped["tables"][TABLE]["stalled"].startswith(f"tail stalled: {TABLE}: source at ")
    assert stopped["summary"]["phases"][STOPPED] == 1 and stopped["summary"]["max_lag_bytes"] == 200

    dialect = open_dialect(state.source())  # the tail's in-driver catch-up: commits the changes, records progress
    committers = table_committers(state, sink, "evolve", BATCH_MEMORY_BYTES)
    assert catch_up_tables_in_driver(state, sink, dialect, {TABLE: state.offsets()[TABLE]}, server.position(), 2**20,
                                     committers) == {TABLE: 3}
    streaming = status()
    lake = SourcePosition.from_version(DeltaTable(changelog_uri(sink, TABLE)).transaction_version("dblog-tail"))
    assert streaming["lake_position"] == str(lake.in_file_of(server.position())) == str(server.position())
    assert streaming["current_position"] == streaming["lake_position"]
    assert streaming["phase"] == STREAMING and streaming["lag_bytes"] == 0 and streaming["rows_current"] == 41
    assert streaming["last_commit_at"] is not None and streaming["tail_position"] == str(server.position())

    # the file the tail resumes in is gone from the server
    server.retention = BinlogRetention((BinlogFile("fake-bin.000002", 10, 0.0),), 3600, None, 0.0)
    purged = capture_status(state_dir, sink, max_stall_seconds=0)
    assert purged["tables"][TABLE]["phase"] == NEEDS_RESNAPSHOT and purged["tables"][TABLE]["binlog_purged"]
    assert "already purged" in purged["tables"][TABLE]["purge_warning"]
    assert purged["summary"]["phases"][NEEDS_RESNAPSHOT] == 1


def test_progress_lines_list_every_table_up_to_a_limit_then_totals_and_extremes():
    from airflow_provider_dblog.core.status import lag_text, rows_text

    few = {"db.a": 3, "db.b": 0}
    assert rows_text(few) == "{'db.a': 3, 'db.b': 0} rows"
    many = {f"db.t{i:04d}": (10 if i % 2 else 0) for i in range(2000)}
    many["db.t0007"] = 99
    text = rows_text(many)
    assert text.startswith("10089 rows in 1000 of 2000 tables (most: db.t0007 99, ") and len(text) < 200, text
    assert rows_text({f"t{i}": 0 for i in range(30)}) == "0 rows in 0 of 30 tables"
    lag = {f"db.t{i:04d}": {"offset": "x", "seconds_behind": 0.0, "bytes_behind": 0, "files_behind": 0}
           for i in range(2000)}
    lag["db.t0042"] = {"offset": "x", "seconds_behind": 75.0, "bytes_behind": 3 * 2**20, "files_behind": 1}
    text = lag_text(lag)
    assert "db.t0042" in text and "1 of 2000 tables behind" in text and len(text) < 200, text
    assert lag_text({"db.a": {"seconds_behind": 1.0}}) == "{'db.a': {'seconds_behind': 1.0}}"
