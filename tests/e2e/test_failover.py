"""A capture resumes on a promoted replica by GTID (MariaDB): its own binlog positions differ from the
primary's, the lake's positions keep their order, no change is lost or written twice, and a server of
another history is refused in one line. Three private MariaDB servers, the CLI as a user runs it."""
from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from tests.support.cli import captured, dblog, one_error_line
from tests.support.lakecheck import assert_each_change_once, assert_replay_equals_current, compare_rows, lake_changes
from tests.support.local_mariadb import LocalMariaDB

pytestmark = pytest.mark.slow
TABLE = "f.t"


def _replicating(primary: LocalMariaDB, replica: LocalMariaDB) -> None:
    replica.sql(f"CHANGE MASTER TO master_host='127.0.0.1', master_port={primary.port}, master_user='root', "
                f"master_use_gtid=slave_pos", "START SLAVE")


def _caught_up(primary: LocalMariaDB, replica: LocalMariaDB) -> None:
    want = primary.sql("SELECT @@gtid_binlog_pos")[0][0]
    deadline = time.time() + 60
    while replica.sql("SELECT @@gtid_slave_pos")[0][0] != want:
        assert time.time() < deadline, f"the replica did not reach {want}"
        time.sleep(0.1)


def _tail(state: str, sink: str, *extra: str) -> str:
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", *extra)
    assert code == 0, err[-3000:]
    return err


def _lake(sink: str):
    return DeltaTable(f"{sink}/{TABLE}/current").to_pyarrow_table()


def test_a_tail_resumes_on_a_promoted_replica_by_gtid(tmp_path):
    primary = LocalMariaDB(tmp_path / "primary", server_id=21).start()
    replica = LocalMariaDB(tmp_path / "replica", server_id=22, extra_flags=("--log-slave-updates=ON",)).start()
    other = LocalMariaDB(tmp_path / "other", server_id=23).start()
    try:
        primary.sql("CREATE DATABASE f", "CREATE TABLE f.t (id INT PRIMARY KEY, v INT, s VARCHAR(40))",
                    "INSERT INTO f.t SELECT seq, seq, CONCAT('row ', seq) FROM seq_1_to_3000", db="mysql")
        _replicating(primary, replica)
        for _ in range(3):  # the primary's binlog numbers run ahead of the replica's
            primary.sql("FLUSH BINARY LOGS")
        state, sink = captured(primary.uri(), TABLE, tmp_path, 500)
        changes = 0
        primary.sql("UPDATE f.t SET v = v + 1 WHERE id <= 400", "DELETE FROM f.t WHERE id BETWEEN 2901 AND 2950",
                    "INSERT INTO f.t SELECT seq, 0, 'inserted' FROM seq_3001_to_3100", db="f")
        changes += 400 + 50 + 100
        _tail(state, sink, "--driver-catch-up-mb", "0")  # the streaming query records the GTID at its end
        primary.sql("UPDATE f.t SET s = 'not tailed from the primary' WHERE id BETWEEN 300 AND 500",
                    "DELETE FROM f.t WHERE id BETWEEN 10 AND 19")
        changes += 201 + 10
        _caught_up(primary, replica)
        primary.stop()  # the primary is gone; the replica is promoted
        replica.sql("STOP SLAVE", "RESET SLAVE ALL")
        replica.sql("UPDATE f.t SET v = v + 1000 WHERE id BETWEEN 350 AND 450", "DELETE FROM f.t WHERE id <= 5",
                    "INSERT INTO f.t SELECT seq, 1, 'after the failover' FROM seq_3101_to_3120", db="f")
        changes += 101 + 5 + 20
        primary_file = DeltaTable(f"{sink}/{TABLE}/changelog").to_pyarrow_table()["_pos"].to_pylist()
        assert replica.sql("SHOW MASTER STATUS")[0][0] < "mysql-bin.000004", "positions would not differ"

        # a server of another history: moved to, then refused by the tail in one line, nothing written
        other.sql("CREATE DATABASE f")
        code, _, err = dblog("failover", "--state", state, "--source", other.uri())
        assert code == 0, err
        before = DeltaTable(f"{sink}/{TABLE}/changelog").version()
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
        assert code != 0 and "not a promoted replica" in one_error_line(err), err[-2000:]
        assert DeltaTable(f"{sink}/{TABLE}/changelog").version() == before

        code, out, err = dblog("failover", "--state", state, "--source", replica.uri())
        assert code == 0, err
        err = _tail(state, sink, "--driver-catch-up-mb", "0")
        assert "GTID" in err and "promoted server" in err, err[-2000:]

        assert not compare_rows(_lake(sink), replica.port, TABLE)
        assert assert_each_change_once(sink, TABLE) == changes
        assert_replay_equals_current(sink, TABLE)
        after = lake_changes(sink, TABLE)["_pos"].to_pylist()
        assert max(after) > max(primary_file), "the replica's positions sort after the primary's"

        replica.sql("UPDATE f.t SET v = -v WHERE id BETWEEN 1000 AND 1099")  # the capture goes on there
        _tail(state, sink)
        assert not compare_rows(_lake(sink), replica.port, TABLE)
        assert assert_each_change_once(sink, TABLE) == changes + 100
        assert_replay_equals_current(sink, TABLE)
    finally:
        for server in (primary, replica, other):
            server.stop()
