"""A seeded random walk over everything that may happen to a capture (issue 25's acceptance): DML of
every shape, DDL of every kind the lake follows (added columns with literal, generated and implicit
values, drops, renames, widenings), TRUNCATE, re-reads of random chunks, and tails killed with SIGKILL
at random moments, over 200 steps. It must end with the checksum verify and the row compare equal, and
the changelog's replay equal to ``current``. The seed is printed on failure: rerun with
``DBLOG_RANDOM_SEED=N`` to replay the same walk."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pymysql
import pytest

from airflow_provider_dblog.spark.executor import SparkExecutor
from tests.support.cli import DBLOG, captured, dblog
from tests.support.lakecheck import assert_replay_equals_current
from tests.support.walks import follow_added_columns

SEED = int(os.environ.get("DBLOG_RANDOM_SEED", "2025"))
STEPS = 200
ROWS = 2_000
DDL = [
    "ADD COLUMN a{n} INT NOT NULL DEFAULT {k}",
    "ADD COLUMN g{n} INT AS (v * 2) STORED",
    "ADD COLUMN z{n} VARCHAR(8) NOT NULL",
    "ADD COLUMN t{n} VARCHAR(12) DEFAULT 'x{k}'",
    "DROP COLUMN {added}",
    "RENAME COLUMN {added} TO r{n}",
    "MODIFY COLUMN v BIGINT",
    "MODIFY COLUMN note VARCHAR(80)",
]


class Walk:
    def __init__(self, mariadb, table: str, rnd: random.Random):
        self.mariadb, self.table, self.rnd = mariadb, table, rnd
        self.conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", autocommit=True,
                                    sql_mode="")  # not strict: a NOT NULL column without DEFAULT takes its implicit one
        self.added: list[str] = []
        self.n = 0
        self.log: list[str] = []

    def sql(self, *statements):
        with self.conn.cursor() as cur:
            for s in statements:
                cur.execute(s)

    def key(self) -> int:
        return self.rnd.randint(1, ROWS + 500)

    def dml(self) -> None:
        rnd, t = self.rnd, self.table
        statements = []
        for _ in range(rnd.randint(1, 12)):
            op = rnd.choice(["insert", "update", "update", "delete", "update_key", "range"])
            if op == "insert":
                statements.append(f"INSERT IGNORE INTO {t} (id, v, note) VALUES ({self.key()}, {rnd.randint(-9, 9)}, "
                                  f"'i{rnd.randint(0, 999)}')")
            elif op == "update":
                statements.append(f"UPDATE {t} SET v = v + {rnd.randint(1, 5)}, note = 'u{rnd.randint(0, 999)}' "
                                  f"WHERE id = {self.key()}")
            elif op == "delete":
                statements.append(f"DELETE FROM {t} WHERE id = {self.key()}")
            elif op == "update_key":
                statements.append(f"UPDATE IGNORE {t} SET id = {self.key()} WHERE id = {self.key()}")
            else:
                lo = self.key()
                statements.append(f"UPDATE {t} SET v = v - 1 WHERE id BETWEEN {lo} AND {lo + rnd.randint(1, 80)}")
        self.sql("BEGIN", *statements, "COMMIT")

    def ddl(self) -> None:
        rnd = self.rnd
        choices = [d for d in DDL if "{added}" not in d or self.added]
        clause = rnd.choice(choices)
        self.n += 1
        added = rnd.choice(self.added) if self.added else ""
        text = clause.format(n=self.n, k=rnd.randint(0, 99), added=added)
        follow_added_columns(self.added, clause, text, added, self.n)
        self.sql(f"ALTER TABLE {self.table} {text}")
        self.log.append(f"ALTER TABLE {text}")

    def truncate(self) -> None:
        self.sql(f"TRUNCATE TABLE {self.table}",
                 f"INSERT INTO {self.table} (id, v, note) VALUES (1, 1, 'again'), ({ROWS}, 2, 'again')")
        self.log.append("TRUNCATE")


@pytest.mark.slow
def test_a_random_walk_of_dml_ddl_truncate_rereads_and_kills_converges(mariadb, db, spark, tmp_path):
    from airflow_provider_dblog.steps.resnapshot import resnapshot

    rnd = random.Random(SEED)
    table = f"{db}.w"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, note VARCHAR(40))",
                f"INSERT INTO {table} SELECT seq, seq, CONCAT('n', seq) FROM seq_1_to_{ROWS}", db=db)
    state, sink = captured(mariadb.uri(), table, tmp_path, 250)
    walk = Walk(mariadb, table, rnd)
    counts: dict[str, int] = {}
    for step in range(STEPS):
        action = rnd.choices(["dml", "ddl", "truncate", "reread", "tail", "kill"], [62, 8, 2, 6, 12, 10])[0]
        counts[action] = counts.get(action, 0) + 1
        context = f"seed {SEED}, step {step} ({action}); DDL so far: {walk.log}"
        if action == "dml":
            walk.dml()
        elif action == "ddl":
            walk.ddl()
        elif action == "truncate":
            walk.truncate()
        elif action == "reread":
            chunks = sorted(rnd.sample(range(8), rnd.randint(1, 3)))
            resnapshot(state, sink, table, chunk_ids=",".join(map(str, chunks)), executor=SparkExecutor(spark))
        elif action == "tail":
            code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
            assert code == 0, f"{context}: {err[-3000:]}"
        else:
            tail = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(rnd.uniform(0.2, 2.5))
            if tail.poll() is None:
                os.killpg(tail.pid, signal.SIGKILL)
            tail.wait()
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, f"seed {SEED}, final tail: {err[-3000:]}"
    context = f"seed {SEED}, counts {counts}, DDL {walk.log}"
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table)
    assert code == 0 and json.loads(out)["drifted"] == [], f"{context}: {out[-2000:]} {err[-2000:]}"
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table, "--rows")
    assert code == 0 and json.loads(out)["equal"], f"{context}: {out[-2000:]} {err[-2000:]}"
    assert_replay_equals_current(sink, table)
    assert counts.get("kill", 0) >= 10 and counts.get("ddl", 0) >= 8 and counts.get("reread", 0) >= 5, counts
