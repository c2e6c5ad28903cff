"""Chunk reads that a schema change overtakes, on a real MariaDB: a column added between the read's description
of the table and its low watermark (in no window, yet the SELECT ran after it with the columns described before),
and a read whose high watermark is before a schema change the lake already followed. Each read is read again with
the columns in force, never written with the added column null; the lake ends equal to the source column by column,
the changelog replays to ``current`` and ``dblog verify`` says equal."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.readers.chunk_reader import run_chunk
from airflow_provider_dblog.source.mysql.dialect import MySqlDialect
from airflow_provider_dblog.steps.resnapshot import resnapshot
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir
from tests.support.cli import captured, dblog
from tests.support.inprocess_executor import InProcessExecutor
from tests.support.lakecheck import assert_replay_equals_current, compare_rows
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

ADD = "ALTER TABLE {t} ADD COLUMN w INT NOT NULL DEFAULT 7"


class ReadsWith(InProcessExecutor):
    """Chunks read through ``dialect`` (the real MySQL dialect with a statement run at the worst moment)."""

    def __init__(self, dialect):
        super().__init__()
        self.dialect = dialect

    def read_chunks(self, sink, plans, groups, dialect, label=""):
        return [run_chunk(sink, plans[g.table], c, self.dialect) for g in groups for c in g.chunk_ids]


def _table(mariadb, db, tmp_path):
    t = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)", f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_100",
                db=db)
    state, sink = captured(mariadb.uri(), t, tmp_path, 25)
    mariadb.sql(f"CREATE TABLE {db}.other (id INT PRIMARY KEY)")  # a position after the capture's last read
    return t, state, sink


def _equal(mariadb, state, sink, t):
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert compare_rows(DeltaTable(f"{sink}/{t}/current").to_pyarrow_table(), mariadb.port, t) == []
    assert_replay_equals_current(sink, t)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", t)
    assert code == 0 and json.loads(out)["equal"], out + err


def test_a_column_added_before_the_low_watermark_reads_the_chunk_again(mariadb, db, tmp_path):
    """ADD COLUMN lands after the read described the table and before its low watermark: the SELECT (of the
    columns described) leaves the column out, its window holds no DDL, its HW is after the statement. Before: the
    chunk's rows went to the lake without the column at a position after it, and the tail's following of the
    statement gave the DEFAULT only to rows before it: column w null for chunk 1's 25 rows. Now the read sees the
    columns changed after its window and reads the chunk again with them."""
    t, state, sink = _table(mariadb, db, tmp_path)
    pending = [ADD.format(t=t)]

    class AddBeforeTheLowWatermark(MySqlDialect):
        def watermark(self, strategy, meta):
            if pending:
                mariadb.sql(pending.pop(), db=db)
            return super().watermark(strategy, meta)

    dialect = AddBeforeTheLowWatermark(SourceConfig.parse(mariadb.uri()))
    try:
        resnapshot(state, sink, t, chunk_ids="1", executor=ReadsWith(dialect))
    finally:
        dialect.close()
    assert not pending
    _equal(mariadb, state, sink, t)


def test_a_column_added_before_the_low_watermark_reads_the_chunk_again_on_postgres(postgres, pg_db, tmp_path):
    """The same on PostgreSQL (the read's description, its window and the check after it are the engine's, not the
    dialect's): the chunk is read again with the column, and the lake ends equal to the source. (Here the lake
    converged before too: the tail follows the statement at the next change's Relation message, after the read's
    HW, so the DEFAULT reached the chunk's rows; the read with the column is what no longer depends on that.)"""
    import psycopg2

    from airflow_provider_dblog.source.postgres.dialect import PostgresDialect

    postgres.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t SELECT g, g FROM generate_series(1, 100) g",
                 db=pg_db)
    state, sink = captured(postgres.uri(pg_db), "public.t", tmp_path, 25)
    pending = ["ALTER TABLE t ADD COLUMN w INT NOT NULL DEFAULT 7"]
    selects = []

    class AddBeforeTheLowWatermark(PostgresDialect):
        def watermark(self, strategy, meta):
            if pending:
                postgres.sql(pending.pop(), db=pg_db)
            return super().watermark(strategy, meta)

        def read_snapshot(self, meta, chunk):
            selects.append(meta.column_names)
            return super().read_snapshot(meta, chunk)

    dialect = AddBeforeTheLowWatermark(StateDir(state).source(), StateDir(state).options())
    try:
        resnapshot(state, sink, "public.t", chunk_ids="1", executor=ReadsWith(dialect))
    finally:
        dialect.close()
    assert selects == [("id", "v"), ("id", "v", "w")]
    postgres.sql("UPDATE t SET v = -v WHERE id = 60", db=pg_db)  # a change: its Relation message has w
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    with psycopg2.connect(postgres.dsn(pg_db)) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v, w FROM t")
        want = sorted(cur.fetchall())
    lake = DeltaTable(f"{sink}/public.t/current").to_pyarrow_table(columns=["id", "v", "w"]).to_pylist()
    assert sorted((r["id"], r["v"], r["w"]) for r in lake) == want
    assert_replay_equals_current(sink, "public.t")
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", "public.t")
    assert code == 0 and json.loads(out)["equal"], out + err


def test_a_read_before_a_schema_change_the_lake_follows_is_read_again(mariadb, db, tmp_path):
    """A chunk's first read, whose HW is before ADD COLUMN ... DEFAULT 7, reaches the lake after the lake followed
    the statement (as the tail does, ``LakeTables.evolve`` with the DEFAULT for the rows it holds then). Committed
    as it was, its rows would take the lake's columns with w null: the lake did not hold them at the statement,
    nothing gave them the DEFAULT. Now the commit refuses the read and the chunk is read again with the column, in
    the same call."""
    t = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)", f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_100",
                db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("plan", "--source", mariadb.uri(), "--table", t, "--state", state, "--chunk-size", "25")
    assert code == 0, err
    plan = StateDir(state).table(t)
    reads = []

    class FollowedBeforeTheCommit(MySqlDialect):
        def arrow_schema(self, meta):  # after the read, before its commit: the lake follows the statement
            if not reads:
                mariadb.sql(ADD.format(t=t), db=db)
                lake = LakeTables(sink, t, super().arrow_schema(meta), meta.key_columns, capture=plan.capture)
                lake.changelog(), lake.current()
                added = super().arrow_schema(self.describe_table(t))
                assert lake.evolve(added, self.current_position(), defaults={"w": pa.scalar(7, pa.int32())})
            reads.append(meta.column_names)
            return super().arrow_schema(meta)

    dialect = FollowedBeforeTheCommit(SourceConfig.parse(mariadb.uri()))
    try:
        report = run_chunk(sink, plan, 1, dialect)
    finally:
        dialect.close()
    rows = DeltaTable(f"{sink}/{t}/current").to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["v"], r["w"]) for r in rows) == [(i, i, 7) for i in range(26, 51)]
    assert reads == [("id", "v"), ("id", "v", "w")] and report["applied"]  # read again, with the column


def test_a_read_before_the_lakes_columns_is_refused_before_anything_is_written(mariadb, db, tmp_path):
    """``commit_chunk`` of rows read before the schema change the lake follows raises the error that reads the
    chunk again, and neither table gets a commit."""
    from airflow_provider_dblog.core.errors import SchemaChangedError
    from airflow_provider_dblog.readers.chunk_reader import read_chunk
    from airflow_provider_dblog.store.lake import snapshot_rows

    t, state, sink = _table(mariadb, db, tmp_path)
    plan = StateDir(state).table(t)
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    try:
        read = read_chunk(dialect, plan.meta, plan.chunk(2), plan.strategy)
        mariadb.sql(ADD.format(t=t), db=db)
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
        assert code == 0, err
        versions = [DeltaTable(f"{sink}/{t}/{part}").version() for part in ("current", "changelog")]
        schema = dialect.arrow_schema(read.meta)
        lake = LakeTables(sink, t, schema, plan.meta.key_columns, capture=plan.capture)
        with pytest.raises(SchemaChangedError, match="reading the chunk again"):
            lake.commit_chunk(2, read.hw, snapshot_rows(read.rows, read.hw.as_snapshot().encode(), 2, 0, schema))
        assert [DeltaTable(f"{sink}/{t}/{part}").version() for part in ("current", "changelog")] == versions
    finally:
        dialect.close()
    _equal(mariadb, state, sink, t)


def test_a_read_of_the_plan_a_new_key_replaced_writes_nothing(mariadb, db, tmp_path):
    """A chunk read under the table's plan before its key changed (``dblog resnapshot`` started then) commits
    after the tail planned the table again with the new key (one chunk now, where the old plan had four) and
    started ``current`` anew. Before: the old chunk 3's rows went to partition 3, which no new chunk replaces:
    25 keys twice in ``current``. Now the commit refuses it in one line and neither table changes."""
    from airflow_provider_dblog.core.errors import DblogError
    from airflow_provider_dblog.readers.chunk_reader import read_chunk
    from airflow_provider_dblog.store.lake import snapshot_rows

    t = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, k INT NOT NULL UNIQUE, v INT)",
                f"INSERT INTO {t} SELECT seq, 1000 - seq, seq FROM seq_1_to_100", db=db)
    state, sink = captured(mariadb.uri(), t, tmp_path, 25)
    mariadb.sql(f"CREATE TABLE {db}.other (id INT PRIMARY KEY)")  # a position after the capture's last read
    old = StateDir(state).table(t)
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    try:
        read = read_chunk(dialect, old.meta, old.chunk(3), old.strategy)
        mariadb.sql(f"ALTER TABLE {t} DROP PRIMARY KEY, ADD PRIMARY KEY (k)", db=db)
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
        assert code == 0, err
        assert len(StateDir(state).table(t).chunks) == 1
        versions = [DeltaTable(f"{sink}/{t}/{part}").version() for part in ("current", "changelog")]
        schema = dialect.arrow_schema(read.meta)
        lake = LakeTables(sink, t, schema, old.meta.key_columns, capture=old.capture)
        with pytest.raises(DblogError, match="replaced") as refused:
            lake.commit_chunk(3, read.hw, snapshot_rows(read.rows, read.hw.as_snapshot().encode(), 3, 0, schema),
                              planned_at=old.planned_at)
        assert "\n" not in str(refused.value) and "dblog resnapshot" in str(refused.value)
        assert [DeltaTable(f"{sink}/{t}/{part}").version() for part in ("current", "changelog")] == versions
    finally:
        dialect.close()
    _equal(mariadb, state, sink, t)
