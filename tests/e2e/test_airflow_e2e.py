"""The Airflow layer end to end, against the test MariaDB and Spark local[2]:

* ``airflow providers list`` shows the provider; the DAG files import cleanly; the trigger form
  rejects an injected filter;
* ``dblog_initial_load`` runs with ``airflow dags test`` (``dag.test()``) while a writer changes rows,
  then ``dblog_tail``; the mirror equals the source;
* with the API server, scheduler and DAG processor running (LocalExecutor, SQLite), a key-range
  ``dblog_resnapshot`` is triggered and one mapped snapshot instance of the initial load is cleared
  through the REST API while a writer and a ``--continuous`` tail run; exactly the expected chunks
  are re-read and the mirror still equals the source;
* the password never shows up in task logs, XComs, rendered fields, the metadata DB or state files;
* on a standalone cluster with state and lake on S3, the S3 credentials come from an ``aws`` connection
  only (neither the Airflow worker nor the Spark worker has ``AWS_*`` variables) and the secret key shows
  up nowhere either (task logs, metadata DB, state objects, executor logs).

Airflow always runs in subprocesses with its own AIRFLOW_HOME, so this test process never imports it.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pymysql
import pytest

from tests.support.local_metadata import LocalAirflowMetadata
from tests.support.local_mariadb import free_port
from tests.support.processes import stop_group

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
AIRFLOW = str(BIN / "airflow")
PASSWORD = "s3cret-Pa55"
CONN_ID = "dblog_test_source"
AWS_CONN_ID = "dblog_test_s3"
ROWS = 3000
FAST_JVM = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


@dataclass
class AirflowHome:
    home: Path
    env: dict
    state: str
    sink: str
    table: str
    mariadb: object
    outputs: list[str] = field(default_factory=list)
    port: int = 0

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run([AIRFLOW, *args], env=self.env, cwd=self.home, capture_output=True, text=True,
                              timeout=timeout)
        self.outputs.append(proc.stdout + proc.stderr)
        return proc

    @property
    def metadata(self) -> LocalAirflowMetadata:
        return LocalAirflowMetadata(self.home)


class StatsdListener:
    """A StatsD server on loopback (UDP): keeps every metric line Airflow sends."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop_event.is_set():
            try:
                data = self.sock.recv(65535)
            except socket.timeout:
                continue
            self.lines.extend(data.decode(errors="replace").splitlines())

    def metrics(self) -> dict[str, list[tuple[str, str]]]:
        """name -> [(value, type)] of every line received so far (``name:value|type``)."""
        out: dict[str, list[tuple[str, str]]] = {}
        for line in list(self.lines):
            name, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            out.setdefault(name, []).append((value, kind.split("|")[0]))
        return out

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(5)
        self.sock.close()


DOWNSTREAM_DAG = """
import os
from datetime import timedelta
from airflow.sdk import DAG, task
from airflow_provider_dblog.airflow.lake_events import lake_asset

# scheduled on one captured table's current state: runs when a dblog task advanced it
# (retries: a task the scheduler starts while the API server is still busy starting can be refused once)
with DAG("dblog_test_downstream", schedule=[lake_asset(os.environ["DBLOG_SINK"], os.environ["DBLOG_TABLES"])],
         catchup=False, tags=["test"], default_args={"retries": 2, "retry_delay": timedelta(seconds=3)}):
    @task
    def changed(triggering_asset_events=None):
        # keyed by the Asset and by the alias the events came through: the same events, by their asset's URI
        seen = {(event.asset.uri, repr(sorted(event.extra.items()))): event.extra
                for events in triggering_asset_events.values() for event in events}
        return [{"uri": uri, "extra": extra} for (uri, _), extra in sorted(seen.items())]

    changed()
"""


@pytest.fixture(scope="module")
def statsd():
    listener = StatsdListener()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def airflow(mariadb, tmp_path_factory, statsd) -> AirflowHome:
    """The DAGs plus a downstream DAG scheduled on the table's ``current`` Asset, with Airflow's metrics sent
    to a StatsD listener and OpenLineage events written to a file (``home/openlineage.jsonl``)."""
    base = tmp_path_factory.mktemp("airflow")
    dags = base / "dags"
    dags.mkdir()
    for path in (ROOT / "dags").glob("*.py"):
        (dags / path.name).symlink_to(path)
    (dags / "dblog_test_downstream.py").write_text(DOWNSTREAM_DAG)
    af = airflow_home(mariadb, base, f"af{os.getpid()}", str(base / "state"), str(base / "lake"), {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "dblog-test",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "append": True,
                                                       "log_file_path": str(base / "home" / "openlineage.jsonl")}),
    })
    for args in (("dags", "reserialize"), ("dags", "unpause", "dblog_test_downstream")):
        proc = af.run(*args, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return af


def airflow_home(mariadb, base: Path, database: str, state: str, sink: str, extra: dict | None = None
                 ) -> AirflowHome:
    """An AIRFLOW_HOME of its own (SQLite, migrated) whose DAGs capture ``database.orders``."""
    home = base / "home"
    home.mkdir()
    mariadb.sql(f"DROP DATABASE IF EXISTS {database}", f"CREATE DATABASE {database}")
    table = f"{database}.orders"
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "PYSPARK", "DBLOG_", "SPARK_", "AWS_"))}
    env.update({
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": "test-jwt-secret-" + os.urandom(8).hex(),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps({
            "conn_type": "mysql", "host": "127.0.0.1", "port": mariadb.port, "login": "dblog",
            "password": PASSWORD, "extra": {"watermark": "auto", "server_id_range": [3000000, 3999999]}}),
        "DBLOG_CONN_ID": CONN_ID,
        "DBLOG_STATE": state,
        "DBLOG_SINK": sink,
        "DBLOG_TABLES": table,
        "DBLOG_CHUNK_SIZE": "500",
        "DBLOG_BATCH_SIZE": "2",
        "DBLOG_MAX_STALL_SECONDS": "600",
        "DBLOG_SPARK_CONF": json.dumps(FAST_JVM),
        # no password anywhere but the Airflow connection: no credentials file, no $DBLOG_SOURCE_PASSWORD
        "DBLOG_CREDENTIALS": str(base / "no-credentials.json"),
        **(extra or {}),
    })
    af = AirflowHome(home, env, state, sink, table, mariadb, port=port)
    proc = af.run("db", "migrate", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return af


# ---- a writer changing rows while snapshots and re-snapshots run ------------------------------
class Writer(threading.Thread):
    def __init__(self, mariadb, table: str, seed: int):
        super().__init__(daemon=True)
        self.mariadb, self.table, self.rng = mariadb, table, random.Random(seed)
        self.stop_event = threading.Event()
        self.ops = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        """Updates, deletes, inserts and primary key changes, keys kept in 1..ROWS (so the plan's chunk
        count does not depend on timing), in small multi-row transactions."""
        conn = pymysql.connect(host="127.0.0.1", port=self.mariadb.port, user="root", autocommit=False)
        try:
            with conn.cursor() as cur:
                while not self.stop_event.is_set():
                    for _ in range(self.rng.randint(1, 3)):
                        op, key, other = self.rng.random(), self.rng.randint(1, ROWS), self.rng.randint(1, ROWS)
                        if op < 0.55:
                            cur.execute(f"UPDATE {self.table} SET amount = amount + 1.25, status = %s, "
                                        f"updated = NOW(6) WHERE id = %s", (self.rng.choice(["paid", "late", "new"]), key))
                        elif op < 0.75:
                            cur.execute(f"INSERT IGNORE INTO {self.table} VALUES (%s, 'new', %s, %s, NOW(6))",
                                        (key, key / 3, f"w{key}"))
                        elif op < 0.93:
                            cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (key,))
                        else:  # a primary key change: a delete plus an insert downstream
                            cur.execute(f"UPDATE IGNORE {self.table} SET id = %s WHERE id = %s", (other, key))
                        self.ops += 1
                    conn.commit()
                    time.sleep(0.08)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            conn.close()

    def stop(self) -> int:
        self.stop_event.set()
        self.join(30)
        assert self.error is None, f"writer failed: {self.error!r}"
        return self.ops


def create_table(mariadb, table: str) -> None:
    db = table.split(".")[0]
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, amount DECIMAL(12,2), "
                f"note TEXT, updated DATETIME(6))",
                f"INSERT INTO {table} SELECT seq, IF(seq % 7 = 0, 'late', 'new'), seq / 4, CONCAT('n', seq), "
                f"'2024-01-01 00:00:00.000001' FROM seq_1_to_{ROWS}", db=db)


def source_position(mariadb):
    from airflow_provider_dblog.core.positions import SourcePosition

    file, pos = mariadb.sql("SHOW MASTER STATUS")[0][:2]
    return SourcePosition.at(file, pos)


def assert_mirror_equals_source(af: AirflowHome, spark, tmp_path, monkeypatch) -> dict:
    from airflow_provider_dblog.core.config import PASSWORD_ENV
    from airflow_provider_dblog.steps.mirror import compare_with_source
    from airflow_provider_dblog.steps.mirror import mirror

    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    out = str(tmp_path / "mirror")
    mirror(af.state, af.sink, af.table, out)
    result = compare_with_source(af.state, out, af.table)
    assert result["equal"], result
    return result


def assert_no_password_anywhere(af: AirflowHome) -> None:
    needle = PASSWORD.encode()
    for i, output in enumerate(af.outputs):
        assert PASSWORD not in output, f"password in the output of airflow command #{i}"
    for folder in (af.home, Path(af.state)):
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix not in (".parquet",):
                assert needle not in path.read_bytes(), f"password in {path}"  # logs, airflow.db (XCom, rendered
                #                                                              fields, serialized DAGs), state files


@pytest.fixture(scope="module")
def initial_load(airflow: AirflowHome):
    """``dblog_initial_load`` through ``airflow dags test`` (dag.test()) while a writer changes rows."""
    create_table(airflow.mariadb, airflow.table)
    writer = Writer(airflow.mariadb, airflow.table, seed=1)
    writer.start()
    try:
        proc = airflow.run("dags", "test", "dblog_initial_load", timeout=900)
    finally:
        ops = writer.stop()
    assert proc.returncode == 0 and airflow.metadata.run_state("dblog_initial_load") == "success", (
        proc.stdout[-6000:] + proc.stderr[-3000:])
    return {"writer_ops": ops}


# ---- quick checks ----------------------------------------------------------------------------
def test_providers_list_shows_the_provider(airflow):
    proc = airflow.run("providers", "list", "-o", "json", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(proc.stdout[proc.stdout.index("["):])}
    assert "airflow-provider-dblog" in providers
    hooks = airflow.run("providers", "hooks", "-o", "json", timeout=120)
    assert "airflow_provider_dblog.airflow.hooks.DblogHook" in hooks.stdout


DAGBAG_CHECK = r"""
import copy, json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.exceptions import ParamValidationError
bag = DagBag(sys.argv[1])
out = {"errors": {k: v[-500:] for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids)}
dag = bag.get_dag("dblog_resnapshot")
params = copy.deepcopy(dag.params)
params["table"] = "shop.orders"
params["filter"] = "status = 'late' AND id > 3"
try:
    params["filter"] = "1=1; DROP TABLE x"
    out["injection"] = "accepted"
except ParamValidationError as exc:
    out["injection"] = str(exc)
tail = bag.get_dag("dblog_tail")
out["tail_max_active_runs"] = tail.max_active_runs
load = bag.get_dag("dblog_initial_load")
out["load_tasks"] = sorted(load.task_ids)

# the operator itself refuses the filter, with the reason, before touching the state or the source
from airflow.sdk.exceptions import AirflowFailException
from airflow_provider_dblog.airflow.operators import ResnapshotPlannerOperator, check_map_length
op = ResnapshotPlannerOperator(task_id="t", state_dir="/nonexistent", sink="/nonexistent")
try:
    op.execute({"params": {"table": "shop.orders", "filter": "1=1; DROP TABLE x"}})
except AirflowFailException as exc:
    out["operator_injection"] = str(exc)

from airflow_provider_dblog.core.errors import DblogError
try:
    check_map_length(3, "snapshot batches", 30)
except DblogError as exc:
    out["max_map_length"] = str(exc)

from airflow_provider_dblog.airflow.hooks import DblogHook
hook = DblogHook(sys.argv[2])
out["hook"] = {"uri": hook.source_config().public_uri, "options": hook.options(), "watermark": hook.watermark(),
               "env": sorted(hook.spark_env())}

import os
from airflow_provider_dblog.airflow.hooks import object_store_env, object_store_environment
out["aws_env"] = sorted(object_store_env(sys.argv[3]).items())
with object_store_environment(sys.argv[3]):
    out["aws_in_step"] = os.environ.get("AWS_ENDPOINT_URL")
out["aws_after_step"] = os.environ.get("AWS_ENDPOINT_URL")
try:
    object_store_env(sys.argv[2])
except DblogError as exc:
    out["aws_wrong_type"] = str(exc)
print("RESULT" + json.dumps(out))
"""


def test_dags_import_cleanly_and_the_form_rejects_an_injected_filter(airflow):
    env = {**airflow.env, "AIRFLOW__CORE__MAX_MAP_LENGTH": "2"}
    env[f"AIRFLOW_CONN_{AWS_CONN_ID.upper()}"] = json.dumps({
        "conn_type": "aws", "login": "AKIDTEST", "password": "aws-Secret-123",
        "extra": {"endpoint_url": "http://127.0.0.1:1", "region_name": "eu-west-3"}})
    proc = subprocess.run([sys.executable, "-c", DAGBAG_CHECK, str(ROOT / "dags"), CONN_ID, AWS_CONN_ID], env=env,
                          cwd=airflow.home, capture_output=True, text=True, timeout=120)
    airflow.outputs.append(proc.stdout + proc.stderr)
    assert "RESULT" in proc.stdout, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert out["errors"] == {}
    assert {"dblog_initial_load", "dblog_tail", "dblog_resnapshot", "dblog_verify"} <= set(out["dags"])
    assert out["injection"].startswith("Invalid input for param filter"), out["injection"]
    assert out["tail_max_active_runs"] == 1
    assert out["load_tasks"] == ["follow_binlog", "plan", "report", "snapshot", "tail"]
    assert out["operator_injection"].startswith(
        "dblog: filter rejected: ';' (a second statement) is not allowed in a filter"), out["operator_injection"]
    assert out["max_map_length"] == (
        "3 snapshot batches exceed Airflow's [core] max_map_length = 2: plan fewer, larger batches (batch_size >= "
        "15 chunks, or a larger chunk_size), or raise max_map_length (AIRFLOW__CORE__MAX_MAP_LENGTH)")
    assert out["hook"] == {"uri": f"mysql://dblog@127.0.0.1:{airflow.mariadb.port}",
                           "options": {"server_id_range": [3000000, 3999999]}, "watermark": "auto",
                           "env": ["DBLOG_SOURCE_PASSWORD"]}
    assert out["aws_env"] == [["AWS_ACCESS_KEY_ID", "AKIDTEST"], ["AWS_ALLOW_HTTP", "true"],
                              ["AWS_ENDPOINT_URL", "http://127.0.0.1:1"], ["AWS_REGION", "eu-west-3"],
                              ["AWS_SECRET_ACCESS_KEY", "aws-Secret-123"]]
    assert out["aws_in_step"] == "http://127.0.0.1:1" and out["aws_after_step"] is None, out
    assert out["aws_wrong_type"].startswith(f"connection {CONN_ID!r} has type 'mysql': aws_conn_id names an Amazon"), out
    assert PASSWORD not in proc.stdout + proc.stderr


# ---- end to end ------------------------------------------------------------------------------
@pytest.mark.slow
def test_initial_load_then_scheduled_tail_converge(airflow, initial_load, spark, tmp_path, monkeypatch):
    assert initial_load["writer_ops"] > 20  # the source really changed during the load
    tasks = airflow.metadata.task_states("dblog_initial_load")
    snapshots = {k[1]: v for k, v in tasks.items() if k[0] == "snapshot"}
    assert len(snapshots) == 3 and all(v["state"] == "success" for v in snapshots.values()), snapshots
    assert all(v["label"].startswith(f"batch {i}: {airflow.table} chunks ") for i, v in snapshots.items()), snapshots
    report = airflow.metadata.xcom("dblog_initial_load", "report")
    assert report["chunks"] == 6 and report["rows"] > 0 and report["min_hw"] and report["max_hw"]
    plan = airflow.metadata.xcom("dblog_initial_load", "plan")
    assert [kw["application_args"][:5] for kw in plan] == [
        ["snapshot", "--state", airflow.state, "--batch", str(i)] for i in range(3)]

    writer = Writer(airflow.mariadb, airflow.table, seed=2)  # changes after the load's tail
    writer.start()
    time.sleep(3)
    writer.stop()
    proc = airflow.run("dags", "test", "dblog_tail", timeout=600)
    assert proc.returncode == 0 and airflow.metadata.run_state("dblog_tail") == "success", proc.stdout[-6000:]
    assert airflow.metadata.task_states("dblog_tail")[("health_check", -1)]["state"] == "success"
    assert_mirror_equals_source(airflow, spark, tmp_path, monkeypatch)

    # dblog_verify: equal; a change made behind the binlog's back fails it naming the chunk; repair converges
    proc = airflow.run("dags", "test", "dblog_verify", timeout=600)
    assert airflow.metadata.run_state("dblog_verify") == "success", proc.stdout[-6000:]
    assert airflow.metadata.xcom("dblog_verify", "verify") == []
    airflow.mariadb.sql("SET SESSION sql_log_bin = 0", f"UPDATE {airflow.table} SET note = 'drift' WHERE id = 2")
    proc = airflow.run("dags", "test", "dblog_verify", timeout=600)
    assert airflow.metadata.run_state("dblog_verify") == "failed", proc.stdout[-6000:]
    assert f"the lake differs from the source: {airflow.table} chunks 0 " in proc.stdout + proc.stderr
    proc = airflow.run("dags", "test", "dblog_verify", "-c", json.dumps({"repair": True}), timeout=600)
    assert airflow.metadata.run_state("dblog_verify") == "success", proc.stdout[-6000:]
    states = airflow.metadata.task_states("dblog_verify")
    assert states[("repair", 0)]["state"] == "success" and states[("repair", 0)]["label"].startswith(
        f"repair {airflow.table} chunks 0 "), states
    assert states[("verify_after_repair", -1)]["state"] == "success", states
    assert_mirror_equals_source(airflow, spark, tmp_path, monkeypatch)
    assert_no_password_anywhere(airflow)


@pytest.mark.slow
def test_the_load_sends_metrics_asset_events_and_lineage(airflow, initial_load, statsd):
    """From the ``dblog_initial_load`` run above (snapshot batches on spark-submit, then the tail):

    * metrics reach the StatsD listener under the names docs/operations.md gives, per table and per tail,
      sent by the spark-submit applications (rows read, changes committed, micro-batches) and by the
      operator after each (lag, chunks);
    * an asset event with its figures (position, rows changed, lag) for the table's ``current`` and
      ``changelog`` Assets, and the downstream DAG scheduled on ``current`` is queued;
    * OpenLineage START and COMPLETE events of the snapshot and tail tasks name the source table (namespace
      ``mysql://HOST:PORT``) as input and both Delta tables as outputs, with schema facets;
    * the password is in none of them."""
    from airflow_provider_dblog.airflow.lake_events import asset_uri

    table, named = airflow.table, airflow.table.replace(".", "__")
    source = f"127_0_0_1_{airflow.mariadb.port}"
    deadline = time.time() + 10  # UDP: the last datagrams may still be on their way
    expected = {f"airflow.dblog.{m}.{named}": kind for m, kind in (
        ("rows_snapshotted", "c"), ("chunks_done", "g"), ("chunks_total", "g"), ("changes_committed", "c"),
        ("lag_seconds", "g"), ("rows_current", "g"))}
    expected.update({f"airflow.dblog.micro_batch_seconds.{source}": "ms",
                     f"airflow.dblog.binlog_bytes_behind.{source}": "g",
                     "airflow.dblog.lag_seconds": "g", "airflow.dblog.changes_committed": "c"})
    while set(expected) - set(statsd.metrics()) and time.time() < deadline:
        time.sleep(0.5)
    got = statsd.metrics()
    missing = sorted(set(expected) - set(got))
    assert not missing, (missing, sorted(n for n in got if "dblog" in n))
    for name, kind in expected.items():
        assert {k for _, k in got[name]} == {kind}, (name, got[name])
    rows_read = sum(int(v) for v, _ in got[f"airflow.dblog.rows_snapshotted.{named}"])
    assert rows_read >= ROWS * 0.8, rows_read  # every chunk's rows (the writer deletes some)
    assert got[f"airflow.dblog.chunks_done.{named}"][-1][0] == "6", got[f"airflow.dblog.chunks_done.{named}"]
    assert sum(int(v) for v, _ in got[f"airflow.dblog.changes_committed.{named}"]) > 0
    assert all(PASSWORD not in line for line in statsd.lines)

    with airflow.metadata.connect() as conn:
        events = conn.execute("SELECT a.uri, e.extra, e.source_dag_id, e.source_task_id FROM asset_event e "
                              "JOIN asset a ON a.id = e.asset_id ORDER BY e.id").fetchall()
        queued = {r[0] for r in conn.execute("SELECT target_dag_id FROM asset_dag_run_queue")}
    by_uri: dict[str, list[dict]] = {}
    for uri, extra, dag_id, task_id in events:
        by_uri.setdefault(uri, []).append({**json.loads(extra or "{}"), "_task": (dag_id, task_id)})
    for kind in ("current", "changelog"):
        mine = by_uri.get(asset_uri(airflow.sink, table, kind), [])
        tasks = {e["_task"] for e in mine}
        assert {("dblog_initial_load", "snapshot"), ("dblog_initial_load", "tail")} <= tasks, (kind, by_uri)
        for event in mine:
            assert event["table"] == table and event["lake"] == kind and event["position"], event
            assert event["rows_changed"] > 0 and "lag_seconds" in event and "lag_bytes" in event, event
        tail_event = [e for e in mine if e["_task"] == ("dblog_initial_load", "tail")][-1]
        assert tail_event["phase"] == "streaming" and tail_event["lag_seconds"] is not None, tail_event
    assert "dblog_test_downstream" in queued, queued
    assert PASSWORD not in json.dumps(events, default=str)

    lineage = [json.loads(line) for line in (airflow.home / "openlineage.jsonl").read_text().splitlines() if line]
    assert PASSWORD not in json.dumps(lineage)
    source_ns = f"mysql://127.0.0.1:{airflow.mariadb.port}"
    outputs = {("file", f"{airflow.sink}/{table}/{kind}") for kind in ("current", "changelog")}
    for task in ("snapshot", "tail"):
        runs = [e for e in lineage if e["job"]["name"] == f"dblog_initial_load.{task}"]
        for event_type in ("START", "COMPLETE"):
            found = [e for e in runs if e["eventType"] == event_type]
            assert found, (task, event_type, [(e["job"]["name"], e["eventType"]) for e in lineage])
            event = found[-1]
            assert [(i["namespace"], i["name"]) for i in event["inputs"]] == [(source_ns, table)], event["inputs"]
            assert {(o["namespace"], o["name"]) for o in event["outputs"]} == outputs, event["outputs"]
            fields = [f["name"] for f in event["inputs"][0]["facets"]["schema"]["fields"]]
            assert fields == ["id", "status", "amount", "note", "updated"], fields
        complete = found[-1]
        for output in complete["outputs"]:
            columns = {f["name"] for f in output["facets"]["schema"]["fields"]}
            assert {"id", "status", "amount", "_pos"} <= columns, (output["name"], columns)


class Servers:
    """API server, scheduler and DAG processor of one AIRFLOW_HOME, on loopback."""

    def __init__(self, af: AirflowHome):
        self.af = af
        self.base = f"http://127.0.0.1:{af.port}"
        self.procs: list[subprocess.Popen] = []
        self.token = None

    def start(self) -> "Servers":
        for name, args in (("api-server", ["api-server", "-H", "127.0.0.1", "-p", str(self.af.port), "-w", "1"]),
                           ("scheduler", ["scheduler"]), ("dag-processor", ["dag-processor"])):
            log = open(self.af.home / f"{name}.out", "w")
            self.procs.append(subprocess.Popen([AIRFLOW, *args], env=self.af.env, cwd=self.af.home, stdout=log,
                                               stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                health = json.load(urllib.request.urlopen(self.base + "/api/v2/monitor/health", timeout=5))
                if health["scheduler"]["status"] == "healthy" and health["dag_processor"]["status"] == "healthy":
                    break
            except (OSError, ValueError, KeyError, TypeError):
                pass
            for p in self.procs:
                assert p.poll() is None, f"an Airflow process exited: {self.tail_logs()}"
            time.sleep(1)
        else:
            raise AssertionError(f"Airflow did not become healthy: {self.tail_logs()}")
        # simple auth manager with all-admins: a token without credentials (GET /auth/token)
        self.token = json.load(urllib.request.urlopen(self.base + "/auth/token", timeout=10))["access_token"]
        return self

    def tail_logs(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-2500:]
                         for p in sorted(self.af.home.glob("*.out")))

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        request = urllib.request.Request(
            self.base + path, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def ok(self, method: str, path: str, body: dict | None = None):
        for attempt in range(5):
            status, data = self.call(method, path, body)
            # SQLite under a busy scheduler answers "database is locked" as a 500: the write is retried
            if not (status == 500 and "Database error" in str(data)):
                break
            time.sleep(2 + attempt * 2)
        assert status == 200, (method, path, status, data)
        return data

    def wait_dag(self, dag_id: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.call("GET", f"/api/v2/dags/{dag_id}")[0] == 200:
                return
            time.sleep(1)
        raise AssertionError(f"{dag_id} not parsed: {self.tail_logs()}")

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        deadline = time.time() + timeout
        state = None
        while time.time() < deadline:
            state = self.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise AssertionError(f"{dag_id} run {run_id} still {state} after {timeout}s: {self.tail_logs()}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def wait_asset_triggered_run(servers: Servers, dag_id: str, timeout: float = 180) -> dict:
    """The first successful run of ``dag_id`` (scheduled on an Asset), once the scheduler ran it."""
    deadline = time.time() + timeout
    runs: list = []
    while time.time() < deadline:
        runs = servers.ok("GET", f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]
        done = [r for r in runs if r["state"] == "success"]
        if done:
            return done[0]
        time.sleep(2)
    raise AssertionError(f"no successful {dag_id} run after {timeout}s: {runs} {servers.tail_logs()}")


def continuous_tail(af: AirflowHome) -> subprocess.Popen:
    """The detached ``--continuous`` tail of docs/airflow.md (here the CLI, without spark-submit)."""
    env = {**af.env, "DBLOG_SOURCE_PASSWORD": PASSWORD, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    log = open(af.home / "continuous-tail.out", "w")
    return subprocess.Popen([str(BIN / "dblog"), "tail", "--state", af.state, "--sink", af.sink, "--continuous",
                             "--trigger-seconds", "2"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_tail_caught_up(af: AirflowHome, tail: subprocess.Popen, timeout: float = 150) -> None:
    from airflow_provider_dblog.steps.health import tail_progress

    target = source_position(af.mariadb)
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert tail.poll() is None, (af.home / "continuous-tail.out").read_text()[-3000:]
        if tail_progress(af.state, af.table)[0] >= target:
            return
        time.sleep(1)
    raise AssertionError("the continuous tail did not catch up: "
                         + (af.home / "continuous-tail.out").read_text()[-3000:])


@pytest.mark.slow
def test_api_resnapshot_and_cleared_instance_converge_while_the_tail_runs(airflow, initial_load, spark, tmp_path,
                                                                         monkeypatch):
    from airflow_provider_dblog.airflow.lake_events import asset_uri
    from airflow_provider_dblog.store.state import StateDir

    state = StateDir(airflow.state)
    plan = state.table(airflow.table)
    lo, hi = 1600, 1900
    in_range = [c.id for c in plan.chunks
                if (c.lo is None or c.lo[0] <= hi) and (c.hi is None or lo < c.hi[0])]
    cleared_batch = state.batch(0)
    assert not set(in_range) & set(cleared_batch.chunk_ids(airflow.table)), (in_range, cleared_batch)
    expected_rereads = set(in_range) | set(cleared_batch.chunk_ids(airflow.table))

    servers = Servers(airflow).start()
    tail = writer = None
    try:
        for dag_id in ("dblog_initial_load", "dblog_resnapshot"):
            servers.wait_dag(dag_id)
            servers.ok("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        # the trigger API refuses an injected filter before any task runs
        status, detail = servers.call("POST", "/api/v2/dags/dblog_resnapshot/dagRuns", {
            "logical_date": None, "conf": {"table": airflow.table, "filter": "1=1; DROP TABLE x"}})
        assert status == 400 and "Invalid input for param filter" in str(detail), (status, detail)

        tail = continuous_tail(airflow)
        writer = Writer(airflow.mariadb, airflow.table, seed=3)
        writer.start()
        started = time.time()
        run = servers.ok("POST", "/api/v2/dags/dblog_resnapshot/dagRuns", {
            "logical_date": None, "conf": {"table": airflow.table, "key_lo": lo, "key_hi": hi}})
        load_run = servers.ok("GET", "/api/v2/dags/dblog_initial_load/dagRuns")["dag_runs"][0]["dag_run_id"]
        cleared = servers.ok("POST", "/api/v2/dags/dblog_initial_load/clearTaskInstances", {
            "dry_run": False, "only_failed": False, "dag_run_id": load_run, "task_ids": [["snapshot", 0]]})
        assert [(t["task_id"], t["map_index"]) for t in cleared["task_instances"]] == [("snapshot", 0)]

        assert servers.wait_run("dblog_resnapshot", run["dag_run_id"], 300) == "success", servers.tail_logs()
        assert servers.wait_run("dblog_initial_load", load_run, 300) == "success", servers.tail_logs()
        writer.stop()
        wait_tail_caught_up(airflow, tail)
        # the asset events of the runs above queued the DAG scheduled on the table's current: the scheduler ran it
        downstream = wait_asset_triggered_run(servers, "dblog_test_downstream")
        api_events = servers.ok("GET", "/api/v2/assets/events?limit=200&order_by=-timestamp")["asset_events"]
    finally:
        if writer is not None and writer.is_alive():
            writer.stop_event.set()
        if tail is not None:
            stop_group(tail, grace=60)
        servers.stop()

    assert downstream["run_type"] == "asset_triggered", downstream
    for kind in ("current", "changelog"):  # the REST API shows the events, their extra included
        uri = asset_uri(airflow.sink, airflow.table, kind)
        extras = [e["extra"] for e in api_events if e["uri"] == uri]
        assert extras and all(x["table"] == airflow.table and x["lake"] == kind and x["position"] for x in extras), (
            kind, [(e["uri"], e["extra"]) for e in api_events][:10])
    seen = airflow.metadata.xcom("dblog_test_downstream", "changed")
    assert seen and {e["uri"] for e in seen} == {asset_uri(airflow.sink, airflow.table)}, seen
    assert all(e["extra"]["table"] == airflow.table and e["extra"]["position"] for e in seen), seen

    # the mapped instance's second try re-read its own chunks with --force; the re-snapshot the range's
    resnap = airflow.metadata.task_states("dblog_resnapshot")
    assert [k for k in resnap if k[0] == "resnapshot"], resnap
    assert all(v["state"] == "success" for v in resnap.values()), resnap
    snap0 = airflow.metadata.task_states("dblog_initial_load")[("snapshot", 0)]
    assert snap0["state"] == "success" and snap0["try"] == 2, snap0
    reports = state.reports(airflow.table)
    reread = {cid for cid, rep in reports.items() if rep["finished_at"] >= started}
    assert reread == expected_rereads, (reread, expected_rereads)
    logs = "\n".join(p.read_text(errors="replace") for p in (airflow.home / "logs").rglob("*.log"))
    assert "re-reading its chunks (--force)" in logs
    assert f"--batch 0 --sink {airflow.sink} --force" in logs

    assert_mirror_equals_source(airflow, spark, tmp_path, monkeypatch)
    assert_no_password_anywhere(airflow)


def test_the_dags_on_a_standalone_cluster_with_state_and_lake_on_s3(mariadb, tmp_path):
    """``dblog_initial_load`` with a writer running, then ``dblog_tail``, through ``airflow dags test`` on a
    standalone master + worker whose executors cannot see this host's files, state and lake on S3:
    ``current`` equals the source. The S3 credentials come only from an ``aws`` connection (no ``AWS_*``
    variable on the Airflow worker or the Spark worker: the executors get them from the driver), and the
    secret key is nowhere in the task logs, the metadata DB (XComs, rendered fields), the state or the
    executors' logs."""
    from tests.support.lakecheck import compare_rows
    from tests.support.seaweedfs import SeaweedS3
    from tests.support.spark_cluster import SparkCluster

    local = tmp_path / "airflow"  # the Airflow worker's own disk: hidden from the Spark worker
    local.mkdir()
    with SeaweedS3(tmp_path / "s3") as s3, SparkCluster(tmp_path / "cluster", hidden=local) as cluster:
        keys = s3.env()
        af = airflow_home(mariadb, local, f"afc{os.getpid()}", "s3://lake/af/state", "s3://lake/af/lake", {
            "DBLOG_CHECKPOINT": str(local / "checkpoint"), "DBLOG_AWS_CONN_ID": AWS_CONN_ID,
            f"AIRFLOW_CONN_{AWS_CONN_ID.upper()}": json.dumps({
                "conn_type": "aws", "login": keys["AWS_ACCESS_KEY_ID"], "password": keys["AWS_SECRET_ACCESS_KEY"],
                "extra": {"endpoint_url": s3.endpoint, "region_name": keys["AWS_REGION"]}}),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1",
                                                      "port": int(cluster.master.rsplit(":", 1)[1])})})
        assert not any(k.startswith("AWS_") for k in af.env)
        create_table(mariadb, af.table)
        writer = Writer(mariadb, af.table, seed=5)
        writer.start()
        try:
            load = af.run("dags", "test", "dblog_initial_load", timeout=900)
        finally:
            writer.stop()
        assert load.returncode == 0 and af.metadata.run_state("dblog_initial_load") == "success", (
            load.stdout[-6000:] + load.stderr[-3000:])
        tail = af.run("dags", "test", "dblog_tail", timeout=600)
        assert tail.returncode == 0 and af.metadata.run_state("dblog_tail") == "success", tail.stdout[-6000:]
        assert "app-" in (tmp_path / "cluster" / "logs" / "master.out").read_text()  # the cluster ran them
        from deltalake import DeltaTable

        options = {**keys, "AWS_ENDPOINT_URL": s3.endpoint}
        lake = DeltaTable(f"{af.sink}/{af.table}/current", storage_options=options).to_pyarrow_dataset().to_table()
        problems = compare_rows(lake, mariadb.port, af.table)
        assert not problems, problems[:5]
        state_objects = _s3_objects(s3, "lake/af/state")
        assert any(name.endswith("offsets.json") for name in state_objects), sorted(state_objects)[:20]
    assert all(PASSWORD not in output for output in af.outputs)
    secret = keys["AWS_SECRET_ACCESS_KEY"].encode()
    for i, output in enumerate(af.outputs):
        assert secret.decode() not in output, f"the S3 secret in the output of airflow command #{i}"
    for folder in (af.home, tmp_path / "cluster"):  # task logs, airflow.db; the executors' logs and work dirs
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix not in (".parquet", ".jar"):
                assert secret not in path.read_bytes(), f"the S3 secret in {path}"
    for name, body in state_objects.items():
        assert secret not in body, f"the S3 secret in s3://{name}"


def _s3_objects(s3, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` (BUCKET/PATH) and its bytes."""
    import pyarrow.fs as pafs

    keys = s3.env()
    fs = pafs.S3FileSystem(access_key=keys["AWS_ACCESS_KEY_ID"], secret_key=keys["AWS_SECRET_ACCESS_KEY"],
                           region=keys["AWS_REGION"], scheme="http", endpoint_override=s3.endpoint.split("://")[1])
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True))
    return {i.path: fs.open_input_stream(i.path).read() for i in infos if i.type == pafs.FileType.File}
