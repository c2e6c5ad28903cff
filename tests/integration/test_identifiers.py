"""Names a real DBA has, end to end: database, schema, table and column names with dots, backticks, quotes, spaces,
percent signs, unicode, leading digits, reserved words, the maximal length, mixed case. What the lake can hold is
captured, tailed (insert, update, delete, ADD COLUMN), verified and repaired column by column; what it cannot is
refused by the plan in one line naming the table and the fix, before a state or a lake exists.

Before: a column with a backtick in its name failed every re-read of its chunk (delta-rs's MERGE ``update_all``
quotes names with unescaped backticks) after the snapshot was written; a table named ``a[1]`` made delta-rs panic
mid-run (``x%41y`` was read back from ``xAy``'s directory, an S3 ``a#b`` written to ``a``); two MySQL tables whose
names differ only in case lost one's changes silently (the binlog scan compares names without case); a database
whose name holds a dot was taken for another table; ``--table "Mixed Case.Order Items"`` was split at its space."""
from __future__ import annotations

import json
from pathlib import Path

import psycopg2
import pymysql
from deltalake import DeltaTable

from tests.support.cli import dblog, one_error_line
from tests.support.lakecheck import compare_rows
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

# MySQL columns: reserved words, a dot, a backtick, quotes, a space, '%', unicode, a leading digit, 64 characters
MY_COLUMNS = ["select", "a.b", "a`b", 'q"d', "s'q", "sp ace", "pct%", "é", "日本", "1lead", "c" * 64, "Mixed"]


def bq(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def dq(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def lake_rows(sink, table: str, key: str) -> list[dict]:
    rows = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table().to_pylist()
    return sorted(({k: v for k, v in r.items() if not k.startswith("_")} for r in rows), key=lambda r: r[key])


def mysql_rows(mariadb, db: str, table: str) -> list[dict]:
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", charset="utf8mb4")
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM {bq(db)}.{bq(table)}")
        rows = list(cur.fetchall())
    conn.close()
    return sorted(rows, key=lambda r: r["key id"])


def test_mysql_odd_names_are_captured_tailed_verified_and_repaired(mariadb, source_uri, db, tmp_path):
    tables = ["order", "sp ace.é", "t" * 64]  # a reserved word; a dot, a space and unicode; the maximal length
    mariadb.sql(f"ALTER DATABASE {db} CHARACTER SET utf8mb4")
    columns = ", ".join(f"{bq(c)} varchar(20)" for c in MY_COLUMNS)
    for n, table in enumerate(tables):
        values = ", ".join(f"'{n}-{i}'" for i in range(len(MY_COLUMNS)))
        mariadb.sql(f"CREATE TABLE {db}.{bq(table)} (`key id` int PRIMARY KEY, {columns})",
                    f"INSERT INTO {db}.{bq(table)} VALUES (1, {values}), (2, {values})",
                    f"INSERT INTO {db}.{bq(table)} (`key id`) VALUES (3)")
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", source_uri, "--tables", f"{db}.*", "--state", state, "--sink", sink)
    assert code == 0, err
    added = "new.col `x\"y'z%"
    for table in tables:
        q = f"{db}.{bq(table)}"
        mariadb.sql(f"INSERT INTO {q} (`key id`, `a.b`, `日本`) VALUES (10, 'new', '新')",
                    f"UPDATE {q} SET `a``b` = 'upd', `sp ace` = 'u2' WHERE `key id` = 1",
                    f"DELETE FROM {q} WHERE `key id` = 2",
                    f"ALTER TABLE {q} ADD COLUMN {bq(added)} varchar(10) DEFAULT 'dflt'",  # a re-read of its chunks
                    f"INSERT INTO {q} (`key id`, {bq(added)}) VALUES (11, 'nc')",
                    f"UPDATE {q} SET {bq(added)} = 'nc3' WHERE `key id` = 3")
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, one_error_line(err)
    for table in tables:
        assert lake_rows(sink, f"{db}.{table}", "key id") == mysql_rows(mariadb, db, table), table
    # drift in a column with a backtick in its name: found, and repaired by a re-read (a MERGE naming every column)
    DeltaTable(f"{sink}/{db}.order/current").update(updates={'"a`b"': "'tampered'"}, predicate='"key id" = 1')
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", f"{db}.ord?r", "--repair")
    assert code == 0, err
    assert '"repaired": [\n    0' in out, out
    assert lake_rows(sink, f"{db}.order", "key id") == mysql_rows(mariadb, db, "order")


def test_mysql_names_the_lake_paths_cannot_hold_are_refused_before_anything_is_written(mariadb, source_uri, db,
                                                                                      tmp_path):
    for table in ("a[1]", "x%41y", "h#sh", "fine %zz"):
        mariadb.sql(f"CREATE TABLE {db}.{bq(table)} (id int PRIMARY KEY, v int)",
                    f"INSERT INTO {db}.{bq(table)} VALUES (1, 1)")
    mariadb.sql(f"CREATE TABLE {db}.xAy (id int PRIMARY KEY, v int)", f"INSERT INTO {db}.xAy VALUES (7, 7)")
    state, sink = tmp_path / "state", tmp_path / "lake"
    run = ("run", "--source", source_uri, "--tables", f"{db}.*", "--state", str(state), "--sink", str(sink))
    code, _, err = dblog(*run)
    assert code != 0
    line = one_error_line(err)
    assert f"3 table(s) have names the lake's paths" in line and "--exclude" in line, line
    assert all(f"{db}.{t}" in line for t in ("a[1]", "x%41y", "h#sh")) and "fine" not in line, line
    assert not state.exists() and not sink.exists()
    code, _, err = dblog(*run, "--exclude", f"{db}.a?1?,{db}.x%41y,{db}.h#sh")
    assert code == 0, err
    assert lake_rows(sink, f"{db}.xAy", "id") == [{"id": 7, "v": 7}]
    assert lake_rows(sink, f"{db}.fine %zz", "id") == [{"id": 1, "v": 1}]


def test_mysql_tables_differing_only_in_case_are_refused(mariadb, source_uri, db, tmp_path):
    """The binlog reader compares table names without case: with ``Case`` and ``case`` captured, the changes of one
    were skipped (exit 0, its lake stale) and its DDL taken for the other's."""
    for table in ("Case", "case"):
        mariadb.sql(f"CREATE TABLE {db}.`{table}` (id int PRIMARY KEY, v int)", f"INSERT INTO {db}.`{table}` VALUES (1, 1)")
    state, sink = tmp_path / "state", tmp_path / "lake"
    code, _, err = dblog("run", "--source", source_uri, "--tables", f"{db}.*", "--state", str(state), "--sink", str(sink))
    assert code != 0
    line = one_error_line(err)
    assert f"{db}.Case (and {db}.case)" in line and f"{db}.case (and {db}.Case)" in line, line
    assert "differing only in case" in line and "RENAME TABLE" in line, line
    assert not state.exists() and not sink.exists()


def test_mysql_a_database_name_with_a_dot_is_refused_not_taken_for_another_table(mariadb, source_uri, db, tmp_path):
    """``DB.x.t`` is table ``t`` of database ``DB.x`` or table ``x.t`` of ``DB``: before, the plan took the second
    for it without a word; a table name with a dot in a database without one is captured (the first test)."""
    mariadb.sql(f"CREATE DATABASE `{db}.x`", f"CREATE TABLE `{db}.x`.t (id int PRIMARY KEY, v text)",
                f"CREATE TABLE {db}.`x.t` (id int PRIMARY KEY, v text)",
                f"INSERT INTO `{db}.x`.t VALUES (1, 'dotted database')", f"INSERT INTO {db}.`x.t` VALUES (2, 'dotted table')")
    state, sink = tmp_path / "state", tmp_path / "lake"
    code, _, err = dblog("run", "--source", source_uri, "--table", f"{db}.x.t", "--state", str(state), "--sink", str(sink))
    assert code != 0
    line = one_error_line(err)
    assert f"{db}.x.t (table `x.t` of database `{db}` or table `t` of database `{db}.x`)" in line, line
    assert "rename the database" in line and "--exclude" in line, line
    assert not state.exists() and not sink.exists()
    mariadb.sql(f"DROP DATABASE `{db}.x`")
    code, _, err = dblog("run", "--source", source_uri, "--table", f"{db}.x.t", "--state", str(state), "--sink", str(sink))
    assert code == 0, err
    assert lake_rows(sink, f"{db}.x.t", "id") == [{"id": 2, "v": "dotted table"}]


def pg_rows(postgres, db: str, schema: str, table: str) -> list[dict]:
    conn = psycopg2.connect(postgres.dsn(db))
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {dq(schema)}.{dq(table)}")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    conn.close()
    return sorted(rows, key=lambda r: r["Key Id"])


def test_postgres_quoted_identifiers_end_to_end(postgres, pg_db, tmp_path):
    pg, db = postgres, pg_db
    columns = ", ".join(f"{dq(c)} text" for c in ["select", "a.b", 'q"d', "s'q", "a`b", "pct%", "é", "UPPER",
                                                   "c" * 63])
    pg.sql('CREATE SCHEMA "Mixed Case"', 'CREATE SCHEMA sel',
           f'CREATE TABLE "Mixed Case"."Order Items" ("Key Id" int PRIMARY KEY, {columns})',
           f'CREATE TABLE "Mixed Case"."a.b" ("Key Id" int PRIMARY KEY, {columns})',
           'CREATE TABLE sel."ORDER" ("Key Id" int PRIMARY KEY, x text)',
           'CREATE TABLE sel."order" ("Key Id" int PRIMARY KEY, x text)',
           'INSERT INTO "Mixed Case"."Order Items" ("Key Id", "q""d", "a`b") VALUES (1, \'q\', \'b\'), (2, \'q2\', \'b2\')',
           'INSERT INTO "Mixed Case"."a.b" ("Key Id", "a.b") VALUES (1, \'ab\')',
           "INSERT INTO sel.\"ORDER\" VALUES (1, 'UP')", "INSERT INTO sel.\"order\" VALUES (1, 'low')", db=db)
    uri = pg.uri(db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    # one name with a space, as written (before: split into 'Mixed' and 'Case.Order Items')
    code, _, err = dblog("run", "--source", uri, "--table", "Mixed Case.Order Items", "--state", state, "--sink", sink)
    assert code == 0, err
    # a pattern with a space; tables differing only in case are two tables in PostgreSQL
    code, _, err = dblog("run", "--source", uri, "--tables", "Mixed Case.a.b,sel.*", "--state", state, "--sink", sink)
    assert code == 0, err
    added = dq("new.col `x\"y'z%")
    for schema, table in (("Mixed Case", "Order Items"), ("Mixed Case", "a.b"), ("sel", "ORDER")):
        q = f"{dq(schema)}.{dq(table)}"
        pg.sql(f'INSERT INTO {q} ("Key Id") VALUES (10)', f'DELETE FROM {q} WHERE "Key Id" = 2',
               f"ALTER TABLE {q} ADD COLUMN {added} text DEFAULT 'dflt'",
               f'INSERT INTO {q} ("Key Id", {added}) VALUES (11, \'nc\')',
               f'UPDATE {q} SET {added} = \'nc3\' WHERE "Key Id" = 1', db=db)
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, one_error_line(err)
    for schema, table in (("Mixed Case", "Order Items"), ("Mixed Case", "a.b"), ("sel", "ORDER"), ("sel", "order")):
        assert lake_rows(sink, f"{schema}.{table}", "Key Id") == pg_rows(pg, db, schema, table), table
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "Mixed Case.*,sel.*")
    assert code == 0 and '"equal": true' in out, err
    assert dblog("drop", "--state", state)[0] == 0


def test_postgres_a_schema_name_with_a_dot_is_refused_not_taken_for_another_table(postgres, pg_db, tmp_path):
    pg, db = postgres, pg_db
    pg.sql('CREATE SCHEMA "s.x"', 'CREATE SCHEMA s', 'CREATE TABLE "s.x".t (id int PRIMARY KEY)',
           'CREATE TABLE s."x.t" (id int PRIMARY KEY)', 'INSERT INTO "s.x".t VALUES (1)', 'INSERT INTO s."x.t" VALUES (2)',
           db=db)
    state, sink = tmp_path / "state", tmp_path / "lake"
    code, _, err = dblog("run", "--source", pg.uri(db), "--tables", "s.*", "--state", str(state), "--sink", str(sink))
    assert code != 0
    line = one_error_line(err)
    assert 's.x.t ("s.x"."t" or "s"."x.t")' in line and "RENAME TO" in line and "--exclude" in line, line
    assert not state.exists() and not sink.exists()
    assert pg.sql(f"SELECT count(*) FROM pg_replication_slots WHERE database = '{db}'")[0][0] == 0


def test_mysql_a_case_twin_created_after_the_plan_changes_nothing_of_the_captured_table(mariadb, source_uri, db,
                                                                                         tmp_path):
    """``shop.orders`` captured, then ``shop.Orders`` created, written, truncated and dropped (a server with
    lower_case_table_names=0 keeps both): none of it is the captured table's, whose own changes go on."""
    mariadb.sql(f"CREATE TABLE {db}.orders (id int PRIMARY KEY, v int)",
                f"INSERT INTO {db}.orders SELECT seq, seq FROM {db}.seq_1_to_20")
    state, sink = tmp_path / "state", tmp_path / "lake"
    code, _, err = dblog("run", "--source", source_uri, "--table", f"{db}.orders", "--state", str(state),
                         "--sink", str(sink))
    assert code == 0, err[-2000:]
    mariadb.sql(f"CREATE TABLE {db}.Orders (id int PRIMARY KEY, v int, w int)",
                f"INSERT INTO {db}.Orders VALUES (1, -1, 0), (99, 99, 0)", f"UPDATE {db}.orders SET v = 100 WHERE id = 1",
                f"ALTER TABLE {db}.Orders DROP COLUMN w", f"TRUNCATE TABLE {db}.Orders",
                f"UPDATE {db}.orders SET v = 200 WHERE id = 2", f"DROP TABLE {db}.Orders",
                f"UPDATE {db}.orders SET v = 300 WHERE id = 3", f"DELETE FROM {db}.orders WHERE id = 4")
    code, _, err = dblog("tail", "--state", str(state), "--sink", str(sink), "--available-now")
    assert code == 0, err[-2000:]
    assert compare_rows(DeltaTable(f"{sink}/{db}.orders/current").to_pyarrow_table(), mariadb.port, f"{db}.orders") == []
    code, out, err = dblog("verify", "--state", str(state), "--sink", str(sink), "--table", f"{db}.orders")
    assert code == 0 and json.loads(out)["equal"], out + err


def test_postgres_columns_differing_only_in_case_are_refused_by_the_plan_and_by_the_tail(postgres, pg_db, tmp_path):
    """PostgreSQL keeps "A" and "a" apart; a Delta table does not. Before: the plan took such a table and the
    snapshot's first write failed in delta-rs ("Duplicate field name"), and a column added so under a running capture
    stopped every tail the same way. Now one line names the table, the columns and the fix: at plan time before
    anything is written, in the tail with nothing of the batch written."""
    pg, db = postgres, pg_db
    pg.sql('CREATE TABLE public.twins (id int PRIMARY KEY, "A" int, a int)', "INSERT INTO public.twins VALUES (1, 1, 1)",
           "CREATE TABLE public.later (id int PRIMARY KEY, v int)", "INSERT INTO public.later VALUES (1, 1), (2, 2)",
           db=db)
    state, sink = tmp_path / "state", tmp_path / "lake"
    code, _, err = dblog("run", "--source", pg.uri(db), "--table", "public.twins", "--state", str(state),
                         "--sink", str(sink))
    line = one_error_line(err)
    assert code != 0 and "public.twins (A, a)" in line and "differ only in case" in line and "--exclude" in line, line
    assert not state.exists() and not sink.exists()

    code, _, err = dblog("run", "--source", pg.uri(db), "--table", "public.later", "--state", str(state),
                         "--sink", str(sink))
    assert code == 0, err[-2000:]
    before = DeltaTable(f"{sink}/public.later/current").to_pyarrow_table().to_pylist()
    pg.sql('ALTER TABLE public.later ADD COLUMN "V" int', 'UPDATE public.later SET "V" = 5 WHERE id = 1', db=db)
    code, _, err = dblog("tail", "--state", str(state), "--sink", str(sink), "--available-now")
    line = one_error_line(err)
    assert code != 0 and "public.later (v, V)" in line and "differ only in case" in line, line
    assert DeltaTable(f"{sink}/public.later/current").to_pyarrow_table().to_pylist() == before
