"""Writes a MySQL/MariaDB server never puts in its binlog are refused in one line, never silently missed.

A server started with ``--binlog-ignore-db`` / ``--binlog-do-db`` leaves a database's row events out of its
binlog, and a replica without ``log_slave_updates`` leaves out every write it applies from its primary: a tail
would read an empty binlog and report itself current. ``dblog plan`` refuses such a server, and a tail refuses
one that became so after the plan (a restart with a filter, ``CHANGE MASTER`` + ``START SLAVE``), before it
reads or commits anything. Each case is a real private server."""
from __future__ import annotations

import time

from deltalake import DeltaTable

from tests.support.cli import dblog, one_error_line
from tests.support.local_mariadb import LocalMariaDB


def plan(uri: str, state, *extra: str):
    return dblog("plan", "--source", uri, "--table", "s.t", "--state", str(state), *extra)


def test_a_database_the_binlog_filters_out_is_refused(tmp_path):
    for flag, said in (("--binlog-ignore-db=s", "binlog_ignore_db"), ("--binlog-do-db=other", "binlog_do_db")):
        with LocalMariaDB(tmp_path / flag[2:16], server_id=31, extra_flags=(flag,)) as server:
            server.sql("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)", "INSERT INTO s.t VALUES (1)")
            code, _, err = plan(server.uri(), tmp_path / f"state-{said}")
            line = one_error_line(err)
            assert code != 0 and said in line and "database(s) s (" in line and "restart" in line, err[-2000:]


def test_a_replica_that_does_not_log_what_it_applies_is_refused_by_plan_and_tail(tmp_path):
    primary = LocalMariaDB(tmp_path / "primary", server_id=32).start()
    replica = LocalMariaDB(tmp_path / "replica", server_id=33).start()  # log_slave_updates: OFF (the default)
    try:
        for server in (primary, replica):
            server.sql("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY, v INT)",
                       "INSERT INTO s.t VALUES (1, 1), (2, 2)")
        state, sink = tmp_path / "state", str(tmp_path / "lake")
        code, _, err = dblog("run", "--source", replica.uri(), "--table", "s.t", "--state", str(state), "--sink", sink)
        assert code == 0, err[-2000:]  # not a replica yet: captured

        # the server becomes a replica: what it applies is not in its binlog
        replica.sql(f"CHANGE MASTER TO master_host='127.0.0.1', master_port={primary.port}, master_user='root', "
                    f"master_use_gtid=slave_pos", "START SLAVE")
        primary.sql("UPDATE s.t SET v = 10 WHERE id = 1")
        deadline = time.time() + 60
        # (the replica replays the primary's CREATE TABLE too, as CREATE OR REPLACE: the row is gone until the
        # INSERT after it is applied)
        while replica.sql("SELECT v FROM s.t WHERE id = 1") != [(10,)]:
            assert time.time() < deadline, "the replica did not apply the update"
            time.sleep(0.1)
        before = DeltaTable(f"{sink}/s.t/changelog").version()
        code, _, err = dblog("tail", "--state", str(state), "--sink", sink, "--available-now")
        line = one_error_line(err)
        assert code != 0 and "log_slave_updates" in line and "replica" in line, err[-2000:]
        assert DeltaTable(f"{sink}/s.t/changelog").version() == before  # nothing written
        code, _, err = plan(replica.uri(), tmp_path / "state2")
        assert code != 0 and "log_slave_updates" in one_error_line(err), err[-2000:]
    finally:
        replica.stop()
        primary.stop()
