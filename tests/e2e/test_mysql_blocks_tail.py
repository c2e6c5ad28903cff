"""The MySQL tail through its column-by-column decoder (``source/mysql/block_decoder.py``), end to end as a user runs
it: a table of every type the lake keeps (DECIMAL(20,6), unsigned BIGINT, JSON, BLOB, ENUM, TIMESTAMP(3), NULLs),
changed by inserts, updates, deletes, key changes and an ADD COLUMN in many transactions, tailed by ``dblog tail
--available-now`` in the driver and then through the Spark streaming query. The lake must equal the source column
by column, hold each change once and replay to ``current``, and the logs must show the changes went through
blocks and the streaming query's range was cut into pieces read by separate tasks (the test would otherwise pass
on the per-row path and interleaved shares alone)."""
from __future__ import annotations

import random
import re

import pymysql
from deltalake import DeltaTable

from tests.support.cli import dblog
from tests.support.lakecheck import (
    SEED_SQL, TYPES_DDL, assert_each_change_once, assert_replay_equals_current, compare_rows, typed_mutation,
    typed_row,
)

ROWS = 3_000


def _changes(port: int, table: str, rnd: random.Random, transactions: int, add_column: str | None = None) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=False, charset="utf8mb4",
                           init_command="SET time_zone = '+00:00'")
    with conn.cursor() as cur:
        cur.execute(f"SELECT id FROM {table}")
        keys = [r[0] for r in cur.fetchall()]
        next_key = max(keys) + 1
        for n in range(transactions):
            for _ in range(rnd.randint(1, 12)):
                what = rnd.random()
                if what < 0.55 and keys:  # an update of several rows: a multi-row event
                    chosen = rnd.sample(keys, min(len(keys), rnd.randint(1, 30)))
                    change = typed_mutation(rnd)
                    sets = ", ".join(f"{c} = %s" for c in change)
                    cur.execute(f"UPDATE {table} SET {sets} WHERE id IN ({', '.join(map(str, chosen))})",
                                list(change.values()))
                elif what < 0.8:
                    rows = [typed_row(next_key + i, rnd) for i in range(rnd.randint(1, 20))]
                    next_key += len(rows)
                    columns = list(rows[0])
                    cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                                    [list(r.values()) for r in rows])
                    keys += [r["id"] for r in rows]
                elif what < 0.9 and keys:
                    chosen = rnd.sample(keys, min(len(keys), rnd.randint(1, 10)))
                    cur.execute(f"DELETE FROM {table} WHERE id IN ({', '.join(map(str, chosen))})")
                    keys = [k for k in keys if k not in set(chosen)]
                elif keys:  # a key change: a delete and an insert in the lake, decoded one by one
                    old = rnd.choice(keys)
                    cur.execute(f"UPDATE {table} SET id = %s WHERE id = %s", (next_key, old))
                    keys = [next_key if k == old else k for k in keys]
                    next_key += 1
            conn.commit()
            if add_column and n == transactions // 2:
                cur.execute(f"ALTER TABLE {table} {add_column}")
    conn.close()


def _lake_equals_source(sink: str, port: int, table: str) -> None:
    current = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table()
    assert not compare_rows(current, port, table)
    assert_each_change_once(sink, table)
    assert_replay_equals_current(sink, table)


def test_blocks_tail_in_the_driver_and_on_spark_equals_the_source(mariadb, db, source_uri, tmp_path):
    table = f"{db}.typed"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL} DEFAULT CHARSET=utf8mb4", f"INSERT INTO {table} {SEED_SQL.format(n=ROWS)}",
                db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", source_uri, "--table", table, "--state", state, "--sink", sink,
                         "--chunk-size", "700")
    assert code == 0, err
    rnd = random.Random(7)

    _changes(mariadb.port, table, rnd, 150, add_column="ADD COLUMN extra INT DEFAULT 5")
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    caught = re.search(r"caught up in the driver: (\d+) rows \((\d+) decoded column by column\)", err)
    assert caught, err[-3000:]
    rows, in_blocks = int(caught.group(1)), int(caught.group(2))
    assert rows > 2_000 and in_blocks > rows // 2, caught.group(0)
    _lake_equals_source(sink, mariadb.port, table)

    _changes(mariadb.port, table, rnd, 150)
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", "--driver-catch-up-mb", "0")
    assert code == 0, err
    assert "caught up in the driver" not in err  # the streaming query read it
    assert re.search(r"micro-batch \d+ to \S+: .* read [0-9.]+s in [2-9] pieces", err), err[-3000:]  # a piece a task
    _lake_equals_source(sink, mariadb.port, table)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table)
    assert code == 0, out + err
