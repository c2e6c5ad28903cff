"""The server closes dblog's connection under a statement (``KILL``, ``pg_terminate_backend``): the statement runs
again on a new connection (``source.reconnect``), a slot read resumes after the messages it gave, and a connection
that died while idle is not where a transaction starts. Real private MariaDB and PostgreSQL."""
from __future__ import annotations

import time

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source import reconnect
from airflow_provider_dblog.source.mysql.connection import IDLE_PING_SECONDS, MySqlClient
from airflow_provider_dblog.source.postgres.connection import PostgresClient
from airflow_provider_dblog.source.postgres.stream import SlotReader
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)


def test_a_mysql_statement_runs_again_after_a_kill_and_a_transaction_never_starts_on_a_dead_connection(mariadb):
    client = MySqlClient(SourceConfig.parse(mariadb.uri()))
    first = client.scalar("SELECT CONNECTION_ID()")
    mariadb.sql(f"KILL {first}")
    second = client.scalar("SELECT CONNECTION_ID()")  # before: OperationalError 2013, the tail ended
    assert second != first
    assert client.scalar("SELECT @@session.sql_mode") == "" and client.scalar("SELECT @@session.time_zone") == "+00:00"
    assert client.scalar("SELECT @@session.tx_isolation") == "REPEATABLE-READ"
    mariadb.sql(f"KILL {second}")
    time.sleep(IDLE_PING_SECONDS + 0.2)
    with client.conn.cursor() as cur:  # a transaction's first statement on a connection killed while idle
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute("SELECT CONNECTION_ID()")
        assert cur.fetchone()[0] not in (first, second)
        cur.execute("COMMIT")
    client.close()


def test_a_statement_whose_connection_dies_again_and_again_fails_in_one_line(mariadb, monkeypatch):
    client = MySqlClient(SourceConfig.parse(mariadb.uri()))
    monkeypatch.setattr(reconnect, "LOST_CONNECTION_RETRIES", 2)
    with pytest.raises(DblogError, match=r"closed dblog's connection 3 times in a row .*nothing kills dblog's sessions"):
        client.query("KILL CONNECTION_ID()")  # kills its own connection, each time it runs
    client.close()


def test_a_postgres_statement_runs_again_after_its_backend_is_terminated(postgres, pg_db):
    client = PostgresClient(SourceConfig.parse(postgres.uri(pg_db)))
    first = client.scalar("SELECT pg_backend_pid()")
    postgres.sql(f"SELECT pg_terminate_backend({first})")
    second = client.scalar("SELECT pg_backend_pid()")  # before: "server closed the connection unexpectedly"
    assert second != first and client.scalar("SHOW TimeZone") == "UTC"
    client.close()


def test_a_slot_read_whose_backend_is_terminated_mid_read_resumes_after_what_it_gave(postgres, pg_db, caplog):
    """A peek of 400,000 messages (≈50 MB, more than the pipe, the socket and the COPY's buffers hold) loses its
    backend after the first 6,000: the read connects again and gives each message once, in order, exactly as an
    undisturbed peek."""
    postgres.sql("CREATE TABLE public.t (id int PRIMARY KEY, v text)", "CREATE PUBLICATION p FOR TABLE public.t",
                 "SELECT pg_create_logical_replication_slot('s_resume', 'pgoutput')", db=pg_db)
    postgres.sql("INSERT INTO public.t SELECT g, repeat('v', 100) || g FROM generate_series(1, 200000) g",
                 "UPDATE public.t SET v = v || '!'", db=pg_db)
    client = PostgresClient(SourceConfig.parse(postgres.uri(pg_db)))
    reader = SlotReader(client, "s_resume", "p")
    end = client.current_lsn()
    want = list(reader._messages(end))
    assert len(want) > 400_000
    got = []
    for payload in reader._messages(end):
        got.append(payload)
        if len(got) == 6_000:
            killed = postgres.sql("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE application_name = 'dblog' AND query LIKE 'COPY (SELECT data FROM "
                                  "pg_logical_slot_peek_binary_changes(%'")[0][0]
    assert killed == 1
    assert "the server closed the connection" in caplog.text  # the kill landed mid-read: it was read again
    assert got == want
    postgres.sql("SELECT pg_drop_replication_slot('s_resume')", db=pg_db)
    client.close()
