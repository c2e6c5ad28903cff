"""Operators: thin wrappers over ``airflow_provider_dblog.steps`` (the same steps as the CLI).

::

    plan = ChunkPlannerOperator(task_id="plan", dblog_conn_id=..., tables="db.orders", state_dir=..., sink=...)
    snapshot = DblogSparkSubmitOperator.partial(task_id="snapshot", dblog_conn_id=...,
                                                map_index_template="{{ task.batch_label }}").expand_kwargs(plan.output)
    report = DblogReportOperator(task_id="report", state_dir=...)
    tail = DblogSparkSubmitOperator(task_id="tail", dblog_conn_id=..., **tail_kwargs(state, sink))
    plan >> snapshot >> report >> tail

Credentials: the planner and the re-snapshot selector read the password from the Airflow connection
in-process; ``DblogSparkSubmitOperator`` hands it to its spark-submit child as
``$DBLOG_SOURCE_PASSWORD`` in the child's environment, set in ``execute()`` -- after template
rendering, so it is not among the rendered fields either. XComs hold batch indexes, labels, paths
and counts only; the state directory holds the URI without the password.

Object storage: every operator takes ``aws_conn_id`` (an Airflow ``aws`` connection; None: the worker's
own ``AWS_*`` variables). Its credentials reach a spark-submit child the same way as the password (its
environment), and a step run in the task through ``hooks.object_store_environment``.

Reruns: a mapped snapshot instance cleared in the UI / through
``POST /api/v2/dags/{dag_id}/clearTaskInstances`` re-reads its batch's chunks with ``--force`` (so do
the retries of that cleared try); an automatic retry resumes, reading only the chunks not reported
yet, as a first try does. See docs/airflow.md.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

import airflow_provider_dblog
from airflow_provider_dblog.airflow.hooks import (
    DblogHook, checked_spark_hook, object_store_env, object_store_environment,
)
from airflow_provider_dblog.airflow.lake_events import (
    LAKE_ALIAS, Application, add_asset_events, advanced, event_extras, lake_alias, lake_marks, lake_schemas,
    lineage_available, operator_lineage,
)
from airflow_provider_dblog.airflow.metrics import install as install_metrics
from airflow_provider_dblog.airflow.metrics import spark_env as metrics_env
from airflow_provider_dblog.core.config import chunk_keys, compress_ids, positive_int, truthy
from airflow_provider_dblog.core.errors import DblogError

# the spark-submit application (``cli/spark_app.py``), by path: spark-submit runs it as a file
SUBMIT_APPLICATION = str(Path(airflow_provider_dblog.__file__).parent / "cli" / "spark_app.py")

DEFAULT_CONN_ID = DblogHook.default_conn_name


def _fail(exc: DblogError):
    """Configuration and data errors: fail without retrying (a retry cannot fix them)."""
    return AirflowFailException(f"dblog: {exc}")


def snapshot_args(state_dir: str, sink: str, batch: int, force: bool = False,
                  chunks: Sequence[int] | None = None, table: str | None = None) -> list[str]:
    args = ["snapshot", "--state", str(state_dir), "--batch", str(batch), "--sink", str(sink)]
    if force:
        args.append("--force")
    if table:
        args += ["--table", table]
    if chunks:
        args += ["--chunks", ",".join(str(c) for c in chunks)]
    return args


def tail_kwargs(state_dir: str, sink: str, continuous: bool = False, table: str | None = None,
                max_events: int = 0, checkpoint: str | None = None, schema_changes: str | None = None) -> dict:
    """Kwargs for a ``DblogSparkSubmitOperator`` running the tail (``--available-now`` by default);
    ``checkpoint``: its ``--checkpoint`` directory (a template rendering empty means the default);
    ``schema_changes``: its ``--schema-changes`` behaviour (evolve, fail, freeze)."""
    args = ["tail", "--state", str(state_dir), "--sink", str(sink), "--continuous" if continuous else "--available-now"]
    if checkpoint is not None:
        args += ["--checkpoint", str(checkpoint)]
    if schema_changes is not None:
        args += ["--schema-changes", str(schema_changes)]
    if table:
        args += ["--table", table]
    if max_events:
        args += ["--max-events", str(int(max_events))]
    return {"application": SUBMIT_APPLICATION, "application_args": args, "name": "dblog-tail",
            "batch_label": "tail " + ("continuous" if continuous else "available-now")}


def check_map_length(count: int, what: str, chunks: int | None = None) -> None:
    from airflow.sdk import conf

    limit = conf.getint("core", "max_map_length", fallback=1024)
    if count > limit:
        hint = (f"plan fewer, larger batches (batch_size >= {math.ceil(chunks / limit)} chunks, or a larger "
                f"chunk_size)" if chunks else "plan fewer, larger batches")
        raise DblogError(f"{count} {what} exceed Airflow's [core] max_map_length = {limit}: {hint}, or raise "
                         f"max_map_length (AIRFLOW__CORE__MAX_MAP_LENGTH)")


class ChunkPlannerOperator(BaseOperator):
    """Plans one or more tables; returns one kwargs dict per chunk batch for
    ``DblogSparkSubmitOperator.partial(...).expand_kwargs(...)`` (or a plain ``SparkSubmitOperator``
    with ``env_vars`` that carry ``$DBLOG_SOURCE_PASSWORD`` some other way).

    Each dict: ``application`` (the package's ``cli/spark_app.py``), ``application_args``
    (``snapshot --state DIR --batch I --sink DIR [--force]``), ``name`` (the Spark app name) and
    ``batch_label`` (``batch 3: shop.orders chunks 0-7 [-∞, 80000)``, or ``batch 0: 12 tables, 14 chunks:
    shop.a, ...`` for a packed batch: use ``map_index_template="{{ task.batch_label }}"``).

    ``batch_rows``: estimated rows per batch (default ``batch_size`` x ``chunk_size``); ``startup``: the
    startup mode (docs/startup-modes.md): a mode without a snapshot returns no batches (the mapped
    snapshot task is skipped: give the report task ``trigger_rule="none_failed"``).
    """

    template_fields: Sequence[str] = ("dblog_conn_id", "tables", "exclude", "state_dir", "sink", "chunk_size",
                                      "batch_size", "batch_rows", "chunk_key", "watermark", "force", "startup",
                                      "aws_conn_id", "checkpoint")
    ui_color = "#e8f4e8"

    def __init__(self, *, tables: str | Sequence[str], state_dir: str, sink: str,
                 dblog_conn_id: str = DEFAULT_CONN_ID, chunk_size: int | str = 100_000, batch_size: int | str = 8,
                 chunk_key: str | None = None, watermark: str | None = None, force: bool | str = False,
                 exclude: str | Sequence[str] | None = None, batch_rows: int | str | None = None,
                 startup: str | None = None, aws_conn_id: str | None = None, checkpoint: str | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.checkpoint = checkpoint  # the tail's --checkpoint ("": its default), checked at plan; None: not known
        self.aws_conn_id = aws_conn_id
        self.batch_rows = batch_rows
        self.startup = startup
        self.dblog_conn_id = dblog_conn_id
        self.tables = tables
        self.exclude = exclude
        self.state_dir = state_dir
        self.sink = sink
        self.chunk_size = chunk_size
        self.batch_size = batch_size
        self.chunk_key = chunk_key
        self.watermark = watermark
        self.force = force

    def execute(self, context) -> list[dict]:
        try:
            with object_store_environment(self.aws_conn_id):
                tables, batches = self._plan()
        except DblogError as exc:
            raise _fail(exc) from None
        self.log.info("%d tables in %d snapshot batches", len(tables), len(batches))
        force = truthy(self.force)
        return [{"application": SUBMIT_APPLICATION,
                 "application_args": snapshot_args(self.state_dir, self.sink, b["batch"], force),
                 "name": f"dblog-snapshot-{b['batch']}",
                 "batch_label": f"batch {b['batch']}: {b['label']}"} for b in batches]

    def _plan(self) -> tuple[list[str], list[dict]]:
        """The planned tables and their batches."""
        from airflow_provider_dblog.steps.plan import capture_options, plan_tables, resolve_tables
        from airflow_provider_dblog.steps.preflight import SPARK_SUBMIT_BINARIES

        if not self.tables or not str(self.tables).strip():
            raise DblogError("no tables to plan: set the tables param, the Variable dblog_tables or $DBLOG_TABLES "
                             "(DB.TABLE names or globs, comma-separated: shop.*,crm.customers)")
        chunk_size, batch_size = positive_int(self.chunk_size, "chunk_size"), positive_int(self.batch_size, "batch_size")
        hook = DblogHook(self.dblog_conn_id)
        options, source = hook.options(), hook.source_config()
        tables = resolve_tables(source, patterns=self.tables, exclude=self.exclude or None, options=options)
        summary = plan_tables(source, tables, self.state_dir, chunk_keys(self.chunk_key, tables),
                              chunk_size=chunk_size, batch_size=batch_size,
                              watermark=str(self.watermark or "") or hook.watermark(),
                              watermark_table=options.get("watermark_table"), save_password=False,
                              # the patterns as given: a list's Python repr ("['shop.*']") would match nothing later
                              options={**options, **capture_options(self.tables, self.exclude or None,
                                                                    chunk_size, batch_size,
                                                                    self.batch_rows or None)},
                              batch_rows=self.batch_rows or None, startup=self.startup or None,
                              sink=self.sink, checkpoint=self.checkpoint, spark_submit=SPARK_SUBMIT_BINARIES)
        batches = [b for b in summary["batches"] if set(b["tables"]) & set(tables)]
        check_map_length(len(batches), "snapshot batches",
                         sum(summary["tables"][t]["chunks"] for t in tables))
        for name in tables:
            info = summary["tables"][name]
            self.log.info("planned %s: %s rows, %d chunks, key %s, %s watermarks, startup %s", name,
                          f"{info['rows']:,}", info["chunks"], ",".join(info["key"]), info["watermark"],
                          info["startup"])
        return tables, batches


class DblogSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` for the dblog application: adds the source password, the object store's
    credentials and the venv's Python to the child's environment (never to its arguments), and turns a
    rerun of a snapshot batch into a ``--force`` re-read.

    :param dblog_conn_id: the source connection whose password the application needs (None: the
        application finds ``$DBLOG_SOURCE_PASSWORD`` or the credentials file itself).
    :param aws_conn_id: an ``aws`` connection for ``s3://`` state and lake (None: the worker's ``AWS_*``
        variables); the driver hands them to its executors inside the tasks.
    :param batch_label: free text for ``map_index_template="{{ task.batch_label }}"``.
    :param force_on_rerun: a snapshot instance cleared after it ran re-reads its chunks even if they
        reported (``--force``), and so do its retries; an automatic retry of a try never cleared resumes
        (reads only the chunks not reported yet). Default True; False: never ``--force`` on its own.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "dblog_conn_id", "batch_label",
                                      "aws_conn_id")

    def __init__(self, *, dblog_conn_id: str | None = DEFAULT_CONN_ID, batch_label: str | None = None,
                 force_on_rerun: bool = True, application: str = SUBMIT_APPLICATION, aws_conn_id: str | None = None,
                 **kwargs) -> None:
        kwargs.setdefault("name", "dblog")
        if kwargs.get("outlets") is None:  # asset events of the tables it advances (airflow/lake_events.py)
            kwargs["outlets"] = [lake_alias()]
        super().__init__(application=application, **kwargs)
        self.dblog_conn_id = dblog_conn_id
        self.aws_conn_id = aws_conn_id
        self.batch_label = batch_label
        self.force_on_rerun = force_on_rerun

    def _rerun(self, ti) -> tuple[int, bool]:
        """(try number, whether this try re-reads the batch whole). An automatic retry resumes: it reads only
        the chunks not reported yet, like the first try (a batch killed near its timeout would otherwise start
        over at every retry). A try after a clear (UI or clearTaskInstances) asked for the batch again: it and
        its own retries re-read every chunk. Airflow's rule: a clear sets max_tries = try_number + retries, so
        the first try since the last clear is max_tries - retries + 1 (1 when never cleared)."""
        try_number = getattr(ti, "try_number", 1) or 1
        max_tries = getattr(ti, "max_tries", None)
        if try_number <= 1:
            return try_number, False
        if not isinstance(max_tries, int):  # cannot tell a retry from a clear: read the batch again, as before
            return try_number, True
        return try_number, max_tries - (self.retries or 0) + 1 > 1

    def _remote_master(self) -> bool:
        """YARN / Kubernetes: the Spark provider turns env_vars into --conf arguments there. Its master is the
        host, or ``CONN_TYPE://HOST`` (a ``yarn`` or ``k8s`` connection type with a plain host name): both are
        looked at, or such a connection put the password on spark-submit's command line."""
        from airflow.sdk import BaseHook

        try:
            conn = BaseHook.get_connection(self._conn_id)
            master = f"{conn.conn_type or ''}://{conn.host or ''}"
        except Exception:  # the provider falls back to yarn for an unknown connection
            master = "yarn"
        return "yarn" in master or "k8s" in master

    def execute(self, context) -> Any:
        args = [str(a) for a in (self.application_args or [])]
        if args[:1] == ["snapshot"] and "--force" not in args and self.force_on_rerun:
            try_number, reads_again = self._rerun(context.get("ti"))
            if reads_again:
                self.log.info("try %d of this batch (cleared): re-reading its chunks (--force)", try_number)
                args.append("--force")
            elif try_number > 1:
                self.log.info("try %d of this batch, a retry: reading only its chunks not reported yet", try_number)
        self.application_args = args
        env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, **(self.env_vars or {})}
        try:
            secret_env = {**(DblogHook(self.dblog_conn_id).spark_env() if self.dblog_conn_id else {}),
                          **object_store_env(self.aws_conn_id)}
        except DblogError as exc:
            raise _fail(exc) from None
        if secret_env and self._remote_master():
            self.log.warning("not passing %s to a YARN/Kubernetes application (they would be --conf arguments): "
                             "provide them to the driver as cluster secrets", ", ".join(sorted(secret_env)))
        else:
            env.update(secret_env)
        env.update(metrics_env())  # the application's metrics go through Airflow's stats too
        self.env_vars = env
        self._hook = checked_spark_hook(self, env)  # built from the attributes above; its spark-submit found first
        install_metrics()
        app = Application.from_args(args)
        before = self._lake_marks(app)
        result = super().execute(context)
        if before is not None:
            self._tell_airflow(app, before, context)
        return result

    # ---- what the application wrote: metrics, asset events (airflow/lake_events.py) ----------------
    def _lake_marks(self, app: Application) -> dict | None:
        """Each table's lake versions before the application runs (None: nothing to watch)."""
        if not app.writes_lake:
            return None
        try:
            with object_store_environment(self.aws_conn_id):
                return lake_marks(app.sink, app.tables())
        except Exception as exc:  # noqa: BLE001 - the figures never stop the capture
            self.log.warning("no asset events for this run: the lake could not be read before it (%s)", exc)
            return None

    def _tell_airflow(self, app: Application, before: dict, context) -> None:
        """After the application: an asset event per lake table that advanced, with its figures (position,
        rows changed, lag; ``steps.status``, which also sends the per-table gauges), through ``dblog_lake``."""
        from airflow_provider_dblog.steps.status import capture_status

        try:
            with object_store_environment(self.aws_conn_id):
                tables = sorted(set(app.tables()) | set(before))
                moved = advanced(before, lake_marks(app.sink, tables))
                source = DblogHook(self.dblog_conn_id).source_config() if self.dblog_conn_id else None
                status = capture_status(app.state, app.sink, tables, source=source)["tables"] if tables else {}
                if lineage_available():  # built here: the OpenLineage listener asks for it in a fork
                    self._complete_lineage = operator_lineage(app, lake_schemas(app.sink, tables))
            extras = event_extras(app, moved, status)
            if "outlet_events" in context and any(getattr(o, "name", None) == LAKE_ALIAS for o in self.outlets or ()):
                add_asset_events(context["outlet_events"], app.sink, extras)
            for (table, kind), extra in sorted(extras.items()):
                self.log.info("lake advanced: %s %s at %s (%s changes; lag %s s)", table, kind, extra["position"],
                              extra["rows_changed"], extra["lag_seconds"])
        except Exception as exc:  # noqa: BLE001 - the data is committed: the figures never fail the task
            self.log.warning("no asset events for this run: %s", exc)

    def get_openlineage_facets_on_start(self):
        """OpenLineage: the source tables in, their Delta tables out (``lake_events.operator_lineage``)."""
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance):
        """As at the start, with the Delta tables' schemas (built by ``execute``: this runs in a fork, where
        delta-rs, already used by the task, can hang)."""
        return getattr(self, "_complete_lineage", None) or self._lineage(None)

    def _lineage(self, schemas: dict | None):
        try:
            with object_store_environment(self.aws_conn_id):
                return operator_lineage(Application.from_args(self.application_args), schemas)
        except Exception as exc:  # noqa: BLE001 - lineage never fails the task
            self.log.warning("no OpenLineage datasets: %s", exc)
            return None


def follows_binlog(startup: str | None) -> bool:
    """For a ``ShortCircuitOperator`` before the tail: False (skip the tail) for ``snapshot-only``."""
    from airflow_provider_dblog.core.startup import StartupMode

    return StartupMode.parse(startup or None).tails


class DblogReportOperator(BaseOperator):
    """Checks every planned chunk reported, builds the offset map; fails listing missing chunks.

    Returns (XCom) a small summary: chunks, rows, HW range per table and overall.
    """

    template_fields: Sequence[str] = ("state_dir", "aws_conn_id")
    ui_color = "#fdf3e0"

    def __init__(self, *, state_dir: str, aws_conn_id: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state_dir = state_dir
        self.aws_conn_id = aws_conn_id

    def execute(self, context) -> dict:
        from airflow_provider_dblog.steps.report import build_offsets

        try:
            with object_store_environment(self.aws_conn_id):
                result = build_offsets(self.state_dir)
        except DblogError as exc:
            raise _fail(exc) from None
        self.log.info("report: %d chunks, %d rows, HW %s .. %s", result["chunks"], result["rows"], result["min_hw"],
                      result["max_hw"])
        return result


class ResnapshotPlannerOperator(BaseOperator):
    """Chooses the chunks a re-snapshot re-reads; returns kwargs for the mapped ``DblogSparkSubmitOperator``
    (``snapshot --force --chunks ...``, one per batch that holds a chosen chunk).

    Selection (each optional, combined with AND): ``chunk_ids`` (``[3, 5]`` or ``"3,5-7"``), a key range
    ``key_lo`` .. ``key_hi`` (inclusive; a JSON list for composite keys), and ``filter`` (see
    ``airflow_provider_dblog.steps.resnapshot``). Arguments left None are read from the DAG run's
    params of the same name, so trigger-form values keep their JSON types.
    """

    template_fields: Sequence[str] = ("dblog_conn_id", "state_dir", "sink", "table", "aws_conn_id")
    ui_color = "#e8eef8"
    PARAM_NAMES = ("table", "key_lo", "key_hi", "chunk_ids", "filter")

    def __init__(self, *, state_dir: str, sink: str, dblog_conn_id: str = DEFAULT_CONN_ID, table: str | None = None,
                 key_lo: Any = None, key_hi: Any = None, chunk_ids: Any = None, filter: str | None = None,
                 aws_conn_id: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dblog_conn_id = dblog_conn_id
        self.aws_conn_id = aws_conn_id
        self.state_dir = state_dir
        self.sink = sink
        self.table = table
        self.key_lo = key_lo
        self.key_hi = key_hi
        self.chunk_ids = chunk_ids
        self.filter = filter

    def _value(self, name: str, context) -> Any:
        value = getattr(self, name)
        if value is None:
            value = (context.get("params") or {}).get(name)
        return value

    def execute(self, context) -> list[dict]:
        try:
            values = {n: self._value(n, context) for n in self.PARAM_NAMES}
            with object_store_environment(self.aws_conn_id):
                return self._select(**values)
        except DblogError as exc:
            raise _fail(exc) from None

    def _select(self, table, key_lo, key_hi, chunk_ids, filter) -> list[dict]:
        from airflow_provider_dblog.steps.resnapshot import reject_unsafe, select_chunks
        from airflow_provider_dblog.store.state import StateDir

        if filter not in (None, ""):
            reject_unsafe(filter)  # before anything else touches the input
        source = None
        if key_lo not in (None, "") or key_hi not in (None, "") or filter not in (None, ""):
            source = DblogHook(self.dblog_conn_id).check_state_source(StateDir(self.state_dir).load_raw()["source"])
        selection = select_chunks(self.state_dir, table, key_lo, key_hi, chunk_ids, filter, source=source)
        if not selection["chunks"]:
            self.log.info("re-snapshot of %s (%s): no chunk selected, nothing to re-read", selection["table"],
                          selection["what"])
            return []
        self.log.info("re-snapshot of %s (%s): chunks %s", selection["table"], selection["what"],
                      ",".join(map(str, selection["chunks"])))
        out = [{"application": SUBMIT_APPLICATION,
                "application_args": snapshot_args(self.state_dir, self.sink, b["batch"], True, b["chunks"], b["table"]),
                "name": f"dblog-resnapshot-{b['batch']}", "batch_label": b["label"]} for b in selection["batches"]]
        check_map_length(len(out), "re-snapshot batches")
        return out


class DblogVerifyOperator(BaseOperator):
    """Checksum verify of the lake against the live source (``dblog verify``: per chunk, computed inside the
    database, while writers and the tail run). Drift fails the task naming the drifted chunks, unless
    ``repair``: then it returns kwargs for a mapped ``DblogSparkSubmitOperator`` that re-reads exactly those
    chunks (``snapshot --force --chunks ...``), and a second verify after it says whether that converged.
    Returns [] when the lake equals the source."""

    template_fields: Sequence[str] = ("dblog_conn_id", "state_dir", "sink", "tables", "repair", "aws_conn_id")
    ui_color = "#e8f6f0"

    def __init__(self, *, state_dir: str, sink: str, tables: str, dblog_conn_id: str = DEFAULT_CONN_ID,
                 repair: bool | str = False, aws_conn_id: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dblog_conn_id, self.aws_conn_id = dblog_conn_id, aws_conn_id
        self.state_dir, self.sink, self.tables, self.repair = state_dir, sink, tables, repair

    def execute(self, context) -> list[dict]:
        from airflow_provider_dblog.steps.resnapshot import select_chunks
        from airflow_provider_dblog.steps.verify import planned_tables, verify_tables
        from airflow_provider_dblog.store.state import StateDir

        try:
            with object_store_environment(self.aws_conn_id):
                source = DblogHook(self.dblog_conn_id).check_state_source(StateDir(self.state_dir).load_raw()["source"])
                names = planned_tables(self.state_dir, patterns=self.tables or "*")
                result = verify_tables(self.state_dir, self.sink, names, source=source)
                if result["equal"]:
                    self.log.info("verify: %d chunks of %d tables equal the source", result["chunks"], len(names))
                    return []
                drifted = {t: r["drifted"] for t, r in result["tables"].items() if r["drifted"]}
                named = "; ".join(f"{t} chunks {compress_ids(c)}" for t, c in drifted.items())
                if not truthy(self.repair):
                    raise DblogError(f"the lake differs from the source: {named} (trigger with repair on, or run "
                                     f"dblog verify --repair)")
                self.log.info("verify: %s differ: re-reading them", named)
                out = []
                for table, chunks in drifted.items():
                    for b in select_chunks(self.state_dir, table, chunk_ids=compress_ids(chunks), source=source)["batches"]:
                        out.append({"application": SUBMIT_APPLICATION, "name": f"dblog-repair-{b['batch']}",
                                    "application_args": snapshot_args(self.state_dir, self.sink, b["batch"], True,
                                                                      b["chunks"], b["table"]),
                                    "batch_label": "repair " + b["label"].removeprefix("re-snapshot ")})
                check_map_length(len(out), "repair batches")
                return out
        except DblogError as exc:
            raise _fail(exc) from None


class DblogMaintainOperator(BaseOperator):
    """Compacts, checkpoints and vacuums the lake's Delta tables (``dblog maintain``); no Spark needed."""

    template_fields: Sequence[str] = ("state_dir", "sink", "retention_hours", "aws_conn_id")
    ui_color = "#eef6e8"

    def __init__(self, *, state_dir: str, sink: str, retention_hours: float | str = 168,
                 aws_conn_id: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id
        self.state_dir = state_dir
        self.sink = sink
        self.retention_hours = retention_hours

    def execute(self, context) -> dict:
        from airflow_provider_dblog.steps.maintain import maintain

        try:
            with object_store_environment(self.aws_conn_id):
                return maintain(self.state_dir, self.sink, retention_hours=float(self.retention_hours))
        except (DblogError, ValueError) as exc:
            raise _fail(DblogError(str(exc))) from None
