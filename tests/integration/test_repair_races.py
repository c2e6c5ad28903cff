"""Re-reads racing the tail: ``dblog resnapshot`` / ``verify --repair`` of chunks a writer keeps changing (keys
deleted and inserted again, moved across chunk boundaries), two re-reads of one chunk at once, re-reads killed at
any moment and run again, on MariaDB and PostgreSQL. Each ends, once the writer stopped and an available-now tail
caught up, with ``current`` equal to the source column by column, no key twice, the changelog replaying to
``current`` and ``dblog verify`` equal. And a re-read at the very position of the chunk's last read (nothing
logged since) that finds other rows (a change made without a binlog event) stops in one line instead of writing
a second image of its keys at the same ``_pos``."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.support.cli import DBLOG, captured, dblog, one_error_line
from tests.support.lakecheck import assert_replay_equals_current, compare_rows
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

ROWS, CHUNK = 1_200, 200
CHUNKS = ROWS // CHUNK
ROOT = Path(__file__).resolve().parents[2]
# one re-read of chunks in its own process (what ``dblog resnapshot`` runs), on the in-driver chunk reader
RESNAPSHOT = """
import sys
from airflow_provider_dblog.steps.resnapshot import resnapshot
from tests.support.inprocess_executor import InProcessExecutor
resnapshot(sys.argv[1], sys.argv[2], sys.argv[3], chunk_ids=sys.argv[4], executor=InProcessExecutor())
"""


def resnapshot(state: str, sink: str, table: str, chunks: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RESNAPSHOT, state, sink, table, chunks], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


class Writer(threading.Thread):
    """Inserts, updates, deletes, a key deleted and inserted again, keys changed a little or moved to the next
    or previous chunk; half of the keys near a chunk boundary."""

    def __init__(self, connect, table: str, postgres: bool, seed: int):
        super().__init__(daemon=True)
        self.connect, self.table, self.rnd = connect, table, random.Random(seed)
        self.halt, self.error, self.count = threading.Event(), None, 0
        if postgres:
            self.insert = f"INSERT INTO {table} (id, v, s) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
            self.rekey = f"UPDATE {table} SET id = %s WHERE id = %s AND NOT EXISTS (SELECT 1 FROM {table} WHERE id = %s)"
        else:
            self.insert = f"INSERT IGNORE INTO {table} (id, v, s) VALUES (%s, %s, %s)"
            self.rekey = f"UPDATE IGNORE {table} SET id = %s WHERE id = %s AND %s IS NOT NULL"

    def key(self) -> int:
        if self.rnd.random() < 0.5:
            return self.rnd.randint(1, CHUNKS) * CHUNK + self.rnd.randint(-2, 2)
        return self.rnd.randint(1, ROWS + 50)

    def run(self) -> None:
        try:
            conn = self.connect()
            cur = conn.cursor()
            while not self.halt.is_set():
                op, k = self.rnd.choice(["insert", "update", "delete", "again", "rekey", "move"]), self.key()
                if op == "insert":
                    cur.execute(self.insert, (k, self.count, f"i{self.count}"))
                elif op == "update":
                    cur.execute(f"UPDATE {self.table} SET v = v + 1, s = %s WHERE id = %s", (f"u{self.count}", k))
                elif op == "delete":
                    cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (k,))
                elif op == "again":  # deleted, then inserted again by the next transaction
                    cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (k,))
                    cur.execute(self.insert, (k, -1, f"again{self.count}"))
                else:
                    to = k + (CHUNK * self.rnd.choice([-1, 1]) if op == "move" else self.rnd.randint(-3, 3))
                    cur.execute(self.rekey, (to, k, to))
                self.count += 1
                time.sleep(0.002)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(60)
        if self.error:
            raise self.error


def converged(state: str, sink: str, table: str, source_problems) -> None:
    """After the writer stopped: an available-now tail catches up, then the lake is the source's, exactly."""
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert source_problems() == []
    ids = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(columns=["id"])["id"].to_pylist()
    assert len(ids) == len(set(ids)), "a key is twice in current"
    assert_replay_equals_current(sink, table)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table)
    assert code == 0 and json.loads(out)["equal"], err


def race_rereads(state: str, sink: str, table: str, writer: Writer) -> None:
    """While ``writer`` runs and available-now tails commit one after another: two re-reads of the same chunk at
    once beside a third of another, then re-reads (and tails) killed after a few delays, then run again."""
    rnd = random.Random(11)
    writer.start()
    try:
        for _ in range(3):
            chunk = str(rnd.randrange(CHUNKS))
            tail = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
            reads = [resnapshot(state, sink, table, chunk), resnapshot(state, sink, table, chunk),
                     resnapshot(state, sink, table, str(rnd.randrange(CHUNKS)))]
            for read in [*reads, tail]:
                _, err = read.communicate(timeout=120)
                assert read.returncode == 0, err[-2000:]
        for delay in (0.4, 0.8, 1.3, 1.9):
            read = resnapshot(state, sink, table, f"{rnd.randrange(CHUNKS)}")
            tail = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(delay)
            for process in (read, tail):
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        read = resnapshot(state, sink, table, f"0-{CHUNKS - 1}")  # run again: every chunk
        _, err = read.communicate(timeout=120)
        assert read.returncode == 0, err[-2000:]
    finally:
        writer.stop()


def test_rereads_racing_a_writer_and_the_tail_converge_on_mariadb(mariadb, db, tmp_path):
    import pymysql

    table = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, s VARCHAR(40))",
                f"INSERT INTO {table} SELECT seq, seq, CONCAT('r', seq) FROM seq_1_to_{ROWS}", db=db)
    state, sink = captured(mariadb.uri(), table, tmp_path, CHUNK)
    writer = Writer(lambda: pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", autocommit=True),
                    table, postgres=False, seed=3)
    race_rereads(state, sink, table, writer)
    converged(state, sink, table, lambda: compare_rows(DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(),
                                                      mariadb.port, table))


def test_rereads_racing_a_writer_and_the_tail_converge_on_postgres(postgres, pg_db, tmp_path):
    import psycopg2

    postgres.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(40))",
                 f"INSERT INTO t SELECT g, g, 'r' || g FROM generate_series(1, {ROWS}) g", db=pg_db)
    state, sink = captured(postgres.uri(pg_db), "public.t", tmp_path, CHUNK)

    def connect():
        conn = psycopg2.connect(postgres.dsn(pg_db))
        conn.autocommit = True
        return conn

    def problems() -> list[str]:
        with connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT id, v, s FROM t")
            want = {r[0]: r for r in cur.fetchall()}
        lake = DeltaTable(f"{sink}/public.t/current").to_pyarrow_table(columns=["id", "v", "s"]).to_pylist()
        have = {r["id"]: (r["id"], r["v"], r["s"]) for r in lake}
        return [f"id {k}: source {want.get(k)} != lake {have.get(k)}" for k in want.keys() | have.keys()
                if want.get(k) != have.get(k)]

    race_rereads(state, sink, "public.t", Writer(connect, "t", postgres=True, seed=5))
    converged(state, sink, "public.t", problems)


def test_a_reread_at_the_position_of_the_chunks_last_read_never_ties_two_images(mariadb, db, tmp_path):
    """Nothing logged since the chunk's last read: a re-read gets the same HW. Of the same rows it writes nothing
    (before: each re-read appended the chunk again at the same ``_pos``); of rows changed without a binlog event
    it stops in one line (before: it appended the new images at the old read's ``_pos``, where a replay could take
    either, left ``current`` as it was and ``verify --repair`` said only that the chunk still differed); once
    the source logged a write, the repair repairs."""
    table = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, s VARCHAR(40))",
                f"INSERT INTO {table} SELECT seq, seq, CONCAT('r', seq) FROM seq_1_to_100", db=db)
    state, sink = captured(mariadb.uri(), table, tmp_path, 25)
    logged = DeltaTable(f"{sink}/{table}/changelog").to_pyarrow_table().num_rows
    code, _, err = dblog("resnapshot", "--state", state, "--sink", sink, "--table", table, "--chunks", "1")
    assert code == 0, err
    assert DeltaTable(f"{sink}/{table}/changelog").to_pyarrow_table().num_rows == logged

    mariadb.sql("SET SESSION sql_log_bin = 0", f"UPDATE {table} SET v = -5 WHERE id = 30",
                f"DELETE FROM {table} WHERE id = 31")
    code, _, err = dblog("verify", "--state", state, "--sink", sink, "--table", table, "--repair")
    assert code != 0
    assert "nothing was logged since" in one_error_line(err)
    assert_replay_equals_current(sink, table)  # no key with two images at one _pos

    mariadb.sql(f"CREATE TABLE {db}.other (id INT PRIMARY KEY)", f"INSERT INTO {db}.other VALUES (1)")
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table, "--repair")
    assert code == 0, err
    assert json.loads(out)["repaired"] == [1]
    converged(state, sink, table, lambda: compare_rows(DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(),
                                                      mariadb.port, table))


def test_a_reread_at_the_same_position_with_a_column_added_unlogged_changes_nothing_of_the_lake(mariadb, db, tmp_path):
    """A column added without a binlog event (``sql_log_bin=0``), then a re-read at the position of the chunk's
    last read: it stops in one line before the lake takes the new column (before: the lake's columns evolved,
    every row's value of the new column null, and then the read was refused). FLUSH BINARY LOGS, the way the line
    names, moves the position without a write, and the re-read then repairs."""
    table = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {table} SELECT seq, seq FROM seq_1_to_100", db=db)
    state, sink = captured(mariadb.uri(), table, tmp_path, 25)
    columns = DeltaTable(f"{sink}/{table}/current").schema().to_arrow().names
    mariadb.sql("SET SESSION sql_log_bin = 0", f"ALTER TABLE {table} ADD COLUMN w INT NOT NULL DEFAULT 7", db=db)
    code, _, err = dblog("resnapshot", "--state", state, "--sink", sink, "--table", table, "--chunks", "1")
    assert code != 0 and "nothing was logged since" in one_error_line(err) and "FLUSH BINARY LOGS" in err, err
    assert DeltaTable(f"{sink}/{table}/current").schema().to_arrow().names == columns
    assert DeltaTable(f"{sink}/{table}/changelog").schema().to_arrow().names.count("w") == 0

    mariadb.sql("FLUSH BINARY LOGS")  # a new binlog file: a position no read of the chunk had (no write needed)
    code, _, err = dblog("resnapshot", "--state", state, "--sink", sink, "--table", table)
    assert code == 0, err
    converged(state, sink, table, lambda: compare_rows(DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(),
                                                      mariadb.port, table))
