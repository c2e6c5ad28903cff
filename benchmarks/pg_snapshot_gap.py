"""How often a PostgreSQL chunk's snapshot shows a transaction that committed after the chunk's LW.

A chunk's rows are stamped with the WAL location read before its REPEATABLE READ snapshot (the LW); the snapshot
may also show transactions that committed in the round trips between the two (docs/postgres.md, "What is not done
yet": an unchanged TOAST value of such a transaction can take a later value). This script reads the LW the way
``PostgresClient.begin_snapshot`` does (control connection, then ``SET TRANSACTION`` and the first statement on the
snapshot connection) under a paced writer in a private cluster, with ``pg_current_snapshot()`` beside the LW and as
the snapshot's first statement, and counts the reads whose snapshot shows a transaction the LW's does not.

    .venv/bin/python benchmarks/pg_snapshot_gap.py --rate 1000 --reads 300
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import common  # noqa: F401  (puts the repository on sys.path)
import psycopg2

from tests.support.local_postgres import LocalPostgres


def parse(text: str) -> tuple[int, int, set[int]]:
    xmin, xmax, xip = text.split(":")
    return int(xmin), int(xmax), {int(x) for x in xip.split(",") if x}


def visible(snapshot: tuple[int, int, set[int]], xid: int) -> bool:
    return xid < snapshot[1] and xid not in snapshot[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=1000, help="single-row UPDATE transactions per second")
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    with LocalPostgres(Path(tempfile.mkdtemp()) / "pg") as pg:
        pg.sql("CREATE TABLE t (id int PRIMARY KEY, v int)", "INSERT INTO t SELECT g, 0 FROM generate_series(1, 10000) g")
        halt, count = threading.Event(), [0]

        def writer() -> None:
            conn = psycopg2.connect(pg.dsn())
            conn.autocommit = True
            cur, start, i = conn.cursor(), time.time(), 0
            while not halt.is_set():
                cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (i % 10000 + 1,))
                i += 1
                count[0] += 1
                ahead = i / args.rate - (time.time() - start)
                if ahead > 0:
                    time.sleep(ahead)

        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(1)
        control = psycopg2.connect(pg.dsn())
        control.autocommit = True
        snapshot = psycopg2.connect(pg.dsn())
        extra, started, before = [], time.time(), count[0]
        for _ in range(args.reads):
            with control.cursor() as cur:
                cur.execute("SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()")
                at_lw = parse(cur.fetchone()[0])
            snapshot.rollback()
            with snapshot.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute("SELECT pg_current_snapshot()::text")
                seen = parse(cur.fetchone()[0])
            candidates = at_lw[2] | set(range(at_lw[1], seen[1]))
            extra.append(sum(1 for x in candidates if visible(seen, x) and not visible(at_lw, x)))
            snapshot.rollback()
            time.sleep(0.01)
        rate = (count[0] - before) / (time.time() - started)
        halt.set()
        thread.join()
    shown = sum(1 for e in extra if e)
    print(f"writer {rate:.0f} tx/s; {args.reads} reads; the snapshot showed a transaction after the LW in {shown} "
          f"({100 * shown / args.reads:.0f} %); {sum(extra) / len(extra):.2f} such transactions per read, at most "
          f"{max(extra)}")


if __name__ == "__main__":
    main()
