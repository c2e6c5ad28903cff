"""The Airflow surface as a data engineer drives it from the UI and from DAG code: operator arguments that take
table names or patterns (lists, names with spaces), DAG run params from the trigger form (a false or 0 param
overriding the Variable, a table name with a space in the re-snapshot form), and what a retry of a snapshot batch
re-reads. Against the in-memory dialect, without Spark or an Airflow database; the same operators run for real in
tests/e2e/test_airflow_e2e.py."""
from __future__ import annotations

import copy
import importlib.util
import itertools
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.local.chunk_readers import snapshot_table
from airflow_provider_dblog.steps.plan import plan_table, resolve_tables
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.store.state import StateDir
from tests.support.fake_dialect import InMemoryServer

ROOT = Path(__file__).resolve().parents[2]
SPACED = "Mixed Case.Order Items"
_servers = itertools.count()


def _server(*tables: str) -> InMemoryServer:
    server = InMemoryServer(f"airflow-inputs-{next(_servers)}")
    for table in tables:
        server.create(table, [("id", "bigint"), ("v", "varchar")], ["id"])
        for i in range(5):
            server.transaction((table, "insert", {"id": i, "v": "x"}))
    return server


@pytest.fixture
def hook_on(monkeypatch):
    """DblogHook reads the in-memory server instead of an Airflow connection."""
    from airflow_provider_dblog.airflow import hooks

    def use(server: InMemoryServer) -> None:
        source = SourceConfig.parse(server.uri)
        monkeypatch.setattr(hooks.DblogHook, "source_config", lambda self: source)
        monkeypatch.setattr(hooks.DblogHook, "options", lambda self: {})
        monkeypatch.setattr(hooks.DblogHook, "watermark", lambda self: "auto")
        monkeypatch.setattr(hooks.DblogHook, "check_state_source", lambda self, uri: SourceConfig.parse(uri))
    # the planner checks that the later tasks find spark-submit (the venv's pyspark has one)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return use


def test_the_planner_records_a_list_of_patterns_as_patterns_so_new_tables_still_join(hook_on, tmp_path):
    """DAG code passing ``tables=[...]``: the plan recorded the list's Python repr ("['shop.*']") as the capture's
    patterns, which matches nothing (or is a malformed pattern, which new_tables swallows): a continuous tail never
    took up a table created later, silently."""
    from airflow_provider_dblog.airflow.operators import ChunkPlannerOperator

    server = _server("shop.orders", SPACED)
    hook_on(server)
    state = str(tmp_path / "state")
    op = ChunkPlannerOperator(task_id="plan", tables=["shop.*", SPACED], state_dir=state, sink=str(tmp_path / "lake"),
                              chunk_size=2)
    batches = op.execute({})
    assert batches and sorted(StateDir(state).tables()) == [SPACED, "shop.orders"]
    capture = StateDir(state).options()["capture"]
    assert capture["tables"] == f"shop.*,{SPACED}"
    server.create("shop.added_later", [("id", "bigint"), ("v", "varchar")], ["id"])
    assert resolve_tables(SourceConfig.parse(server.uri), patterns=capture["tables"]) == [
        SPACED, "shop.added_later", "shop.orders"]


def test_the_health_sensor_takes_a_table_name_with_spaces_and_globs(hook_on, tmp_path):
    """``tables="Mixed Case.Order Items"`` was split at the spaces: 'bad table name 'Mixed'', the sensor failed
    (no retry) on a table the capture holds. It now takes what ``dblog health --tables`` takes."""
    from airflow_provider_dblog.airflow.sensors import DblogTailHealthSensor
    from airflow.sdk.exceptions import AirflowFailException

    server = _server(SPACED, "shop.orders")
    hook_on(server)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    for table in (SPACED, "shop.orders"):
        plan_table(SourceConfig.parse(server.uri), table, state, chunk_size=10)
        snapshot_table(state, sink, table, None, spark=None, driver_threads=1)
    build_offsets(state)

    def checked(tables):
        return sorted(DblogTailHealthSensor(task_id="health_check", state_dir=state, tables=tables)._check())

    assert checked(SPACED) == [SPACED]
    assert checked([SPACED]) == [SPACED]
    assert checked("Mixed Case.*, shop.orders") == [SPACED, "shop.orders"]
    with pytest.raises(AirflowFailException, match=r"^dblog: no captured table matches --tables shop.nope"):
        DblogTailHealthSensor(task_id="health_check", state_dir=state, tables="shop.nope").poke({})


def _render(template: str, params: dict, variables: dict) -> str:
    import jinja2

    var = SimpleNamespace(value=SimpleNamespace(get=lambda key, default=None: variables.get(key, default)))
    return jinja2.Environment().from_string(template).render(params=params, var=var)


def test_a_false_or_zero_param_wins_over_the_variable():
    """Precedence is param, Variable, env, default: an unticked ``repair`` (false) in the trigger form fell through
    to the Variable ``dblog_repair=true`` and the run repaired; ``chunk_size=0`` silently took the default instead
    of the planner's 'must be a positive number'."""
    from airflow_provider_dblog.airflow.dag_config import template

    variables = {"dblog_repair": "true", "dblog_chunk_size": "5000"}
    assert _render(template("repair"), {"repair": False}, variables) == "False"
    assert _render(template("repair"), {"repair": True}, {}) == "True"
    assert _render(template("repair"), {"repair": None}, variables) == "true"
    assert _render(template("repair"), {}, {}) == "false"
    assert _render(template("chunk_size"), {"chunk_size": 0}, variables) == "0"
    assert _render(template("chunk_size"), {"chunk_size": None}, variables) == "5000"
    assert _render(template("tables"), {"tables": ""}, {"dblog_tables": "shop.*"}) == "shop.*"  # empty: the Variable
    assert _render(template("tables"), {"tables": "  "}, {"dblog_tables": "shop.*"}) == "shop.*"
    assert _render(template("state"), {}, {}) == os.environ.get("DBLOG_STATE", "/var/lib/dblog/state")


def test_the_resnapshot_form_takes_the_table_names_the_capture_takes():
    """The trigger form's ``table`` pattern refused a space (and a backtick or ';'): a table captured as
    ``Mixed Case.Order Items`` could not be re-read from the UI. A name still needs its DB. part."""
    from airflow.sdk.exceptions import ParamValidationError

    spec = importlib.util.spec_from_file_location("dblog_resnapshot_dag", ROOT / "dags" / "dblog_resnapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in (SPACED, "shop.orders", "shop.it`s", "shop.a;b", "we ird.t.x"):
        params = copy.deepcopy(module.dag.params)
        params["table"] = name
        assert params["table"] == name
    for bad in ("orders", "shop.", ".orders", " shop.orders", ""):
        params = copy.deepcopy(module.dag.params)
        with pytest.raises(ParamValidationError):
            params["table"] = bad


class _Recorded(Exception):
    pass


@pytest.mark.parametrize("try_number, max_tries, retries, forced", [
    (1, 2, 2, False),  # the first try reads the batch's unreported chunks
    (2, 2, 2, False),  # an automatic retry resumes: the chunks the killed try reported are not read again
    (3, 2, 2, False),
    (4, 5, 2, True),   # the first try after a clear (max_tries = 3 + retries): the batch is read again whole
    (5, 5, 2, True),   # a retry of a cleared instance: which chunks it re-read is not known, read them all again
    (2, 1, 0, True),   # cleared, no retries
])
def test_a_retry_resumes_its_batch_and_a_cleared_instance_reads_it_again(monkeypatch, tmp_path, try_number,
                                                                         max_tries, retries, forced):
    """A snapshot batch killed after some of its chunks reported: its retry re-read every chunk (``--force`` on
    any try > 1), so a long batch near its execution_timeout could never finish. Airflow's own rule
    (first try of the current clear = max_tries - retries + 1) tells a retry from a clear."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_dblog.airflow import operators

    seen = {}

    def record(self, context):
        seen["args"] = list(self.application_args)
        raise _Recorded

    monkeypatch.setattr(SparkSubmitOperator, "execute", record)
    monkeypatch.setattr(operators, "checked_spark_hook", lambda operator, env: None)
    args = operators.snapshot_args(str(tmp_path / "state"), str(tmp_path / "lake"), 3)
    op = operators.DblogSparkSubmitOperator(task_id="snapshot", dblog_conn_id=None, application_args=args,
                                            retries=retries)
    ti = SimpleNamespace(try_number=try_number, max_tries=max_tries)
    with pytest.raises(_Recorded):
        op.execute({"ti": ti})
    assert ("--force" in seen["args"]) is forced


def _connection(monkeypatch, conn_type: str, extra: dict):
    from airflow.sdk import Connection

    from airflow_provider_dblog.airflow import hooks

    conn = Connection(conn_id="dblog_source", conn_type=conn_type, host="db.internal", login="dblog",
                      password="pw-Secret-9", schema="sales" if conn_type == "postgres" else None,
                      extra=__import__("json").dumps(extra))
    monkeypatch.setattr(hooks.DblogHook, "get_connection", classmethod(lambda cls, conn_id: conn))
    return hooks.DblogHook("dblog_source")


@pytest.mark.parametrize("conn_type, extra, named", [
    ("mysql", {"ssl": {"ca": "/etc/ssl/ca.pem"}}, "ssl"),
    ("mysql", {"ssl_mode": "VERIFY_IDENTITY", "watermark": "auto"}, "ssl_mode"),
    ("postgres", {"sslmode": "verify-full", "sslrootcert": "/etc/ssl/ca.pem"}, "sslmode, sslrootcert"),
])
def test_tls_extras_the_hook_cannot_honour_are_one_line_not_a_silent_unverified_connection(monkeypatch, conn_type,
                                                                                            extra, named):
    """A connection whose extras ask for a verified TLS connection (the MySQL / Postgres providers' ``ssl``,
    ``ssl_mode``, ``sslmode``, ``sslrootcert``): dblog ignored them and connected without verifying the server, with
    the CDC user's password, silently."""
    from airflow_provider_dblog.core.errors import DblogError

    hook = _connection(monkeypatch, conn_type, extra)
    with pytest.raises(DblogError) as caught:
        hook.source_config()
    message = str(caught.value)
    assert message.startswith(f"connection 'dblog_source': extras {named}: dblog cannot verify"), message
    assert "\n" not in message and "pw-Secret-9" not in message


def test_extras_the_hook_does_not_use_are_named_in_a_warning_and_harmless_tls_preferences_pass(monkeypatch):
    from airflow_provider_dblog.airflow import hooks

    lines = []
    log = SimpleNamespace(warning=lambda message, *args: lines.append(message % args))
    monkeypatch.setattr(hooks.DblogHook, "log", property(lambda self: log))
    hook = _connection(monkeypatch, "mysql", {"charset": "utf8mb4", "cursor": "sscursor", "watermark": "position",
                                              "ssl_mode": "PREFERRED"})
    assert hook.source_config().host == "db.internal"
    assert hook.watermark() == "position"
    hook.source_config()  # once per hook
    warned = [line for line in lines if "not used by dblog" in line]
    assert warned == ["connection 'dblog_source': extras charset, cursor are not used by dblog (it reads watermark, "
                      "watermark_table, server_id_range, publication)"], warned
