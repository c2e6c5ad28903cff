"""Whole databases (issue 14's acceptance) on real MariaDB and Spark local[2]: 50 tables of mixed shapes in
two databases, captured by pattern with an exclusion and a per-table chunk key, while a writer changes
all of them before, during and after the snapshot; the available-now tail (the streaming query) then
catches up and every table's lake equals its source, column by column. Bad input (an empty match, a
malformed pattern, a table without a key) is one line each and writes nothing.

Only the public surface is used: `dblog plan` / `dblog tail` as processes, the snapshot and report steps
in this process (on the suite's Spark session)."""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import threading
import time
import unicodedata
from decimal import Decimal
from pathlib import Path

import pymysql
import pytest
from deltalake import DeltaTable

from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.spark.executor import SparkExecutor
from tests.support.lakecheck import assert_each_change_once, compare_rows
from tests.support.cli import dblog, one_error_line

pytestmark = pytest.mark.slow

VALUES = "v INT, s VARCHAR(40) CHARACTER SET utf8mb4, amt DECIMAL(12,2), ts DATETIME(6)"
# shape -> (DDL, row identity); every shape but "nokey" has it as its primary key
SHAPES = {
    "int": (f"(id INT PRIMARY KEY, {VALUES})", ("id",)),
    "composite": (f"(a INT, b VARCHAR(4) CHARACTER SET ascii, {VALUES}, PRIMARY KEY (a, b))", ("a", "b")),
    "unicode_ci": (f"(k VARCHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci PRIMARY KEY, {VALUES})", ("k",)),
    "latin1_ci": (f"(k VARCHAR(24) CHARACTER SET latin1 COLLATE latin1_swedish_ci PRIMARY KEY, {VALUES})", ("k",)),
    "nokey": (f"(c1 INT NOT NULL, c2 INT NOT NULL, {VALUES}, KEY (c1, c2))", ("c1", "c2")),
}
# collated keys: prefixes whose order and case differ between the collation and the bytes; the number makes
# every key distinct under the collation too (no two keys differ only in case or accents)
PREFIXES = ["a", "B", "é", "Z", "ö", "Ça", "ø", "É", "m", "Å"]  # latin1 in both cases
STRINGS = ["plain", "émoji 😀", "tab\tquote'\"", "", "ünïcødé ✓", "x" * 40]


def key_of(shape: str, n: int) -> tuple:
    if shape == "int":
        return (n,)
    if shape == "composite":
        return (n // 3, f"x{n % 3}")
    if shape == "nokey":
        return (n // 4, n % 4)
    return (f"{PREFIXES[n % len(PREFIXES)]}{n:05d}",)


def values(rnd: random.Random) -> dict:
    return {"v": rnd.randint(-10**6, 10**6), "s": None if rnd.random() < 0.1 else rnd.choice(STRINGS),
            "amt": Decimal(rnd.randint(-10**9, 10**9)) / 100,
            "ts": dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rnd.randint(0, 10**13))}


def variant(key: str) -> str:
    """The same key under a case- and accent-insensitive collation, other bytes: a key change all the same."""
    flipped = key.swapcase()
    if flipped != key:
        return flipped
    return unicodedata.normalize("NFKD", key).encode("ascii", "ignore").decode() or key


class Table:
    def __init__(self, name: str, shape: str, rows: int):
        self.name, self.shape, self.rows = name, shape, rows
        self.key = SHAPES[shape][1]
        self.space = int(rows * 1.3)  # the writer's keys: the seeded ones and some new

    def row(self, n: int, rnd: random.Random) -> dict:
        return {**dict(zip(self.key, key_of(self.shape, n))), **values(rnd)}

    def where(self) -> str:
        return " AND ".join(f"`{c}` = %s" for c in self.key)


class ManyTablesWriter(threading.Thread):
    """Random changes over many tables until ``stop()``: single- and multi-row inserts, updates of values,
    of the key (also to the same key under the collation), deletes, statements changing many rows, and
    multi-table transactions, committed or rolled back. Counts the committed changes per (phase, table)."""

    def __init__(self, port: int, tables: list[Table], seed: int = 14, pause: float = 0.002):
        super().__init__(daemon=True)
        self.port, self.tables, self.rnd, self.pause = port, tables, random.Random(seed), pause
        self.phase = "before"
        self.touched: dict[tuple[str, str], int] = {}
        self._halt = threading.Event()
        self.error: BaseException | None = None
        self.ops = self.same_key_updates = 0

    def _exists(self, cur, table: Table, key: tuple) -> bool:
        cur.execute(f"SELECT 1 FROM {table.name} WHERE {table.where()} LIMIT 1", key)
        return cur.fetchone() is not None

    def _insert(self, cur, table: Table, count: int = 1) -> int:
        rows = [table.row(self.rnd.randint(1, table.space), self.rnd) for _ in range(count)]
        if table.shape == "nokey":  # no constraint: the chunk key stays unique because this writer keeps it so
            rows = [r for r in rows if not self._exists(cur, table, tuple(r[c] for c in table.key))][:1]
            if not rows:
                return 0
        cols = list(rows[0])
        marks = ", ".join("(" + ", ".join(["%s"] * len(cols)) + ")" for _ in rows)
        return cur.execute(f"INSERT IGNORE INTO {table.name} ({', '.join(cols)}) VALUES {marks}",
                           [r[c] for r in rows for c in cols])

    def _change(self, cur, table: Table, op: str) -> None:
        """One statement of ``op`` on ``table``; counted in ``touched`` if it changed a row."""
        key = key_of(table.shape, self.rnd.randint(1, table.space))
        if op == "insert":
            changed = self._insert(cur, table, self.rnd.choice([1, 1, 3]))
        elif op == "update":
            new = values(self.rnd)
            sets = ", ".join(f"{c} = %s" for c in new)
            changed = cur.execute(f"UPDATE {table.name} SET {sets} WHERE {table.where()}", [*new.values(), *key])
        elif op == "update_many":
            changed = cur.execute(f"UPDATE {table.name} SET v = v + 1 WHERE v %% 17 = %s",
                                  (self.rnd.randint(0, 16),))
        elif op == "update_key":
            new = key_of(table.shape, self.rnd.randint(1, table.space))
            if table.shape.endswith("_ci") and self.rnd.random() < 0.5:  # the same key under the collation
                cur.execute(f"SELECT k FROM {table.name} WHERE k = %s", key)
                found = cur.fetchone()
                if not found:
                    return
                key, new = (found[0],), (variant(found[0]),)
                self.same_key_updates += 1  # e.g. 'é00012' -> 'É00012': a delete and an insert downstream
            elif table.shape == "nokey" and self._exists(cur, table, new):
                return
            sets = ", ".join(f"{c} = %s" for c in table.key)
            changed = cur.execute(f"UPDATE IGNORE {table.name} SET {sets} WHERE {table.where()}", [*new, *key])
        else:
            changed = cur.execute(f"DELETE FROM {table.name} WHERE {table.where()}", key)
        if changed:
            self.touched[(self.phase, table.name)] = self.touched.get((self.phase, table.name), 0) + 1

    def run(self) -> None:
        try:
            conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True,
                                   charset="utf8mb4")
            with conn.cursor() as cur:
                while not self._halt.is_set():
                    op = self.rnd.choice(["insert", "update", "update", "update_many", "update_key", "delete",
                                          "txn", "txn", "rollback"])
                    before = dict(self.touched)
                    try:
                        if op in ("txn", "rollback"):
                            cur.execute("BEGIN")
                            for table in self.rnd.sample(self.tables, 4):
                                self._change(cur, table, self.rnd.choice(["insert", "update", "update_key", "delete"]))
                            cur.execute("COMMIT" if op == "txn" else "ROLLBACK")
                            if op == "rollback":
                                self.touched = before
                        else:
                            self._change(cur, self.rnd.choice(self.tables), op)
                    except pymysql.err.IntegrityError:
                        cur.execute("ROLLBACK")
                        self.touched = before
                    self.ops += 1
                    if self.pause:
                        time.sleep(self.pause)
            conn.close()
        except BaseException as exc:  # surfaced by stop() / wait_touched()
            self.error = exc

    def wait_touched(self, phase: str, names: list[str], timeout: float = 120) -> None:
        """Block until every table in ``names`` had a committed change in ``phase``."""
        deadline = time.time() + timeout
        while any((phase, n) not in self.touched for n in names):
            if self.error:
                raise self.error
            assert time.time() < deadline, f"the writer did not change every table {phase} in {timeout} s"
            time.sleep(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(60)
        if self.error:
            raise self.error


@pytest.fixture(scope="module")
def shops(mariadb):
    """Two databases: 25 + 25 captured tables (int, composite and two collated-VARCHAR primary keys, one
    table without a key, 200-1,000 rows each) and one excluded scratch table without a key."""
    base = f"w{os.getpid()}"
    a, b = f"{base}_shopa", f"{base}_shopb"
    rnd = random.Random(5)
    tables: list[Table] = []
    shapes = ["int", "composite", "unicode_ci", "latin1_ci"]
    for d, db in enumerate((a, b)):
        mariadb.sql(f"CREATE DATABASE {db}")
        for i in range(25):
            shape = "nokey" if (d, i) == (1, 24) else shapes[i % len(shapes)]
            name = f"{db}.events" if shape == "nokey" else f"{db}.{shape}_{i:02d}"
            tables.append(Table(name, shape, 200 + (d * 25 + i) * 263 % 801))
    scratch = Table(f"{a}.tmp_scratch", "nokey", 100)
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", autocommit=True, charset="utf8mb4")
    with conn.cursor() as cur:
        for table in [*tables, scratch]:
            cur.execute(f"CREATE TABLE {table.name} {SHAPES[table.shape][0]}")
            rows = [table.row(n, rnd) for n in range(1, table.rows + 1)]
            cols = list(rows[0])
            cur.executemany(f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})",
                            [[r[c] for c in cols] for r in rows])
    conn.close()
    return a, b, tables, scratch


def test_fifty_tables_of_two_databases_converge_under_a_writer(mariadb, spark, shops, tmp_path):
    a, b, tables, scratch = shops
    names = [t.name for t in tables]
    assert len(names) == 50 and {t.shape for t in tables} == set(SHAPES)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    writer = ManyTablesWriter(mariadb.port, [*tables, scratch])
    writer.start()
    started = time.time()
    try:
        writer.wait_touched("before", names)
        writer.phase = "during"
        code, out, err = dblog("plan", "--source", mariadb.uri(), "--tables", f"{a}.*,{b}.*", "--exclude",
                               f"{a}.tmp_*", "--chunk-key", f"{b}.events=c1,c2", "--state", state,
                               "--chunk-size", "250", "--batch-rows", "12000")
        assert code == 0, err
        plan = json.loads(out)
        assert sorted(plan["tables"]) == sorted(names)
        assert plan["tables"][f"{b}.events"]["key"] == ["c1", "c2"]
        batches = plan["batches"]
        assert 1 < len(batches) <= 4, [(x["batch"], x["rows"], len(x["tables"])) for x in batches]
        assert sum(info["chunks"] for info in plan["tables"].values()) > 2 * len(names)  # tables split too
        for batch in batches:
            snapshot_batch(state, batch["batch"], sink, executor=SparkExecutor(spark))
        build_offsets(state)
        writer.phase = "after"
        writer.wait_touched("after", names)
    finally:
        writer.stop()
    missed = [n for n in names if ("during", n) not in writer.touched]
    assert not missed, f"no change during the snapshot to {missed}"
    snapshot_s = time.time() - started
    started = time.time()
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", "--driver-catch-up-mb", "0")
    assert code == 0, err
    tail_s = time.time() - started
    problems = {}
    for table in tables:
        found = compare_rows(DeltaTable(f"{sink}/{table.name}/current").to_pyarrow_table(), mariadb.port, table.name,
                             table.key)
        if found:
            problems[table.name] = found[:3]
        assert_each_change_once(sink, table.name)
    assert not problems, problems
    assert not Path(sink, scratch.name).exists()  # excluded: never written
    print(f"writer: {writer.ops} statements ({writer.same_key_updates} key updates to the same key under the "
          f"collation); plan+snapshot+report {snapshot_s:.0f} s; tail {sum(json.loads(out)['rows'].values())} "
          f"rows in {tail_s:.0f} s")


def test_bad_patterns_and_a_table_without_a_key_are_one_line_and_write_nothing(mariadb, shops, tmp_path):
    a, b, _, _ = shops
    cases = [
        (["--tables", f"{a}.*,{b}.*", "--exclude", f"{a}.tmp_*"],
         f"1 table(s) have no primary key or NOT NULL unique key: {b}.events"),
        (["--tables", f"{a}.*,{b}.*"],
         f"2 table(s) have no primary key or NOT NULL unique key: {a}.tmp_scratch, {b}.events"),
        (["--tables", f"{a}_nothing.*,{b}.nope_*"], f"no table on 127.0.0.1:{mariadb.port} matches --tables"),
        (["--tables", f"{a}.[ab"], f"bad --tables pattern '{a}.[ab'"),
        (["--tables", f"{a}.*,"], "bad --tables pattern"),
    ]
    for i, (args, message) in enumerate(cases):
        state = tmp_path / f"state{i}"
        code, out, err = dblog("plan", "--source", mariadb.uri(), *args, "--state", str(state))
        assert code != 0 and message in one_error_line(err), (args, err)
        assert out == "" and not state.exists(), args
