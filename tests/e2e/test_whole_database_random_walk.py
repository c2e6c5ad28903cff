"""The whole-database twin of ``test_randomised_convergence``: a seeded random walk over a capture of two
MariaDB databases by pattern (``A.*,B.*``), whose tables have an INT key, a composite key, a VARCHAR key
under a case- and accent-insensitive collation, and a NOT NULL unique key with no primary key. The walk
mixes multi-table transactions (inserts, updates, deletes, key changes, committed or rolled back), DDL on
random tables, the table life events the capture claims to follow (a table created under the pattern, a
RENAME onto another captured name, out of the pattern and back, a gh-ost style swap, DROP and CREATE again
of the name, with the same key or another one, TRUNCATE), available-now tails, tails SIGKILLed at random
moments, and re-reads of random chunks. A re-read of a table whose key changed before a tail planned it
again is refused in one line that says to run the tail (docs/schema-changes.md): the walk does that.

At the end, after a final tail, every table the source has is in the capture and equal to the source by the
checksum verify, the row compare and the changelog's replay; a captured table the source no longer has
keeps the rows it had when it was dropped or renamed away (docs/schema-changes.md: "the lake keeps its
rows and stops following the table"), in the columns it had if they changed after the last tail (the
documented limit: a gone table's statements are not followed, TRUNCATE aside); of a name whose last table came
and went between two tails, which the docs leave open, the lake holds the rows of one of its tables. The seed is in every assertion message: rerun with
``DBLOG_RANDOM_SEED=N`` to replay the same walk."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field

import pymysql
import pytest
from deltalake import DeltaTable

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.steps.resnapshot import resnapshot
from airflow_provider_dblog.spark.executor import SparkExecutor
from airflow_provider_dblog.store.state import StateDir
from tests.support.cli import DBLOG, dblog
from tests.support.lakecheck import assert_replay_equals_current, compare_with, source_rows
from tests.support.walks import follow_added_columns

SEED = int(os.environ.get("DBLOG_RANDOM_SEED", "2026"))
STEPS = 120
ROWS = 240
MAX_TABLES = 7
# shape -> (columns, row identity); "unique" has no primary key: its NOT NULL unique key is the capture's
SHAPES = {
    "int": ("(id INT PRIMARY KEY, v INT, note VARCHAR(40))", ("id",)),
    "composite": ("(a INT, b VARCHAR(4) CHARACTER SET ascii, v INT, note VARCHAR(40), PRIMARY KEY (a, b))", ("a", "b")),
    "ci": ("(k VARCHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci PRIMARY KEY, v INT, note VARCHAR(40))",
           ("k",)),
    "unique": ("(u INT NOT NULL, v INT, note VARCHAR(40), UNIQUE KEY (u))", ("u",)),
}
PREFIXES = ["a", "B", "é", "Z", "ö", "Ça", "ø", "É", "m", "Å"]  # their case and accents differ in the collation
DDL = [
    "ADD COLUMN a{n} INT NOT NULL DEFAULT {k}",
    "ADD COLUMN t{n} VARCHAR(12) DEFAULT 'x{k}'",
    "ADD COLUMN z{n} VARCHAR(8) NOT NULL",
    "ADD COLUMN g{n} INT AS (v * 2) STORED",
    "DROP COLUMN {added}",
    "RENAME COLUMN {added} TO r{n}",
    "MODIFY COLUMN v BIGINT",
    "MODIFY COLUMN note VARCHAR(80)",
]
KEY_CHANGED = "its planned chunks no longer apply; run the tail"


def key_of(shape: str, n: int) -> tuple:
    if shape == "composite":
        return (n // 3, f"x{n % 3}")
    if shape == "ci":
        return (f"{PREFIXES[n % len(PREFIXES)]}{n:05d}",)
    return (n,)


@dataclass
class Table:
    shape: str
    added: list[str] = field(default_factory=list)
    altered: bool = False  # its columns changed since the last tail that ended

    @property
    def key(self) -> tuple[str, ...]:
        return SHAPES[self.shape][1]

    def where(self) -> str:
        return " AND ".join(f"{c} = %s" for c in self.key)


class Walk:
    """The source side of the walk: what it does, and the tables it holds (``tables``: under the pattern;
    ``parked``: renamed out of it, by their name in the pattern; ``gone``: captured names the source no longer
    has, with their rows at that moment)."""

    def __init__(self, port: int, a: str, b: str, parked: str, rnd: random.Random):
        self.port, self.dbs, self.parked_db, self.rnd = port, (a, b), parked, rnd
        self.conn = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True, charset="utf8mb4",
                                    sql_mode="")  # not strict: a NOT NULL column without DEFAULT takes its implicit one
        self.tables: dict[str, Table] = {}
        self.parked: dict[str, tuple[str, Table]] = {}
        self.gone: dict[str, list[tuple[tuple[str, ...], dict, bool, bool]]] = {}  # key, rows, seen, altered
        self.seen: set[str] = set()  # names whose table now a tail that ended has read or followed
        self.n = 0
        self.log: list[str] = []

    def sql(self, statement: str, params=None) -> int:
        with self.conn.cursor() as cur:
            return cur.execute(statement, params)

    def next_n(self) -> int:
        self.n += 1
        return self.n

    def create(self, name: str, shape: str, rows: int) -> None:
        self.sql(f"CREATE TABLE {name} {SHAPES[shape][0]}")
        table = Table(shape)
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {name} ({', '.join(table.key)}, v, note) VALUES "
                            f"({', '.join(['%s'] * (len(table.key) + 2))})",
                            [(*key_of(shape, n), n, f"n{n}") for n in range(1, rows + 1)])
        self.appear(name, table)

    def appear(self, name: str, table: Table) -> None:
        self.tables[name] = table
        self.seen.discard(name)

    def vanish(self, name: str) -> Table:
        """``name`` is about to leave the pattern: its rows now are what the lake keeps, if a tail saw it."""
        table = self.tables.pop(name)
        self.gone.setdefault(name, []).append((table.key, source_rows(self.port, name, key=table.key),
                                               name in self.seen, table.altered))
        return table

    def recreatable(self) -> list[str]:
        """Gone names free to create again (not the name a parked table goes back to)."""
        return sorted(set(self.gone) - set(self.tables) - {origin for origin, _ in self.parked.values()})

    def free_name(self, db: str | None = None) -> str:
        return f"{db or self.rnd.choice(self.dbs)}.c{self.next_n()}"

    # DML

    def change(self, cur, name: str, table: Table) -> None:
        rnd = self.rnd
        key = key_of(table.shape, rnd.randint(1, ROWS + 80))
        op = rnd.choice(["insert", "update", "update", "delete", "update_key", "range"])
        if op == "insert":
            cur.execute(f"INSERT IGNORE INTO {name} ({', '.join(table.key)}, v, note) VALUES "
                        f"({', '.join(['%s'] * (len(key) + 2))})", (*key, rnd.randint(-9, 9), f"i{rnd.randint(0, 999)}"))
        elif op == "update":
            cur.execute(f"UPDATE {name} SET v = v + %s, note = %s WHERE {table.where()}",
                        (rnd.randint(1, 5), f"u{rnd.randint(0, 999)}", *key))
        elif op == "delete":
            cur.execute(f"DELETE FROM {name} WHERE {table.where()}", key)
        elif op == "update_key":
            sets = ", ".join(f"{c} = %s" for c in table.key)
            if table.shape == "ci" and rnd.random() < 0.5:  # the same key under the collation, other bytes
                cur.execute(f"SELECT k FROM {name} WHERE k = %s", key)
                found = cur.fetchone()
                if found:
                    cur.execute(f"UPDATE {name} SET k = %s WHERE k = %s", (found[0].swapcase(), found[0]))
                return
            new = key_of(table.shape, rnd.randint(1, ROWS + 80))
            cur.execute(f"UPDATE IGNORE {name} SET {sets} WHERE {table.where()}", (*new, *key))
        else:
            cur.execute(f"UPDATE {name} SET v = v - 1 WHERE v %% 13 = %s", (rnd.randint(0, 12),))

    def dml(self) -> None:
        """One transaction over several tables (parked ones too: the capture must not see those)."""
        rnd = self.rnd
        every = [*self.tables.items(), *((p, t) for p, (_, t) in self.parked.items())]
        chosen = rnd.sample(every, min(len(every), rnd.randint(2, 4)))
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(rnd.randint(2, 10)):
                self.change(cur, *rnd.choice(chosen))
            cur.execute("ROLLBACK" if rnd.random() < 0.1 else "COMMIT")

    # DDL and TRUNCATE

    def ddl(self) -> None:
        rnd = self.rnd
        name = rnd.choice(sorted(self.tables))
        table = self.tables[name]
        clause = rnd.choice([d for d in DDL if "{added}" not in d or table.added])
        n = self.next_n()
        added = rnd.choice(table.added) if table.added else ""
        text = clause.format(n=n, k=rnd.randint(0, 99), added=added)
        self.sql(f"ALTER TABLE {name} {text}")
        table.altered = True
        follow_added_columns(table.added, clause, text, added, n)
        self.log.append(f"ALTER TABLE {name} {text}")

    def truncate(self) -> None:
        name = self.rnd.choice(sorted(self.tables))
        table = self.tables[name]
        self.sql(f"TRUNCATE TABLE {name}")
        with self.conn.cursor() as cur:
            for n in (1, ROWS):
                cur.execute(f"INSERT INTO {name} ({', '.join(table.key)}, v, note) VALUES "
                            f"({', '.join(['%s'] * (len(table.key) + 2))})", (*key_of(table.shape, n), n, "again"))
        self.log.append(f"TRUNCATE {name}")

    # the tables' lives

    def life(self) -> str:
        """One life event; returns its kind."""
        rnd = self.rnd
        kinds = []
        if len(self.tables) < MAX_TABLES:
            kinds += ["create", "recreate"] if self.recreatable() else ["create"]
        if len(self.tables) > 3:
            kinds += ["rename_in", "rename_out", "drop"]
        kinds += ["swap", "drop_create"]
        if self.parked and any(origin not in self.tables for origin, _ in self.parked.values()):
            kinds += ["rename_back", "rename_back"]
        kind = rnd.choice(kinds)
        name = rnd.choice(sorted(self.tables))
        if kind == "create":
            new = self.free_name()
            self.create(new, rnd.choice(sorted(SHAPES)), rnd.randint(60, ROWS))
            self.log.append(f"CREATE {new}")
        elif kind == "recreate":
            new = rnd.choice(self.recreatable())
            self.create(new, rnd.choice(sorted(SHAPES)), rnd.randint(60, ROWS))
            self.log.append(f"CREATE {new} again")
        elif kind == "rename_in":  # onto a new captured name, maybe in the other database
            new = self.free_name()
            table = self.vanish(name)
            self.sql(f"RENAME TABLE {name} TO {new}")
            self.appear(new, table)
            self.log.append(f"RENAME {name} TO {new}")
        elif kind == "rename_out":
            parked = f"{self.parked_db}.p{self.next_n()}"
            table = self.vanish(name)
            self.sql(f"RENAME TABLE {name} TO {parked}")
            self.parked[parked] = (name, table)
            self.log.append(f"RENAME {name} TO {parked}")
        elif kind == "rename_back":
            parked = rnd.choice(sorted(p for p, (origin, _) in self.parked.items() if origin not in self.tables))
            origin, table = self.parked.pop(parked)
            self.sql(f"RENAME TABLE {parked} TO {origin}")
            self.appear(origin, table)
            self.log.append(f"RENAME {parked} TO {origin} (back)")
        elif kind == "swap":  # gh-ost: a copy with one more column built out of the pattern, swapped in
            table = self.tables[name]
            ghost, old = f"{self.parked_db}.ghost{self.next_n()}", f"{self.parked_db}.old{self.n}"
            column = f"s{self.n}"
            self.sql(f"CREATE TABLE {ghost} LIKE {name}")
            self.sql(f"ALTER TABLE {ghost} ADD COLUMN {column} INT DEFAULT 7")
            self.sql(f"INSERT INTO {ghost} SELECT *, 7 FROM {name}")
            self.sql(f"RENAME TABLE {name} TO {old}, {ghost} TO {name}")
            table.added.append(column)
            self.seen.discard(name)  # another table under the name
            self.log.append(f"SWAP {name}")
        elif kind == "drop":
            self.vanish(name)
            self.sql(f"DROP TABLE {name}")
            self.log.append(f"DROP {name}")
        else:  # dropped and created again at once, maybe with another key
            self.vanish(name)
            self.sql(f"DROP TABLE {name}")
            shape = rnd.choice(sorted(SHAPES))
            self.create(name, shape, rnd.randint(60, ROWS))
            self.log.append(f"DROP {name}, CREATE {name} ({shape})")
        return kind


def tail_killed(state: str, sink: str, rnd: random.Random) -> None:
    """An available-now tail SIGKILLed with its whole process group (its Spark JVM too) at a random moment."""
    tail = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--available-now"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(rnd.uniform(0.3, 4.0))
    if tail.poll() is None:
        os.killpg(tail.pid, signal.SIGKILL)
    tail.wait()


@pytest.mark.slow
def test_a_random_walk_over_two_databases_converges(mariadb, db, spark, tmp_path):
    rnd = random.Random(SEED)
    a, b, parked = db, f"{db}_b", f"{db}_parked"
    mariadb.sql(f"CREATE DATABASE {b}", f"CREATE DATABASE {parked}")
    walk = Walk(mariadb.port, a, b, parked, rnd)
    for name, shape in [(f"{a}.ints", "int"), (f"{a}.pairs", "composite"), (f"{a}.names", "ci"),
                        (f"{b}.uniques", "unique"), (f"{b}.more", "int")]:
        walk.create(name, shape, ROWS)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    pattern = f"{a}.*,{b}.*"
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", pattern, "--state", state, "--sink", sink,
                         "--chunk-size", "60")
    assert code == 0, f"seed {SEED}: {err[-3000:]}"
    executor = SparkExecutor(spark)
    counts: dict[str, int] = {}
    started = time.time()
    for step in range(STEPS):
        action = rnd.choices(["dml", "ddl", "truncate", "life", "reread", "tail", "kill"],
                             [40, 10, 4, 12, 8, 10, 9])[0]
        if action == "life":
            action = walk.life()
        elif action == "truncate":
            walk.truncate()
        elif action == "dml":
            walk.dml()
        elif action == "ddl":
            walk.ddl()
        counts[action] = counts.get(action, 0) + 1
        context = f"seed {SEED}, step {step} ({action}); log: {walk.log[-12:]}"
        if action == "reread":  # the walk's choices never depend on what the killed tails did
            name, wanted = rnd.choice(sorted(walk.tables)), rnd.sample(range(5), rnd.randint(1, 3))
            planned = StateDir(state).tables()
            if name not in planned:  # created since the last tail: not captured yet
                action, wanted = "tail", []
                counts["reread_unplanned"] = counts.get("reread_unplanned", 0) + 1
            chosen = sorted({min(c, len(planned[name].chunks) - 1) for c in wanted})
            try:
                if chosen:
                    resnapshot(state, sink, name, chunk_ids=",".join(map(str, chosen)), executor=executor)
            except DblogError as exc:  # documented: the table was planned with another key; the tail plans it
                assert KEY_CHANGED in str(exc), f"{context}: {exc}"
                counts["reread_refused"] = counts.get("reread_refused", 0) + 1
                action = "tail"
        if action == "tail":
            code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
            assert code == 0, f"{context}: {err[-3000:]}"
            walk.seen = set(walk.tables)
            for table in walk.tables.values():
                table.altered = False
        elif action == "kill":
            tail_killed(state, sink, rnd)
    walked = time.time() - started
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    context = f"seed {SEED}, counts {counts}, log {walk.log}"
    assert code == 0, f"{context}, final tail: {err[-3000:]}"
    planned = StateDir(state).tables()
    existing = sorted(walk.tables)
    assert not set(existing) - set(planned), f"{context}: not captured: {set(existing) - set(planned)}"
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", ",".join(existing))
    assert code == 0 and json.loads(out)["drifted"] == [], f"{context}: {out[-2000:]} {err[-2000:]}"
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", ",".join(existing), "--rows")
    assert code == 0 and json.loads(out)["equal"], f"{context}: {out[-2000:]} {err[-2000:]}"
    for name in existing:
        try:
            assert_replay_equals_current(sink, name, walk.tables[name].key)
        except AssertionError as exc:
            raise AssertionError(f"{context}: {name}: {exc}") from None
    kept = 0
    for name, lives in sorted(walk.gone.items()):
        if name in walk.tables or name not in planned:  # back at the source, or gone before a tail saw it
            continue
        lake = DeltaTable(f"{sink}/{name}/current").to_pyarrow_table()
        key, rows, seen, altered = lives[-1]
        if seen and altered:  # columns changed, then gone before a tail: the lake keeps the columns it had
            columns = [c for c in lake.column_names if not c.startswith("_") and c in next(iter(rows.values()), {})]
            problems = compare_with(lake.select(columns), {k: {c: r[c] for c in columns} for k, r in rows.items()},
                                    key)
        elif seen:  # the lake followed its last table up to its drop or rename: it keeps those rows
            problems = compare_with(lake, rows, key)
        else:  # its last table came and went between two tails that ended: the rows of one of its tables
            candidates = [compare_with(lake.select([*k, "v", "note"]), {i: {c: r[c] for c in (*k, "v", "note")}
                                                                        for i, r in rows.items()}, k)
                          for k, rows, _, _ in lives if set(k) <= set(lake.column_names)]
            problems = min(candidates, key=len) if candidates else ["its key is not the lake's"]
        assert not problems, f"{context}: {name}, gone from the source, does not keep its rows: {problems[:5]}"
        kept += 1
    print(f"seed {SEED}: {counts}; walk {walked:.0f} s; {len(existing)} tables at the end, {kept} gone kept")
    assert counts.get("kill", 0) >= 5 and counts.get("tail", 0) >= 5 and counts.get("ddl", 0) >= 5, counts
    assert counts.get("reread", 0) >= 4 and counts.get("dml", 0) >= 25, counts
    lives = [k for k in ("create", "recreate", "rename_in", "rename_out", "rename_back", "swap", "drop", "drop_create")
             if counts.get(k)]
    assert sum(counts[k] for k in lives) >= 8 and len(lives) >= 4 and counts.get("truncate", 0) >= 1, counts
