"""Never silent (issue 25, classes 1 and 2): every binlog event of a captured table is decoded, or the
tail stops before it with one line naming the setting, the table and the position, and the lake keeps
nothing past it. The server's settings are changed at run time, as a DBA would, globally or in one session.
"""
from __future__ import annotations

import json
from typing import Sequence

import pytest

from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.state import StateDir
from airflow_provider_dblog.local.executor import LocalExecutor
from tests.support.cli import captured, dblog, one_error_line


def _capture(mariadb, db, tmp_path, rows=200, ddl="(id INT PRIMARY KEY, v INT, note TEXT)"):
    mariadb.sql(f"CREATE TABLE {db}.t {ddl}",
                f"INSERT INTO {db}.t SELECT seq, seq, CONCAT('note ', seq) FROM seq_1_to_{rows}", db=db)
    return captured(mariadb.uri(), f"{db}.t", tmp_path, 50)


def _tail(state, sink, *options, env=None):
    return dblog("tail", "--state", state, "--sink", sink, "--available-now", *options, env=env)


def _tail_by(request, state, sink, path):
    """The tail of ``path``: in the driver, ``dblog tail`` in a subprocess; on Spark (``--driver-catch-up-mb 0``),
    the same steps and streaming query in this process on the tests' shared session (a local Spark's start per
    call took most of these tests' time), answering as the CLI does: exit code, log and one error line."""
    if not path:
        return lambda: _tail(state, sink)
    spark = request.getfixturevalue("spark")

    def tail():
        import io
        import logging

        from airflow_provider_dblog.core.errors import DblogError
        from airflow_provider_dblog.steps.tail import run_tail

        said, logger = io.StringIO(), logging.getLogger("dblog")
        handler, level = logging.StreamHandler(said), logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            run_tail(state, sink, available_now=True, executor=LocalExecutor("dblog-test", spark=spark))
            return 0, "", said.getvalue()
        except DblogError as exc:
            return 2, "", f"{said.getvalue()}dblog: error: {exc}\n"
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
    return tail


def _verify_rows(state, sink, table):
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table, "--rows")
    return code, (json.loads(out) if code == 0 else err)


def _roll_back_if_prepared(mariadb, xid: str) -> None:
    """A test's XA transaction left prepared by a failed assertion is rolled back (it would hold the shared server)."""
    if xid in {str(r[-1], "utf-8", "replace") if isinstance(r[-1], bytes) else r[-1] for r in mariadb.sql("XA RECOVER")}:
        mariadb.sql(f"XA ROLLBACK '{xid}'")


def _followed_then_equal(state, sink, table, in_place: bool) -> None:
    """A tail after a schema change: followed in place (no chunk read again) or by a re-read, as ``in_place`` says;
    the lake then equals the source row by row."""
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    assert ("chunks of" in err and "again" in err) is not in_place, err[-3000:]
    code, result = _verify_rows(state, sink, table)
    assert code == 0 and result["equal"], result


def _captured_then_tailed(mariadb, db, tmp_path, table: str, setup: Sequence[str], changes: Sequence[str]):
    """``setup`` run, ``db.table`` captured (chunks of 50), ``changes`` run, one tail that must succeed: (state,
    sink). Both lists run in one session each (a lax ``sql_mode`` set by their first statement holds for the rest)."""
    mariadb.sql(*setup, db=db)
    state, sink = captured(mariadb.uri(), f"{db}.{table}", tmp_path, 50)
    mariadb.sql(*changes, db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    return state, sink


def _both_verifies_equal(state, sink, table) -> None:
    """``dblog verify --rows`` and the checksum verify both say equal."""
    code, result = _verify_rows(state, sink, table)
    assert code == 0 and result["equal"], result
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table)
    assert code == 0, err[-3000:]


def _lake_position(state, table):
    recorded = StateDir(state).tail_positions().get(table)
    return recorded[0] if recorded else None


def test_compressed_binlog_events_are_decoded(mariadb, db, tmp_path):
    """log_bin_compress=ON: MariaDB writes compressed query and rows events the replication library
    does not know; dblog decodes them (before, 600 updates were skipped and the tail exited 0)."""
    state, sink = _capture(mariadb, db, tmp_path)
    try:
        mariadb.sql("SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
        mariadb.sql(f"UPDATE {db}.t SET v = v * 3, note = REPEAT('compressed ', 40) WHERE id <= 150",
                    f"DELETE FROM {db}.t WHERE id > 190",
                    f"INSERT INTO {db}.t SELECT seq, -seq, REPEAT('x', 300) FROM seq_1000_to_1100",
                    f"ALTER TABLE {db}.t ADD COLUMN extra VARCHAR(20) NOT NULL DEFAULT 'dflt'",
                    f"UPDATE {db}.t SET extra = 'set' WHERE id % 7 = 0", db=db)
        file = mariadb.sql("SHOW MASTER STATUS")[0][0]
        kinds = {row[2] for row in mariadb.sql(f"SHOW BINLOG EVENTS IN '{file}'")}
        assert {"Update_rows_compressed_v1", "Query_compressed"} <= kinds, kinds
    finally:
        mariadb.sql("SET GLOBAL log_bin_compress = OFF", "SET GLOBAL log_bin_compress_min_len = DEFAULT")
    code, _, err = _tail(state, sink)
    assert code == 0, err
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"], result
    assert result["source_rows"] == 190 + 101


@pytest.mark.parametrize("setting, value, expected", [
    ("binlog_row_image", "MINIMAL", "binlog_row_image is not FULL"),
    ("binlog_row_image", "NOBLOB", "binlog_row_image is not FULL"),
    ("binlog_format", "STATEMENT", "statement-logged UPDATE"),
    ("binlog_format", "MIXED", "statement-logged UPDATE"),
])
def test_a_session_setting_that_hides_rows_stops_the_tail(mariadb, db, tmp_path, setting, value, expected):
    """One session with MINIMAL/NOBLOB images or statement logging: the tail stops before that
    transaction with one line; nothing from it or after it reaches the lake (the batch holding it fails
    whole, so changes just before it may wait too)."""
    state, sink = _capture(mariadb, db, tmp_path)
    mariadb.sql(f"UPDATE {db}.t SET v = -1 WHERE id = 1")  # before: must reach the lake
    before = mariadb.sql("SHOW MASTER STATUS")[0]
    mariadb.sql(f"SET SESSION {setting} = '{value}'", f"UPDATE {db}.t SET v = v + 1000 WHERE id BETWEEN 10 AND 60")
    mariadb.sql(f"UPDATE {db}.t SET v = -2 WHERE id = 2")  # after: must not
    code, _, err = _tail(state, sink)
    assert code != 0
    line = one_error_line(err)
    assert expected in line and f"{db}.t" in line and "stops before it" in line, line
    bad_at = SourcePosition.at(before[0], int(before[1]))
    lake_at = _lake_position(state, f"{db}.t")
    assert lake_at is None or lake_at <= bad_at
    from deltalake import DeltaTable

    current = DeltaTable(f"{sink}/{db}.t/current").to_pyarrow_table(columns=["id", "v"]).to_pylist()
    rows = {r["id"]: r["v"] for r in current}
    assert rows[1] in (1, -1) and rows[2] == 2 and all(rows[k] == k for k in range(10, 61)), rows
    code, _, err = _tail(state, sink)  # again: the same one line, still nothing past it
    assert code != 0 and expected in one_error_line(err)
    # the line's fix: the session's writes go back to FULL rows (this test's next sessions), then a re-snapshot of
    # the table. Before, the tail stopped on the same event after the re-snapshot too: the fix could not be done
    _resnapshot_in_process(state, sink, f"{db}.t")
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    _both_verifies_equal(state, sink, f"{db}.t")


def _resnapshot_in_process(state, sink, table):
    """``dblog resnapshot --table TABLE`` read in this process (no Spark to start: the step is the same)."""
    from airflow_provider_dblog.steps.resnapshot import resnapshot
    from tests.support.inprocess_executor import InProcessExecutor

    resnapshot(state, sink, table, executor=InProcessExecutor())


def test_binlog_row_metadata_switched_off_stops_the_tail(mariadb, db, tmp_path):
    state, sink = _capture(mariadb, db, tmp_path)
    try:
        mariadb.sql("SET GLOBAL binlog_row_metadata = 'MINIMAL'")
        mariadb.sql(f"UPDATE {db}.t SET v = 7 WHERE id = 3")
    finally:
        mariadb.sql("SET GLOBAL binlog_row_metadata = 'FULL'")
    code, _, err = _tail(state, sink)
    assert code != 0
    line = one_error_line(err)
    assert "binlog_row_metadata is not FULL" in line and f"{db}.t" in line


def test_statement_dml_of_another_table_does_not_stop_the_tail(mariadb, db, tmp_path):
    state, sink = _capture(mariadb, db, tmp_path)
    mariadb.sql(f"CREATE TABLE {db}.other (id INT PRIMARY KEY, v INT)")
    mariadb.sql("SET SESSION binlog_format = 'STATEMENT'", f"INSERT INTO {db}.other VALUES (1, 1)",
                f"UPDATE {db}.other SET v = 2")
    mariadb.sql(f"UPDATE {db}.t SET v = 0 WHERE id < 20")
    code, _, err = _tail(state, sink)
    assert code == 0, err
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"], result


def test_a_tail_killed_between_changelog_and_current_leaves_no_stale_current(mariadb, db, tmp_path, monkeypatch):
    """Issue 25 class 6: the changelog commit lands, the process dies before ``current`` follows; the
    table sees no further change. The next tail brings ``current`` up from the changelog."""
    from airflow_provider_dblog.steps.tail import run_tail
    from airflow_provider_dblog.store.lake_tables import LakeTables

    state, sink = _capture(mariadb, db, tmp_path)
    mariadb.sql(f"UPDATE {db}.t SET v = v + 100000 WHERE id <= 120", f"DELETE FROM {db}.t WHERE id > 180")

    def killed(self, end=None):  # the process dies here, after the tail recorded its progress
        pass

    with monkeypatch.context() as patched:
        patched.setattr(LakeTables, "update_current", killed)
        run_tail(state, sink, available_now=True, executor=LocalExecutor("dblog-test", 64 << 20))
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code != 0  # current is stale now (the changelog has the changes)
    # the checksum verify brings current forward with the changelog's changes after current's position (the tail
    # recorded its progress before current followed): no drift. Before, it took the recorded progress for
    # current's and called the changed chunks drifted (and --repair read them again); a continuous tail under load
    # showed it between its changelog commit and current's update
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.t")
    assert code == 0 and json.loads(out)["drifted"] == [], err[-2000:]
    mariadb.sql("SET SESSION sql_log_bin = 0", f"UPDATE {db}.t SET v = -1 WHERE id = 20", db=db)  # never in the binlog
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.t")
    assert code != 0 and json.loads(out)["drifted"] == [0], err[-2000:]  # still found, and only there
    mariadb.sql("SET SESSION sql_log_bin = 0", f"UPDATE {db}.t SET v = 100020 WHERE id = 20", db=db)  # as it was
    code, _, err = _tail(state, sink)  # no new change of the table
    assert code == 0, err
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"], result


@pytest.mark.parametrize("clause", [
    "ADD COLUMN g INT AS (v * 2) STORED",
    "ADD COLUMN vg INT GENERATED ALWAYS AS (v + 1) VIRTUAL",
    "ADD COLUMN n BIGINT AUTO_INCREMENT UNIQUE",
    "ADD COLUMN ts TIMESTAMP",
    "ADD COLUMN z INT NOT NULL",
    "ADD COLUMN d DATETIME(6) NOT NULL DEFAULT '2001-02-03 04:05:06'",
])
def test_an_added_column_whose_old_rows_the_statement_does_not_state_is_read(mariadb, db, tmp_path, clause):
    """Issue 25 class 4: a generated, AUTO_INCREMENT or implicitly defaulted column is filled for the rows
    already there by a re-read of the table's chunks, never with NULL; a literal DEFAULT in place."""
    state, sink = _capture(mariadb, db, tmp_path)
    mariadb.sql(f"ALTER TABLE {db}.t {clause}", f"UPDATE {db}.t SET v = v + 1 WHERE id % 5 = 0")
    code, _, err = _tail(state, sink)
    assert code == 0, err
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"], result
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.t")
    assert code == 0 and json.loads(out)["drifted"] == [], err


def test_truncate_writes_delete_rows_so_the_changelog_replays_to_current(mariadb, db, tmp_path):
    """Issue 25 class 5: after a TRUNCATE (followed by re-reading every chunk) the changelog holds a delete
    for every key it removed; a consumer replaying it ends with ``current``, not 200 rows that no longer exist."""
    from tests.support.lakecheck import assert_replay_equals_current

    state, sink = _capture(mariadb, db, tmp_path)
    mariadb.sql(f"UPDATE {db}.t SET v = 0 WHERE id < 10", f"TRUNCATE TABLE {db}.t",
                f"INSERT INTO {db}.t VALUES (7, 7, 'back'), (500, 500, 'new')")
    code, _, err = _tail(state, sink)
    assert code == 0, err
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"] and result["source_rows"] == 2, result
    assert assert_replay_equals_current(sink, f"{db}.t") == 2


def test_positions_know_their_server(tmp_path):
    """Another server_id whose binlog continues the lake's GTIDs (a promoted replica answering at the same
    address) is followed by GTID; without a GTID recorded to prove it, or after a binlog reset under the
    lake's positions (RESET MASTER), the tail stops in one line and nothing is read or written."""
    import json

    from tests.support.local_mariadb import LocalMariaDB

    with LocalMariaDB(tmp_path / "own", server_id=7) as server:
        server.sql("CREATE DATABASE s")
        state, sink = _capture(server, "s", tmp_path)
        server.sql("UPDATE s.t SET v = 1")
        code, _, err = _tail(state, sink)
        assert code == 0, err
        server.sql("SET GLOBAL server_id = 8", "UPDATE s.t SET v = 2 WHERE id < 50")
        code, _, err = _tail(state, sink)
        assert code == 0 and "promoted server server_id 8" in err, err[-2000:]
        code, result = _verify_rows(state, sink, "s.t")
        assert code == 0 and result["equal"], result

        positions = tmp_path / "state" / "tail_positions.json"  # a capture whose positions carry no GTID
        recorded = json.loads(positions.read_text())
        positions.write_text(json.dumps({"tables": {t: {k: v for k, v in e.items() if k != "gtid"}
                                                    for t, e in recorded["tables"].items()}}))
        for caught_up in (tmp_path / "state" / "caught_up").glob("*.json"):
            caught_up.unlink()
        server.sql("SET GLOBAL server_id = 9")
        code, _, err = _tail(state, sink)
        assert code != 0 and "no GTID was recorded" in one_error_line(err), err[-2000:]
        positions.write_text(json.dumps(recorded))

        server.sql("SET GLOBAL server_id = 8", "RESET MASTER")
        code, _, err = _tail(state, sink)
        assert code != 0 and "RESET MASTER" in one_error_line(err)


def test_schema_changes_followed_in_place_are_in_the_changelog(mariadb, db, tmp_path):
    """Issue 25 class 5: ADD COLUMN ... DEFAULT, RENAME COLUMN and a widening MODIFY change the rows
    already there without a binlog event; the changelog gets them as rows at the statement's position,
    so a consumer replaying it ends with ``current``."""
    from tests.support.lakecheck import assert_replay_equals_current

    state, sink = _capture(mariadb, db, tmp_path)
    mariadb.sql(f"ALTER TABLE {db}.t ADD COLUMN extra VARCHAR(10) NOT NULL DEFAULT 'dflt'",
                f"UPDATE {db}.t SET extra = 'set' WHERE id < 5",
                f"ALTER TABLE {db}.t RENAME COLUMN note TO remark",
                f"ALTER TABLE {db}.t MODIFY COLUMN v BIGINT", f"UPDATE {db}.t SET v = 5000000000 WHERE id = 9")
    code, _, err = _tail(state, sink)
    assert code == 0, err
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"], result
    assert assert_replay_equals_current(sink, f"{db}.t") == 200
    code, _, err = _tail(state, sink)  # again: nothing logged twice
    assert code == 0, err
    assert assert_replay_equals_current(sink, f"{db}.t") == 200


@pytest.mark.parametrize("path", [(), ("--driver-catch-up-mb", "0")], ids=["in-driver", "spark"])
def test_binlog_checksum_changed_at_run_time_is_read_file_by_file(mariadb, db, tmp_path, path, request):
    """``SET GLOBAL binlog_checksum`` between writes: one range holds files with and without CRC32s. Each is
    read with its own setting, whichever the server logs when the tail runs (before: an UPDATE in the range
    was lost and the tail exited 0 on the Spark path; the in-driver path stopped with the server's error)."""
    state, sink = _capture(mariadb, db, tmp_path)
    original = mariadb.sql("SELECT @@global.binlog_checksum")[0][0]
    files_before = len(mariadb.sql("SHOW BINARY LOGS"))
    tail = _tail_by(request, state, sink, path)
    try:
        mariadb.sql("SET GLOBAL binlog_checksum = 'CRC32'")
        mariadb.sql(f"UPDATE {db}.t SET v = -1 WHERE id = 1")
        mariadb.sql("SET GLOBAL binlog_checksum = 'NONE'")
        mariadb.sql(f"UPDATE {db}.t SET v = -2, note = 'no checksum' WHERE id BETWEEN 2 AND 40",
                    f"DELETE FROM {db}.t WHERE id > 190",
                    f"INSERT INTO {db}.t SELECT seq, -seq, 'inserted' FROM seq_300_to_320", db=db)
        mariadb.sql("SET GLOBAL binlog_checksum = 'CRC32'")
        mariadb.sql(f"UPDATE {db}.t SET v = -3 WHERE id = 3")  # the change the Spark path lost
        assert len(mariadb.sql("SHOW BINARY LOGS")) >= files_before + 2  # each change of setting starts a file
        # the server logs checksums; the range holds a file without them
        code, _, err = tail()
        assert code == 0, err[-3000:]
        assert path or "written without checksums: read with that setting" in err, err[-3000:]
        code, result = _verify_rows(state, sink, f"{db}.t")
        assert code == 0 and result["equal"], result

        mariadb.sql(f"UPDATE {db}.t SET v = -4 WHERE id = 4")
        mariadb.sql("SET GLOBAL binlog_checksum = 'NONE'")
        mariadb.sql(f"UPDATE {db}.t SET v = -6 WHERE id IN (3, 6)", f"DELETE FROM {db}.t WHERE id = 5")
        # the server logs no checksums; the range starts in a file with them
        code, _, err = tail()
        assert code == 0, err[-3000:]
        assert path or "written with checksums: read with that setting" in err, err[-3000:]
        code, result = _verify_rows(state, sink, f"{db}.t")
        assert code == 0 and result["equal"], result
    finally:
        mariadb.sql(f"SET GLOBAL binlog_checksum = '{original}'")
    from deltalake import DeltaTable

    current = {r["id"]: r["v"] for r in DeltaTable(f"{sink}/{db}.t/current").to_pyarrow_table(
        columns=["id", "v"]).to_pylist()}
    assert (current[1], current[2], current[3], current[4], current[6]) == (-1, -2, -6, -4, -6), current
    assert 5 not in current and 191 not in current and current[310] == -310


@pytest.mark.parametrize("path", [(), ("--driver-catch-up-mb", "0")], ids=["in-driver", "spark"])
def test_xa_transactions_count_from_their_commit_and_a_rollback_leaves_no_trace(mariadb, db, tmp_path, path, request):
    """The server writes an XA transaction's rows at XA PREPARE, before its outcome. Before: the rows of one
    rolled back after its prepare stayed in the lake (tail exit 0, verify: 1 extra, 1 different). Now they wait
    for XA COMMIT (and count from its position) or go at XA ROLLBACK; one still undecided where the read ends
    stops the tail in one line with nothing of the read written, and the next tail after its commit takes it."""
    state, sink = _capture(mariadb, db, tmp_path)
    tail = _tail_by(request, state, sink, path)
    t = f"{db}.t"
    mariadb.sql(f"XA START '{db}r'", f"UPDATE {t} SET v = -1 WHERE id = 1", f"INSERT INTO {t} VALUES (900, 900, 'x')",
                f"DELETE FROM {t} WHERE id = 2", f"XA END '{db}r'", f"XA PREPARE '{db}r'")
    mariadb.sql(f"UPDATE {t} SET v = -10 WHERE id = 10")  # committed between a prepare and its rollback
    mariadb.sql(f"XA ROLLBACK '{db}r'")
    mariadb.sql(f"XA START '{db}c'", f"UPDATE {t} SET v = -3 WHERE id = 3", f"DELETE FROM {t} WHERE id = 4",
                f"XA END '{db}c'", f"XA PREPARE '{db}c'")
    mariadb.sql(f"UPDATE {t} SET v = -11 WHERE id = 11")
    mariadb.sql(f"XA COMMIT '{db}c'", f"XA START '{db}o'", f"UPDATE {t} SET v = -5 WHERE id = 5", f"XA END '{db}o'",
                f"XA COMMIT '{db}o' ONE PHASE")
    code, _, err = tail()
    assert code == 0, err[-3000:]
    code, result = _verify_rows(state, sink, t)
    assert code == 0 and result["equal"], result

    # prepared, undecided when the tail reads: it stops before it in one line; the lake keeps what it had
    lake_at = _lake_position(state, t)
    mariadb.sql(f"UPDATE {t} SET v = -12 WHERE id = 12")
    mariadb.sql(f"XA START '{db}u'", f"UPDATE {t} SET v = -6 WHERE id = 6", f"XA END '{db}u'", f"XA PREPARE '{db}u'")
    try:
        code, _, err = tail()
        assert code != 0
        line = one_error_line(err)
        assert "XA transaction" in line and t in line and "neither committed nor rolled back" in line, line
        assert _lake_position(state, t) == lake_at
    finally:
        mariadb.sql(f"XA COMMIT '{db}u'")
    code, _, err = tail()
    assert code == 0, err[-3000:]
    code, result = _verify_rows(state, sink, t)
    assert code == 0 and result["equal"], result
    from deltalake import DeltaTable

    current = {r["id"]: r["v"] for r in DeltaTable(f"{sink}/{t}/current").to_pyarrow_table(
        columns=["id", "v"]).to_pylist()}
    assert (current[1], current[2], current[3], current[5], current[6], current[12]) == (1, 2, -3, -5, -6, -12)
    assert 4 not in current and 900 not in current
    changes = DeltaTable(f"{sink}/{t}/changelog").to_pyarrow_table(columns=["id", "v", "_op"]).to_pylist()
    rolled_back = [c for c in changes if c["id"] == 900 or (c["id"] == 1 and c["v"] == -1)
                   or (c["id"] == 2 and c["_op"] == "d")]
    assert not rolled_back, rolled_back  # the rolled-back transaction left nothing in the changelog either


@pytest.mark.parametrize("path", [(), ("--driver-catch-up-mb", "0")], ids=["in-driver", "spark"])
def test_rows_a_foreign_key_cascade_changes_are_read_again(mariadb, db, tmp_path, path, request):
    """InnoDB does not log the child rows an ON DELETE/UPDATE CASCADE or SET NULL changes (MySQL bug #32506):
    before, the lake kept them (tail exit 0; verify: 4 extra, 4 different). A parent's DELETE, or an UPDATE of
    the key a cascade references, now makes the committer read the captured child tables again, through
    chains of cascades (an uncaptured parent -> c -> g); a parent UPDATE of other columns reads nothing."""
    mariadb.sql("CREATE TABLE p (id INT PRIMARY KEY, note VARCHAR(20))",
                "CREATE TABLE c (id INT PRIMARY KEY, pid INT, v INT, FOREIGN KEY (pid) REFERENCES p (id) "
                "ON DELETE CASCADE ON UPDATE CASCADE)",
                "CREATE TABLE g (id INT PRIMARY KEY, cid INT, FOREIGN KEY (cid) REFERENCES c (id) ON DELETE SET NULL)",
                "INSERT INTO p SELECT seq, 'n' FROM seq_1_to_5", "INSERT INTO c SELECT seq, seq % 5 + 1, seq FROM seq_1_to_20",
                "INSERT INTO g SELECT seq, seq FROM seq_1_to_20", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.c,{db}.g", "--state", state,
                         "--sink", sink, "--chunk-size", "8")
    assert code == 0, err[-3000:]
    tail = _tail_by(request, state, sink, path)

    mariadb.sql("UPDATE p SET note = 'other columns' WHERE id = 3", "UPDATE c SET v = -1 WHERE id = 3",
                "UPDATE c SET v = -1 WHERE id BETWEEN 11 AND 14", db=db)  # c: captured, and g's parent
    code, _, err = tail()
    assert code == 0, err[-3000:]
    assert "REWRITE" not in err, err[-3000:]  # no key a cascade references changed: nothing read again
    code, result = _verify_rows(state, sink, f"{db}.c")  # a captured parent's own updates are in the lake
    assert code == 0 and result["equal"], result

    mariadb.sql("DELETE FROM p WHERE id = 1", "UPDATE p SET id = 50 WHERE id = 2", "UPDATE c SET v = -2 WHERE id = 7",
                db=db)
    code, _, err = tail()
    assert code == 0, err[-3000:]
    assert path or f"REWRITE of {db}.c" in err and f"REWRITE of {db}.g" in err, err[-3000:]
    for table in ("c", "g"):
        code, result = _verify_rows(state, sink, f"{db}.{table}")
        assert code == 0 and result["equal"], result
    from deltalake import DeltaTable

    children = {r["id"]: r["pid"] for r in DeltaTable(f"{sink}/{db}.c/current").to_pyarrow_table().to_pylist()}
    assert 5 not in children and children[1] == 50 and len(children) == 16, children
    code, _, err = tail()  # nothing new: nothing read again
    assert code == 0 and "REWRITE" not in err, err[-3000:]

    # a parent DELETE inside an XA transaction: its cascade counts from the XA COMMIT, like its rows
    mariadb.sql(f"XA START '{db}f'", "DELETE FROM p WHERE id = 3", f"XA END '{db}f'", f"XA PREPARE '{db}f'", db=db)
    try:
        code, _, err = tail()
        assert code != 0 and "neither committed nor rolled back" in one_error_line(err), err[-3000:]
    finally:
        mariadb.sql(f"XA COMMIT '{db}f'")
    code, _, err = tail()
    assert code == 0, err[-3000:]
    for table in ("c", "g"):
        code, result = _verify_rows(state, sink, f"{db}.{table}")
        assert code == 0 and result["equal"], result


@pytest.mark.parametrize("strategy", ["consistent_snapshot", "watermark_table", "position"])
def test_an_xa_commit_inside_a_chunk_window_reads_the_chunk_again(mariadb, db, strategy):
    """An XA transaction prepared before a chunk's low watermark and committed between its SELECT and its high
    watermark: the server wrote its rows at the prepare, before the window, so the window held only its XA
    COMMIT, and the SELECT read the rows as they were before it. Before: the chunk kept the old values under a
    high watermark past the commit, so the tail's copy of the change lost to it (silent; verify: different).
    Now the window names the unseen commit and the chunk is read again; a window that says so every time ends
    in one line after a bounded number of reads."""
    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.core.errors import DblogError
    from airflow_provider_dblog.readers.chunk_reader import AGAIN_ATTEMPTS, read_chunk
    from airflow_provider_dblog.source.mysql.dialect import MySqlDialect

    t = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)", f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_50",
                db=db)
    prepared = []

    def prepare(n: int) -> None:
        xid = f"{db}w{n}"
        mariadb.sql(f"XA START '{xid}'", f"UPDATE {t} SET v = {-n} WHERE id = {n}", f"XA END '{xid}'",
                    f"XA PREPARE '{xid}'")
        prepared.append(xid)

    class CommitAfterTheSelect(MySqlDialect):  # the real dialect; the XA COMMIT lands at the worst moment
        every_read = False

        def read_snapshot(self, meta, chunk):
            rows = super().read_snapshot(meta, chunk)
            if prepared:
                mariadb.sql(f"XA COMMIT '{prepared.pop()}'")
                if self.every_read:
                    prepare(len(selects) + 10)  # before the next read's low watermark
            selects.append(rows)
            return rows

    selects = []
    dialect = CommitAfterTheSelect(SourceConfig.parse(mariadb.uri()))
    try:
        meta = dialect.describe_table(t)
        chunk = dialect.split_chunks(meta, 1000)[0]
        dialect.resolve_strategy(strategy, meta)
        prepare(1)
        read = read_chunk(dialect, meta, chunk, strategy)
        assert {r["id"]: r["v"] for r in read.rows.to_pylist()} == {i: (-1 if i == 1 else i) for i in range(1, 51)}
        assert {r["id"]: r["v"] for r in selects[0].to_pylist()}[1] == 1  # the first SELECT did not see the XA
        assert len(selects) == 2  # and its read was thrown away

        selects.clear()
        dialect.every_read = True
        prepare(2)
        with pytest.raises(DblogError) as failed:
            read_chunk(dialect, meta, chunk, strategy)
        assert len(selects) == AGAIN_ATTEMPTS
        message = str(failed.value)
        assert "\n" not in message and f"{t}/{chunk.id}" in message and "prepared before the window" in message
        assert "dblog resnapshot" in message
    finally:
        for xid in prepared:
            mariadb.sql(f"XA COMMIT '{xid}'")
        dialect.close()


def test_an_xa_transaction_prepared_before_the_plan_is_waited_for(mariadb, db, tmp_path):
    """An XA transaction prepared before the plan's position and committed after the snapshot read its rows:
    its rows sit in the binlog before the stream's start and the SELECTs did not see them. Before: tail exit 0,
    verify 1 missing, 1 different. Now the plan waits for it to be decided (DBLOG_XA_WAIT_SECONDS), and refuses
    in one line, writing nothing, when it is not."""
    import threading
    from pathlib import Path

    from deltalake import DeltaTable

    t = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)", f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_200",
                db=db)
    mariadb.sql(f"XA START '{db}p'", f"UPDATE {t} SET v = -1 WHERE id = 1", f"INSERT INTO {t} VALUES (900, 900)",
                f"XA END '{db}p'", f"XA PREPARE '{db}p'")
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    run = ("run", "--source", mariadb.uri(), "--table", t, "--state", state, "--sink", sink, "--chunk-size", "50")
    try:
        code, _, err = dblog(*run, env={"DBLOG_XA_WAIT_SECONDS": "1"})
        assert code != 0
        line = one_error_line(err)
        assert "XA transaction(s) prepared before the plan's position are still undecided" in line, line
        assert f"{db}p" in line and "XA COMMIT or XA ROLLBACK" in line, line
        assert not Path(state).exists() or not any(Path(state).iterdir()), list(Path(state).iterdir())
        assert not Path(sink).exists()

        commit = threading.Timer(2.0, lambda: mariadb.sql(f"XA COMMIT '{db}p'"))
        commit.start()
        code, _, err = dblog(*run, env={"DBLOG_XA_WAIT_SECONDS": "60"})
        commit.join()
    finally:
        _roll_back_if_prepared(mariadb, f"{db}p")
    assert code == 0, err[-3000:]
    assert "waiting up to 60 s for 1 XA transaction(s)" in err and "are decided" in err, err[-3000:]
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    code, result = _verify_rows(state, sink, t)
    assert code == 0 and result["equal"], result
    current = {r["id"]: r["v"] for r in DeltaTable(f"{sink}/{t}/current").to_pyarrow_table().to_pylist()}
    assert current[1] == -1 and current[900] == 900 and len(current) == 201


@pytest.mark.parametrize("path", [(), ("--driver-catch-up-mb", "0")], ids=["in-driver", "spark"])
def test_a_tail_killed_while_it_reads_a_cascaded_table_again_converges(mariadb, db, tmp_path, path):
    """SIGKILL of the tail after it committed the read holding a parent's cascading DELETE (which records that
    the child must be read again) and while it reads the child again (in the driver: after the re-read's first
    chunk landed; on Spark: while the re-read's job runs): the next tail reads the child again whole. The lake
    equals the source, each change is in the changelog once, and it replays to current."""
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    from tests.support.cli import DBLOG
    from tests.support.lakecheck import assert_each_change_once, assert_replay_equals_current

    mariadb.sql("CREATE TABLE p (id INT PRIMARY KEY)",
                "CREATE TABLE c (id INT PRIMARY KEY, pid INT, v INT, FOREIGN KEY (pid) REFERENCES p (id) "
                "ON DELETE CASCADE)",
                "INSERT INTO p SELECT seq FROM seq_1_to_5", "INSERT INTO c SELECT seq, seq % 5 + 1, seq FROM seq_1_to_3000",
                db=db)
    child = f"{db}.c"
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", mariadb.uri(), "--table", child, "--state", state, "--sink", sink,
                         "--chunk-size", "150")
    assert code == 0, err[-3000:]
    mariadb.sql("UPDATE c SET v = -v WHERE id % 7 = 0", "DELETE FROM p WHERE id = 2", "UPDATE c SET v = 0 WHERE id = 9",
                db=db)  # 600 children gone without a row event
    reports = Path(state) / "reports" / child
    started = time.time()
    log = tmp_path / "killed.log"
    process = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now", *path],
                               stdout=subprocess.DEVNULL, stderr=open(log, "w"), start_new_session=True)

    def rewritten() -> int:
        return sum(f.stat().st_mtime > started for f in reports.glob("*.json"))

    try:
        deadline = time.time() + 300
        while "schema change: reading the" not in log.read_text():  # the re-read starts: its change is committed
            assert process.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.01)
        if path:  # the re-read is one Spark job: its reports come at its end
            time.sleep(1.0)
        else:
            while not rewritten():
                assert process.poll() is None and time.time() < deadline, log.read_text()[-3000:]
                time.sleep(0.01)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert f"REWRITE of {child}" in log.read_text()
    assert (0 if path else 1) <= rewritten() < len(list(reports.glob("*.json"))), rewritten()  # killed inside it
    code, _, err = _tail(state, sink, *path)
    assert code == 0, err[-3000:]
    assert f"REWRITE of {child}" in err, err[-3000:]  # the next tail follows the recorded change again
    code, result = _verify_rows(state, sink, child)
    assert code == 0 and result["equal"], result
    assert_each_change_once(sink, child)
    assert assert_replay_equals_current(sink, child) == 2400
    code, _, err = _tail(state, sink)
    assert code == 0 and "REWRITE" not in err, err[-3000:]  # done: not read again


@pytest.mark.parametrize("behaviour", ["evolve", "freeze"])
def test_partition_statements_that_remove_or_swap_rows_read_the_tables_again(mariadb, db, tmp_path, behaviour):
    """ALTER TABLE ... DROP / TRUNCATE PARTITION remove rows and EXCHANGE PARTITION ... WITH TABLE swaps rows
    between two tables, with no row event. Before: EXCHANGE left the other table's lake as it was (tail exit 0;
    verify: 89 missing, 11 different), and freeze ignored DROP and TRUNCATE PARTITION as column changes (199
    extra); ADD and REORGANIZE PARTITION read the table again for nothing. Now
    each is a ``rewrite`` of the tables it names (read again, columns kept under freeze); statements that only
    move rows between partitions (ADD, REORGANIZE) read nothing."""
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN "
                "(100), PARTITION p1 VALUES LESS THAN (200), PARTITION p2 VALUES LESS THAN (300), PARTITION p3 VALUES "
                "LESS THAN (400))", "INSERT INTO t SELECT seq, seq FROM seq_1_to_399",
                "CREATE TABLE x (id INT PRIMARY KEY, v INT)", "INSERT INTO x SELECT seq, -seq FROM seq_250_to_260", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.t,{db}.x", "--state", state,
                         "--sink", sink, "--chunk-size", "50")
    assert code == 0, err[-3000:]
    tail = lambda: _tail(state, sink, "--schema-changes", behaviour)  # noqa: E731

    def equal(*tables):
        for table in tables:
            code, result = _verify_rows(state, sink, f"{db}.{table}")
            assert code == 0 and result["equal"], result

    mariadb.sql("ALTER TABLE t ADD PARTITION (PARTITION p4 VALUES LESS THAN (500))",
                "ALTER TABLE t REORGANIZE PARTITION p3 INTO (PARTITION p3a VALUES LESS THAN (350), "
                "PARTITION p3b VALUES LESS THAN (400))", "UPDATE t SET v = -v WHERE id = 399", db=db)
    code, _, err = tail()
    assert code == 0, err[-3000:]
    assert "again" not in err and "REWRITE" not in err, err[-3000:]  # rows only moved between partitions
    equal("t")

    mariadb.sql("ALTER TABLE t DROP PARTITION p0", "ALTER TABLE t TRUNCATE PARTITION p1",
                "UPDATE t SET v = 0 WHERE id = 201", db=db)
    code, _, err = tail()
    assert code == 0, err[-3000:]
    assert f"REWRITE of {db}.t" in err, err[-3000:]
    equal("t")

    mariadb.sql("ALTER TABLE t EXCHANGE PARTITION p2 WITH TABLE x", db=db)  # t: 250..260; x: 200..299 but 201's 0
    code, _, err = tail()
    assert code == 0, err[-3000:]
    assert f"REWRITE of {db}.t" in err and f"REWRITE of {db}.x" in err, err[-3000:]
    equal("t", "x")
    code, _, err = tail()
    assert code == 0 and "REWRITE" not in err, err[-3000:]  # followed once


@pytest.mark.parametrize("before, after", [
    (["DROP TABLE t", "CREATE TABLE t_new (id INT PRIMARY KEY, v INT)"], ["ALTER TABLE t_new RENAME TO t"]),
    (["CREATE TABLE t_new (id INT PRIMARY KEY, v INT)", "ALTER TABLE t RENAME TO t_old"], ["ALTER TABLE t_new RENAME t"]),
], ids=["drop-then-alter-rename", "alter-rename-swap"])
def test_a_table_renamed_onto_a_captured_name_by_alter_table_is_read_again(mariadb, db, tmp_path, before, after):
    """``ALTER TABLE a RENAME TO b`` renames a table like ``RENAME TABLE``. Before, it named only ``a``: a table
    renamed onto a captured name whose old table was dropped or renamed away in an earlier tail read left the
    lake with the old rows under the new ones (tail exit 0; verify: 69 extra, 30 different). Now it is a RENAME
    of both names, and the table now named ``t`` is read again."""
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t SELECT seq, seq FROM seq_1_to_99", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.t", tmp_path, 50)
    mariadb.sql(*before, "INSERT INTO t_new SELECT seq, -seq FROM seq_1_to_30", db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    mariadb.sql(*after, "INSERT INTO t VALUES (500, 500)", db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    assert f"RENAME of {db}.t" in err, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"], result
    assert result["source_rows"] == 31


def test_a_new_table_waits_for_xa_transactions_prepared_before_its_plan(mariadb, db, tmp_path):
    """A table that starts to match the capture's patterns is planned by the tail: while an XA transaction
    prepared before that plan stays undecided, the table is not captured yet (a warning, the tail goes on), and
    the next tail after the transaction's commit captures it with its rows."""
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t SELECT seq, seq FROM seq_1_to_20", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", state, "--sink", sink)
    assert code == 0, err[-3000:]
    mariadb.sql("CREATE TABLE n (id INT PRIMARY KEY, v INT)", "INSERT INTO n SELECT seq, seq FROM seq_1_to_20",
                f"XA START '{db}n'", "UPDATE n SET v = -1 WHERE id = 1", f"XA END '{db}n'", f"XA PREPARE '{db}n'", db=db)
    try:
        code, _, err = _tail(state, sink, env={"DBLOG_XA_WAIT_SECONDS": "1"})
        assert code == 0, err[-3000:]
        assert f"{db}.n not captured yet" in err and "still undecided" in err, err[-3000:]
    finally:
        mariadb.sql(f"XA COMMIT '{db}n'")
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.n")
    assert code == 0 and result["equal"], result


@pytest.mark.parametrize("behaviour", ["evolve", "freeze"])
def test_system_versioned_tables_are_refused_in_one_line(mariadb, db, tmp_path, behaviour):
    """MariaDB's system-versioned tables keep history rows in the table: a DELETE is logged as an UPDATE that
    ends the row, an UPDATE writes the old row again as history. Before: under freeze the lake kept deleted rows
    and took history rows for current ones (tail exit 0; verify: 5 extra, 1 different); under evolve every tail
    read the whole table again. Now a plan refuses such tables in one line naming all of them, a tail refuses a
    captured table that became versioned (nothing written), and DROP SYSTEM VERSIONING reads it again."""
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t SELECT seq, seq FROM seq_1_to_99",
                "CREATE TABLE h1 (id INT PRIMARY KEY) WITH SYSTEM VERSIONING",
                "CREATE TABLE h2 (id INT PRIMARY KEY) WITH SYSTEM VERSIONING", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", state, "--sink", sink)
    assert code != 0
    line = one_error_line(err)
    assert f"2 table(s) are system-versioned (WITH SYSTEM VERSIONING): {db}.h1, {db}.h2" in line, line
    assert "--exclude" in line and "DROP SYSTEM VERSIONING" in line, line
    from pathlib import Path
    assert not Path(sink).exists()

    state, sink = captured(mariadb.uri(), f"{db}.t", tmp_path / "t", 50)
    mariadb.sql("UPDATE t SET v = -1 WHERE id = 1", db=db)  # before it: must wait with the rest
    lake_at = _lake_position(state, f"{db}.t")
    mariadb.sql("ALTER TABLE t ADD SYSTEM VERSIONING", "DELETE FROM t WHERE id <= 5", "UPDATE t SET v = -v WHERE id = 10",
                db=db)
    code, _, err = _tail(state, sink, "--schema-changes", behaviour)
    assert code != 0
    line = one_error_line(err)
    assert f"are system-versioned (WITH SYSTEM VERSIONING): {db}.t" in line, line
    assert _lake_position(state, f"{db}.t") == lake_at
    mariadb.sql("ALTER TABLE t DROP SYSTEM VERSIONING", "UPDATE t SET v = 0 WHERE id = 20", db=db)
    code, _, err = _tail(state, sink, "--schema-changes", behaviour)
    assert code == 0, err[-3000:]
    assert f"REWRITE of {db}.t" in err, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"], result
    assert result["source_rows"] == 94


def test_a_new_collation_of_the_key_plans_the_table_again(mariadb, db, tmp_path):
    """The plan's chunk boundaries and the lake's key ranges hold only in the key's order. A new collation of a
    key column (``MODIFY k ... COLLATE``, a ``CONVERT TO CHARACTER SET``) reorders the keys: 'B' sorts before 'a'
    in utf8mb4_bin and after it in utf8mb4_general_ci. Before: the tail followed it in place and a re-read of
    chunks 3 and 4 later lost 10 rows (exit 0; verify: 10 missing). Now a re-read with the old chunks is refused
    in one line, freeze and fail stop in one line, and evolve plans the table again with the new order."""
    mariadb.sql("CREATE TABLE t (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
                "INSERT INTO t VALUES " + ", ".join(f"('{c}{i}', {i})" for i in range(30) for c in "aBcD"), db=db)
    state, sink = captured(mariadb.uri(), f"{db}.t", tmp_path, 20)
    mariadb.sql("ALTER TABLE t MODIFY k VARCHAR(10) COLLATE utf8mb4_bin", "UPDATE t SET v = -v WHERE k LIKE 'c%'", db=db)
    resnapshot = ("resnapshot", "--state", state, "--sink", sink, "--table", f"{db}.t", "--chunks", "3,4")
    code, _, err = dblog(*resnapshot)
    assert code != 0
    line = one_error_line(err)
    assert f"the key of {db}.t changed (k utf8mb4_general_ci -> k utf8mb4_bin)" in line, line
    code, _, err = _tail(state, sink, "--schema-changes", "freeze")
    assert code != 0
    assert "k utf8mb4_general_ci -> k utf8mb4_bin" in one_error_line(err), err[-3000:]
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    assert f"the key of {db}.t is now k utf8mb4_bin: planned again" in err, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"], result
    chunks = len(StateDir(state).table(f"{db}.t").chunks)
    code, _, err = dblog(*resnapshot[:-1], ",".join(str(i) for i in range(chunks)))
    assert code == 0, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"] and result["source_rows"] == 120, result
    from tests.support.lakecheck import assert_replay_equals_current
    assert assert_replay_equals_current(sink, f"{db}.t", ("k",)) == 120  # the old plan's chunks closed at the change


@pytest.mark.parametrize("path", [(), ("--driver-catch-up-mb", "0")], ids=["in-driver", "spark"])
def test_an_xa_transaction_prepared_between_the_plan_and_the_snapshot_is_read_by_the_first_tail(mariadb, db, tmp_path,
                                                                                                 path, request):
    """``dblog plan`` and ``dblog snapshot`` are separate steps (Airflow tasks): an XA transaction prepared in
    between is not waited for by the plan, the snapshot's SELECTs do not see it, and its commit after the
    snapshot falls in no chunk window. Before: the first tail started at the smallest chunk HW, after its
    prepare, and dropped its commit as one of an unknown group (exit 0; verify: 1 missing, 1 different). Now a
    table's first read starts at its plan's position (``StateDir.first_floor``) and sees the prepare."""
    t = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)", f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_200",
                db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("plan", "--source", mariadb.uri(), "--table", t, "--state", state, "--chunk-size", "50")
    assert code == 0, err[-3000:]
    mariadb.sql(f"XA START '{db}s'", f"UPDATE {t} SET v = -1 WHERE id = 1", f"INSERT INTO {t} VALUES (900, 900)",
                f"XA END '{db}s'", f"XA PREPARE '{db}s'")
    try:
        for batch in StateDir(state).batches():
            code, _, err = dblog("snapshot", "--state", state, "--batch", str(batch.index), "--sink", sink)
            assert code == 0, err[-3000:]
        code, _, err = dblog("report", "--state", state)
        assert code == 0, err[-3000:]
    finally:
        mariadb.sql(f"XA COMMIT '{db}s'")
    code, _, err = _tail_by(request, state, sink, path)()
    assert code == 0, err[-3000:]
    code, result = _verify_rows(state, sink, t)
    assert code == 0 and result["equal"], result
    assert result["source_rows"] == 201


def test_a_new_key_on_a_column_added_by_the_same_statement_closes_the_history(mariadb, db, tmp_path):
    """``DROP PRIMARY KEY, ADD COLUMN n ... PRIMARY KEY``: the new key's column is in no changelog row yet.
    Before: the re-plan closed no history (no row has the new key), so a replay of the changelog kept every
    row of the old plan beside the new chunks' rows. Now the history is closed by the key it was written
    under (and by the new key where history rows have it): a replay by the new key gives ``current``."""
    from tests.support.lakecheck import assert_replay_equals_current

    state, sink = _capture(mariadb, db, tmp_path)
    mariadb.sql(f"UPDATE {db}.t SET v = -v WHERE id % 7 = 0", f"DELETE FROM {db}.t WHERE id % 11 = 0")
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    mariadb.sql(f"ALTER TABLE {db}.t DROP PRIMARY KEY, ADD COLUMN n BIGINT AUTO_INCREMENT PRIMARY KEY",
                f"UPDATE {db}.t SET v = v + 1000 WHERE id % 5 = 0")
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    assert f"the key of {db}.t is now n: planned again" in err, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"] and result["source_rows"] == 182, result
    assert assert_replay_equals_current(sink, f"{db}.t", ("n",)) == 182


def test_a_latest_start_waits_for_xa_transactions_prepared_before_it(mariadb, db, tmp_path):
    """``--startup latest`` reads no snapshot: an XA transaction prepared before the start position and
    committed after it has its rows before the start, and the stream saw only its commit. Before: its rows
    were never in the lake (exit 0). Now the start is taken while no XA transaction prepared before it is
    undecided: the plan waits for it (its commit then comes before the start), and refuses in one line after
    DBLOG_XA_WAIT_SECONDS, writing nothing."""
    import threading
    from pathlib import Path

    t = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)", f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_20",
                db=db)
    mariadb.sql(f"XA START '{db}q'", f"UPDATE {t} SET v = -1 WHERE id = 1", f"INSERT INTO {t} VALUES (900, 900)",
                f"XA END '{db}q'", f"XA PREPARE '{db}q'")
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan = ("plan", "--source", mariadb.uri(), "--table", t, "--state", state, "--startup", "latest")
    committed = {}

    def commit():
        mariadb.sql(f"XA COMMIT '{db}q'")
        committed["at"] = tuple(mariadb.sql("SHOW MASTER STATUS")[0][:2])

    try:
        code, _, err = dblog(*plan, env={"DBLOG_XA_WAIT_SECONDS": "1"})
        assert code != 0
        line = one_error_line(err)
        assert f"{db}q" in line and "XA COMMIT or XA ROLLBACK" in line, line
        assert not Path(state).exists() or not any(Path(state).iterdir())
        timer = threading.Timer(2.0, commit)
        timer.start()
        code, out, err = dblog(*plan, env={"DBLOG_XA_WAIT_SECONDS": "60"})
        timer.join()
    finally:
        _roll_back_if_prepared(mariadb, f"{db}q")
    assert code == 0, err[-3000:]
    file, offset = json.loads(out)["tables"][t]["start_at"].rsplit(":", 1)
    assert (file, int(offset)) >= (committed["at"][0], int(committed["at"][1])), (out, committed)
    mariadb.sql(f"UPDATE {t} SET v = 7 WHERE id IN (1, 2)")
    code, _, err = dblog("report", "--state", state)
    assert code == 0, err[-3000:]
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err[-3000:]
    from deltalake import DeltaTable
    lake = {r["id"]: r["v"] for r in DeltaTable(f"{sink}/{t}/current").to_pyarrow_table().to_pylist()}
    assert lake == {1: 7, 2: 7}, lake


def test_an_xa_transaction_prepared_after_a_latest_start_does_not_hold_it(mariadb, db):
    """The other side of the latest start's check: a transaction prepared at or after the start (the binlog
    shows its prepare there, in the form XA RECOVER's row converts to) is the stream's to read, and the start
    is kept at once."""
    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.core.startup import StartupMode
    from airflow_provider_dblog.source.mysql import startup, xa
    from airflow_provider_dblog.source.mysql.dialect import MySqlDialect

    t = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)", f"INSERT INTO {t} VALUES (1, 1)", db=db)
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    try:
        start = dialect.startup_position(StartupMode.parse("latest"))
        mariadb.sql("XA START 'ab\\'c', 'q1', 7", f"UPDATE {t} SET v = 2", "XA END 'ab\\'c', 'q1', 7",
                    "XA PREPARE 'ab\\'c', 'q1', 7")
        try:
            listed = xa.recovered(dialect.client)
            assert set(listed) == {"x'61622763',x'7131',7"} and set(listed) <= startup.prepared_since(dialect.client, start)
            assert startup.start_clear_of_prepared(dialect.client, lambda: start, 0) == start
        finally:
            mariadb.sql("XA ROLLBACK 'ab\\'c', 'q1', 7")
    finally:
        dialect.close()


def test_a_chunk_key_that_does_not_identify_rows_is_refused_in_one_line(mariadb, db, tmp_path):
    """``--chunk-key`` of a table without a primary key is the lake's row identity on the user's word. Before: a
    nullable chunk key's NULL rows were in no chunk (``dblog run`` exit 0; verify: 1 missing for 10 rows), two
    rows sharing a key became one, and a tail meeting a NULL key died with a TypeError. Now a column that may be
    NULL is refused (as PostgreSQL's already was), the plan checks that no two rows share a key, each in one line
    writing nothing, and a key column made nullable later stops the tail in one line."""
    from pathlib import Path

    mariadb.sql(f"CREATE TABLE {db}.n (a INT NULL, b INT NOT NULL, c INT NOT NULL, note VARCHAR(10), INDEX (a), "
                f"INDEX (b, c))",
                f"INSERT INTO {db}.n SELECT IF(seq % 10 = 0, NULL, seq), seq % 40, seq, 'x' FROM seq_1_to_100", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    run = ("run", "--source", mariadb.uri(), "--table", f"{db}.n", "--state", state, "--sink", sink,
           "--chunk-size", "20", "--chunk-key")
    code, _, err = dblog(*run, "a")
    assert code != 0 and f"--chunk-key a of {db}.n may be NULL" in one_error_line(err), err[-2000:]
    code, _, err = dblog(*run, "b")
    line = one_error_line(err)
    assert code != 0 and f"--chunk-key b of {db}.n does not identify rows: 2 rows have (0)" in line, line
    assert not Path(state).exists() and not Path(sink).exists()
    code, _, err = dblog(*run, "b,c")  # unique together: the word holds
    assert code == 0, err[-2000:]
    mariadb.sql(f"UPDATE {db}.n SET note = 'y' WHERE c < 30", f"ALTER TABLE {db}.n MODIFY c INT NULL",
                f"UPDATE {db}.n SET note = 'z' WHERE c > 90")
    code, _, err = _tail(state, sink)
    line = one_error_line(err)
    assert code != 0 and f"--chunk-key c of {db}.n may be NULL" in line, err[-3000:]
    mariadb.sql(f"UPDATE {db}.n SET c = NULL WHERE c = 50")  # the tail meets the NULL key before the ALTER's follow
    code, _, err = _tail(state, sink)
    line = one_error_line(err)
    assert code != 0 and f"a change of {db}.n has NULL in its --chunk-key b,c" in line, line


@pytest.mark.parametrize("behaviour", ["evolve", "freeze"])
def test_a_key_dropped_from_a_captured_table_stops_the_tail_in_one_line(mariadb, db, tmp_path, behaviour):
    """``ALTER TABLE t DROP PRIMARY KEY`` leaves rows the lake can no longer tell apart: two rows may share an
    id from then on and ``current`` would keep one. Before: the table was taken for dropped (a warning, exit 0)
    and a duplicate id inserted after it left one row in the lake. Now the tail stops in one line naming the fix,
    and nothing of the read is written."""
    state, sink = _capture(mariadb, db, tmp_path)
    mariadb.sql(f"UPDATE {db}.t SET v = -1 WHERE id = 1", f"ALTER TABLE {db}.t DROP PRIMARY KEY",
                f"INSERT INTO {db}.t VALUES (2, 2000, 'a second row with id 2')")
    position = _lake_position(state, f"{db}.t")
    code, _, err = _tail(state, sink, "--schema-changes", behaviour)
    line = one_error_line(err)
    assert code != 0 and f"{db}.t" in line and "no primary key" in line, err[-3000:]
    assert _lake_position(state, f"{db}.t") == position


GLOBAL_SETTINGS = [
    *[(f"sql_mode = '{mode}'", "sql_mode = DEFAULT") for mode in (
        "NO_BACKSLASH_ESCAPES", "PAD_CHAR_TO_FULL_LENGTH", "EMPTY_STRING_IS_NULL", "ANSI_QUOTES", "PIPES_AS_CONCAT",
        "ORACLE")],
    ("TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", "TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
    ("TRANSACTION ISOLATION LEVEL READ COMMITTED", "TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
    ("time_zone = '-07:00'", "time_zone = DEFAULT"),
]


@pytest.mark.parametrize("setting, default", GLOBAL_SETTINGS, ids=[s for s, _ in GLOBAL_SETTINGS])
def test_a_global_setting_changes_neither_the_lake_nor_verify(mariadb, db, tmp_path, setting, default):
    """A DBA changes the server's defaults at run time: every new session (the snapshot's, the checksums') reads,
    prints and parses by them. Keys with a backslash and a quote sit on chunk boundaries, a CHAR column holds
    values shorter than its width, a TIMESTAMP is an instant, and a transaction left open while the capture
    reads (rolled back after it) inserts and changes rows no one ever committed. Before: NO_BACKSLASH_ESCAPES
    broke the key bounds' SQL, PAD_CHAR_TO_FULL_LENGTH left padded values in the lake (verify: 27 different),
    READ UNCOMMITTED read the open transaction's rows into the lake."""
    import pymysql

    from tests.support.lakecheck import compare_rows

    mariadb.sql(f"CREATE TABLE {db}.m (k VARCHAR(20) PRIMARY KEY, c CHAR(8), e VARCHAR(8), n INT, ts TIMESTAMP(3) "
                f"NULL)",
                f"INSERT INTO {db}.m SELECT CONCAT(CHAR(65 + seq % 5), CHAR(92), seq, CHAR(39)), CONCAT('c', seq), "
                f"IF(seq % 3 = 0, '', 'e'), seq, FROM_UNIXTIME(1700000000 + seq * 3600.5) FROM seq_1_to_120", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    uncommitted = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", autocommit=False)
    try:
        mariadb.sql(f"SET GLOBAL {setting}")
        with uncommitted.cursor() as cur:
            cur.execute(f"INSERT INTO {db}.m VALUES ('B', 'never', 'x', -1, NULL), ('D~', 'never', 'x', -2, NULL)")
            cur.execute(f"UPDATE {db}.m SET n = -n, c = 'dirty' WHERE n % 5 = 0")
        code, _, err = dblog("run", "--source", mariadb.uri(), "--table", f"{db}.m", "--state", state,
                             "--sink", sink, "--chunk-size", "16")
        assert code == 0, err[-3000:]
        uncommitted.rollback()
        mariadb.sql("SET SESSION sql_mode = ''", f"UPDATE {db}.m SET c = 'u', e = '' WHERE n % 4 = 0",
                    f"INSERT INTO {db}.m VALUES (CONCAT('Z', CHAR(92), CHAR(39)), 'new', '', 1000, NOW())",
                    f"DELETE FROM {db}.m WHERE n % 7 = 0")
        code, _, err = _tail(state, sink)
        assert code == 0, err[-3000:]
        code, result = _verify_rows(state, sink, f"{db}.m")
        assert code == 0 and result["equal"], result
    finally:
        uncommitted.close()
        mariadb.sql(f"SET GLOBAL {default}")
    from deltalake import DeltaTable

    lake = DeltaTable(f"{sink}/{db}.m/current").to_pyarrow_table()
    assert compare_rows(lake, mariadb.port, f"{db}.m", key=("k",)) == []


@pytest.mark.parametrize("init", ["SET NAMES utf8", "SET NAMES latin1", "SET character_set_results = latin1"])
def test_a_servers_init_connect_changes_neither_the_lake_nor_verify(mariadb, db, tmp_path, init):
    """``init_connect`` runs at the login of every user without SUPER (the least privileges dblog needs), after
    the client asked for utf8mb4. Before: ``SET NAMES utf8`` turned every 4-byte character the snapshot read into
    '?', with exit 0, while the binlog (and so the tail) kept the stored bytes; ``SET NAMES latin1`` stopped the
    snapshot with a panic of the chunk reader. Keys with such characters sit on chunk boundaries."""
    from deltalake import DeltaTable

    from tests.support.lakecheck import compare_rows

    user, password = "least_privileged", "lp-Pa55-word"
    mariadb.sql(f"CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY '{password}'",
                f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'")
    mariadb.sql(f"CREATE TABLE {db}.u (k VARCHAR(20) CHARACTER SET utf8mb4 PRIMARY KEY, "
                f"note VARCHAR(40) CHARACTER SET utf8mb4, n INT)",
                f"INSERT INTO {db}.u SELECT CONCAT(ELT(1 + seq % 4, 'a', 'é', '😀', '✓'), seq), "
                f"CONCAT('note 😀 ünï ', seq), seq FROM seq_1_to_80", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    try:
        mariadb.sql(f"SET GLOBAL init_connect = '{init}'")
        code, _, err = dblog("run", "--source", mariadb.uri(user, password), "--table", f"{db}.u", "--state", state,
                             "--sink", sink, "--chunk-size", "16")
        assert code == 0, err[-3000:]
        mariadb.sql(f"UPDATE {db}.u SET note = CONCAT(note, ' 🚀') WHERE n % 5 = 0",
                    f"INSERT INTO {db}.u VALUES ('😀new', 'ß 🚀', 1000)", f"DELETE FROM {db}.u WHERE n % 7 = 0", db=db)
        code, _, err = _tail(state, sink)
        assert code == 0, err[-3000:]
        code, result = _verify_rows(state, sink, f"{db}.u")
        assert code == 0 and result["equal"], result
        code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.u")
        assert code == 0, err[-3000:]
    finally:
        mariadb.sql("SET GLOBAL init_connect = ''")
    lake = DeltaTable(f"{sink}/{db}.u/current").to_pyarrow_table()
    assert compare_rows(lake, mariadb.port, f"{db}.u", key=("k",)) == []  # as root: no init_connect
    assert "?" not in "".join(lake.column("note").to_pylist())


def test_a_servers_statement_time_limit_stops_neither_the_snapshot_nor_the_tail_nor_verify(mariadb, db, tmp_path):
    """A DBA's ``SET GLOBAL max_statement_time`` (MariaDB; MySQL's ``max_execution_time``) for the applications,
    at run time: a chunk's read, a checksum and the binlog's reads are long statements. Before: the snapshot
    stopped on "Query execution was interrupted (max_statement_time exceeded)". dblog's sessions lift it."""
    from deltalake import DeltaTable

    from tests.support.lakecheck import compare_rows

    mariadb.sql(f"CREATE TABLE {db}.big (id INT PRIMARY KEY, v VARCHAR(200), n DECIMAL(12,2))",
                f"INSERT INTO {db}.big SELECT seq, REPEAT(MD5(seq), 4), seq / 7 FROM seq_1_to_100000", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    try:
        mariadb.sql("SET GLOBAL max_statement_time = 0.02")  # 20 ms, for every new session
        code, _, err = dblog("run", "--source", mariadb.uri(), "--table", f"{db}.big", "--state", state,
                             "--sink", sink, "--chunk-size", "100000")  # one chunk: one read of 100,000 rows
        assert code == 0, err[-3000:]
        mariadb.sql("SET SESSION max_statement_time = 0", f"UPDATE {db}.big SET n = n + 1 WHERE id % 2 = 0",
                    f"DELETE FROM {db}.big WHERE id % 9 = 0", db=db)
        code, _, err = _tail(state, sink)
        assert code == 0, err[-3000:]
        code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.big")
        assert code == 0, err[-3000:]
    finally:
        mariadb.sql("SET GLOBAL max_statement_time = 0")
    lake = DeltaTable(f"{sink}/{db}.big/current").to_pyarrow_table()
    assert lake.num_rows == 100000 - 100000 // 9
    assert compare_rows(lake, mariadb.port, f"{db}.big") == []


def test_a_second_capture_into_the_same_lake_is_refused_in_one_line(mariadb, db, tmp_path):
    """Two captures (two states) of two servers holding the same database and table names, one ``--sink``: before,
    the second's snapshot replaced the first's rows and both tails went on with exit 0 (verify: 4 missing, 30
    different). Now each lake table carries the capture that created it, and the second is refused in one line
    before it writes anything; the first goes on."""
    from deltalake import DeltaTable

    from tests.support.lakecheck import compare_rows
    from tests.support.local_mariadb import LocalMariaDB

    other = LocalMariaDB(tmp_path / "other", server_id=9).start()
    try:
        for server in (mariadb, other):
            server.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
            server.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, v INT)",
                       f"INSERT INTO {db}.u SELECT seq, seq FROM seq_1_to_60", db=db)
        other.sql(f"UPDATE {db}.u SET v = 5000 + id WHERE id > 30", f"DELETE FROM {db}.u WHERE id < 5")
        sink, first, second = str(tmp_path / "lake"), str(tmp_path / "first"), str(tmp_path / "second")
        run = ("run", "--table", f"{db}.u", "--sink", sink, "--chunk-size", "20", "--state")
        code, _, err = dblog(*run, first, "--source", mariadb.uri())
        assert code == 0, err[-2000:]
        versions = {kind: DeltaTable(f"{sink}/{db}.u/{kind}").version() for kind in ("current", "changelog")}
        code, _, err = dblog(*run, second, "--source", other.uri())
        line = one_error_line(err)
        assert code != 0 and f"{db}.u/current belongs to another capture" in line and "another --sink" in line, err
        assert {kind: DeltaTable(f"{sink}/{db}.u/{kind}").version() for kind in versions} == versions
        mariadb.sql(f"UPDATE {db}.u SET v = 1000 WHERE id > 50")
        code, _, err = _tail(first, sink)
        assert code == 0, err[-2000:]
        assert compare_rows(DeltaTable(f"{sink}/{db}.u/current").to_pyarrow_table(), mariadb.port, f"{db}.u") == []
        code, _, err = _tail(second, sink)  # its snapshot never finished: nothing to tail from
        assert code != 0 and "no offset map" in one_error_line(err)
    finally:
        other.stop()


@pytest.mark.parametrize("alter, in_place", [
    ("MODIFY t VARCHAR(5) CHARACTER SET utf8mb4", False),  # cuts every value to 5 characters
    ("MODIFY t VARCHAR(40) CHARACTER SET latin1", False),  # the emoji becomes '?'
    ("MODIFY e ENUM('a','b')", False),  # 'c' becomes ''
    ("MODIFY dt DATETIME", False),  # rounds the microseconds
    ("MODIFY s TINYINT UNSIGNED", False),  # clamps to 0..255
    ("MODIFY s SMALLINT NOT NULL", False),  # NULL becomes 0 (outside strict mode)
    ("CHANGE t t2 VARCHAR(5) CHARACTER SET utf8mb4", False),  # a rename that also cuts (before: taken for a rename)
    ("MODIFY st SET('z','y','x')", False),  # 'x,z' shows as 'z,x' (before: followed in place, kept 'x,z')
    ("MODIFY t VARCHAR(200) CHARACTER SET utf8mb4, MODIFY e ENUM('a','b','c','d'), MODIFY s INT, "
     "MODIFY dt DATETIME(6) NULL, MODIFY st SET('w','x','y','z')", True),  # every value kept: in place, no read
])
def test_a_modify_that_changes_values_under_the_same_lake_type_reads_the_table_again(mariadb, db, tmp_path, alter,
                                                                                       in_place):
    """``ALTER TABLE … MODIFY`` rewrites every row without a row event. Before: a narrowing that keeps the lake's
    type (string, int16, timestamp) was followed in place, the tail exited 0 and the lake kept the values the
    source had cut (verify: 59 different). Now the source's declared types decide (``keeps_values``); a change that
    keeps every value is still followed in place."""
    mariadb.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, t VARCHAR(40) CHARACTER SET utf8mb4, "
                f"e ENUM('a','b','c'), dt DATETIME(6), s SMALLINT, st SET('x','y','z'))",
                f"INSERT INTO {db}.u SELECT seq, CONCAT('émoji 😀 long text ', seq), ELT(1 + seq % 3, 'a', 'b', 'c'), "
                f"'2024-01-01 00:00:00.654321' + INTERVAL seq SECOND, IF(seq % 10 = 0, NULL, CAST(seq AS SIGNED) * 97 - 3000), "
                f"ELT(1 + seq % 3, 'x,z', 'y', 'x,y,z') FROM seq_1_to_60", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.u", tmp_path, 20)
    mariadb.sql("SET SESSION sql_mode = ''", f"ALTER TABLE {db}.u {alter}", f"UPDATE {db}.u SET s = 1 WHERE id = 1")
    _followed_then_equal(state, sink, f"{db}.u", in_place)


@pytest.mark.parametrize("alter, in_place", [
    (r"ADD COLUMN s VARCHAR(10) DEFAULT 'a\tb'", False),  # an escape: a TAB (or not, by the DDL's sql_mode)
    ("ADD COLUMN s VARCHAR(10) DEFAULT 'a' 'b'", False),  # adjacent literals: 'ab'
    ("ADD COLUMN d DATETIME DEFAULT '2024-01-01 10:00:00.7'", False),  # rounded to 10:00:01
    ("ADD COLUMN y YEAR DEFAULT 69", False),  # 2069
    ("ADD COLUMN b BIT(3) DEFAULT 5", False),  # b'101'
    ("ADD COLUMN ts TIMESTAMP NULL DEFAULT '2024-01-01 00:00:00'", False),  # in the DDL session's time zone
    ("ADD COLUMN s VARCHAR(10) DEFAULT 'it''s', ADD COLUMN n INT NOT NULL DEFAULT -7, "
     "ADD COLUMN d DATE DEFAULT '2024-02-29'", True),  # exactly what they say: followed in place, no read
])
def test_an_added_columns_default_the_server_reads_otherwise_is_read_from_the_source(mariadb, db, tmp_path, alter,
                                                                                     in_place):
    """``ADD COLUMN … DEFAULT literal`` gives the rows already there the literal's value as the server reads it, in
    the column's type and the DDL session's settings. Before: each of these was taken as written, followed in place
    with exit 0, and every old row differed from the source (verify: 29 different)."""
    mariadb.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, v INT)", f"INSERT INTO {db}.u SELECT seq, seq FROM "
                f"seq_1_to_30", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.u", tmp_path, 10)
    mariadb.sql("SET SESSION time_zone = '+05:00'", f"ALTER TABLE {db}.u {alter}", f"UPDATE {db}.u SET v = 0 WHERE id = 1")
    _followed_then_equal(state, sink, f"{db}.u", in_place)


def test_compressed_columns_are_refused_in_one_line(mariadb, db, tmp_path):
    """MariaDB column compression (``COMPRESSED``): the replication library cannot read such a table's binlog images
    (types 140/141). Before: the tail died with ``IndexError: index out of range`` or ``NotImplementedError: Unknown
    MySQL column type: 141``. Now ``plan`` refuses the table, and a tail meeting a column made COMPRESSED (even made
    plain again since) stops in one line naming the fix, with nothing of the read written; other tables' compressed
    columns do not matter."""
    from pathlib import Path

    mariadb.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, t VARCHAR(400), n INT)",
                f"CREATE TABLE {db}.c (id INT PRIMARY KEY, t VARCHAR(400) COMPRESSED)",
                f"INSERT INTO {db}.u SELECT seq, REPEAT('x', 100), seq FROM seq_1_to_30", db=db)
    code, _, err = dblog("plan", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", str(tmp_path / "all"))
    line = one_error_line(err)
    assert code != 0 and f"have COMPRESSED columns (MariaDB column compression): {db}.c;" in line, line
    assert "--exclude" in line and not Path(tmp_path / "all").exists()
    state, sink = captured(mariadb.uri(), f"{db}.u", tmp_path, 10)
    mariadb.sql(f"INSERT INTO {db}.c VALUES (1, REPEAT('y', 300))", f"UPDATE {db}.u SET n = -n WHERE id < 5")
    code, _, err = _tail(state, sink)  # another table's compressed column: no matter
    assert code == 0, err[-2000:]
    position = _lake_position(state, f"{db}.u")
    mariadb.sql(f"ALTER TABLE {db}.u MODIFY t VARCHAR(400) COMPRESSED", f"UPDATE {db}.u SET t = 'y' WHERE id > 20")
    code, _, err = _tail(state, sink)
    line = one_error_line(err)
    assert code != 0 and f"have COMPRESSED columns (MariaDB column compression): {db}.u;" in line, line
    mariadb.sql(f"ALTER TABLE {db}.u MODIFY t VARCHAR(400)")
    code, _, err = _tail(state, sink)
    line = one_error_line(err)
    assert code != 0 and "a MariaDB COMPRESSED column, even one made plain since" in line, line
    assert _lake_position(state, f"{db}.u") == position


def test_storage_engines_whose_rows_the_binlog_does_not_follow_are_refused_in_one_line(mariadb, db, tmp_path):
    """A MERGE table shows the rows of other tables, whose changes the binlog logs under their names: captured,
    its lake missed every change (exit 0; only verify found it). BLACKHOLE keeps no rows, FEDERATED, CONNECT and
    SPIDER keep them elsewhere. The plan refuses such tables in one line (MyISAM and Aria tables are captured),
    and a captured table moved to such an engine (``ALTER TABLE ... ENGINE=``) stops the tail in one line with the
    lake as it was."""
    mariadb.sql(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
                f"CREATE TABLE {db}.b (id INT PRIMARY KEY, v INT) ENGINE=Aria",
                f"CREATE TABLE {db}.m (id INT NOT NULL, v INT, UNIQUE KEY (id)) ENGINE=MERGE UNION=(a)",
                f"INSERT INTO {db}.a VALUES (1, 1), (2, 2)", f"INSERT INTO {db}.b VALUES (3, 3)", db=db)
    code, out, err = dblog("plan", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", str(tmp_path / "s"))
    line = one_error_line(err)
    assert code != 0 and f"1 table(s) use a storage engine whose rows the binlog does not follow: {db}.m (MRG_MyISAM)" \
        in line and "--exclude" in line, err[-2000:]
    state, sink = captured(mariadb.uri(), f"{db}.a,{db}.b", tmp_path, 50)
    mariadb.sql(f"UPDATE {db}.a SET v = 10", f"INSERT INTO {db}.b VALUES (4, 4)", db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    for table in ("a", "b"):
        code, result = _verify_rows(state, sink, f"{db}.{table}")
        assert code == 0 and result["equal"], result

    mariadb.sql(f"ALTER TABLE {db}.a ENGINE=MRG_MyISAM", f"UPDATE {db}.b SET v = 30", db=db)  # a's rows are gone
    before = _lake_position(state, f"{db}.b")
    code, _, err = _tail(state, sink)
    line = one_error_line(err)
    assert code != 0 and f"{db}.a (MRG_MyISAM)" in line, err[-3000:]
    assert _lake_position(state, f"{db}.b") == before  # nothing of the read was committed


def test_zero_and_partial_dates_are_null_on_every_path(mariadb, db, tmp_path):
    """Under a lax ``sql_mode`` MySQL stores ``0000-00-00``, ``2020-00-15``, ``2020-05-00 10:00:00`` and a zero
    TIMESTAMP. The lake has no such date: the binlog decoders made DATE/DATETIME ones NULL, but the snapshot's reader
    panicked on them (as did ``verify --rows``), the checksum called every such row different, and a zero TIMESTAMP
    became 1970-01-01 00:00:00 UTC; a NOT NULL column holding one failed ``verify --rows`` and ``mirror``. Now every path makes them NULL, the valid values keep their fractions, and
    both verifies are equal: in the snapshot, and in the tail one by one and in blocks."""
    from deltalake import DeltaTable

    columns = "d DATE, dt DATETIME(3), ts TIMESTAMP(6) NULL"
    bad = "('0000-00-00', '2020-05-00 10:00:00', '0000-00-00 00:00:00')"
    partial = "('2020-00-15', '0000-00-00 00:00:00', '0000-00-00 00:00:00')"
    good = "('2021-03-04', '2021-03-04 05:06:07.891', '2021-03-04 05:06:07.123456')"
    rows = ", ".join(f"({i}, " + (bad, partial, good)[i % 3][1:] for i in range(1, 61))
    mariadb.sql(f"CREATE TABLE {db}.z (id INT PRIMARY KEY, {columns})", db=db)
    mariadb.sql("SET SESSION sql_mode = ''", f"INSERT INTO {db}.z VALUES {rows}",
                # a legacy schema: NOT NULL with a zero default (the lake's column is nullable)
                f"CREATE TABLE {db}.legacy (id INT PRIMARY KEY, d DATE NOT NULL DEFAULT '0000-00-00', "
                f"ts TIMESTAMP NOT NULL DEFAULT '0000-00-00 00:00:00')", f"INSERT INTO {db}.legacy (id) VALUES (1), (2)",
                db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", state, "--sink", sink,
                         "--chunk-size", "25")
    assert code == 0, err[-3000:]
    assert "holds a date that does not exist: read again with such dates as NULL" in err, err[-3000:]
    more = [f"INSERT INTO {db}.z VALUES ({i}, " + (bad, partial, good)[i % 3][1:] for i in range(100, 400)]
    mariadb.sql("SET SESSION sql_mode = ''", *more,  # a rows event each: runs of them decoded as blocks
                f"UPDATE {db}.z SET d = '0000-00-00', ts = '0000-00-00 00:00:00' WHERE id = 3",
                f"INSERT INTO {db}.legacy (id) VALUES (3)", f"UPDATE {db}.legacy SET d = '2020-01-01' WHERE id = 1",
                db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    assert "(300 decoded column by column)" in err, err[-3000:]  # the INSERTs' rows in blocks
    lake = {r["id"]: (r["d"], r["dt"], r["ts"]) for r in
            DeltaTable(f"{sink}/{db}.z/current").to_pyarrow_table(columns=["id", "d", "dt", "ts"]).to_pylist()}
    assert len(lake) == 360
    for key, values in lake.items():
        if key % 3 == 2:  # the valid dates, their fractions kept
            assert values[0].isoformat() == "2021-03-04" and values[1].microsecond == 891000, values
            assert values[2].isoformat() == "2021-03-04T05:06:07.123456+00:00", values
        else:  # zero and partial dates, zero TIMESTAMPs: never 1970
            assert values == (None, None, None), (key, values)
    legacy = DeltaTable(f"{sink}/{db}.legacy/current").to_pyarrow_table(columns=["id", "d", "ts"]).to_pylist()
    assert sorted((r["id"], str(r["d"]), r["ts"]) for r in legacy) == [(1, "2020-01-01", None), (2, "None", None),
                                                                       (3, "None", None)]
    for table in ("z", "legacy"):
        code, result = _verify_rows(state, sink, f"{db}.{table}")  # before: the NOT NULL cast failed
        assert code == 0 and result["equal"], result
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", f"{db}.*")
    assert code == 0, err[-3000:]
    code, out, err = dblog("mirror", "--state", state, "--sink", sink, "--table", f"{db}.legacy",
                           "--out", str(tmp_path / "mirror"))
    assert code == 0, err[-3000:]


@pytest.mark.parametrize("charset, text", [("utf16", "Привет ✓ 😀"), ("utf32", "Привет ✓ 😀"), ("ucs2", "Привет ✓"),
                                           ("utf16le", "Привет ✓ 😀"), ("cp1251", "Привет"), ("sjis", "日本語テキスト"),
                                           ("latin7", "Ąčę")])
def test_text_of_every_decodable_character_set_is_followed_exactly(mariadb, db, tmp_path, charset, text):
    """The binlog holds a text column's bytes in its own character set. MySQL's utf16, utf32 and ucs2 are big-endian:
    decoded with Python's "utf16" (little-endian) every tail row of a utf16 or ucs2 column differed, exit 0; utf32,
    utf16le and the rest stopped the tail on an unexpected error. Each character set now has its exact codec."""
    state, sink = _captured_then_tailed(
        mariadb, db, tmp_path, "c",
        [f"CREATE TABLE {db}.c (id INT PRIMARY KEY, v VARCHAR(40) CHARACTER SET {charset}, "
         f"t TEXT CHARACTER SET {charset}, ch CHAR(12) CHARACTER SET {charset})",
         f"INSERT INTO {db}.c VALUES (1, '{text}', '{text} long', '{text[:4]}'), (2, NULL, '', 'a')"],
        [f"INSERT INTO {db}.c VALUES (3, '{text} 3', '{text} three', '{text[:3]}')",
         f"UPDATE {db}.c SET v = '{text[::-1]}' WHERE id = 1"])
    code, result = _verify_rows(state, sink, f"{db}.c")
    assert code == 0 and result["equal"], result


def test_a_character_set_without_an_exact_codec_is_refused_in_one_line(mariadb, db, tmp_path):
    """armscii8, eucjpms (and dec8, hp8, swe7, keybcs2, geostd8) have no exact Python codec: before, such a column
    was snapshotted (the server converts) and the tail then died on an unexpected error. The plan refuses it in
    one line, and a column changed to one stops the tail in one line."""
    mariadb.sql(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v VARCHAR(10) CHARACTER SET armscii8)",
                f"CREATE TABLE {db}.ok (id INT PRIMARY KEY, v VARCHAR(10))", f"INSERT INTO {db}.ok VALUES (1, 'x')",
                db=db)
    code, _, err = dblog("plan", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", str(tmp_path / "s"))
    line = one_error_line(err)
    assert code != 0 and f"1 column(s) use a character set whose binlog bytes dblog cannot decode exactly: " \
        f"{db}.a.v (armscii8)" in line and "CONVERT TO CHARACTER SET utf8mb4" in line, err[-2000:]
    state, sink = captured(mariadb.uri(), f"{db}.ok", tmp_path, 50)
    mariadb.sql(f"ALTER TABLE {db}.ok MODIFY v VARCHAR(10) CHARACTER SET eucjpms", f"INSERT INTO {db}.ok VALUES (2, 'y')",
                db=db)
    code, _, err = _tail(state, sink)
    assert code != 0 and f"{db}.ok.v (eucjpms)" in one_error_line(err), err[-3000:]


@pytest.mark.parametrize("column, value", [("v DATETIME", "'0000-01-01 00:00:00'"), ("v DATE", "'0000-03-04'"),
                                           ("v DATE", "'2020-02-30'"), ("v DATETIME(2)", "'2021-04-31 10:00:00.5'")])
def test_dates_that_do_not_exist_are_null_on_every_path(mariadb, db, tmp_path, column, value):
    """Year 0 and, under ALLOW_INVALID_DATES, a 30 February: the binlog decoders made them NULL, the snapshot kept
    them (a year-0 value in a lake file's statistics then stopped every tail: OverflowError). Now NULL everywhere;
    a real 29 February stays."""
    from deltalake import DeltaTable

    lax = "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'"
    state, sink = _captured_then_tailed(
        mariadb, db, tmp_path, "x",
        [lax, f"CREATE TABLE {db}.x (id INT PRIMARY KEY, {column})",
         f"INSERT INTO {db}.x VALUES (1, {value}), (2, NULL), (4, '2020-02-29')"],
        [lax, f"INSERT INTO {db}.x VALUES (3, {value})"])
    lake = {r["id"]: r["v"] for r in DeltaTable(f"{sink}/{db}.x/current").to_pyarrow_table(columns=["id", "v"]).to_pylist()}
    assert (lake[1], lake[2], lake[3]) == (None, None, None) and str(lake[4])[:10] == "2020-02-29", lake
    _both_verifies_equal(state, sink, f"{db}.x")


def test_geometry_columns_are_their_stored_bytes_on_every_path(mariadb, db, tmp_path):
    """connectorx reads no GEOMETRY: the snapshot of a table with a spatial column panicked ("not implemented:
    MYSQL_TYPE_GEOMETRY"). The snapshot now reads the stored bytes (the SRID, then WKB), which is what the binlog
    holds and the checksum hashes."""
    from deltalake import DeltaTable

    state, sink = _captured_then_tailed(
        mariadb, db, tmp_path, "g",
        [f"CREATE TABLE {db}.g (id INT PRIMARY KEY, g GEOMETRY, p POINT, poly POLYGON)",
         f"INSERT INTO {db}.g VALUES (1, ST_GeomFromText('POINT(1 2)', 4326), POINT(3, 4), "
         f"ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))')), (2, NULL, NULL, NULL)"],
        [f"INSERT INTO {db}.g VALUES (3, ST_GeomFromText('LINESTRING(0 0,5 5)'), POINT(5, 6), NULL)",
         f"UPDATE {db}.g SET p = POINT(7, 8) WHERE id = 2"])
    lake = {r["id"]: r for r in DeltaTable(f"{sink}/{db}.g/current").to_pyarrow_table().to_pylist()}
    assert lake[1]["g"][:4] == (4326).to_bytes(4, "little") and lake[1]["g"][4:6] == b"\x01\x01", lake[1]
    _both_verifies_equal(state, sink, f"{db}.g")


def test_uuid_and_inet_columns_are_followed_without_reading_the_table_again(mariadb, db, tmp_path):
    """MariaDB's UUID, INET6 and INET4 columns are BINARY(16)/(4) in a table map: every change of such a table
    was taken for a schema change, and the table was read again whole at each tail (and each chunk window that
    held a change read its chunk ten times, then failed). The binlog's bytes are now printed as a SELECT
    prints them: the zero-run, IPv4-mapped and -compatible forms of INET6, every UUID version."""
    import ipaddress
    import random
    import uuid

    rnd = random.Random(4)

    def inet6():
        b = bytearray(rnd.getrandbits(128).to_bytes(16, "big"))
        start, length = rnd.randrange(16), rnd.randrange(0, 14)
        b[start:start + length] = bytes(len(b[start:start + length]))
        return str(ipaddress.IPv6Address(bytes(b)))

    def row(i):
        return (f"({i}, '{uuid.UUID(int=rnd.getrandbits(128), version=rnd.choice([1, 4]))}', '{inet6()}', "
                f"'{ipaddress.IPv4Address(rnd.getrandbits(32))}')")

    fixed = ["'::'", "'::1'", "'::ffff:1.2.3.4'", "'::1.2.3.4'", "'1:0:1:0:1:0:1:0'", "'::ffff:0:1.2.3.4'",
             "'2001:db8:0:0:1:0:0:1'", "'::1:0:0'"]
    mariadb.sql(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, u UUID, i6 INET6, i4 INET4)",
                f"INSERT INTO {db}.a VALUES {', '.join(row(i) for i in range(1, 301))}", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.a", tmp_path, 50)
    mariadb.sql(f"INSERT INTO {db}.a VALUES {', '.join(row(i) for i in range(301, 401))}",
                *[f"UPDATE {db}.a SET i6 = {v}, u = UUID(), i4 = '0.0.0.{n}' WHERE id = {n + 1}"
                  for n, v in enumerate(fixed)],
                f"UPDATE {db}.a SET u = NULL, i6 = NULL, i4 = NULL WHERE id = 300", db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    assert not StateDir(state).schema_changes(f"{db}.a") and "again" not in err, err[-3000:]
    _both_verifies_equal(state, sink, f"{db}.a")


def test_ddl_in_every_form_the_server_logs_is_followed(mariadb, db, tmp_path):
    """The binlog holds a DDL statement as its session wrote it. Before, the statement parser missed these forms,
    and each left the lake silently different (tail exit 0): ``TRUNCATE tablé`` (an unquoted name outside ASCII)
    truncated a table named ``tabl``; MariaDB's ``SET STATEMENT ... FOR TRUNCATE t`` and ``/*M!100000 TRUNCATE t */``
    and a session under ``ANSI_QUOTES`` (``TRUNCATE "t"``, ``ALTER TABLE "t" TRUNCATE PARTITION p0``) named no
    table; ``RENAME TABLE IF EXISTS t TO t_old, t_new TO t`` and ``RENAME TABLE t WAIT 5 TO ...`` named
    ``IF.EXISTS`` and ``t.WAIT`` (the swapped-in table was never read); and ``DEFAULT '/* c */'`` was read as
    ``DEFAULT ' '`` (every old row's value differed). Then a statement-logged UPDATE in the ``SET STATEMENT``
    form, in an ANSI_QUOTES session, of the table named outside ASCII stops the tail in one line."""
    tables = ["tablé", "t_set", "t_mcomment", "t_ansi", "t_part", "t_swap", "t_wait", "t_default"]
    setup = [f"CREATE TABLE `{t}` (id INT PRIMARY KEY, v INT)" for t in tables if t != "t_part"]
    setup += ["CREATE TABLE t_part (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS "
              "THAN (50), PARTITION p1 VALUES LESS THAN MAXVALUE)"]
    setup += [f"INSERT INTO `{t}` SELECT seq, seq FROM seq_1_to_100" for t in tables]
    mariadb.sql(*setup, db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    listed = ",".join(f"{db}.{t}" for t in tables)
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", listed, "--state", state, "--sink", sink,
                         "--chunk-size", "50")
    assert code == 0, err[-3000:]
    swapped_in = [f"CREATE TABLE {t}_new LIKE {t}" for t in ("t_swap", "t_wait")]
    swapped_in += [f"INSERT INTO {t}_new SELECT seq, -seq FROM seq_1_to_30" for t in ("t_swap", "t_wait")]
    mariadb.sql(*swapped_in,
                "TRUNCATE tablé", "SET STATEMENT max_statement_time=60 FOR TRUNCATE t_set",
                "/*M!100000 TRUNCATE t_mcomment */",
                "RENAME TABLE IF EXISTS t_swap TO t_swap_old, t_swap_new TO t_swap",
                "RENAME TABLE t_wait WAIT 5 TO t_wait_old, t_wait_new TO t_wait",
                "ALTER TABLE t_default ADD COLUMN c VARCHAR(20) NOT NULL DEFAULT '/* c */'",
                "SET SESSION sql_mode = 'ANSI_QUOTES'", 'TRUNCATE "t_ansi"',
                'ALTER TABLE "t_part" TRUNCATE PARTITION p0', db=db)
    for t in tables:
        mariadb.sql(f"INSERT INTO `{t}` VALUES (1000, 1000)" if t != "t_default" else
                    "INSERT INTO t_default (id, v) VALUES (1000, 1000)", db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", listed, "--rows")
    assert code == 0, err[-3000:]
    counts = {r["table"].split(".", 1)[1]: r["source_rows"] for r in json.loads(out)["tables"]}
    assert counts == {"tablé": 1, "t_set": 1, "t_mcomment": 1, "t_ansi": 1, "t_part": 52, "t_swap": 31,
                      "t_wait": 31, "t_default": 101}, counts
    code, _, err = dblog("verify", "--state", state, "--sink", sink, "--tables", listed)
    assert code == 0, err[-3000:]

    mariadb.sql("SET SESSION sql_mode = 'ANSI_QUOTES'", "SET SESSION binlog_format = 'STATEMENT'",
                'SET STATEMENT max_statement_time=60 FOR UPDATE "tablé" SET v = -v', db=db)
    code, _, err = _tail(state, sink)
    assert code != 0
    line = one_error_line(err)
    assert f"{db}.tablé changed by a statement-logged UPDATE" in line, line


def test_a_statement_logged_change_through_triggers_views_or_functions_stops_the_tail_until_a_resnapshot(
        mariadb, db, tmp_path):
    """Under binlog_format STATEMENT a replica runs a statement again with its triggers, so the binlog holds only
    the statement: an INSERT into an uncaptured table whose trigger updates a captured one, a SELECT of a stored
    function that updates one, an UPDATE of a view over one. Before, the tail went on (exit 0; verify: 3, 9 and 4
    rows different). Now each stops the tail in one line naming the captured table, and its re-snapshot (the
    line's fix; before, the tail stopped on the same event again, for ever) lets the tail go on: the lake then
    equals the source. A statement-logged change of a table no trigger, view or function links to a captured
    one stops nothing."""
    tables = ["t_trigger", "t_function", "t_view"]
    mariadb.sql(*[f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)" for t in tables],
                *[f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_100" for t in tables],
                "CREATE TABLE src (id INT PRIMARY KEY)", "CREATE TABLE other (id INT PRIMARY KEY)",
                "CREATE TRIGGER tr AFTER INSERT ON src FOR EACH ROW UPDATE t_trigger SET v = -v WHERE id = NEW.id",
                "CREATE FUNCTION f() RETURNS INT DETERMINISTIC MODIFIES SQL DATA "
                "BEGIN UPDATE t_function SET v = -v WHERE id < 10; RETURN 1; END",
                "CREATE VIEW vv AS SELECT id, v FROM t_view WHERE id < 50", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    listed = ",".join(f"{db}.{t}" for t in tables)
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", listed, "--state", state, "--sink", sink,
                         "--chunk-size", "50")
    assert code == 0, err[-3000:]
    mariadb.sql("SET SESSION binlog_format = 'STATEMENT'", "INSERT INTO other VALUES (1)",
                "INSERT INTO src VALUES (1), (2), (3)", "SELECT f()", "UPDATE vv SET v = 0 WHERE id < 5", db=db)
    mariadb.sql(*[f"UPDATE {t} SET v = 1000 WHERE id = 100" for t in tables], db=db)  # rows, after them
    for table in tables:  # in binlog order: each stops the tail until it is read again
        code, _, err = _tail(state, sink)
        assert code != 0, err[-3000:]
        line = one_error_line(err)
        assert f"{db}.{table} may have been changed by a statement-logged" in line, line
        assert f"dblog resnapshot --table {db}.{table}" in line, line
        if table == "t_trigger":  # the CLI, as the line says
            code, _, err = dblog("resnapshot", "--state", state, "--sink", sink, "--table", f"{db}.{table}")
            assert code == 0, err[-3000:]
        else:
            _resnapshot_in_process(state, sink, f"{db}.{table}")
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", listed, "--rows")
    assert code == 0, err[-3000:]
    assert [r["source_rows"] for r in json.loads(out)["tables"]] == [100, 100, 100]


def test_a_statement_logged_load_data_stops_the_tail_until_the_table_is_read_again(mariadb, db, tmp_path):
    """A LOAD DATA under binlog_format STATEMENT is logged as the file's blocks and an Execute_load_query event
    whose statement the replication library does not decode: which table it loaded is unknown, so every
    captured table of the read stops on it in one line. Before, the line's fix (a re-snapshot) could not be done:
    the tail stopped on the same event for ever. Now the re-snapshot lets the tail go on, and the lake equals
    the source."""
    state, sink = _capture(mariadb, db, tmp_path)
    data = tmp_path / "rows.tsv"
    data.write_text("".join(f"{i}\t{-i}\tloaded {i}\n" for i in range(1000, 1010)))
    data.chmod(0o644)
    tmp_path.chmod(0o755)
    mariadb.sql("SET SESSION binlog_format = 'STATEMENT'", f"LOAD DATA INFILE '{data}' INTO TABLE t", db=db)
    mariadb.sql("UPDATE t SET v = 0 WHERE id = 1", db=db)
    code, _, err = _tail(state, sink)
    assert code != 0
    line = one_error_line(err)
    assert "a statement-logged LOAD DATA" in line and f"dblog resnapshot --table {db}.t" in line, line
    _resnapshot_in_process(state, sink, f"{db}.t")
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.t")
    assert code == 0 and result["equal"] and result["source_rows"] == 210, result


def test_checksum_verify_compares_floats_to_their_last_bit(mariadb, db, tmp_path):
    """FLOAT and DOUBLE are in the checksum as their exact binary form, which MariaDB computes the same as the lake
    (checked here on 2,000 random bit patterns and the edges: subnormals, the largest double, powers of two). So a
    drift of a float by its last bits, or two rows' floats swapped, is a drifted chunk that ``--repair`` mends,
    and the values the snapshot and the tail wrote are no false alarm. Before, floats were only summed per
    chunk within 1e-6 of the sum of their magnitudes: both drifts below went unseen (verify: 0 differ)."""
    import numpy as np
    import pymysql

    from airflow_provider_dblog.source.mysql.checksum import float_sql
    from tests.support.float_bits import assert_float_text_is_the_lakes, random_floats

    values = random_floats(2000, 7)
    singles = [float(np.float32(v)) if abs(v) < 3.4e38 else 1.5 for v in values]
    mariadb.sql(f"CREATE TABLE {db}.bits (id INT PRIMARY KEY, d DOUBLE, f FLOAT)", db=db)
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", database=db, autocommit=True)
    try:
        with conn.cursor() as cur:
            assert_float_text_is_the_lakes(cur, "bits", float_sql, values, singles)
    finally:
        conn.close()

    mariadb.sql(f"CREATE TABLE {db}.m (id INT PRIMARY KEY, d DOUBLE, f FLOAT, note VARCHAR(20))",
                f"INSERT INTO {db}.m SELECT seq, 100 + seq / 7, seq / 3, 'n' FROM seq_1_to_2000", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.m", tmp_path, 500)
    mariadb.sql("UPDATE m SET d = d / 3, f = f * 1.1 WHERE id % 9 = 0", "INSERT INTO m VALUES (5000, 1/3, 1/7, 'x')",
                db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.m")
    assert code == 0, err[-3000:]  # the snapshot's and the tail's floats are exact: no false alarm
    mariadb.sql("SET SESSION sql_log_bin = 0", "UPDATE m SET d = d + 1e-9 WHERE id = 10",
                "SELECT f INTO @a FROM m WHERE id = 601", "SELECT f INTO @b FROM m WHERE id = 602",
                "UPDATE m SET f = @b WHERE id = 601", "UPDATE m SET f = @a WHERE id = 602", db=db)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.m")
    result = json.loads(out)
    assert code != 0 and sorted(result["drifted"]) == [0, 1], (result, err[-2000:])
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.m", "--repair")
    assert code == 0, err[-3000:]
    _both_verifies_equal(state, sink, f"{db}.m")


def test_a_temporary_table_under_a_captured_tables_name_is_not_that_table(mariadb, db, tmp_path):
    """A MIXED session creates a temporary table named like a captured one, truncates nothing, and drops it (the
    server logs both statements, and a DROP of every temporary table when a session ends): neither is a change of
    the captured table, whose rows changed meanwhile by row events. Before: the CREATE stopped a tail with
    ``--schema-changes fail`` in one line (a false stop), and under ``evolve`` read the whole table again."""
    import pymysql

    state, sink = _capture(mariadb, db, tmp_path)
    session = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", database=db, autocommit=True)
    try:
        with session.cursor() as cur:
            cur.execute("SET SESSION binlog_format = 'MIXED'")
            cur.execute("CREATE TEMPORARY TABLE t (id INT PRIMARY KEY, v INT)")
            mariadb.sql("UPDATE t SET v = -v WHERE id % 3 = 0", db=db)
            cur.execute("DROP TEMPORARY TABLE t")
            cur.execute("CREATE TEMPORARY TABLE t (id INT PRIMARY KEY)")  # dropped by the server at the session's end
    finally:
        session.close()
    mariadb.sql("DELETE FROM t WHERE id = 7", db=db)
    code, _, err = _tail(state, sink, "--schema-changes", "fail")
    assert code == 0, err[-3000:]
    assert "again" not in err and "schema change" not in err, err[-3000:]
    _both_verifies_equal(state, sink, f"{db}.t")


@pytest.mark.parametrize("column, alter", [
    ("g INT AS (v * 2) VIRTUAL", "MODIFY g INT AS (v * 3) VIRTUAL"),
    ("g INT AS (v * 2) STORED", "MODIFY g INT AS (v * 3) STORED"),
    ("g VARCHAR(30) AS (CONCAT('x', v)) VIRTUAL", "CHANGE g g2 VARCHAR(30) AS (CONCAT('y', v)) VIRTUAL"),
], ids=["virtual", "stored", "change"])
def test_a_generated_columns_new_expression_reads_the_table_again(mariadb, db, tmp_path, column, alter):
    """``ALTER TABLE … MODIFY g … AS (new expression)`` changes every row's value of ``g`` without a row event
    (a VIRTUAL column is computed when read; a STORED one is rewritten in place). Before: followed in place as a
    modify that keeps values (same declared type), the tail exited 0 and the lake kept the old expression's
    values (verify: 59 and 60 rows different)."""
    mariadb.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, v INT, {column})",
                f"INSERT INTO {db}.u (id, v) SELECT seq, seq FROM seq_1_to_60", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.u", tmp_path, 20)
    mariadb.sql(f"ALTER TABLE {db}.u {alter}", f"UPDATE {db}.u SET v = 0 WHERE id = 1")
    _followed_then_equal(state, sink, f"{db}.u", in_place=False)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.u")
    assert code == 0, err[-3000:]


def test_zerofill_columns_are_compared_as_their_numbers(mariadb, db, tmp_path):
    """MariaDB prints a ZEROFILL column padded with zeros (``0000000001``), the lake holds the number. Before: the
    checksum verify of any table with such a column said every chunk differed (a false alarm the row compare
    did not share), and ``--repair`` could not mend it. A drift planted behind the binlog's back is still found."""
    mariadb.sql(f"CREATE TABLE {db}.z (id INT PRIMARY KEY, n INT ZEROFILL, d DECIMAL(8,2) ZEROFILL, "
                f"b BIGINT UNSIGNED ZEROFILL, s SMALLINT(3) ZEROFILL)",
                f"INSERT INTO {db}.z SELECT seq, seq, seq / 4, IF(seq = 1, 18446744073709551615, seq * 1000), seq "
                f"FROM seq_1_to_90", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.z", tmp_path, 30)
    mariadb.sql("UPDATE z SET n = n * 7, d = d + 0.25 WHERE id % 4 = 0", "INSERT INTO z VALUES (500, 0, 0, 0, 0)",
                db=db)
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    _both_verifies_equal(state, sink, f"{db}.z")
    mariadb.sql("SET SESSION sql_log_bin = 0", "UPDATE z SET s = 999 WHERE id = 45", db=db)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", f"{db}.z")
    assert code != 0 and json.loads(out)["drifted"] == [1], (out, err[-2000:])


@pytest.mark.parametrize("alter", ["ADD UNIQUE (c)", "ADD COLUMN z INT DEFAULT 5 UNIQUE",
                                   "MODIFY k VARCHAR(10) COLLATE utf8mb4_general_ci"],
                         ids=["index", "column", "collation"])
def test_alter_ignore_that_deletes_duplicates_reads_the_table_again(mariadb, db, tmp_path, alter):
    """``ALTER IGNORE TABLE t ADD UNIQUE (c)`` deletes every row whose ``c`` an earlier row holds; a new UNIQUE
    column with a DEFAULT keeps one row of the table; a unique column compared by a new collation keeps one of
    'k1' and 'K1': no row event says so. Before: taken for an index change, a column added or a modify that
    keeps values, the tail exited 0 and the lake kept the 50, 59 and 29 rows the source had deleted."""
    mariadb.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, c INT, k VARCHAR(10) COLLATE utf8mb4_bin UNIQUE)",
                f"INSERT INTO {db}.u SELECT seq, seq % 10, CONCAT(IF(seq % 2, 'k', 'K'), seq DIV 2) "
                f"FROM seq_1_to_60", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.u", tmp_path, 20)
    mariadb.sql(f"ALTER IGNORE TABLE {db}.u {alter}", f"UPDATE {db}.u SET c = -c WHERE id = 1")
    assert mariadb.sql(f"SELECT COUNT(*) FROM {db}.u")[0][0] < 60
    _followed_then_equal(state, sink, f"{db}.u", in_place=False)


@pytest.mark.parametrize("path", [(), ("--driver-catch-up-mb", "0")], ids=["in-driver", "spark"])
def test_writes_through_a_merge_table_read_its_captured_tables_again(mariadb, db, tmp_path, path, request):
    """A MERGE (MRG_MyISAM) table over captured MyISAM tables: an INSERT, UPDATE or DELETE through it is logged as
    rows events of the MERGE table only (each child gets a table map, no rows). Before: the tail exited 0 and the
    lake missed the insert, kept the deleted row and the old values (verify: 1 missing, 1 extra, 10 different),
    and a TRUNCATE of the MERGE table, which empties its children, left all their rows in the lake. Now each such
    rows event or TRUNCATE reads the captured children again, as for a foreign-key cascade. A MERGE table that cannot
    open its tables is left out: it takes no write (a first version of this stopped every capture of the server)."""
    mariadb.sql("CREATE TABLE broken (id INT) ENGINE=MRG_MyISAM UNION=(no_such_table)",  # cannot open: left out
                "CREATE TABLE c1 (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
                "CREATE TABLE c2 (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
                "INSERT INTO c1 SELECT seq, seq FROM seq_1_to_30", "INSERT INTO c2 SELECT seq, seq FROM seq_31_to_60",
                "CREATE TABLE m (id INT NOT NULL, v INT COMMENT 'UNION=(broken)', KEY (id)) ENGINE=MRG_MyISAM "
                "UNION=(c1, `c2`) INSERT_METHOD=LAST COMMENT 'UNION=(broken)'", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.c1,{db}.c2", "--state", state,
                         "--sink", sink, "--chunk-size", "10")
    assert code == 0, err[-3000:]
    tail = _tail_by(request, state, sink, path)
    mariadb.sql("UPDATE c1 SET v = 0 WHERE id = 1", db=db)  # its own rows events: nothing read again
    code, _, err = tail()
    assert code == 0 and "REWRITE" not in err, err[-3000:]
    mariadb.sql("INSERT INTO m VALUES (100, 100)", "UPDATE m SET v = -v WHERE id % 3 = 0", "DELETE FROM m WHERE id = 5",
                db=db)
    code, _, err = tail()
    assert code == 0, err[-3000:]
    assert path or f"REWRITE of {db}.c1" in err and f"REWRITE of {db}.c2" in err, err[-3000:]
    for table in ("c1", "c2"):
        code, result = _verify_rows(state, sink, f"{db}.{table}")
        assert code == 0 and result["equal"], result
    mariadb.sql("TRUNCATE TABLE m", db=db)  # empties both children (before: the lake kept their 60 rows, exit 0)
    code, _, err = tail()
    assert code == 0, err[-3000:]
    for table in ("c1", "c2"):
        code, result = _verify_rows(state, sink, f"{db}.{table}")
        assert code == 0 and result["equal"] and result["source_rows"] == 0, result


def test_a_repair_that_drops_rows_it_cannot_read_reads_the_table_again(mariadb, db, tmp_path):
    """REPAIR TABLE of a damaged MyISAM table keeps the rows it can read and logs no event for those it drops
    (the server says "Number of rows changed from 100 to 50"). Before: tail exit 0, the lake kept all 100 rows
    (verify: 50 extra). Now REPAIR TABLE (and ALTER TABLE ... REPAIR PARTITION) reads the table again."""
    import os

    mariadb.sql("CREATE TABLE c (id INT PRIMARY KEY, v CHAR(20)) ENGINE=MyISAM ROW_FORMAT=FIXED",
                "INSERT INTO c SELECT seq, 'x' FROM seq_1_to_100", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.c", tmp_path, 25)
    mariadb.sql(f"FLUSH TABLES {db}.c")
    data = mariadb.datadir / "data" / db / "c.MYD"
    os.truncate(data, data.stat().st_size // 2)  # the second half of its rows is lost to a crash
    repaired = mariadb.sql(f"REPAIR TABLE {db}.c")
    assert any("changed from 100 to 50" in str(row) for row in repaired), repaired
    code, _, err = _tail(state, sink)
    assert code == 0 and f"REWRITE of {db}.c" in err, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.c")
    assert code == 0 and result["equal"] and result["source_rows"] == 50, result


_KEY_GONE = {  # a cascade through a key the catalog (the server's now) no longer shows by the read
    "added_and_dropped": ("ALTER TABLE c ADD CONSTRAINT fk FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE",
                          "DELETE FROM p WHERE id = 1", "ALTER TABLE c DROP FOREIGN KEY fk"),
    "parent_renamed": ("ALTER TABLE c ADD CONSTRAINT fk FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE",
                       "SELECT 'a tail between: the key is in the catalog'",
                       "DELETE FROM p WHERE id = 1", "RENAME TABLE p TO p_old, p_new TO p"),
    "chain_broken": ("ALTER TABLE m ADD CONSTRAINT fk FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE",
                     "ALTER TABLE c ADD CONSTRAINT fk2 FOREIGN KEY (pid) REFERENCES m (id) ON DELETE CASCADE",
                     "SELECT 'a tail between: the key is in the catalog'",
                     "DELETE FROM p WHERE id = 1", "ALTER TABLE m DROP FOREIGN KEY fk"),
}


@pytest.mark.parametrize("case", list(_KEY_GONE))
def test_a_cascade_through_a_key_the_catalog_no_longer_shows_reads_the_child_again(mariadb, db, tmp_path, case):
    """The catalog of cascading keys is the server's when a read starts; the read covers a range before it. A key
    added, used by a parent's DELETE and dropped within the range, a parent renamed away after its DELETE cascaded
    (the key follows it: the events name it as it was), a chain p -> m -> c broken above the captured table: each
    left the lake with the cascaded rows, tail exit 0 (verify: 10 extra). Now the DDL that hides the key from the
    catalog reads the tables it reached again."""
    mariadb.sql("CREATE TABLE p (id INT PRIMARY KEY)", "INSERT INTO p SELECT seq FROM seq_1_to_5",
                "CREATE TABLE p_new (id INT PRIMARY KEY)", "INSERT INTO p_new SELECT seq FROM seq_1_to_5",
                "CREATE TABLE m (id INT PRIMARY KEY, pid INT)", "INSERT INTO m SELECT seq, seq FROM seq_1_to_5",
                "CREATE TABLE c (id INT PRIMARY KEY, pid INT, KEY (pid))",
                "INSERT INTO c SELECT seq, seq % 5 + 1 FROM seq_1_to_50", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.c", tmp_path, 10)
    for statement in _KEY_GONE[case]:
        if statement.startswith("SELECT 'a tail between"):
            code, _, err = _tail(state, sink)
            assert code == 0 and "REWRITE" not in err, err[-3000:]  # a key added: no row of c changed
        else:
            mariadb.sql(statement, db=db)
    assert mariadb.sql(f"SELECT COUNT(*) FROM {db}.c")[0][0] == 40
    code, _, err = _tail(state, sink)
    assert code == 0 and f"REWRITE of {db}.c" in err, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.c")
    assert code == 0 and result["equal"], result
    code, _, err = _tail(state, sink)  # nothing new: nothing read again
    assert code == 0 and "REWRITE" not in err, err[-3000:]


_MERGE_GONE = {  # writes through a MERGE table the catalog (the server's now) no longer shows by the read
    "created_and_dropped": ("CREATE TABLE m (id INT NOT NULL, v INT) ENGINE=MRG_MyISAM UNION=(c)",
                            "DELETE FROM m WHERE id < 5", "UPDATE m SET v = -v WHERE id = 9", "DROP TABLE m"),
    "union_changed": ("DELETE FROM old_m WHERE id < 5", "INSERT INTO old_m VALUES (100, 100)",
                      "ALTER TABLE old_m UNION=(other)"),
    "truncated_and_dropped": ("TRUNCATE TABLE other", "TRUNCATE TABLE old_m", "DROP TABLE old_m"),
    # a legacy MERGE setup moved to InnoDB: the table is not MyISAM by the read (its maps count from the ALTER)
    "moved_to_innodb": ("DELETE FROM old_m WHERE id < 5", "DROP TABLE old_m", "ALTER TABLE c ENGINE=InnoDB"),
}


@pytest.mark.parametrize("path", [(), ("--driver-catch-up-mb", "0")], ids=["in-driver", "spark"])
@pytest.mark.parametrize("case", list(_MERGE_GONE))
def test_writes_through_a_merge_table_the_catalog_no_longer_shows_read_its_tables_again(mariadb, db, tmp_path, case,
                                                                                         path, request):
    """A MERGE table created, written through and dropped within a read's range, one whose UNION changed after
    writes, one truncated then dropped: the catalog of MERGE tables (the server's now) did not show them, and the
    lake kept the captured MyISAM table's old rows, tail exit 0 (verify: 4 extra). A write through a MERGE table
    maps its tables and logs its own rows only: a captured MyISAM table mapped by a statement without a row of its
    own is now read again, and so is one moved off MyISAM later in the read (the MERGE table's last writes, then
    ``ALTER TABLE c ENGINE=InnoDB``: 4 extra before); a TRUNCATE of a table that is gone (or a MERGE table) reads
    the MyISAM tables again. A direct write, or a TRUNCATE of another table that is there, reads nothing again."""
    mariadb.sql("CREATE TABLE c (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
                "CREATE TABLE other (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
                "INSERT INTO c SELECT seq, seq FROM seq_1_to_30",
                "CREATE TABLE old_m (id INT NOT NULL, v INT) ENGINE=MRG_MyISAM UNION=(c) INSERT_METHOD=LAST", db=db)
    state, sink = captured(mariadb.uri(), f"{db}.c", tmp_path, 10)
    tail = _tail_by(request, state, sink, path)
    mariadb.sql("UPDATE c SET v = 0 WHERE id = 1", "TRUNCATE TABLE other", db=db)
    code, _, err = tail()
    assert code == 0 and "REWRITE" not in err, err[-3000:]
    mariadb.sql(*_MERGE_GONE[case], db=db)
    code, _, err = tail()
    assert code == 0, err[-3000:]
    code, result = _verify_rows(state, sink, f"{db}.c")
    assert code == 0 and result["equal"], result


@pytest.mark.parametrize("strategy", ["consistent_snapshot", "watermark_table"])
@pytest.mark.parametrize("source", ["cascade", "merge"])
def test_rows_changed_without_their_events_inside_a_chunk_window_read_the_chunk_again(mariadb, db, strategy, source):
    """A parent's DELETE cascading into the chunk's table, or a write through a MERGE table over it, between the
    chunk's SELECT and its high watermark: the window holds no event of the table for it, so the chunk kept rows
    the source no longer had under a high watermark past their deletion (a re-snapshot while the tail runs, at the
    worst moment). Now the window names the change and the chunk is read again: it is the source as of its HW."""
    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.readers.chunk_reader import read_chunk
    from airflow_provider_dblog.source.mysql.dialect import MySqlDialect

    if source == "cascade":
        mariadb.sql("CREATE TABLE p (id INT PRIMARY KEY)", "INSERT INTO p SELECT seq FROM seq_1_to_5",
                    "CREATE TABLE c (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE)",
                    "INSERT INTO c SELECT seq, seq % 5 + 1 FROM seq_1_to_50", db=db)
        change = "DELETE FROM p WHERE id = 1"
    else:
        mariadb.sql("CREATE TABLE c (id INT PRIMARY KEY, pid INT) ENGINE=MyISAM",
                    "INSERT INTO c SELECT seq, seq % 5 + 1 FROM seq_1_to_50",
                    "CREATE TABLE m (id INT NOT NULL, pid INT) ENGINE=MRG_MyISAM UNION=(c)", db=db)
        change = "DELETE FROM m WHERE pid = 1"
    pending = [change]

    class ChangedAfterTheSelect(MySqlDialect):  # the real dialect; the unlogged change lands at the worst moment
        def read_snapshot(self, meta, chunk):
            rows = super().read_snapshot(meta, chunk)
            if pending:
                mariadb.sql(pending.pop(), db=db)
            return rows

    dialect = ChangedAfterTheSelect(SourceConfig.parse(mariadb.uri()))
    try:
        meta = dialect.describe_table(f"{db}.c")
        chunk = dialect.split_chunks(meta, 1000)[0]
        dialect.resolve_strategy(strategy, meta)
        read = read_chunk(dialect, meta, chunk, strategy)
        assert sorted(r["id"] for r in read.rows.to_pylist()) == [i for i in range(1, 51) if i % 5 != 0]
    finally:
        dialect.close()


SMALL_ROWS_PER_POSITION = ("import sys; from airflow_provider_dblog.source.mysql import binlog, block_decoder; "
                           "binlog.ROWS_PER_POSITION = block_decoder.ROWS_PER_POSITION = 3; "
                           "from airflow_provider_dblog.cli.main import console; sys.argv[0] = 'dblog'; console()")


@pytest.mark.parametrize("shape", ["one event", "a run of blocks", "an XA transaction"])
def test_a_change_of_more_rows_than_one_position_orders_stops_its_table_until_a_resnapshot(mariadb, db, tmp_path,
                                                                                           shape):
    """A rows event or XA transaction of 50,000,000 rows or more has rows no position orders (their ``_pos`` would
    collide with ``CLOSED_ROW`` or sort wrongly as nine digits). With the constant lowered to 3 in the tail's
    process: one event of 10 rows, the same event in a run the block decoder takes, or an XA transaction of 4 rows
    stops the tail in one line naming the table and the re-snapshot, nothing of it reaches the lake; after the
    re-snapshot the tail goes on and the lake equals the source."""
    import subprocess
    import sys

    state, sink = _capture(mariadb, db, tmp_path)
    t = f"{db}.t"
    if shape == "one event":
        mariadb.sql(f"UPDATE {t} SET v = -v WHERE id BETWEEN 10 AND 19")
    elif shape == "a run of blocks":
        mariadb.sql("BEGIN", *(f"UPDATE {t} SET v = -v WHERE id = {i}" for i in range(100, 112)),
                    f"UPDATE {t} SET v = -v WHERE id BETWEEN 10 AND 19", "COMMIT")
    else:
        mariadb.sql(f"XA START '{db}big'", f"UPDATE {t} SET v = -v WHERE id IN (10, 11)",
                    f"DELETE FROM {t} WHERE id IN (12, 13)", f"XA END '{db}big'", f"XA PREPARE '{db}big'",
                    f"XA COMMIT '{db}big'")
    tail = [sys.executable, "-c", SMALL_ROWS_PER_POSITION, "tail", "--state", state, "--sink", sink,
            "--available-now"]
    done = subprocess.run(tail, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    line = one_error_line(done.stderr)
    assert "more rows than dblog's positions order" in line and f"dblog resnapshot --table {t}" in line, line
    from deltalake import DeltaTable

    current = DeltaTable(f"{sink}/{t}/current").to_pyarrow_table(columns=["id", "v"]).to_pylist()
    assert all(r["v"] == r["id"] for r in current if 10 <= r["id"] < 20), "a change past the stop reached the lake"
    _resnapshot_in_process(state, sink, t)
    mariadb.sql(f"UPDATE {t} SET v = 7 WHERE id = 1")
    done = subprocess.run(tail, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    _both_verifies_equal(state, sink, t)
