"""What a PostgreSQL server refuses, one line each with its fix, on a server that speaks German.

The server's messages are in its ``lc_messages`` (a DBA may change it at run time); dblog decides by SQLSTATE
and by the catalog, never by the server's English text. The private cluster here runs with ``LANGUAGE=de``
(PostgreSQL's own German catalog: ``lc_messages`` C.UTF-8 translates, ``C`` does not), so a decision taken on
an English phrase shows up as the wrong line or no wait at all.
"""
from __future__ import annotations

import itertools
import threading
import time

import psycopg2
import pytest
from psycopg2.extras import LogicalReplicationConnection

from airflow_provider_dblog.store.state import StateDir
from tests.support.cli import dblog, one_error_line
from tests.support.local_postgres import LocalPostgres

GERMAN = {"LANGUAGE": "de"}
_names = itertools.count()


@pytest.fixture(scope="module")
def german(tmp_path_factory):
    """A cluster whose messages are German, with room for two replication slots."""
    server = LocalPostgres(tmp_path_factory.mktemp("pg-de"), settings=("max_replication_slots=2",),
                           environment=GERMAN).start()
    try:
        server.sql("SELECT * FROM no_such_table")
        raise AssertionError("the query should have failed")
    except psycopg2.Error as exc:  # the premise of every test here
        assert "existiert nicht" in str(exc), exc
    yield server
    server.stop()


@pytest.fixture
def db(german):
    name = f"r{next(_names)}"
    german.sql(f"CREATE DATABASE {name}")
    german.sql("CREATE TABLE public.t (id int PRIMARY KEY, v text)", "INSERT INTO public.t VALUES (1, 'a'), (2, 'b')",
               db=name)
    yield name
    german.sql(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{name}' "
               f"AND NOT active")


def run(server, database: str, tmp_path, user: str | None = None, *extra: str) -> tuple[int, str, str]:
    return dblog("run", "--source", server.uri(database, user=user), "--tables", "public.t", "--state",
                 str(tmp_path / "state"), "--sink", str(tmp_path / "lake"), *extra)


def test_wal_level_below_logical_is_refused_and_snapshot_only_still_reads(tmp_path):
    server = LocalPostgres(tmp_path / "pg", settings=("wal_level=replica",), environment=GERMAN).start()
    try:
        server.sql("CREATE DATABASE s")
        server.sql("CREATE TABLE public.t (id int PRIMARY KEY, v text)", "INSERT INTO public.t VALUES (1, 'a')", db="s")
        code, _, err = run(server, "s", tmp_path)
        assert code != 0
        line = one_error_line(err)
        assert "wal_level=replica" in line and "ALTER SYSTEM SET wal_level = logical" in line, line
        assert not (tmp_path / "state").exists() and not (tmp_path / "lake").exists()
        code, _, err = run(server, "s", tmp_path, None, "--startup", "snapshot-only")  # the fix the line names
        assert code == 0, err
    finally:
        server.stop()


def test_a_role_without_replication_is_refused_and_leaves_nothing(german, db, tmp_path):
    german.sql("DROP ROLE IF EXISTS plain", "CREATE ROLE plain LOGIN")
    german.sql("GRANT SELECT ON public.t TO plain", db=db)
    code, _, err = run(german, db, tmp_path, "plain")
    assert code != 0
    line = one_error_line(err)
    assert "may not use replication slots" in line and 'ALTER ROLE "plain" REPLICATION' in line, line
    assert not german.sql("SELECT 1 FROM pg_replication_slots", db=db)
    assert not german.sql("SELECT 1 FROM pg_publication", db=db)
    # with REPLICATION but not the table's owner: the publication is the owner's to create, and the line says how
    german.sql("ALTER ROLE plain REPLICATION")
    german.sql("GRANT CREATE ON DATABASE " + db + " TO plain")
    code, _, err = run(german, db, tmp_path, "plain")
    assert code != 0
    line = one_error_line(err)
    assert "cannot publish public.t" in line and "Eigentümer" in line, line  # the server's words, in German
    statement = line.split("run: ", 1)[1].split("; then")[0]
    assert statement.startswith("CREATE PUBLICATION"), line
    assert not german.sql("SELECT 1 FROM pg_replication_slots", db=db) and not (tmp_path / "state").exists()
    german.sql(statement, db=db)  # the owner does what the line says
    code, _, err = run(german, db, tmp_path, "plain", *line.split("; then plan again with ", 1)[1].split()[:2])
    assert code == 0, err
    options = StateDir(str(tmp_path / "state")).options()
    assert german.sql(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{options['slot']}'", db=db)
    # a later plan naming another publication is refused: the capture streams through the one it records
    code, _, err = run(german, db, tmp_path, "plain", "--publication", "another")
    assert code != 0
    assert f"streams through publication {options['publication']}" in one_error_line(err), err
    # the owner's publication is the owner's: dropping the capture leaves it
    code, out, err = dblog("drop", "--state", str(tmp_path / "state"))
    assert code == 0, err
    assert not german.sql(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{options['slot']}'", db=db)
    assert german.sql(f"SELECT 1 FROM pg_publication WHERE pubname = '{options['publication']}'", db=db)
    # and a later tail does not make the slot anew through the publication that stayed: the capture was given up
    code, _, err = dblog("tail", "--state", str(tmp_path / "state"), "--sink", str(tmp_path / "lake"),
                         "--available-now")
    assert code != 0
    line = one_error_line(err)
    assert "is gone" in line and "(dblog drop)" in line and "capture again" in line, line
    assert not german.sql(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{options['slot']}'", db=db)


def test_no_free_replication_slot_is_named_with_its_fix_in_the_servers_language(german, db, tmp_path):
    held = [f"other_{db}_{i}" for i in range(2)]
    for name in held:  # the cluster's two slots taken by someone else
        german.sql(f"SELECT pg_create_logical_replication_slot('{name}', 'pgoutput')", db=db)
    try:
        code, _, err = run(german, db, tmp_path)
    finally:
        for name in held:
            german.sql(f"SELECT pg_drop_replication_slot('{name}')", db=db)
    assert code != 0
    line = one_error_line(err)
    assert "cannot create replication slot" in line and "raise max_replication_slots" in line, line
    assert "Replikations-Slots" in line, line  # the server's own words, in its language
    assert not german.sql("SELECT 1 FROM pg_publication", db=db)  # the plan's publication went with it
    assert not (tmp_path / "state").exists()


def hold_slot(server, database: str, slot: str, publication: str, seconds: float) -> threading.Thread:
    """Another process's streaming read of ``slot`` for ``seconds`` (it holds the slot: ``active_pid``)."""
    conn = psycopg2.connect(server.dsn(database), connection_factory=LogicalReplicationConnection)
    cur = conn.cursor()
    cur.start_replication(slot_name=slot, decode=False,
                          options={"proto_version": "1", "publication_names": publication})

    def hold() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            cur.read_message()
            time.sleep(0.05)
        conn.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    while not server.sql(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{slot}' AND active", db=database):
        time.sleep(0.05)
    return thread


def test_a_slot_another_process_reads_is_waited_for_then_named(german, db, tmp_path):
    code, _, err = run(german, db, tmp_path)
    assert code == 0, err
    options = StateDir(str(tmp_path / "state")).options()
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    german.sql("INSERT INTO public.t VALUES (3, 'c')", db=db)
    # held for 3 s: the tail waits (the server said "ist aktiv für PID"), then reads
    holder = hold_slot(german, db, options["slot"], options["publication"], 3.0)
    started = time.monotonic()
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert time.monotonic() - started >= 2.0, "the tail did not wait for the slot"
    assert "waiting up to 30 s for it" in err, err
    holder.join()
    # held for longer than the tail waits: one line naming the other reader and the fix
    german.sql("INSERT INTO public.t VALUES (4, 'd')", db=db)
    holder = hold_slot(german, db, options["slot"], options["publication"], 8.0)
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now",
                         env={"DBLOG_SLOT_BUSY_SECONDS": "2"})
    holder.join()
    assert code != 0
    line = one_error_line(err)
    assert "another process has read it for 2 s" in line and "DBLOG_SLOT_BUSY_SECONDS" in line, line
    # free again: the tail reads what it could not, and the lake has every row
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    from deltalake import DeltaTable

    rows = DeltaTable(f"{sink}/public.t/current").to_pyarrow_table(columns=["id", "v"]).sort_by("id").to_pylist()
    assert rows == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}, {"id": 4, "v": "d"}]


def test_messages_switched_to_english_at_run_time_change_nothing(german, db, tmp_path):
    """A DBA's ALTER SYSTEM SET lc_messages between the plan and the tail: the same lines either way; then the
    DBA drops the capture's slot by hand."""
    german.sql("ALTER SYSTEM SET lc_messages = 'C'", "SELECT pg_reload_conf()")
    try:
        code, _, err = run(german, db, tmp_path)
        assert code == 0, err
    finally:
        german.sql("ALTER SYSTEM RESET lc_messages", "SELECT pg_reload_conf()")
    options = StateDir(str(tmp_path / "state")).options()
    german.sql(f"SELECT pg_drop_replication_slot('{options['slot']}')", db=db)  # a DBA drops the capture's slot
    german.sql("UPDATE public.t SET v = 'lost' WHERE id = 1", db=db)  # a change no slot holds
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", "--on-purge", "fail")
    assert code != 0
    line = one_error_line(err)
    assert f"replication slot {options['slot']} is gone" in line and "--on-purge resnapshot" in line, line
    # the default: the slot made anew, the table read again
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    assert german.sql(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{options['slot']}'", db=db)
    from deltalake import DeltaTable

    rows = DeltaTable(f"{sink}/public.t/current").to_pyarrow_table(columns=["id", "v"]).sort_by("id").to_pylist()
    assert rows == [{"id": 1, "v": "lost"}, {"id": 2, "v": "b"}]
