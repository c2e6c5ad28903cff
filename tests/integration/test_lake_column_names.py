"""A source column named like a column the lake adds to its rows (``_op``, ``_pos``, ``_ts_ms``, ``_chunk``,
``_kind``, ``_before``, ``_unchanged``, the MERGE's ``_chunk_hw``; as a key column also the merge's working
``_held``, ``_i``, ``_j``; Delta compares names without case) cannot be stored next to them: before, ``dblog run``
crashed after the plan (a PostgreSQL slot and publication made, lake tables half written) with a KeyError, a
TableNotFoundError or 30 commit conflicts. The plan now refuses such tables in one line naming each table and
column, before a slot, a publication, the state or the lake exists; a ``_``-prefixed name of the source's own
(``_body``, a non-key ``_i``) is captured."""
from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

from tests.support.cli import dblog, one_error_line
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

PASSWORD = "pg-Names-5ecret"
REFUSED = "{db}.k (_i); {db}.m (_op, _Kind, _unchanged, _chunk_hw); rename those columns"


def create(sql, db: str, text: str) -> None:
    sql(f'CREATE TABLE {db}.m (id int PRIMARY KEY, "_op" {text}, "_Kind" {text}, "_unchanged" {text}, '
        f'"_chunk_hw" int, "_i" int, "_body" {text})',
        f'CREATE TABLE {db}.k ("_i" int PRIMARY KEY, v int)',
        f'CREATE TABLE {db}.fine (id int PRIMARY KEY, "_body" {text}, "_i" int)',
        f"INSERT INTO {db}.fine VALUES (1, 'one', 1), (2, 'two', 2)")


def assert_refused_then_excluded(uri: str, db: str, tmp_path: Path, streams=lambda: 0) -> None:
    """The run's one error line with nothing made (``streams``: the source's replication slots and publications),
    then a run excluding the two tables captures the third."""
    state, sink = tmp_path / "state", tmp_path / "lake"
    run = ("run", "--source", uri, "--tables", f"{db}.*", "--state", str(state), "--sink", str(sink))
    code, out, err = dblog(*run)
    assert code != 0
    line = one_error_line(err)
    assert REFUSED.format(db=db) in line and "--exclude" in line, line
    assert "_body" not in line and "Error" not in line, line
    assert not state.exists() and not sink.exists() and streams() == 0
    code, out, err = dblog(*run, "--exclude", f"{db}.m,{db}.k")
    assert code == 0, err
    lake = DeltaTable(f"{sink}/{db}.fine/current").to_pyarrow_table(columns=["id", "_body", "_i"]).to_pylist()
    assert sorted((r["id"], r["_body"], r["_i"]) for r in lake) == [(1, "one", 1), (2, "two", 2)]


def test_postgresql_columns_named_like_the_lakes_are_refused_before_a_slot_is_made(postgres, pg_db, tmp_path):
    pg, db = postgres, pg_db
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    create(lambda *s: pg.sql(*s, db=db), "public", "text")
    slots = (f"SELECT (SELECT count(*) FROM pg_replication_slots WHERE database = '{db}') "
             "+ (SELECT count(*) FROM pg_publication)")
    assert_refused_then_excluded(pg.uri(db, password=PASSWORD), "public", tmp_path, lambda: pg.sql(slots, db=db)[0][0])
    assert dblog("drop", "--state", str(tmp_path / "state"))[0] == 0


def test_mysql_columns_named_like_the_lakes_are_refused_before_anything_is_written(mariadb, source_uri, db, tmp_path):
    create(lambda *s: mariadb.sql(*(q.replace('"', "`") for q in s)), db, "text")
    assert_refused_then_excluded(source_uri, db, tmp_path)


def test_a_column_named_like_the_lakes_added_later_stops_the_tail_before_the_lake_changes(mariadb, source_uri, db,
                                                                                          tmp_path):
    """``ALTER TABLE ... ADD COLUMN _op`` after the plan: following it stops the tail in one line naming the table,
    the column and the fix, with ``current`` as it was (before, the tail crashed writing the lake)."""
    mariadb.sql(f"CREATE TABLE {db}.t (id int PRIMARY KEY, v int)", f"INSERT INTO {db}.t VALUES (1, 1), (2, 2)")
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", source_uri, "--tables", f"{db}.t", "--state", state, "--sink", sink)
    assert code == 0, err
    version = DeltaTable(f"{sink}/{db}.t/current").version()
    mariadb.sql(f"ALTER TABLE {db}.t ADD COLUMN `_op` text", f"INSERT INTO {db}.t VALUES (3, 3, 'x')",
                f"UPDATE {db}.t SET v = 10 WHERE id = 1")
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code != 0
    line = one_error_line(err)
    assert f"{db}.t (_op)" in line and "rename those columns" in line and "--exclude" in line, line
    assert DeltaTable(f"{sink}/{db}.t/current").version() == version
