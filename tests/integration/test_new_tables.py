"""Tables joining a capture by its patterns (``steps.new_tables``) when the tail that plans them stops before it
has read them (a killed process): the next tail finishes them, or forgets a plan that no longer applies."""
from __future__ import annotations

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

import airflow_provider_dblog.steps.new_tables as new_tables
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.local.executor import LocalExecutor
from airflow_provider_dblog.steps.plan import capture_options, plan_tables
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.store.state import StateDir
from tests.support.lakecheck import assert_replay_equals_current, compare_rows


class Killed(Exception):
    """The tail's process ending between its plan of the new tables and their read."""


def test_tables_planned_by_a_tail_stopped_before_reading_them_join_at_the_next_tail(mariadb, db, spark, tmp_path,
                                                                                  monkeypatch):
    mariadb.sql(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {db}.a SELECT seq, seq FROM {db}.seq_1_to_150")
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_tables(SourceConfig.parse(mariadb.uri()), [f"{db}.a"], state, chunk_size=100,
                options=capture_options(f"{db}.*", None, 100))
    snapshot_batch(state, 0, sink, executor=LocalExecutor("dblog-test", spark=spark))
    build_offsets(state)

    def tail():
        return run_tail(state, sink, available_now=True, executor=LocalExecutor("dblog-test", spark=spark))

    mariadb.sql(f"CREATE TABLE {db}.joined (id INT PRIMARY KEY, v VARCHAR(10))",
                f"INSERT INTO {db}.joined SELECT seq, CONCAT('v', seq) FROM {db}.seq_1_to_250",
                f"CREATE TABLE {db}.gone (id INT PRIMARY KEY, v INT)", f"INSERT INTO {db}.gone VALUES (1, 1)")

    def killed(*args, **kwargs):
        raise Killed()

    monkeypatch.setattr(new_tables, "snapshot_batch", killed)
    with pytest.raises(Killed):
        tail()
    monkeypatch.undo()
    assert {f"{db}.joined", f"{db}.gone"} <= set(StateDir(state).tables())  # planned, never read
    mariadb.sql(f"UPDATE {db}.joined SET v = 'late' WHERE id % 7 = 0", f"DROP TABLE {db}.gone")
    summary = tail()  # before: exit 0, and joined was never read nor streamed
    assert f"{db}.joined" in summary["rows"] and f"{db}.joined" in StateDir(state).offsets()
    assert f"{db}.gone" not in StateDir(state).tables()  # its plan no longer applies: forgotten
    mariadb.sql(f"UPDATE {db}.joined SET v = 'later' WHERE id % 5 = 0",
                f"CREATE TABLE {db}.gone (k VARCHAR(8) PRIMARY KEY, id INT)",
                f"INSERT INTO {db}.gone SELECT CONCAT('k', seq), seq FROM {db}.seq_1_to_30")
    tail()
    for table, key in [(f"{db}.joined", ("id",)), (f"{db}.gone", ("k",))]:
        assert not compare_rows(DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(), mariadb.port, table, key)


@pytest.mark.parametrize("again", ["(k VARCHAR(8) PRIMARY KEY, id INT)", "(id INT PRIMARY KEY, v INT)",
                                   "(k VARCHAR(8) PRIMARY KEY, w INT)"])
def test_a_table_read_in_part_then_forgotten_leaves_no_row_in_its_next_life(mariadb, db, spark, tmp_path, monkeypatch,
                                                                            again):
    """A joining table killed after two of its four chunks were read, then dropped and made again (another key, or
    the same with fewer rows): its plan is forgotten and made anew, and the new chunks' reads replaced only their
    own ids, so the old plan's chunks 1.. stayed in ``current`` (99 rows of a table the source never held, with
    no value in the new key)."""
    mariadb.sql(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v INT)", f"INSERT INTO {db}.a VALUES (1, 1)")
    state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
    plan_tables(SourceConfig.parse(mariadb.uri()), [f"{db}.a"], state, chunk_size=100,
                options=capture_options(f"{db}.*", None, 100))
    executor = LocalExecutor("dblog-test", spark=spark)
    snapshot_batch(state, 0, sink, executor=executor)
    build_offsets(state)
    mariadb.sql(f"CREATE TABLE {db}.gone (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {db}.gone SELECT seq, seq FROM {db}.seq_1_to_350")
    read = new_tables.snapshot_batch

    def two_chunks_then_killed(state_dir, batch, sink_dir, **kwargs):
        group = StateDir(state_dir).batch(batch).groups[0]
        read(state_dir, batch, sink_dir, chunk_ids=list(group.chunk_ids[:2]), table=group.table, **kwargs)
        raise Killed()

    monkeypatch.setattr(new_tables, "snapshot_batch", two_chunks_then_killed)
    with pytest.raises(Killed):
        run_tail(state, sink, available_now=True, executor=executor)
    monkeypatch.undo()
    assert DeltaTable(f"{sink}/{db}.gone/current").to_pyarrow_table().num_rows == 200
    key = ("k",) if "k VARCHAR" in again else ("id",)
    values = "CONCAT('k', seq), seq" if key == ("k",) else "seq, -seq"
    kept = "w" if "w INT" in again else "id"  # a column the new life has
    mariadb.sql(f"DROP TABLE {db}.gone", f"CREATE TABLE {db}.gone {again}",
                f"INSERT INTO {db}.gone SELECT {values} FROM {db}.seq_1_to_30")
    run_tail(state, sink, available_now=True, executor=executor)
    mariadb.sql(f"DELETE FROM {db}.gone WHERE {kept} % 3 = 0")
    run_tail(state, sink, available_now=True, executor=executor)
    assert not compare_rows(DeltaTable(f"{sink}/{db}.gone/current").to_pyarrow_table(), mariadb.port, f"{db}.gone", key)
    if kept == "id":  # unique in both lives (the old one has no k)
        assert_replay_equals_current(sink, f"{db}.gone", ("id",))
    history = DeltaTable(f"{sink}/{db}.gone/changelog").to_pyarrow_table().filter(pc.is_valid(pc.field("v")))
    old_life = history.sort_by([("id", "ascending"), ("_pos", "descending")]).to_pylist()
    last = {}
    for row in old_life:
        last.setdefault(row["id"], row["_op"])
    assert {op for i, op in last.items() if 30 < i <= 200} == {"d"}, "the old life's rows are not closed in the changelog"
