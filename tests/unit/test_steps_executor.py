"""Steps read only through the executor they are given (steps/executor.py): a capture planned, snapshotted,
reported and tailed on the in-memory dialect with an in-process executor that records what it was asked,
ending with the lake equal to the source; a step that must read and is given no executor fails at once."""
from __future__ import annotations

import itertools

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.steps.plan import plan_table
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.resnapshot import resnapshot
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.steps.verify import verify_tables
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir
from tests.support.fake_dialect import InMemoryDialect, InMemoryServer
from tests.support.inprocess_executor import InProcessExecutor

TABLE = "shop.t"
_servers = itertools.count()


def captured(tmp_path, rows: int = 20):
    server = InMemoryServer(f"executor{next(_servers)}")
    server.create(TABLE, [("id", "bigint"), ("v", "bigint")], ["id"])
    for i in range(rows):
        server.transaction((TABLE, "insert", {"id": i, "v": i}))
    state_dir, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan = plan_table(SourceConfig.parse(server.uri), TABLE, state_dir, chunk_size=5, batch_size=2)
    return server, state_dir, sink, plan


def lake_rows(state_dir: str, sink: str, server: InMemoryServer) -> dict:
    meta = StateDir(state_dir).table(TABLE).meta
    rows = LakeTables(sink, TABLE, InMemoryDialect(server).arrow_schema(meta), meta.key_columns).read_current()
    return {(r["id"],): {"id": r["id"], "v": r["v"]} for r in rows.to_pylist()}


@pytest.mark.parametrize("catch_up", [False, True], ids=["the query reads", "the executor's catch-up reads"])
def test_a_capture_reads_and_tails_only_through_the_executor_it_is_given(tmp_path, catch_up):
    server, state_dir, sink, plan = captured(tmp_path)
    executor = InProcessExecutor(catch_up_rows=catch_up)
    for batch in plan["batches"]:
        snapshot_batch(state_dir, batch["batch"], sink, executor=executor)
    reads = [c for c in executor.calls if c[0] == "read_chunks"]
    assert len(reads) == len(plan["batches"])  # one read per batch, each chunk once
    assert sorted(i for _, groups in reads for table, ids in groups for i in ids) == list(
        range(plan["tables"][TABLE]["chunks"]))
    build_offsets(state_dir)
    server.transaction((TABLE, "update", {"id": 3, "v": -3}), (TABLE, "delete", {"id": 4, "v": 4}))
    server.transaction((TABLE, "insert", {"id": 100, "v": 100}))

    executor.calls.clear()
    summary = run_tail(state_dir, sink, available_now=True, executor=executor)
    asked = [c[0] for c in executor.calls]
    assert asked == (["catch_up"] if catch_up else ["catch_up", "start_tail", "watch"])
    assert summary["rows"] == {TABLE: 3}
    assert ("caught_up_in_driver" in summary) == catch_up
    assert lake_rows(state_dir, sink, server) == server.rows[TABLE]


def test_a_step_that_must_read_and_has_no_executor_fails_before_anything_is_written(tmp_path):
    server, state_dir, sink, plan = captured(tmp_path)
    assert resnapshot(state_dir, sink, TABLE, chunk_ids="0", dry_run=True)["chunks"] == [0]  # reads nothing
    with pytest.raises(TypeError, match="executor"):
        resnapshot(state_dir, sink, TABLE, chunk_ids="0")
    with pytest.raises(TypeError, match="executor"):
        verify_tables(state_dir, sink, [TABLE], repair=True)
    assert not StateDir(state_dir).reports(TABLE)
    with pytest.raises(TypeError, match="executor"):
        snapshot_batch(state_dir, 0, sink)  # the executor is a required keyword
