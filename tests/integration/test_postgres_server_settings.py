"""Settings a DBA gives the server, a database or a role, at run time, that would change what dblog's readers see
or stop them: every dblog session sets its own (``values.SESSION_SETTINGS``).

* ``lc_monetary``: ``money`` prints by it (``$1,234.50`` in C, ``1.234,50 €`` in de_DE, another number of decimals
  elsewhere), so a reader that took the server's default would write one column in two formats. The German
  locale is compiled for the private server only (``localedef`` into a directory named by its ``LOCPATH``): the
  machine needs no locale installed.
* ``statement_timeout`` and ``idle_in_transaction_session_timeout`` (production servers often set them for
  applications): a slot's peek over a large range and a chunk's read are long statements, and a chunk window's
  transaction waits while the reader converts rows. As pg_dump does, dblog's sessions turn both off, and
  ``idle_session_timeout`` too (PostgreSQL 14+), which closed the control connection between statements and a new
  connection before its first on a loaded client (the slot's creation failed so); a connection closed all the same
  is opened again (``source.reconnect``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_dblog.store.state import StateDir
from tests.support.cli import dblog, one_error_line
from tests.support.lakecheck import assert_replay_equals_current
from tests.support.local_postgres import LocalPostgres
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def locales():
    """A directory with de_DE.UTF-8 compiled, readable by the server's user."""
    if not shutil.which("localedef") or not Path("/usr/share/i18n/locales/de_DE").exists():
        pytest.skip("localedef or the de_DE locale source is missing")
    path = Path(tempfile.mkdtemp(prefix="dblog-locales-", dir="/tmp"))
    path.chmod(0o755)
    done = subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8", str(path / "de_DE.UTF-8")],
                          capture_output=True, text=True)
    assert (path / "de_DE.UTF-8").is_dir(), done.stderr
    for root, dirs, files in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


def test_money_keeps_one_format_when_lc_monetary_changes_at_run_time(locales, tmp_path):
    server = LocalPostgres(tmp_path / "pg", environment={"LOCPATH": locales}).start()
    try:
        server.sql("CREATE DATABASE m")
        server.sql("CREATE TABLE public.prices (id int PRIMARY KEY, price money, note text)",
                   "INSERT INTO public.prices VALUES (1, 1234.5, 'a'), (2, -7.25, 'b')", db="m")
        state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
        code, _, err = dblog("run", "--source", server.uri("m"), "--tables", "public.prices", "--state", state,
                             "--sink", sink)
        assert code == 0, err
        server.sql("ALTER SYSTEM SET lc_monetary = 'de_DE.UTF-8'", "SELECT pg_reload_conf()")
        assert server.sql("SELECT 1234.5::money::text", db="m") == [("1.234,50 €",)]  # the premise
        server.sql("UPDATE public.prices SET price = price + 1::money WHERE id = 1",
                   "INSERT INTO public.prices VALUES (3, 99.99, 'c')", db="m")
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
        assert code == 0, err
        lake = DeltaTable(f"{sink}/public.prices/current").to_pyarrow_table(columns=["id", "price"])
        assert sorted(lake.to_pylist(), key=lambda r: r["id"]) == [
            {"id": 1, "price": "$1,235.50"}, {"id": 2, "price": "-$7.25"}, {"id": 3, "price": "$99.99"}]
        changes = DeltaTable(f"{sink}/public.prices/changelog").to_pyarrow_table(columns=["price"])
        assert all(p.startswith(("$", "-$")) for p in changes["price"].to_pylist()), changes
        code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "public.prices")
        assert code == 0, out + err
        # a re-read under the German setting prints the same
        code, _, err = dblog("resnapshot", "--state", state, "--sink", sink, "--table", "public.prices")
        assert code == 0, err
        lake = DeltaTable(f"{sink}/public.prices/current").to_pyarrow_table(columns=["id", "price"])
        assert sorted(lake.to_pylist(), key=lambda r: r["id"])[0] == {"id": 1, "price": "$1,235.50"}
    finally:
        server.stop()


UNTIMED = ("SET statement_timeout = 0", "SET idle_in_transaction_session_timeout = 0", "SET idle_session_timeout = 0")  # the test's own statements


def test_timeouts_set_for_the_capture_at_run_time_stop_neither_the_snapshot_nor_the_tail(postgres, pg_db, tmp_path):
    pg, db = postgres, pg_db
    pg.sql("CREATE TABLE public.big (id int PRIMARY KEY, v text, n numeric(12,2))",
           "INSERT INTO public.big SELECT g, repeat(md5(g::text), 4), g / 7.0 FROM generate_series(1, 100000) g", db=db)
    # what a DBA sets for everyone but the applications' own sessions: the plan's and the readers' sessions too
    pg.sql(f"ALTER DATABASE {db} SET statement_timeout = '20ms'",
           f"ALTER DATABASE {db} SET idle_in_transaction_session_timeout = '20ms'",
           f"ALTER DATABASE {db} SET idle_session_timeout = '20ms'")
    try:
        state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
        code, _, err = dblog("run", "--source", pg.uri(db), "--tables", "public.big", "--state", state, "--sink",
                             sink, "--chunk-size", "100000")  # one chunk: a read of 100,000 rows
        assert code == 0, err
        pg.sql(*UNTIMED, "UPDATE public.big SET n = n + 1", "DELETE FROM public.big WHERE id % 10 = 0",
               db=db)  # 110,000 changes
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")  # a peek of them all
        assert code == 0, err
        code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "public.big")
        assert code == 0, out + err
    finally:
        pg.sql(f"ALTER DATABASE {db} RESET statement_timeout", f"ALTER DATABASE {db} RESET "
               f"idle_in_transaction_session_timeout", f"ALTER DATABASE {db} RESET idle_session_timeout")
    lake = DeltaTable(f"{sink}/public.big/current").to_pyarrow_table().sort_by("id")
    source = pg.sql(*UNTIMED, "SELECT id, v, n::text FROM public.big ORDER BY id", db=db)
    assert lake.num_rows == len(source) == 90000
    assert [(r["id"], r["v"], f"{r['n']:.2f}") for r in lake.select(["id", "v", "n"]).to_pylist()] == \
        [(i, v, n) for i, v, n in source]
    assert_replay_equals_current(sink, "public.big")


def test_an_idle_session_limit_closes_no_dblog_connection(postgres, pg_db, caplog):
    """``idle_session_timeout`` set for the database closed dblog's connections whenever they waited between two
    statements, or between the connect and the first one on a loaded machine: the slot's creation then failed
    (CI, under load). dblog's sessions turn it off at connect time, so a connection idle past the limit lives on."""
    import logging
    import time

    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.source.postgres.connection import PostgresClient

    pg, db = postgres, pg_db
    pg.sql(f"ALTER DATABASE {db} SET idle_session_timeout = '50ms'")
    try:
        client = PostgresClient(SourceConfig.parse(pg.uri(db)))
        with caplog.at_level(logging.WARNING, "dblog"):
            first = client.query("SELECT pg_backend_pid(), current_setting('idle_session_timeout')")[0]
            time.sleep(0.5)
            second = client.query("SELECT pg_backend_pid(), current_setting('idle_session_timeout')")[0]
        client.close()
    finally:
        pg.sql(f"ALTER DATABASE {db} RESET idle_session_timeout")
    assert first == second and first[1] == "0", (first, second)
    assert "closed by the server" not in caplog.text


def test_a_slot_the_server_invalidates_is_named_by_health_and_made_anew_by_the_tail(tmp_path):
    """A DBA's ``max_slot_wal_keep_size`` at run time, then a tail paused while the server writes more WAL than
    that: the server removes WAL the slot holds and invalidates it (``wal_status = lost``). No table can be caught
    up from that slot any more. Before: health reported no purge (the WAL "file" a table needed spans 4 GiB), and
    each tail read the table again, then failed on "can no longer get changes from replication slot". Now health
    names the loss, ``--on-purge fail`` stops in one line, and the default makes a new slot and reads every table
    again: the lake is the source's again."""
    server = LocalPostgres(tmp_path / "pg", settings=("max_wal_size=64MB", "min_wal_size=32MB")).start()
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    try:
        server.sql("CREATE DATABASE w")
        server.sql("CREATE TABLE public.t (id int PRIMARY KEY, v text)",
                   "INSERT INTO public.t SELECT g, 'x' FROM generate_series(1, 1000) g",
                   "CREATE TABLE public.noise (id bigserial PRIMARY KEY, v text)", db="w")
        code, _, err = dblog("run", "--source", server.uri("w"), "--tables", "public.t", "--state", state,
                             "--sink", sink)
        assert code == 0, err
        slot = StateDir(state).options()["slot"]
        server.sql("ALTER SYSTEM SET max_slot_wal_keep_size = '32MB'", "SELECT pg_reload_conf()")
        server.sql("UPDATE public.t SET v = 'y' WHERE id < 10", db="w")
        for _ in range(4):  # ≈ 100 MB of WAL while no tail runs
            server.sql("INSERT INTO public.noise (v) SELECT repeat('n', 200) FROM generate_series(1, 100000)",
                       "CHECKPOINT", db="w")
        assert server.sql("SELECT wal_status FROM pg_replication_slots", db="w") == [("lost",)]  # the premise
        code, out, err = dblog("health", "--state", state)
        report = json.loads(out)
        assert report["binlog_purged"] == 1 and report["tables"]["public.t"]["binlog_purged"], out
        assert "was invalidated by the server" in report["tables"]["public.t"]["purge_warning"], out
        lake_before = DeltaTable(f"{sink}/public.t/current").to_pyarrow_table().sort_by("id")
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", "--on-purge", "fail")
        assert code != 0
        line = one_error_line(err)
        assert "was invalidated by the server" in line and "max_slot_wal_keep_size = 32MB" in line, line
        assert "--on-purge resnapshot (the default) makes a new slot" in line, line
        assert "chunks again" not in err, err  # nothing read in vain
        assert DeltaTable(f"{sink}/public.t/current").to_pyarrow_table().sort_by("id") == lake_before
        # the default: a new slot of the same name, every table read again, the lake the source's again
        server.sql("UPDATE public.t SET v = 'z' WHERE id > 990", db="w")
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
        assert code == 0, err
        assert "made anew: every table is read again" in err and "reading its 1 chunks again" in err, err
        assert server.sql(f"SELECT wal_status FROM pg_replication_slots WHERE slot_name = '{slot}'",
                          db="w") == [("reserved",)]
        server.sql("DELETE FROM public.t WHERE id = 5", "INSERT INTO public.t VALUES (2000, 'new')", db="w")
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")  # and it streams on
        assert code == 0, err
        assert "chunks again" not in err, err
        lake = DeltaTable(f"{sink}/public.t/current").to_pyarrow_table(columns=["id", "v"]).sort_by("id")
        assert [(r["id"], r["v"]) for r in lake.to_pylist()] == server.sql("SELECT id, v FROM public.t ORDER BY id",
                                                                             db="w")
        code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "public.t")
        assert code == 0, out + err
        code, out, _ = dblog("health", "--state", state)
        assert json.loads(out)["binlog_purged"] == 0, out
    finally:
        server.stop()
