"""Bad input: one clear line on stderr, a non-zero exit, and nothing already written is lost."""
from __future__ import annotations

import json

import pytest

from tests.support.local_mariadb import LocalMariaDB
from tests.support.cli import dblog, one_error_line



@pytest.fixture(scope="module")
def misconfigured(tmp_path_factory):
    """A second server whose binlog settings the tests change; the shared one stays correct."""
    server = LocalMariaDB(tmp_path_factory.mktemp("bad"), server_id=2).start()
    server.sql("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)", "INSERT INTO s.t VALUES (1)")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def no_binlog(tmp_path_factory):
    server = LocalMariaDB(tmp_path_factory.mktemp("nobinlog"), server_id=3, binlog=False).start()
    server.sql("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)")
    yield server
    server.stop()


def plan(uri, table, state, *extra):
    return dblog("plan", "--source", uri, "--table", table, "--state", str(state), *extra)


def test_binlog_off(no_binlog, tmp_path):
    code, _, err = plan(no_binlog.uri(), "s.t", tmp_path)
    assert code != 0
    assert "binary logging is off" in one_error_line(err) and "--log-bin" in err


@pytest.mark.parametrize("setting, value, message", [
    ("binlog_format", "STATEMENT", "binlog_format is STATEMENT"),
    ("binlog_row_image", "MINIMAL", "binlog_row_image is MINIMAL"),
    ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata is MINIMAL"),
])
def test_wrong_binlog_settings(misconfigured, tmp_path, setting, value, message):
    misconfigured.sql(f"SET GLOBAL {setting} = '{value}'")
    try:
        code, _, err = plan(misconfigured.uri(), "s.t", tmp_path)
    finally:
        misconfigured.sql(f"SET GLOBAL {setting} = DEFAULT",
                          "SET GLOBAL binlog_format = 'ROW'", "SET GLOBAL binlog_row_image = 'FULL'",
                          "SET GLOBAL binlog_row_metadata = 'FULL'")
    assert code != 0
    line = one_error_line(err)
    assert message in line and "--binlog-format=ROW" in line


def test_missing_replication_privileges(misconfigured, tmp_path):
    misconfigured.sql("CREATE USER IF NOT EXISTS 'reader'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON s.* TO 'reader'@'%'")
    code, _, err = plan(misconfigured.uri("reader", "pw"), "s.t", tmp_path)
    assert code != 0
    line = one_error_line(err)
    assert "lacks REPLICATION SLAVE" in line and "GRANT" in line and "pw" not in line.replace("pwd", "")


def test_wrong_password_is_named_but_not_echoed(misconfigured, tmp_path):
    code, _, err = plan(misconfigured.uri("root", "Not-The-Password"), "s.t", tmp_path)
    assert code != 0
    line = one_error_line(err)
    assert "access denied" in line and "Not-The-Password" not in err


def test_unknown_table_and_no_primary_key(mariadb, db, tmp_path):
    code, _, err = plan(mariadb.uri(), f"{db}.missing", tmp_path)
    assert code != 0 and f"unknown table {db}.missing" in one_error_line(err)
    mariadb.sql(f"CREATE TABLE {db}.nopk (a INT NOT NULL, b INT)", f"INSERT INTO {db}.nopk VALUES (1, 2), (3, 4)")
    code, _, err = plan(mariadb.uri(), f"{db}.nopk", tmp_path)
    assert code != 0 and "--chunk-key" in one_error_line(err)
    code, _, err = plan(mariadb.uri(), f"{db}.nopk", tmp_path, "--chunk-key", "b")
    assert code != 0 and f"--chunk-key b of {db}.nopk may be NULL" in one_error_line(err)
    code, out, err = plan(mariadb.uri(), f"{db}.nopk", tmp_path, "--chunk-key", "a")
    assert code == 0, err
    assert json.loads(out)["tables"][f"{db}.nopk"]["key"] == ["a"]


def test_bad_arguments(mariadb, db, tmp_path):
    assert "expected mysql://" in one_error_line(plan("oracle://x@y:1", f"{db}.t", tmp_path)[2])
    assert "names its database" in one_error_line(plan("postgres://x@y:1", f"{db}.t", tmp_path)[2])
    assert "positive" in one_error_line(plan(mariadb.uri(), f"{db}.t", tmp_path, "--chunk-size", "0")[2])
    assert "unknown watermark strategy 'x'" in one_error_line(plan(mariadb.uri(), f"{db}.t", tmp_path, "--watermark", "x")[2])
    assert "publications are PostgreSQL's" in one_error_line(plan(mariadb.uri(), f"{db}.t", tmp_path,
                                                                    "--publication", "p")[2])
    code, _, err = dblog("snapshot", "--state", str(tmp_path / "nothing"), "--batch", "0", "--sink", str(tmp_path))
    assert code != 0 and "no plan in" in one_error_line(err)


def test_failed_plan_keeps_the_existing_plan(mariadb, db, tmp_path):
    mariadb.sql(f"CREATE TABLE {db}.ok (id INT PRIMARY KEY)", f"INSERT INTO {db}.ok VALUES (1), (2), (3)")
    code, _, err = plan(mariadb.uri(), f"{db}.ok", tmp_path)
    assert code == 0, err
    before = (tmp_path / "plan.json").read_text()
    code, _, err = plan(mariadb.uri(), f"{db}.missing", tmp_path)
    assert code != 0
    assert (tmp_path / "plan.json").read_text() == before
    code, _, err = dblog("snapshot", "--state", str(tmp_path), "--batch", "9", "--sink", str(tmp_path / "k"))
    assert code != 0 and "batch 9 does not exist" in one_error_line(err)


def test_patterns_plan_a_database_and_bad_patterns_fail_in_one_line(mariadb, db, tmp_path):
    mariadb.sql(*(f"CREATE TABLE {db}.{name} (id INT PRIMARY KEY, v VARCHAR(10))" for name in ("a", "b", "tmp_c")),
                f"CREATE TABLE {db}.nokey1 (ts INT NOT NULL, v INT)", f"CREATE TABLE {db}.nokey2 (ts INT NOT NULL, v INT NOT NULL)",
                f"INSERT INTO {db}.a VALUES (1, 'x'), (2, 'y')")
    state = tmp_path / "state"
    code, _, err = dblog("plan", "--source", mariadb.uri(), "--tables", f"{db}.*", "--exclude", f"{db}.tmp_*",
                         "--state", str(state))
    line = one_error_line(err)
    assert code != 0 and f"2 table(s) have no primary key or NOT NULL unique key: {db}.nokey1, {db}.nokey2" in line
    assert "--exclude" in line and "--chunk-key DB.TABLE=COL[,COL]" in line and not state.exists()
    code, out, err = dblog("plan", "--source", mariadb.uri(), "--tables", f"{db}.*", "--exclude", f"{db}.tmp_*",
                           "--chunk-key", f"{db}.nokey1=ts", "--chunk-key", f"{db}.nokey2=ts,v", "--state", str(state))
    assert code == 0, err
    planned = json.loads(out)["tables"]
    assert sorted(planned) == [f"{db}.a", f"{db}.b", f"{db}.nokey1", f"{db}.nokey2"]
    assert planned[f"{db}.nokey2"]["key"] == ["ts", "v"]
    code, _, err = dblog("plan", "--source", mariadb.uri(), "--tables", f"{db}_nothing.*", "--state", str(tmp_path / "x"))
    assert code != 0 and f"no table on 127.0.0.1:{mariadb.port} matches --tables {db}_nothing.*" in one_error_line(err)
    code, _, err = dblog("plan", "--source", mariadb.uri(), "--tables", f"{db}", "--state", str(tmp_path / "x"))
    assert code != 0 and f"bad --tables pattern '{db}'" in one_error_line(err)
    assert not (tmp_path / "x").exists()


def test_a_table_whose_name_holds_a_slash_is_refused_in_one_line(mariadb, db, tmp_path):
    """``a/current`` would have put its Delta table inside ``a``'s ``current`` directory (where a vacuum of ``a``
    deletes its files), and a name with ``../..`` outside the sink: such names are refused, and an --exclude
    captures the rest."""
    mariadb.sql(*[f"CREATE TABLE {db}.`{name}` (id INT PRIMARY KEY)" for name in ("a", "a/current", "x/../../../out")],
                f"INSERT INTO {db}.a VALUES (1), (2)", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", state, "--sink", sink)
    line = one_error_line(err)
    assert code != 0 and "2 table(s) have names the lake's paths" in line, line
    assert f"{db}.a/current" in line and "--exclude" in line, line
    assert not (tmp_path / "lake").exists() and not (tmp_path.parent / "out").exists()
    code, out, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.*", "--exclude", f"{db}.a/*,{db}.x/*",
                           "--state", state, "--sink", sink)
    assert code == 0, err[-2000:]
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", f"{db}.*", "--rows")
    assert code == 0 and json.loads(out)["equal"], out + err[-2000:]
