"""PostgreSQL streaming captures against a private PostgreSQL (issue 26, the stream): ``dblog run`` with the
default ``--startup initial`` plans a slot and a publication, snapshots the tables under a concurrent writer
(inserts, updates, deletes, key changes, TOASTed values), and the tail reads the slot into the lake: compared
with the source row by row and column by column, the changelog replaying to ``current``, each change once. The
slot is advanced only to what the lake holds (a tail killed before its commit loses and repeats nothing); a
TRUNCATE and an ADD COLUMN are followed; an unchanged TOASTed value under REPLICA IDENTITY DEFAULT takes the key's
previous value and is never written as NULL; ``dblog drop`` removes the slot and the publication; one-line refusals
for a replica identity that does not name the key and for a server without logical decoding."""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from decimal import Decimal

import psycopg2
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_dblog.core.positions import lsn_position, position_lsn
from airflow_provider_dblog.source.postgres.pgoutput import parse_lsn
from airflow_provider_dblog.source.postgres.values import libpq_options
from airflow_provider_dblog.store.state import StateDir
from tests.support.cli import dblog, one_error_line
from tests.support.lakecheck import assert_each_change_once, assert_replay_equals_current
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

PASSWORD = "pg-Stream-5ecret"
BIG = 5000  # characters of a value PostgreSQL TOASTs (compressed or out of line: > ~2 kB)


def uri(pg, db) -> str:
    return pg.uri(db, password=PASSWORD)


def connect(pg, db):
    conn = psycopg2.connect(pg.dsn(db), options=libpq_options())
    conn.autocommit = True
    return conn


def create_tables(pg, db) -> None:
    pg.sql(
        "CREATE TABLE public.orders (id bigint PRIMARY KEY, amount numeric(12,2), note text, at timestamptz, "
        "doc jsonb, raw bytea, flag boolean)",
        "INSERT INTO public.orders SELECT g, g * 1.25, 'note ' || g, timestamptz '2024-01-01 00:00:00+00' + "
        "g * interval '1.5 second', jsonb_build_object('g', g), decode(lpad(to_hex(g), 8, '0'), 'hex'), g % 2 = 0 "
        "FROM generate_series(1, 600) g",
        # TOASTed text under REPLICA IDENTITY DEFAULT: an UPDATE leaving it unchanged does not carry it
        "CREATE TABLE public.docs (id int PRIMARY KEY, body text, n int)",
        "ALTER TABLE public.docs ALTER COLUMN body SET STORAGE EXTERNAL",  # out of line, not compressed
        f"INSERT INTO public.docs SELECT g, repeat(md5(g::text), {BIG // 32}), g FROM generate_series(1, 50) g",
        "CREATE TABLE public.noise (id serial PRIMARY KEY, v text)",  # written to, not captured
        db=db,
    )


def write_some(pg, db, rnd: random.Random, rounds: int, first_id: int) -> int:
    """Random inserts, updates, deletes and key changes on the captured tables (and noise elsewhere)."""
    conn = connect(pg, db)
    next_id = first_id
    try:
        with conn.cursor() as cur:
            for _ in range(rounds):
                kind = rnd.random()
                oid = rnd.randint(1, next_id)
                if kind < 0.3:
                    cur.execute("INSERT INTO public.orders VALUES (%s, %s, %s, now(), %s, %s, %s) ON CONFLICT DO NOTHING",
                                (next_id, Decimal(rnd.randint(0, 10 ** 6)) / 100, f"new {next_id}",
                                 f'{{"k": {next_id}}}', bytes([rnd.randint(0, 255) for _ in range(4)]), True))
                    next_id += 1
                elif kind < 0.6:
                    cur.execute("UPDATE public.orders SET amount = amount + 1, note = note || '+', doc = doc || "
                                "'{\"u\": 1}' WHERE id = %s", (oid,))
                elif kind < 0.7:
                    cur.execute("DELETE FROM public.orders WHERE id = %s", (oid,))
                elif kind < 0.75:
                    cur.execute("UPDATE public.orders SET id = %s WHERE id = %s AND NOT EXISTS (SELECT 1 FROM "
                                "public.orders WHERE id = %s)", (next_id, oid, next_id))  # a key change
                    next_id += 1
                elif kind < 0.85:
                    cur.execute("UPDATE public.docs SET n = n + 1 WHERE id = %s", (rnd.randint(1, 50),))  # TOAST kept
                elif kind < 0.9:
                    cur.execute("UPDATE public.docs SET body = %s WHERE id = %s",
                                ("x" * rnd.randint(10, BIG), rnd.randint(1, 50)))
                else:
                    cur.execute("INSERT INTO public.noise (v) VALUES (repeat('z', 100))")
                if rnd.random() < 0.05:  # a multi-statement transaction now and then
                    cur.execute("BEGIN")
                    cur.execute("UPDATE public.orders SET flag = NOT flag WHERE id BETWEEN %s AND %s", (oid, oid + 5))
                    cur.execute("DELETE FROM public.docs WHERE id = %s", (rnd.randint(40, 50),))
                    cur.execute("COMMIT")
    finally:
        conn.close()
    return next_id


def typed(value):
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc)
    return value


def assert_lake_equals_source(pg, db, sink: str, table: str, columns: list[str]) -> int:
    """Row by row, column by column (jsonb as PostgreSQL prints it, the rest typed)."""
    conn = connect(pg, db)
    try:
        with conn.cursor() as cur:
            select = ", ".join(f"{c}::text" if c == "doc" else c for c in columns)
            cur.execute(f"SELECT {select} FROM {table} ORDER BY id")
            source = {r[0]: tuple(typed(v) for v in r) for r in cur.fetchall()}
    finally:
        conn.close()
    lake_rows = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(columns=columns).to_pylist()
    lake = {r["id"]: tuple(typed(r[c]) for c in columns) for r in lake_rows}
    missing, extra = sorted(set(source) - set(lake)), sorted(set(lake) - set(source))
    assert not missing and not extra, f"{table}: keys missing {missing[:10]}, extra {extra[:10]}"
    differ = [(k, source[k], lake[k]) for k in source if source[k] != lake[k]]
    assert not differ, f"{table}: {len(differ)} rows differ, e.g. {differ[:2]}"
    return len(source)


ORDERS = ["id", "amount", "note", "at", "doc", "raw", "flag"]
DOCS = ["id", "body", "n"]


def slot_of(state: str) -> tuple[str, str]:
    options = StateDir(state).options()
    return options["slot"], options["publication"]


@pytest.mark.slow  # a continuous and an available-now tail on Spark
def test_a_database_is_snapshotted_under_writes_and_tailed_from_its_slot(postgres, pg_db, tmp_path):
    pg, db = postgres, pg_db
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    create_tables(pg, db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    rnd = random.Random(26)
    stop, ids = threading.Event(), [700]

    def writer():
        while not stop.is_set():
            ids[0] = write_some(pg, db, rnd, 20, ids[0])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.orders,public.docs",
                               "--state", state, "--sink", sink, "--chunk-size", "100")
    finally:
        stop.set()
        thread.join()
    assert code == 0, err
    assert PASSWORD not in out + err
    slot, publication = slot_of(state)
    assert pg.sql(f"SELECT plugin FROM pg_replication_slots WHERE slot_name = '{slot}'", db=db) == [("pgoutput",)]

    ids[0] = write_some(pg, db, rnd, 300, ids[0])
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert assert_lake_equals_source(pg, db, sink, "public.orders", ORDERS) > 500
    assert assert_lake_equals_source(pg, db, sink, "public.docs", DOCS) > 0
    for table in ("public.orders", "public.docs"):
        assert_each_change_once(sink, table)
        assert_replay_equals_current(sink, table)

    # the slot holds nothing the lake has: advanced to the smallest position a table still needs
    confirmed = parse_lsn(pg.sql(f"SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = "
                                 f"'{slot}'", db=db)[0][0])
    positions = StateDir(state).tail_positions()
    assert confirmed == min(position_lsn(p[0]) for p in positions.values())

    # a continuous tail on Spark, writes while it runs, SIGKILLed: the slot moved only to what the lake
    # committed, so the next tail (Spark, available-now) loses and repeats nothing
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "dblog"), "tail", "--state", state,
                             "--sink", sink, "--continuous", "--trigger-seconds", "0.5"], stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "tail.log", "w"))
    try:
        before = StateDir(state).tail_positions()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            ids[0] = write_some(pg, db, rnd, 10, ids[0])
            time.sleep(0.5)
            if StateDir(state).tail_positions() != before:
                break
        assert StateDir(state).tail_positions() != before, (tmp_path / "tail.log").read_text()[-3000:]
        ids[0] = write_some(pg, db, rnd, 100, ids[0])
        time.sleep(rnd.uniform(0.0, 1.5))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    pg.sql("TRUNCATE public.docs", db=db)  # followed: the table is read again
    pg.sql("INSERT INTO public.docs VALUES (1, repeat('y', 3000), 1), (2, 'short', 2)", db=db)
    pg.sql("ALTER TABLE public.orders ADD COLUMN region text DEFAULT 'eu'", db=db)
    pg.sql("UPDATE public.orders SET region = 'us' WHERE id % 7 = 0", db=db)
    ids[0] = write_some(pg, db, rnd, 100, ids[0])
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", "--driver-catch-up-mb", "0")
    assert code == 0, err
    assert assert_lake_equals_source(pg, db, sink, "public.orders", ORDERS + ["region"]) > 500
    assert assert_lake_equals_source(pg, db, sink, "public.docs", DOCS) == 2
    for table in ("public.orders", "public.docs"):
        assert_each_change_once(sink, table)
        assert_replay_equals_current(sink, table)

    # checksum verify while a writer runs: no false alarm (the snapshot's exact position from the slot's commits)
    stop.clear()
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(1)
        code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "public.*")
        assert code == 0, err + out
        result = json.loads(out)
        assert result["equal"], result
    finally:
        stop.set()
        thread.join()
    # the table out of the publication for one UPDATE, behind the stream's back: the publication's rows are new, so
    # verify says the table is to be read again (before: it found the drift, and only --repair mended it), and the
    # tail reads it again
    pg.sql(f"ALTER PUBLICATION {publication} DROP TABLE public.docs",
           "UPDATE public.docs SET n = -1 WHERE id = 2",
           f"ALTER PUBLICATION {publication} ADD TABLE public.docs", db=db)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", "public.docs")
    line = one_error_line(err)
    assert code != 0 and f"publication {publication} was altered for public.docs" in line and "dblog tail" in line, err
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert assert_lake_equals_source(pg, db, sink, "public.docs", DOCS) == 2
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", "public.docs", "--repair")
    assert code == 0 and not json.loads(out)["repaired"], err + out
    for table in ("public.orders", "public.docs"):
        assert_lake_equals_source(pg, db, sink, table, ORDERS + ["region"] if table == "public.orders" else DOCS)
        assert_each_change_once(sink, table)
        assert_replay_equals_current(sink, table)

    # the operator's views work on the slot: health (WAL the slot holds), status, a row-by-row verify
    code, out, err = dblog("health", "--state", state)
    assert code == 0, err
    health = json.loads(out)["tables"]
    assert set(health) >= {"public.orders", "public.docs"}, health
    assert all(not info.get("binlog_purged") for info in health.values()), health
    code, out, err = dblog("status", "--state", state, "--sink", sink, "--json")
    assert code == 0, err
    assert "public.orders" in out
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "public.*", "--rows")
    assert code == 0, err + out

    # dblog drop: the slot and the publication are gone; a later tail says so in one line
    code, out, err = dblog("drop", "--state", state)
    assert code == 0, err
    assert not pg.sql(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{slot}'", db=db)
    assert not pg.sql(f"SELECT 1 FROM pg_publication WHERE pubname = '{publication}'", db=db)
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code != 0 and "is gone" in one_error_line(err), err


def captured_notes(pg, db, tmp_path) -> tuple[str, str]:
    """``public.notes`` (20 rows, ``body`` TOASTed out of line) captured with ``dblog run``: (state, sink)."""
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    pg.sql("CREATE TABLE public.notes (id int PRIMARY KEY, body text, n int)",
           "ALTER TABLE public.notes ALTER COLUMN body SET STORAGE EXTERNAL",
           f"INSERT INTO public.notes SELECT g, repeat(md5(g::text), {BIG // 32}), g FROM generate_series(1, 20) g",
           db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.notes", "--state", state, "--sink", sink)
    assert code == 0, err
    return state, sink


def test_an_unchanged_toasted_value_under_replica_identity_default_is_the_keys_previous_value(postgres, pg_db,
                                                                                              tmp_path):
    """REPLICA IDENTITY DEFAULT: an UPDATE leaving a TOASTed value alone sends neither it nor the old row. The lake
    takes it from the key's previous image: an earlier change in the same range, ``current``, or (when a re-read
    of the chunk at a later position is already in ``current``) the changelog. Never a NULL."""
    pg, db = postgres, pg_db
    state, sink = captured_notes(pg, db, tmp_path)
    pg.sql("UPDATE public.notes SET n = n + 100 WHERE id = 3",  # from current
           "UPDATE public.notes SET n = n + 100 WHERE id = 4", "UPDATE public.notes SET n = n + 1 WHERE id = 4",
           f"UPDATE public.notes SET body = repeat('z', {BIG}) WHERE id = 5",  # from the change before it
           "UPDATE public.notes SET n = 0 WHERE id = 5",
           "UPDATE public.notes SET id = 106 WHERE id = 6",  # a key change: from the old key
           f"INSERT INTO public.notes VALUES (30, repeat('q', {BIG}), 30)", "UPDATE public.notes SET n = 31 WHERE id = 30",
           "UPDATE public.notes SET body = NULL WHERE id = 8", "UPDATE public.notes SET n = 8 WHERE id = 8",  # a NULL
           db=db)
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert assert_lake_equals_source(pg, db, sink, "public.notes", DOCS) == 21
    changelog = DeltaTable(f"{sink}/public.notes/changelog").to_pyarrow_table().to_pylist()
    source = dict(pg.sql("SELECT id, body FROM public.notes", db=db))
    updates = [r for r in changelog if r["_op"] in ("u", "c")]
    assert {r["id"] for r in updates} == {3, 4, 5, 106, 30, 8}
    for row in updates:  # each change's image holds the value it had then (no later change of body here)
        if row["id"] != 5 or row["n"] == 0:
            assert row["body"] == source[row["id"]], (row["id"], row["n"], (row["body"] or "")[:20])

    # the chunk of id 7 is read again after its change and before the tail commits it: current's row is newer
    # than the change, so the value comes from the changelog's image before it
    pg.sql("UPDATE public.notes SET n = n + 100 WHERE id = 7", db=db)
    code, out, err = dblog("resnapshot", "--state", state, "--sink", sink, "--table", "public.notes")
    assert code == 0, err
    pg.sql("UPDATE public.notes SET n = n + 1 WHERE id = 7", db=db)
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert assert_lake_equals_source(pg, db, sink, "public.notes", DOCS) == 21
    sevens = [r for r in DeltaTable(f"{sink}/public.notes/changelog").to_pyarrow_table().to_pylist() if r["id"] == 7]
    assert sevens and all(r["body"] == source[7] for r in sevens), [(r["_op"], r["n"]) for r in sevens]
    assert_each_change_once(sink, "public.notes")
    assert_replay_equals_current(sink, "public.notes")
    code, out, err = dblog("drop", "--state", state)
    assert code == 0, err


@pytest.mark.parametrize("earlier", ["in the range", "in the lake"])
def test_an_unchanged_toasted_value_is_filled_whatever_the_columns_name(postgres, pg_db, tmp_path, earlier):
    """A value left unchanged comes from an earlier image of the key, in the range or in the lake, even when the
    TOASTed column's name starts with ``_`` (only dblog's own metadata columns are left out of an image) or the key
    is a float NaN (which equals no float, itself included: keys are matched by their bits). Before, either stopped
    the tail with a false "the lake holds no earlier image"."""
    pg, db = postgres, pg_db
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    pg.sql('CREATE TABLE public.floats (k float8 PRIMARY KEY, "_body" text, n int)',
           'ALTER TABLE public.floats ALTER COLUMN "_body" SET STORAGE EXTERNAL',
           f"INSERT INTO public.floats VALUES (1, repeat('a', {BIG}), 1)", db=db)
    inserts = [f"INSERT INTO public.floats VALUES ('{key}', repeat('b', {BIG}), 1)" for key in ["2.5", "NaN"]]
    updates = [f"UPDATE public.floats SET n = 2 WHERE k = '{key}'" for key in ["2.5", "NaN"]]
    if earlier == "in the lake":  # snapshotted: the update's unchanged value is the lake's
        pg.sql(*inserts, db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.floats", "--state", state,
                           "--sink", sink)
    assert code == 0, err
    pg.sql(*(updates if earlier == "in the lake" else [*inserts, *updates]), db=db)
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    changes = DeltaTable(f"{sink}/public.floats/changelog").to_pyarrow_table(columns=["k", "_body", "n", "_op"])
    first = "r" if earlier == "in the lake" else "c"
    assert sorted((repr(r["k"]), r["_op"], r["n"]) for r in changes.to_pylist() if r["_body"] == "b" * BIG) == [
        ("2.5", first, 1), ("2.5", "u", 2), ("nan", first, 1), ("nan", "u", 2)]
    current = DeltaTable(f"{sink}/public.floats/current").to_pyarrow_table(columns=["k", "_body", "n"]).to_pylist()
    source = pg.sql('SELECT k::text, "_body", n FROM public.floats', db=db)
    assert sorted((repr(r["k"]), r["_body"], r["n"]) for r in current) == sorted(
        (repr(float(k)), body, n) for k, body, n in source)


KILLED_AFTER_THE_CHANGELOG = """
import os, sys
from airflow_provider_dblog.cli.main import console
from airflow_provider_dblog.store.lake_tables import LakeTables
LakeTables.update_current = lambda *args, **kwargs: os._exit(9)  # a tail SIGKILLed after its changelog commit
sys.argv[0] = "dblog"
sys.exit(console())
"""


def test_an_unchanged_toasted_value_of_a_key_change_is_filled_when_the_range_is_read_again(postgres, pg_db,
                                                                                          tmp_path):
    """A tail killed between its changelog commit and ``current``'s update reads the range again: the key change's
    delete of the old key is then already in the changelog, at the row before the insert. The insert's unchanged
    TOASTed value is the old key's image before that delete. Before, the lake was asked for the old key's image
    before the *insert*, found the delete, and every later tail stopped in one line ("the lake holds no earlier
    image of the key"; the seeded random walk found it)."""
    pg, db = postgres, pg_db
    state, sink = captured_notes(pg, db, tmp_path)
    pg.sql("UPDATE public.notes SET id = 106, n = 0 WHERE id = 6", db=db)
    killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_THE_CHANGELOG, "tail", "--state", state, "--sink",
                             sink, "--available-now"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == 9, killed.stderr[-3000:]
    assert {r["id"] for r in DeltaTable(f"{sink}/public.notes/changelog").to_pyarrow_table().to_pylist()
            if r["_op"] == "c"} == {106}  # the changelog took the range, current did not
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err[-3000:]
    assert assert_lake_equals_source(pg, db, sink, "public.notes", DOCS) == 20
    assert_each_change_once(sink, "public.notes")
    assert_replay_equals_current(sink, "public.notes")
    code, out, err = dblog("drop", "--state", state)
    assert code == 0, err


def test_replica_identity_and_settings_are_checked_in_one_line_before_anything_is_written(postgres, pg_db, tmp_path):
    pg, db = postgres, pg_db
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    pg.sql("CREATE TABLE public.keyed_by_index (a int NOT NULL, b text, UNIQUE (a))", db=db)
    state, sink = tmp_path / "state", tmp_path / "lake"
    code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.keyed_by_index", "--state", str(state),
                           "--sink", str(sink))
    assert code != 0
    line = one_error_line(err)
    assert "the replica identity does not name the capture's key" in line and "REPLICA IDENTITY FULL" in line, line
    assert not state.exists() and not sink.exists()
    assert not pg.sql("SELECT 1 FROM pg_replication_slots", db=db)
    # with an identity naming the key, it streams
    pg.sql("ALTER TABLE public.keyed_by_index REPLICA IDENTITY USING INDEX keyed_by_index_a_key", db=db)
    code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.keyed_by_index", "--state", str(state),
                           "--sink", str(sink))
    assert code == 0, err
    # a table taken out of the publication: its changes would be missing from the stream; the tail says so
    publication = slot_of(str(state))[1]
    pg.sql(f"ALTER PUBLICATION {publication} DROP TABLE public.keyed_by_index", db=db)
    code, out, err = dblog("tail", "--state", str(state), "--sink", str(sink), "--available-now")
    assert code != 0
    line = one_error_line(err)
    assert f"no longer names public.keyed_by_index" in line and "ADD TABLE" in line and "resnapshot" in line, line
    pg.sql(f"ALTER PUBLICATION {publication} ADD TABLE public.keyed_by_index", db=db)
    assert dblog("tail", "--state", str(state), "--sink", str(sink), "--available-now")[0] == 0
    assert dblog("drop", "--state", str(state))[0] == 0


def test_a_plan_whose_slot_waits_for_a_prepared_transaction_says_so_and_stops_in_one_line(postgres, pg_db, tmp_path):
    """Creating a logical slot waits for the transactions running at that moment, prepared ones (two-phase
    commit) included, which may wait for a coordinator for days. Before: ``dblog plan`` hung without a word. Now
    it logs what it waits for, and after DBLOG_SLOT_WAIT_SECONDS stops in one line naming the prepared
    transaction and the fix; no slot is left behind. Once it is committed, the plan goes on and its snapshot
    holds the committed rows."""
    pg, db = postgres, pg_db
    pg.sql("CREATE TABLE public.t (id int PRIMARY KEY, v int)", "INSERT INTO public.t SELECT g, g FROM "
           "generate_series(1, 50) g", db=db)
    gid = f"{db}_2pc"
    pg.sql("BEGIN", "UPDATE public.t SET v = -1 WHERE id = 1", f"PREPARE TRANSACTION '{gid}'", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    run = ("run", "--source", uri(pg, db), "--tables", "public.t", "--state", state, "--sink", sink)
    try:
        code, _, err = dblog(*run, env={"DBLOG_SLOT_WAIT_SECONDS": "6"})
        assert code != 0
        line = one_error_line(err)
        assert f"prepared transaction '{gid}'" in line and "COMMIT PREPARED" in line, line
        assert "waits for the transactions running when it started to end" in err, err[-3000:]  # said while waiting
        assert not pg.sql("SELECT 1 FROM pg_replication_slots", db=db)
        assert not pg.sql("SELECT 1 FROM pg_publication", db=db)
        assert not pg.sql("SELECT 1 FROM pg_stat_activity WHERE query LIKE '%pg_create_logical_replication_slot%' "
                          "AND pid <> pg_backend_pid()")
    finally:
        pg.sql(f"COMMIT PREPARED '{gid}'", db=db)
    code, _, err = dblog(*run)
    assert code == 0, err[-3000:]
    current = {r["id"]: r["v"] for r in DeltaTable(f"{sink}/public.t/current").to_pyarrow_table().to_pylist()}
    assert current[1] == -1 and len(current) == 50
    assert dblog("drop", "--state", state)[0] == 0


def assert_blocks_are_the_events_rows(pg, db, state: str, tables: list[str], later=None) -> None:
    """The slot's changes of ``tables`` after their snapshots read twice (peeked: nothing consumed): one by one as
    events, and with blocks allowed (``read_changes``' ``blocks_after``): per table the same changelog rows in the
    same order, and blocks really were made for each (key changes still come as events). ``later``: a position
    from which blocks are allowed in a third read (the transactions before it one by one)."""
    from airflow_provider_dblog.core.change_block import ChangeBlock
    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.core.events import ChangeEvent
    from airflow_provider_dblog.core.schema_events import SchemaVersion
    from airflow_provider_dblog.source import open_dialect
    from airflow_provider_dblog.store.lake import block_rows, event_rows

    st = StateDir(state)
    metas = {t: st.table(t).meta for t in tables}
    offsets = st.offsets()
    dialect = open_dialect(SourceConfig.parse(uri(pg, db)), st.options())
    from airflow_provider_dblog.core.positions import lsn_position
    from airflow_provider_dblog.source.postgres.slot import slot_state

    # from the snapshots' HWs, or past them when ``dblog run`` released the slot further (WAL of no captured
    # change written after the last HW, such as the server's periodic running-transactions record)
    released = lsn_position(slot_state(dialect.client, dialect.slot).confirmed_flush)
    start = max(min(offsets[t].max_hw for t in tables).as_snapshot(), released)
    end = dialect.current_position()
    after = {t: offsets[t].max_hw.as_snapshot() for t in tables}

    def rows(blocks_after) -> tuple[dict[str, list], set]:
        parts, kinds, versions = {t: [] for t in tables}, set(), dict(metas)
        for item in dialect.read_changes(start, end, list(metas.values()), blocks_after=blocks_after):
            if isinstance(item, SchemaVersion):  # the rows after it are in its columns
                versions[item.meta.qualified] = item.meta
                continue
            schema = dialect.arrow_schema(versions[item.table])
            if isinstance(item, ChangeBlock):
                parts[item.table] += block_rows(item, [0] * len(item), schema).to_pylist()
                kinds.add((item.table, ChangeBlock))
            elif isinstance(item, ChangeEvent) and item.pos > after[item.table]:
                parts[item.table] += event_rows([item], [0], schema).to_pylist()
                kinds.add((item.table, ChangeEvent))
        return parts, kinds

    one_by_one, kinds = rows(None)
    assert {k for _, k in kinds} == {ChangeEvent}
    with_blocks, kinds = rows(after)
    assert {(t, ChangeBlock) for t in tables} <= kinds, kinds
    for t in tables:
        assert len(with_blocks[t]) == len(one_by_one[t]) > 100
        assert nan_free(with_blocks[t]) == nan_free(one_by_one[t]), t
    if later is not None:
        late, kinds = rows({t: later for t in tables})
        assert {(t, ChangeBlock) for t in tables} <= kinds and late == one_by_one
    dialect.close()


def nan_free(value):
    """``value`` with every float NaN as the string "NaN" (NaN != NaN would fail an equal comparison)."""
    if isinstance(value, dict):
        return {k: nan_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nan_free(v) for v in value]
    return "NaN" if isinstance(value, float) and value != value else value


def test_blocks_of_interleaved_tables_are_their_events_rows(postgres, pg_db, tmp_path):
    """Two tables changed in the same transactions, row by row in turn (a run per table keeps their blocks long),
    with key changes, deletes and NULLs among them: read with blocks, each table's rows are the events' rows."""
    pg, db = postgres, pg_db
    pg.sql("CREATE TABLE public.a (id bigint PRIMARY KEY, v text, n numeric(10,2))",
           "CREATE TABLE public.b (id int PRIMARY KEY, at timestamptz, ok bool)", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.a,public.b", "--state", state,
                           "--sink", sink)
    assert code == 0, err
    conn = connect(pg, db)
    conn.autocommit = False  # both tables in each transaction, row by row in turn
    try:
        with conn.cursor() as cur:
            for tx in range(4):
                for i in range(tx * 100, tx * 100 + 100):
                    cur.execute("INSERT INTO public.a VALUES (%s, %s, %s)", (i, None if i % 7 == 0 else f"v{i}", i / 4))
                    cur.execute("INSERT INTO public.b VALUES (%s, now(), %s)", (i, i % 2 == 0))
                    if i % 10 == 5:
                        cur.execute("UPDATE public.a SET v = v || '+' WHERE id = %s", (i - 3,))
                        cur.execute("DELETE FROM public.b WHERE id = %s", (i - 4,))
                cur.execute("UPDATE public.a SET id = id + 100000 WHERE id = %s", (tx * 100 + 1,))
                conn.commit()
            # a column added between two changes of the same transaction (a Relation message inside it)
            cur.execute("INSERT INTO public.a VALUES (1000, 'before', 1)")
            cur.execute("ALTER TABLE public.a ADD COLUMN extra int")
            cur.execute("INSERT INTO public.a VALUES (1001, 'after', 2, 7)")
            cur.execute("INSERT INTO public.b VALUES (1000, now(), true)")
            conn.commit()
            cur.execute("SELECT pg_current_wal_lsn()::text")
            later = lsn_position(parse_lsn(cur.fetchone()[0]))
            for i in range(2000, 2100):
                cur.execute("INSERT INTO public.a VALUES (%s, 'x', 1, %s)", (i, i))
                cur.execute("INSERT INTO public.b VALUES (%s, now(), false)", (i,))
            conn.commit()
    finally:
        conn.close()
    assert_blocks_are_the_events_rows(pg, db, state, ["public.a", "public.b"], later=later)
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert assert_lake_equals_source(pg, db, sink, "public.a", ["id", "v", "n", "extra"]) == 502
    assert assert_lake_equals_source(pg, db, sink, "public.b", ["id", "at", "ok"]) == 461
    for table in ("public.a", "public.b"):
        assert_replay_equals_current(sink, table)
    assert dblog("drop", "--state", state)[0] == 0


def test_every_type_keeps_its_meaning_through_the_stream(postgres, pg_db, tmp_path):
    """The snapshot test's table of every type, changed after the snapshot: inserts of its edge rows, updates of
    every column, deletes; the lake equals the source column by column (the stream's text values parse to what
    COPY's do)."""
    from tests.integration.test_postgres_snapshot import (INSERT, ROW_1, ROW_2, ROW_3, assert_equal_tables,
                                                          create_source, source_rows)

    pg, db = postgres, pg_db
    create_source(pg, db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.all_types", "--state", state,
                           "--sink", sink, "--chunk-size", "300")
    assert code == 0, err
    conn = connect(pg, db)
    try:
        with conn.cursor() as cur:
            for offset, row in ((5000, ROW_1), (6000, ROW_2), (7000, ROW_3)):
                cur.execute(INSERT, dict(row, id=row["id"] + offset))
            cur.execute("UPDATE public.all_types SET n = n + 1, f8 = f8 * 2, t = t || ' ✓', by = by || '\\xff'::bytea, "
                        "tstz = tstz + interval '1.000001 second', jb = jb || '{\"u\": true}', arr = arr || 7, "
                        "iv = iv * 2, e = 'ok' WHERE id % 5 = 0")
            cur.execute("UPDATE public.all_types SET id = id + 100000 WHERE id % 11 = 0")  # key changes
            cur.execute("DELETE FROM public.all_types WHERE id % 13 = 0")
            cur.execute("UPDATE public.all_types SET d = NULL, tm = '24:00:00', u = NULL WHERE id = 2")
    finally:
        conn.close()
    assert_blocks_are_the_events_rows(pg, db, state, ["public.all_types"])
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    lake = DeltaTable(f"{sink}/public.all_types/current").to_pyarrow_table()
    schema = lake.select([c for c in lake.column_names if not c.startswith("_")]).schema
    assert_equal_tables(lake, source_rows(pg, db, "public.all_types", schema, ["id"]), schema, ["id"],
                        "public.all_types")
    assert_replay_equals_current(sink, "public.all_types")
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", "public.all_types")
    assert code == 0, err  # the checksum compares reals and doubles to their last bit: the lake's are exact
    assert dblog("drop", "--state", state)[0] == 0


ROWS_PER_POSITION_SMALL = 40  # the constant, lowered in the tail's process, so that a test's transaction crosses it
SMALL_POSITIONS = ("import sys; from airflow_provider_dblog.source.postgres import stream; "
                   f"stream.ROWS_PER_POSITION = {ROWS_PER_POSITION_SMALL}; "
                   "from airflow_provider_dblog.cli.main import console; sys.argv[0] = 'dblog'; console()")


def test_a_transaction_of_more_changes_than_one_position_orders_reaches_the_lake_whole(postgres, pg_db, tmp_path,
                                                                                        monkeypatch):
    """A transaction past ``ROWS_PER_POSITION`` changes (50 million: a bulk UPDATE of a big table) has its later
    changes at the next WAL locations inside its commit record. With the constant lowered to 40 (in the test's
    reads and in the tail's process) one transaction of ≈700 changes of two tables (inserts, updates, key changes,
    deletes) crosses it 14 times: blocks and events give the same rows and positions, every
    position is unique, in order and between the boundaries around the commit, and the lake equals the source; a
    transaction past every location of its commit record stops the tail in one line with nothing committed."""
    from airflow_provider_dblog.source.postgres import stream

    pg, db = postgres, pg_db
    pg.sql("CREATE TABLE public.a (id bigint PRIMARY KEY, v text, n numeric(10,2))",
           "CREATE TABLE public.b (id int PRIMARY KEY, w text)", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.a,public.b", "--state", state,
                           "--sink", sink)
    assert code == 0, err
    conn = connect(pg, db)
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        before = parse_lsn(cur.fetchone()[0])
        cur.executemany("INSERT INTO public.a VALUES (%s, %s, %s)", [(i, f"v{i}", i / 4) for i in range(300)])
        for i in range(0, 300, 3):
            cur.execute("INSERT INTO public.b VALUES (%s, %s)", (i, f"w{i}"))
            cur.execute("UPDATE public.a SET v = v || '+' WHERE id = %s", (i + 1,))
        cur.execute("UPDATE public.a SET id = id + 100000 WHERE id % 10 = 2")  # key changes: a delete and an insert
        cur.execute("DELETE FROM public.a WHERE id % 10 = 5")
        cur.execute("DELETE FROM public.b WHERE id % 9 = 0")
        conn.commit()
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        after = parse_lsn(cur.fetchone()[0])
    conn.close()

    monkeypatch.setattr(stream, "ROWS_PER_POSITION", ROWS_PER_POSITION_SMALL)
    assert_blocks_are_the_events_rows(pg, db, state, ["public.a", "public.b"])
    tail = [sys.executable, "-c", SMALL_POSITIONS, "tail", "--state", state, "--sink", sink, "--available-now"]
    done = subprocess.run(tail, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert assert_lake_equals_source(pg, db, sink, "public.a", ["id", "v", "n"]) == 270
    assert assert_lake_equals_source(pg, db, sink, "public.b", ["id", "w"]) == 66
    for table in ("public.a", "public.b"):
        assert_replay_equals_current(sink, table)
        assert_each_change_once(sink, table)
    changes = DeltaTable(f"{sink}/public.a/changelog").to_pyarrow_table(columns=["_pos", "_op"])
    streamed = sorted(p for p, op in zip(changes["_pos"].to_pylist(), changes["_op"].to_pylist()) if op != "r")
    low, high = lsn_position(before).as_snapshot().encode(), lsn_position(after).as_snapshot().encode()
    assert [p for p in streamed if not low < p < high] == [] and len(streamed) == 300 + 100 + 2 * 30 + 30, (low, high)
    locations = {p.rsplit(".", 1)[0] for p in streamed}
    assert len(locations) >= 10, "the transaction's changes never passed one position's rows"

    # past every location of its commit record: one line, and the lake stays as it was
    pg.sql(f"INSERT INTO public.b SELECT g, 'x' FROM generate_series(1000, "
           f"{1000 + stream.POSITION_STEPS * ROWS_PER_POSITION_SMALL}) g", db=db)
    done = subprocess.run(tail, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "smaller transactions" in one_error_line(done.stderr)
    assert DeltaTable(f"{sink}/public.b/current").to_pyarrow_table().num_rows == 66
    assert dblog("drop", "--state", state)[0] == 0
