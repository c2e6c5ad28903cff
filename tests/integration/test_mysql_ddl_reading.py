"""How the tail reads the DDL statements of the binlog (``source/mysql/ddl.py``): which tables a statement names,
its kind and what its clauses do to the rows already there. A misread statement leaves the lake different from the
source with no row event to show it, so each test ends with a tail that exits 0 and a lake equal to the source,
column by column. One private MariaDB for the module."""
from __future__ import annotations

import json

import pymysql
import pytest
from deltalake import DeltaTable

from tests.support.cli import dblog
from tests.support.lakecheck import compare_rows
from tests.support.local_mariadb import LocalMariaDB


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory):
    server = LocalMariaDB(tmp_path_factory.mktemp("ddl-reading"), server_id=31).start()
    yield server
    server.stop()


def _captured(mariadb, db, tmp_path, tables, setup):
    """``setup`` run in ``db``, then ``dblog run`` of ``tables`` (chunks of 50): (state, sink, listed)."""
    mariadb.sql(*setup, db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    listed = ",".join(f"{db}.{t}" for t in tables)
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", listed, "--state", state, "--sink", sink,
                         "--chunk-size", "50")
    assert code == 0, err[-3000:]
    return state, sink, listed


def _tail(state, sink):
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err[-3000:]
    return err


def _equal(mariadb, state, sink, listed, skip=()):
    """``dblog verify --rows`` says equal, and so does ``compare_rows`` (columns of ``skip`` left to the caller)."""
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", listed, "--rows")
    assert code == 0, err[-3000:]
    for table in listed.split(","):
        lake = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table()
        problems = [p for p in compare_rows(lake, mariadb.port, table) if not any(f"column {c}:" in p for c in skip)]
        assert problems == [], (table, problems[:10])
    return {r["table"].split(".", 1)[1]: r["source_rows"] for r in json.loads(out)["tables"]}


def test_lists_of_names_holding_commas_spaces_or_to_are_read_name_by_name(mariadb, tmp_path):
    """``DROP TABLE `x,y``` (the server logs every DROP TABLE with quoted names), ``RENAME TABLE t TO `t, old`,
    `new, one` TO t`` and, from an ANSI_QUOTES session, ``RENAME TABLE "t" TO "t TO x", "a TO b" TO "t"``: the
    names of a list are read whole. Before, the list was cut at each comma and at each `` TO ``, even inside a
    quoted name: the tail crashed (``AttributeError``) at the statement, even one of a table not captured, and
    every tail after crashed there again."""
    db = "lists"
    mariadb.sql(f"CREATE DATABASE {db}")
    tables = ["t_swap", "t_ansi", "t_kept"]
    setup = [f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)" for t in tables]
    setup += [f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_100" for t in tables]
    state, sink, listed = _captured(mariadb, db, tmp_path, tables, setup)
    mariadb.sql("CREATE TABLE `x,y` (id INT PRIMARY KEY)", "DROP TABLE `x,y`",
                "CREATE TABLE `new, one` LIKE t_swap", "INSERT INTO `new, one` SELECT seq, -seq FROM seq_1_to_30",
                "RENAME TABLE t_swap TO `t_swap, old`, `new, one` TO t_swap",
                "REPAIR TABLE `t_swap, old`, t_kept",
                "SET SESSION sql_mode = 'ANSI_QUOTES'",
                'CREATE TABLE "a TO b" LIKE t_ansi', 'INSERT INTO "a TO b" SELECT seq, -seq FROM seq_1_to_20',
                'RENAME TABLE "t_ansi" TO "t_ansi TO x", "a TO b" TO "t_ansi"', db=db)
    mariadb.sql(*[f"INSERT INTO {t} VALUES (1000, 1000)" for t in tables], "UPDATE t_kept SET v = -v WHERE id < 5",
                db=db)
    _tail(state, sink)
    assert _equal(mariadb, state, sink, listed) == {"t_swap": 31, "t_ansi": 21, "t_kept": 101}


def test_alter_ignore_that_deletes_rows_reads_the_table_again(mariadb, tmp_path):
    """``ALTER IGNORE TABLE`` deletes, with no row event, the rows a new partitioning has no partition for
    (``PARTITION BY``, ``REORGANIZE PARTITION``) and the rows a new CHECK constraint refuses. Before, each clause
    was taken for one that keeps the rows: tail exit 0, the lake kept 11, 11 and 1 rows the source had deleted."""
    db = "ignored"
    mariadb.sql(f"CREATE DATABASE {db}")
    tables = ["t_range", "t_check", "t_list"]
    setup = ["CREATE TABLE t_range (id INT PRIMARY KEY, v INT)", "CREATE TABLE t_check (id INT PRIMARY KEY, v INT)",
             "CREATE TABLE t_list (id INT PRIMARY KEY, v INT) PARTITION BY LIST (id) "
             "(PARTITION p0 VALUES IN (1, 2, 3), PARTITION p1 VALUES IN (4, 5, 6))"]
    setup += [f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_{6 if t == 't_list' else 20}" for t in tables]
    state, sink, listed = _captured(mariadb, db, tmp_path, tables, setup)
    mariadb.sql("ALTER IGNORE TABLE t_range PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10))",
                "ALTER IGNORE TABLE t_check ADD CONSTRAINT small CHECK (v < 10)",
                "ALTER IGNORE TABLE t_list REORGANIZE PARTITION p1 INTO (PARTITION p1 VALUES IN (4, 5))", db=db)
    mariadb.sql(*[f"UPDATE {t} SET v = -v WHERE id = 2" for t in tables], db=db)
    _tail(state, sink)
    assert _equal(mariadb, state, sink, listed) == {"t_range": 9, "t_check": 9, "t_list": 5}


def _times(mariadb, table):
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root")
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, CAST(tm AS CHAR) FROM {table}")
        rows = dict(cur.fetchall())
    conn.close()
    return rows


def test_an_added_columns_default_is_the_value_the_server_stores(mariadb, tmp_path):
    """The rows already there take an added column's DEFAULT as the server stores it: an ENUM's or SET's label as
    declared (``'A'`` is ``'a'``, ``'b,a'`` is ``'a,b'``, ``'a '`` is ``'a'``), a TIME in full (``'9:00'`` is
    ``09:00:00``), a number for a text column as the server prints it (``007`` is ``'7'``, ``1e3`` is ``'1000'``).
    Before, the literal was taken as written: tail exit 0, every old row differed. A default already written as
    the server stores it is still followed in place (no chunk read again)."""
    db = "defaults"
    mariadb.sql(f"CREATE DATABASE {db}")
    tables = ["t_odd", "t_plain"]
    setup = [f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)" for t in tables]
    setup += [f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_60" for t in tables]
    state, sink, listed = _captured(mariadb, db, tmp_path, tables, setup)
    mariadb.sql("ALTER TABLE t_odd ADD e ENUM('a','b') NOT NULL DEFAULT 'A', ADD s SET('a','b') DEFAULT 'b,a', "
                "ADD e2 ENUM('a','b') DEFAULT 'a ', ADD tm TIME DEFAULT '9:00', ADD n VARCHAR(10) DEFAULT 007, "
                "ADD n2 VARCHAR(10) DEFAULT 1e3, ADD n3 TEXT DEFAULT +5",
                "ALTER TABLE t_plain ADD e ENUM('a','b') NOT NULL DEFAULT 'b', ADD s SET('a','b') DEFAULT 'a,b', "
                "ADD tm TIME DEFAULT '09:00:00', ADD n VARCHAR(10) DEFAULT 7, ADD n2 INT DEFAULT 007", db=db)
    mariadb.sql(*[f"INSERT INTO {t} (id, v) VALUES (1000, 1000)" for t in tables], db=db)
    err = _tail(state, sink)
    assert f"chunks of {db}.t_plain again" not in err, err[-3000:]
    assert _equal(mariadb, state, sink, listed, skip=("tm",)) == {"t_odd": 61, "t_plain": 61}
    for table in listed.split(","):
        lake = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(columns=["id", "tm"]).to_pylist()
        assert {r["id"]: r["tm"] for r in lake} == _times(mariadb, table), table
