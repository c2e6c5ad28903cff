"""The same DAGs capturing a PostgreSQL database (issue 26's acceptance), through ``airflow dags test`` on Spark
local[2] with an Airflow ``postgres`` connection: ``dblog_initial_load`` under a writer (updates, deletes,
inserts, key changes, TOASTed values), then ``dblog_tail`` and ``dblog_verify`` (checksums in PostgreSQL); the
lake equals the source column by column, the changelog replays to ``current``, and the password shows up
nowhere."""
from __future__ import annotations

import json
import os
import random
import threading
import time

import psycopg2
import pytest

from tests.e2e.test_airflow_e2e import AIRFLOW, BIN, FAST_JVM, ROOT, AirflowHome  # noqa: F401
from tests.integration.test_postgres_stream import ORDERS, assert_lake_equals_source, connect
from tests.support.lakecheck import assert_each_change_once, assert_replay_equals_current
from tests.support.local_mariadb import free_port
from tests.support.postgres_fixtures import postgres  # noqa: F401  (fixture)

PASSWORD = "pg-Airflow-5ecret"
CONN_ID = "dblog_test_pg"


def create_source(pg, db) -> None:
    pg.sql(f"CREATE DATABASE {db}")
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    pg.sql(
        "CREATE TABLE public.orders (id bigint PRIMARY KEY, amount numeric(12,2), note text, at timestamptz, "
        "doc jsonb, raw bytea, flag boolean)",
        "ALTER TABLE public.orders REPLICA IDENTITY FULL",
        "ALTER TABLE public.orders ALTER COLUMN note SET STORAGE EXTERNAL",
        "INSERT INTO public.orders SELECT g, g * 1.25, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 100) ELSE "
        "'note ' || g END, timestamptz '2024-01-01 00:00:00+00' + g * interval '1.5 second', "
        "jsonb_build_object('g', g), decode(lpad(to_hex(g), 8, '0'), 'hex'), g % 2 = 0 FROM generate_series(1, 2000) g",
        db=db,
    )


class Writer(threading.Thread):
    def __init__(self, pg, db, seed: int):
        super().__init__(daemon=True)
        self.pg, self.db, self.rng = pg, db, random.Random(seed)
        self.stop_event, self.ops, self.error = threading.Event(), 0, None

    def run(self) -> None:
        conn = connect(self.pg, self.db)
        try:
            with conn.cursor() as cur:
                while not self.stop_event.is_set():
                    key, other = self.rng.randint(1, 2000), self.rng.randint(1, 2000)
                    op = self.rng.random()
                    if op < 0.5:
                        cur.execute("UPDATE public.orders SET amount = amount + 1.25, flag = NOT flag WHERE id = %s",
                                    (key,))  # a TOASTed note stays unchanged
                    elif op < 0.7:
                        cur.execute("INSERT INTO public.orders VALUES (%s, 1, 'w', now(), '{}', '\\x00', true) "
                                    "ON CONFLICT DO NOTHING", (key,))
                    elif op < 0.9:
                        cur.execute("DELETE FROM public.orders WHERE id = %s", (key,))
                    else:
                        cur.execute("UPDATE public.orders SET id = %s WHERE id = %s AND NOT EXISTS (SELECT 1 FROM "
                                    "public.orders WHERE id = %s)", (other, key, other))
                    self.ops += 1
                    time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            conn.close()

    def stop(self) -> int:
        self.stop_event.set()
        self.join(30)
        assert self.error is None, f"writer failed: {self.error!r}"
        return self.ops


@pytest.fixture(scope="module")
def airflow_pg(postgres, tmp_path_factory):  # noqa: F811 - the fixture
    base = tmp_path_factory.mktemp("airflow_pg")
    home = base / "home"
    home.mkdir()
    db = f"afpg{os.getpid()}"
    create_source(postgres, db)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "DBLOG_", "SPARK_", "AWS_"))}
    env.update({
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": "test-jwt-secret-" + os.urandom(8).hex(),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps({
            "conn_type": "postgres", "host": "127.0.0.1", "port": postgres.port, "login": postgres.user,
            "password": PASSWORD, "schema": db}),
        "DBLOG_CONN_ID": CONN_ID,
        "DBLOG_STATE": str(base / "state"),
        "DBLOG_SINK": str(base / "lake"),
        "DBLOG_TABLES": "public.orders",
        "DBLOG_CHUNK_SIZE": "500",
        "DBLOG_BATCH_SIZE": "4",
        "DBLOG_MAX_STALL_SECONDS": "600",
        "DBLOG_SPARK_CONF": json.dumps(FAST_JVM),
        "DBLOG_CREDENTIALS": str(base / "no-credentials.json"),
    })
    af = AirflowHome(home, env, str(base / "state"), str(base / "lake"), "public.orders", None, port=port)
    proc = af.run("db", "migrate", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield af, postgres, db
    from airflow_provider_dblog.store.state import StateDir

    slot = StateDir(af.state).options().get("slot") if os.path.exists(af.state) else None
    if slot:
        postgres.sql(f"SELECT pg_drop_replication_slot('{slot}') FROM pg_replication_slots WHERE slot_name = '{slot}'",
                     db=db)


@pytest.mark.slow
def test_the_dags_capture_a_postgresql_database_under_writes(airflow_pg):
    af, pg, db = airflow_pg
    writer = Writer(pg, db, seed=1)
    writer.start()
    try:
        proc = af.run("dags", "test", "dblog_initial_load", timeout=900)
    finally:
        ops = writer.stop()
    assert proc.returncode == 0 and af.metadata.run_state("dblog_initial_load") == "success", (
        proc.stdout[-6000:] + proc.stderr[-3000:])
    assert ops > 20
    writer = Writer(pg, db, seed=2)
    writer.start()
    time.sleep(3)
    writer.stop()
    proc = af.run("dags", "test", "dblog_tail", timeout=600)
    assert proc.returncode == 0 and af.metadata.run_state("dblog_tail") == "success", proc.stdout[-6000:]
    assert assert_lake_equals_source(pg, db, af.sink, "public.orders", ORDERS) > 1000
    assert_each_change_once(af.sink, "public.orders")
    assert_replay_equals_current(af.sink, "public.orders")
    proc = af.run("dags", "test", "dblog_verify", timeout=600)
    assert af.metadata.run_state("dblog_verify") == "success", proc.stdout[-6000:]
    assert af.metadata.xcom("dblog_verify", "verify") == []
    # the password: in the Airflow connection only
    for text in af.outputs:
        assert PASSWORD not in text
    for root, _, files in os.walk(af.state):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                assert PASSWORD.encode() not in f.read(), name
