"""A DBA kills dblog's connections while a continuous tail runs under writes (``KILL``, pt-kill, a short
``wait_timeout``; ``pg_terminate_backend``, ``idle_session_timeout``): every control, chunk, binlog and slot
connection, over and over. The tail connects again and goes on; afterwards the lake equals the source column by
column and holds each change once. Before: the first control connection killed ended the tail with
``OperationalError: (2013, 'Lost connection to MySQL server during query')`` (PostgreSQL: "server closed the
connection unexpectedly"). Both run the tail's streaming query in this process, on the tests' shared Spark."""
from __future__ import annotations

import random
import threading
import time

import pytest

from airflow_provider_dblog.spark.executor import SparkExecutor
from airflow_provider_dblog.steps.tail import run_tail
from tests.support.cli import dblog
from tests.support.lakecheck import assert_each_change_once, assert_replay_equals_current, compare_rows
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

KILL_SECONDS = 12


def _tail_while_killing(state, sink, spark, kill) -> tuple[int, dict]:
    """A continuous tail in a thread for ``KILL_SECONDS`` while ``kill()`` (returning how many it killed) runs every
    0.3 s; then the tail is stopped. (connections killed, the tail's summary)"""
    stop, result, failed = threading.Event(), {}, []

    def tail():
        try:
            result.update(run_tail(state, sink, available_now=False, trigger_seconds=0.5,
                                   executor=SparkExecutor(spark), stop_event=stop))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    thread = threading.Thread(target=tail, daemon=True)
    thread.start()
    killed, deadline = 0, time.time() + KILL_SECONDS
    try:
        time.sleep(2)  # the query has started
        while time.time() < deadline and thread.is_alive():
            killed += kill()
            time.sleep(0.3)
        assert thread.is_alive(), f"the tail stopped: {failed[0]!r}" if failed else "the tail stopped"
    finally:
        stop.set()
        thread.join(120)
    assert not failed, repr(failed[0])
    return killed, result


def test_a_mysql_tail_goes_on_when_its_connections_are_killed(mariadb, db, spark, source_uri, tmp_path, monkeypatch):
    from tests.support.workload import Writer

    table = f"{db}.t"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, note VARCHAR(40) CHARACTER SET utf8mb4)",
                f"INSERT INTO {table} SELECT seq, seq, 'x' FROM seq_1_to_3000", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", source_uri, "--table", table, "--state", state, "--sink", sink,
                         "--chunk-size", "500")
    assert code == 0, err[-2000:]
    monkeypatch.setenv("DBLOG_SOURCE_PASSWORD", "s3cret-Pa55")
    writer = Writer(mariadb.port, table, 4000, lambda key, rnd: {"id": key, "v": rnd.randint(0, 99), "note": "w"},
                    lambda rnd: {"v": rnd.randint(0, 99), "note": rnd.choice(["u", "é 😀", ""])}, seed=3, pause=0.005)

    def kill() -> int:  # every connection of dblog's login: control, chunk reads, the binlog dump
        done = 0
        for (thread_id,) in mariadb.sql("SELECT id FROM information_schema.processlist WHERE user = 'dblog'"):
            try:
                mariadb.sql(f"KILL {thread_id}")
                done += 1
            except Exception:  # noqa: BLE001 - it ended by itself meanwhile
                pass
        return done

    writer.start()
    try:
        killed, _ = _tail_while_killing(state, sink, spark, kill)
    finally:
        writer.stop()
    assert killed >= 5, f"only {killed} connections killed: the test proved nothing"
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    from deltalake import DeltaTable

    assert compare_rows(DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(), mariadb.port, table) == []
    assert_each_change_once(sink, table)
    assert_replay_equals_current(sink, table)


def test_a_postgres_tail_goes_on_when_its_backends_are_terminated(postgres, pg_db, spark, tmp_path):
    import psycopg2

    pg, table = postgres, "public.t"
    pg.sql("CREATE TABLE public.t (id int PRIMARY KEY, v int, note text)",
           "INSERT INTO public.t SELECT g, g, 'x' FROM generate_series(1, 3000) g", db=pg_db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", pg.uri(pg_db), "--table", table, "--state", state, "--sink", sink,
                         "--chunk-size", "500")
    assert code == 0, err[-2000:]
    halt, writes = threading.Event(), [0]

    def write():
        rnd, conn = random.Random(4), psycopg2.connect(pg.uri(pg_db))
        conn.autocommit = True
        with conn.cursor() as cur:
            while not halt.is_set():
                key = rnd.randint(1, 4000)
                if rnd.random() < 0.2:
                    cur.execute("DELETE FROM public.t WHERE id = %s", (key,))
                else:
                    cur.execute("INSERT INTO public.t VALUES (%s, %s, 'w') ON CONFLICT (id) DO UPDATE SET v = "
                                "t.v + 1, note = %s", (key, rnd.randint(0, 99), rnd.choice(["u", "é 😀", ""])))
                writes[0] += 1
                time.sleep(0.003)
        conn.close()

    def kill() -> int:  # every backend dblog opened: control, chunk reads, the slot's reads
        return pg.sql("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = 'dblog' AND pid <> pg_backend_pid()) AS k")[0][0]

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        killed, _ = _tail_while_killing(state, sink, spark, kill)
    finally:
        halt.set()
        writer.join(30)
    assert killed >= 5 and writes[0] > 100, f"{killed} backends terminated, {writes[0]} writes: proved nothing"
    run_tail(state, sink, available_now=True, executor=SparkExecutor(spark))
    from deltalake import DeltaTable

    lake = {r["id"]: (r["v"], r["note"]) for r in
            DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(columns=["id", "v", "note"]).to_pylist()}
    source = {i: (v, n) for i, v, n in pg.sql("SELECT id, v, note FROM public.t", db=pg_db)}
    assert lake == source, sorted(set(lake.items()) ^ set(source.items()))[:6]
    assert_each_change_once(sink, table)
    assert_replay_equals_current(sink, table)
