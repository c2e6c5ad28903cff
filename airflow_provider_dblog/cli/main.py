"""``dblog``: the pipeline's steps without Airflow (local runs, demos, debugging, scripting); each
command is one call into ``steps/``.

Every command exits non-zero with a one-line reason on any error.
"""
from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import signal
import sys
import threading

from airflow_provider_dblog.core import metrics
from airflow_provider_dblog.core.config import PASSWORD_ENV, chunk_keys, parse_chunk_ids
from airflow_provider_dblog.core.errors import DblogError, root_cause
from airflow_provider_dblog.core.schema_events import SCHEMA_CHANGE_BEHAVIOURS

log = logging.getLogger("dblog")


class RedactingFilter(logging.Filter):
    """Defence in depth: no log record ever shows the source password, whatever logged it."""

    def __init__(self, secret: str):
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.secret and self.secret in message:
            record.msg, record.args = message.replace(self.secret, "***"), ()
        return True


class RedactingFormatter(logging.Formatter):
    """The whole formatted record, traceback included (``-v``), with every secret known so far replaced."""

    def format(self, record: logging.LogRecord) -> str:
        return redacted(super().format(record))


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s dblog %(levelname)s %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setFormatter(RedactingFormatter("%(asctime)s dblog %(levelname)s %(message)s"))
    for noisy in ("py4j", "pymysqlreplication"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


_SECRETS: set[str] = set()


def _redact(secret: str) -> None:
    """Never show ``secret`` (nor its percent-encoded form, as a URI holds it) in a log record or an error."""
    if secret:
        from urllib.parse import quote

        for form in {secret, quote(secret, safe="")}:
            _SECRETS.add(form)
            for handler in logging.getLogger().handlers:
                handler.addFilter(RedactingFilter(form))


def redacted(text: str) -> str:
    """``text`` with every secret known so far replaced (the longest first: one may hold another)."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _source(uri: str):
    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.store.credentials import with_password

    config = with_password(SourceConfig.parse(uri))
    _redact(config.password)
    return config


def _print(data) -> None:
    print(json.dumps(data, indent=1, default=str))


def _executor(args, app_name: str, short_lived: bool = True, **local):
    """Where the step reads (``steps.executor``): under spark-submit the application's stock session; for a
    local run the single-machine executor (a tuned local Spark started only if the step needs it, plus
    ``local`` options: the driver's threads, the size of a catch-up read without Spark)."""
    if args.spark_submit:
        from airflow_provider_dblog.spark.executor import SparkExecutor

        return SparkExecutor()
    from airflow_provider_dblog.local.executor import LocalExecutor

    return LocalExecutor(app_name, short_lived=short_lived, **local)


def _capture(args):
    """The source and the tables a plan or run names (``--table`` or ``--tables``/``--exclude``)."""
    from airflow_provider_dblog.steps.plan import resolve_tables

    if args.exclude and not args.tables:
        raise DblogError("--exclude needs --tables PATTERNS")
    source = _source(args.source)
    signal_table = getattr(args, "signal_table", None)
    if signal_table and args.tables:  # read by the tail, never captured (also by tables joining the patterns)
        args.exclude = ",".join(p for p in (args.exclude, signal_table) if p)
    # ``--table`` names as written, split at commas only: a space is part of a name ("Mixed Case.Order Items")
    named = [t.strip() for t in args.table.split(",") if t.strip()] if args.table else None
    tables = resolve_tables(source, named, args.tables, args.exclude)
    return source, tables, chunk_keys(args.chunk_key, tables)


def cmd_plan(args) -> dict:
    from airflow_provider_dblog.steps.plan import capture_options, plan_tables

    source, tables, keys = _capture(args)
    return plan_tables(source, tables, args.state, keys, chunk_size=args.chunk_size, batch_size=args.batch_size,
                       watermark=args.watermark, watermark_table=args.watermark_table, batch_rows=args.batch_rows,
                       startup=args.startup, options={**capture_options(args.tables, args.exclude, args.chunk_size,
                                                                       args.batch_size, args.batch_rows, args.watermark),
                                                      **_signal_option(args), **_publication_option(args, source)},
                       sink=args.sink, checkpoint=args.checkpoint or "")


def cmd_snapshot(args) -> dict:
    from airflow_provider_dblog.steps.snapshot import snapshot_batch

    reports = snapshot_batch(args.state, args.batch, args.sink, args.force, parse_chunk_ids(args.chunks),
                             executor=_executor(args, "dblog-snapshot"), table=args.table)
    tables: dict[str, list[int]] = {}
    for report in reports:
        tables.setdefault(report["table"], []).append(report["chunk"])
    return {"batch": args.batch, "tables": tables, "chunks": sum(len(c) for c in tables.values()),
            "rows": sum(r["rows"] for r in reports)}


def cmd_report(args) -> dict:
    from airflow_provider_dblog.steps.report import build_offsets

    return build_offsets(args.state)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def cmd_tail(args) -> dict:
    from airflow_provider_dblog.steps.tail import run_tail

    if args.spark_submit:
        executor = _executor(args, "dblog-tail")
    else:  # a local run may read a small cold catch-up in this process
        from airflow_provider_dblog.local.catch_up import DRIVER_CATCH_UP_BYTES

        catch_up = DRIVER_CATCH_UP_BYTES if args.driver_catch_up_mb is None else int(args.driver_catch_up_mb * 2**20)
        executor = _executor(args, "dblog-tail", short_lived=False, catch_up_bytes=catch_up)
        if args.continuous or catch_up == 0:  # Spark's query will run: its JVM starts while the tail checks the
            executor.start_spark()  # lake and the binlog (many tables: seconds)
    return run_tail(args.state, args.sink, available_now=not args.continuous, trigger_seconds=args.trigger_seconds,
                    max_events=args.max_events, tables=[args.table] if args.table else None,
                    stop_event=_stop_on_signals(), executor=executor, merge_interval=args.merge_interval,
                    schema_changes=args.schema_changes, checkpoint=args.checkpoint, on_purge=args.on_purge,
                    batch_memory_bytes=int(args.batch_memory_mb * 2**20), signal_table=args.signal_table,
                    signal_seconds=args.signal_seconds)


def cmd_failover(args) -> dict:
    from airflow_provider_dblog.steps.failover import move_source

    return move_source(args.state, _source(args.source))


def cmd_drop(args) -> dict:
    from airflow_provider_dblog.steps.drop import drop_capture_stream

    return drop_capture_stream(args.state)


def cmd_mirror(args) -> dict:
    from airflow_provider_dblog.steps.mirror import mirror

    return mirror(args.state, args.sink, args.table, args.out)


def cmd_verify(args) -> dict:
    from airflow_provider_dblog.steps.verify import planned_tables, verify_tables

    tables = planned_tables(args.state, args.table, args.tables)
    if args.rows or args.out:
        from airflow_provider_dblog.steps.mirror import verify

        if len(tables) > 1 and args.out:
            raise DblogError("--out writes one table's mirror: give --table")
        results, differing = [], []
        for table in tables:  # every table is compared, and the one line names each that differs
            try:
                results.append(verify(args.state, args.sink, table, args.out))
            except DblogError as exc:
                differing.append(str(exc))
        if differing:
            raise DblogError("; ".join(differing))
        return results[0] if len(results) == 1 else {"tables": results, "equal": True}
    result = verify_tables(args.state, args.sink, tables, repair=args.repair,
                           executor=_executor(args, "dblog-repair") if args.repair else None)
    if not result["equal"]:
        _print(result)
        raise DblogError(f"the lake differs from the source in chunks {', '.join(map(str, result['unrepaired'][:20]))}"
                         + (" after the repair" if args.repair else ": rerun with --repair to re-read them"))
    return result


def cmd_health(args) -> dict:
    from airflow_provider_dblog.steps.health import check_health, purge_messages
    from airflow_provider_dblog.steps.verify import planned_tables
    from airflow_provider_dblog.store.state import StateDir

    _redact(StateDir(args.state, args.checkpoint).source().password)
    tables = planned_tables(args.state, args.table, args.tables) if args.table or args.tables else None
    report = check_health(args.state, args.max_stall_seconds, tables, checkpoint=args.checkpoint,
                          purge_warning_seconds=args.purge_warning_seconds,
                          purge_warning_bytes=args.purge_warning_bytes)
    if report is None:
        raise DblogError(f"no offset map in {args.state} yet: the initial load has not reported (dblog report)")
    purged, close = purge_messages(report)
    for line in purged:
        log.error("binlog purged: %s", line)
    for line in close:
        log.warning("binlog purge horizon: %s", line)
    return {"tables": report, "binlog_purged": len(purged), "purge_warnings": len(close)}


def cmd_status(args) -> dict | None:
    from airflow_provider_dblog.core.status import render
    from airflow_provider_dblog.steps.status import capture_status
    from airflow_provider_dblog.steps.verify import planned_tables
    from airflow_provider_dblog.store.state import StateDir

    _redact(StateDir(args.state).source().password)
    tables = planned_tables(args.state, args.table, args.tables) if args.table or args.tables else None
    report = capture_status(args.state, args.sink, tables, args.max_stall_seconds)
    if args.json:
        return report
    print(render(report))
    return None


def cmd_maintain(args) -> dict:
    from airflow_provider_dblog.steps.maintain import maintain

    return maintain(args.state, args.sink, [args.table] if args.table else None, args.retention_hours)


def cmd_executor_zip(args) -> dict:
    from airflow_provider_dblog.cli.executor_zip import write_executor_zip

    return write_executor_zip(args.out)


def cmd_resnapshot(args) -> dict:
    from airflow_provider_dblog.steps.resnapshot import resnapshot

    return resnapshot(args.state, args.sink, args.table, args.key_lo, args.key_hi, args.chunks, args.filter,
                      dry_run=args.dry_run, executor=_executor(args, "dblog-resnapshot"))


def cmd_run(args) -> dict:
    from airflow_provider_dblog.steps.plan import capture_options
    from airflow_provider_dblog.steps.run import run_capture

    source, tables, keys = _capture(args)
    local = {}
    if args.spark_submit and args.driver_threads is not None:
        log.warning("run: --driver-threads is for local runs; under spark-submit Spark's "
                    "executors read every chunk")
    if not args.spark_submit:
        from airflow_provider_dblog.local.catch_up import DRIVER_CATCH_UP_BYTES
        from airflow_provider_dblog.local.chunk_readers import DRIVER_THREADS

        local = {"catch_up_bytes": DRIVER_CATCH_UP_BYTES,
                 "driver_threads": DRIVER_THREADS if args.driver_threads is None else args.driver_threads}
    return run_capture(source, tables, args.state, args.sink, args.chunk_size, args.batch_size, keys, args.watermark,
                       args.watermark_table, args.batch_rows, args.startup, executor=_executor(args, "dblog-run", **local),
                       schema_changes=args.schema_changes, checkpoint=args.checkpoint,
                       options={**capture_options(args.tables, args.exclude, args.chunk_size, args.batch_size,
                                                  args.batch_rows, args.watermark), **_signal_option(args),
                                **_publication_option(args, source)})


def _publication_option(args, source) -> dict:
    """The plan's record of ``--publication`` (a PostgreSQL publication its owner made: dblog neither creates
    nor drops it)."""
    name = getattr(args, "publication", None)
    if not name:
        return {}
    if source.scheme != "postgresql":
        raise DblogError(f"--publication {name}: publications are PostgreSQL's; leave it out for a {source.scheme} "
                         f"source")
    return {"publication": name, "publication_given": True}


def _signal_option(args) -> dict:
    """The plan's record of ``--signal-table`` (``steps.signals``)."""
    table = getattr(args, "signal_table", None)
    if not table:
        return {}
    if "." not in table.strip(".") or table.count(".") != 1:
        raise DblogError(f"--signal-table {table}: name it DB.TABLE (PostgreSQL: SCHEMA.TABLE)")
    return {"signal_table": table}


def _schema_changes_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schema-changes", choices=SCHEMA_CHANGE_BEHAVIOURS, default="evolve",
                   help="a DDL statement of a captured table: evolve (follow it: new columns, a re-read of the "
                        "table's chunks), fail (stop before it with its statement and position), freeze (keep "
                        "the lake's columns)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dblog", description=(
        "Lock-free chunked snapshots of MySQL/MariaDB tables on Spark, kept current from the binlog "
        "(PostgreSQL: snapshots, for now)."))
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def planning(p):
        p.add_argument("--source", required=True, help="mysql://USER[:PASSWORD]@HOST:PORT[/DB] or "
                                                        "postgresql://USER[:PASSWORD]@HOST:PORT/DB (or password in "
                                                        "$DBLOG_SOURCE_PASSWORD)")
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--table", help="DB.TABLE (PostgreSQL: SCHEMA.TABLE)")
        which.add_argument("--tables", help="comma-separated DB.TABLE names or globs: 'shop.*,crm.customers'")
        p.add_argument("--exclude", help="with --tables: names or globs to leave out, e.g. 'shop.tmp_*'")
        p.add_argument("--state", required=True, help="state: a directory or s3://BUCKET/PREFIX (plan, chunk reports, "
                                                      "offsets)")
        p.add_argument("--chunk-size", type=int, default=100_000, help="rows per chunk (default 100000)")
        p.add_argument("--batch-size", type=int, default=8,
                       help="chunks of --chunk-size rows per Spark application (default 8); small tables' chunks "
                            "count by their rows, so many small tables share one application")
        p.add_argument("--batch-rows", type=int, default=None,
                       help="estimated rows per Spark application (default: --batch-size x --chunk-size)")
        p.add_argument("--startup", default="initial",
                       help="initial (snapshot, then tail; default) | snapshot-only | latest | position:FILE:POS | "
                            "gtid:SET | timestamp:EPOCH_MS (docs/startup-modes.md; PostgreSQL: initial, latest, snapshot-only)")
        p.add_argument("--chunk-key", action="append",
                       help="DB.TABLE=COL[,COL] (repeatable; COL[,COL] with --table): split on these columns "
                            "(tables without a primary key)")
        p.add_argument("--watermark", default="auto",
                       help="auto | position | watermark_table | consistent_snapshot (default auto)")
        p.add_argument("--watermark-table", help="DB.TABLE for watermark_table (default DB._dblog_watermark)")
        p.add_argument("--publication", help="PostgreSQL: stream through this existing publication of the tables "
                                              "(created by their owner) instead of one dblog creates; dblog drop "
                                              "leaves it")
        p.add_argument("--signal-table", help="DB.TABLE (SCHEMA.TABLE) of Debezium-style signals: an execute-snapshot "
                                              "row written there makes the running tail read those tables again "
                                              "(docs/signals.md)")

    def checkpoint(p):
        p.add_argument("--checkpoint", help="directory of the tail's Spark checkpoints, on the driver's disk or a "
                                            "cluster filesystem (default STATE/checkpoints; required when --state "
                                            "is s3://: losing it costs a restart, the lake records the position)")

    p = sub.add_parser("plan", help="split a table into chunks and batches; prints the batches as JSON")
    planning(p)
    p.add_argument("--sink", help="the lake the snapshot and the tail will write: checked now (bucket and "
                                  "credentials, or a directory this user may write), nothing is written to it")
    checkpoint(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("snapshot", help="read one batch of chunks (a Spark application)")
    p.add_argument("--state", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--sink", required=True, help="lake directory")
    p.add_argument("--force", action="store_true", help="re-read chunks that already reported")
    p.add_argument("--table", help="only the chunks of this table (a batch may hold several tables)")
    p.add_argument("--chunks", help="only these chunk ids (of --table, or of the batch's only table), e.g. 3,5-7")
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("report", help="check every chunk reported; build the binlog-split offset map")
    p.add_argument("--state", required=True)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("tail", help="stream the binlog into the lake (Spark Structured Streaming)")
    p.add_argument("--state", required=True)
    p.add_argument("--sink", required=True)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--available-now", action="store_true", help="catch up to the current position and stop")
    mode.add_argument("--continuous", action="store_true", help="run until stopped (SIGTERM/SIGINT)")
    p.add_argument("--table", help="only this table (default: every planned table)")
    p.add_argument("--max-events", type=int, default=0, help="binlog events per micro-batch (0: no limit)")
    p.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval with --continuous")
    _schema_changes_option(p)
    p.add_argument("--on-purge", choices=("resnapshot", "fail"), default="resnapshot",
                   help="a table whose binlog the server purged before the tail read it: resnapshot (read its "
                        "chunks again, alone, then stream it; the other tables go on) or fail (stop with one line)")
    p.add_argument("--merge-interval", type=float, default=0.0,
                   help="update the lake's current tables at most every this many seconds (default 0: every "
                        "micro-batch); the changelog commits every micro-batch either way")
    p.add_argument("--signal-table", help="DB.TABLE of execute-snapshot signals to act on (default: the plan's)")
    p.add_argument("--signal-seconds", type=float, default=5.0,
                   help="how often a continuous tail reads the signal table (default 5)")
    p.add_argument("--batch-memory-mb", type=float, default=256,
                   help="changes of a micro-batch held in the driver's memory (default 256): more (one huge "
                        "transaction) are staged as files by the readers and applied to current chunk by chunk")
    checkpoint(p)
    p.add_argument("--driver-catch-up-mb", type=float, default=None,
                   help="--available-now without a checkpoint: read at most this much binlog in this process "
                        "instead of starting a streaming query (default 64; 0: always Spark)")
    p.set_defaults(func=cmd_tail)

    p = sub.add_parser("failover", help="read the capture from a promoted replica (MariaDB GTIDs): the next tail "
                                        "resumes each table there by the GTID of its last committed position")
    p.add_argument("--state", required=True)
    p.add_argument("--source", required=True, help="the promoted server: mysql://USER[:PASSWORD]@HOST:PORT")
    p.set_defaults(func=cmd_failover)

    p = sub.add_parser("drop", help="remove what the capture made at its source (a PostgreSQL replication slot and "
                                    "publication); the state and the lake stay")
    p.add_argument("--state", required=True)
    p.set_defaults(func=cmd_drop)

    p = sub.add_parser("mirror", help="write the table's current state as Parquet")
    p.add_argument("--state", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_mirror)

    p = sub.add_parser("verify", help="compare the lake with the live source by chunk checksums computed in the "
                                      "database (no rows moved), while writers and the tail run; --repair re-reads "
                                      "the chunks that differ")
    p.add_argument("--state", required=True)
    p.add_argument("--sink", required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--table", help="DB.TABLE")
    which.add_argument("--tables", help="captured tables: comma-separated names or globs, e.g. 'shop.*'")
    p.add_argument("--repair", action="store_true", help="re-read the chunks that differ, then check them again")
    p.add_argument("--out", help="where to write the mirror (default: a temporary directory)")
    p.add_argument("--rows", action="store_true", help="compare row by row and column by column instead (reads every "
                                                       "row of the table from the source and the lake)")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("run", help="plan, every batch, report and an available-now tail")
    _schema_changes_option(p)
    planning(p)
    p.add_argument("--sink", required=True)
    checkpoint(p)
    p.add_argument("--driver-threads", type=int, default=None,
                   help="chunks read in this process at once (default 2); a local Spark starts only if it runs "
                        "more tasks at once ($DBLOG_SPARK_MASTER, default local[2]); 0: Spark reads every chunk")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("health", help="DBLog's health check: fails when the source moved but the tail made no "
                                      "progress for --max-stall-seconds; warns when a table's binlog is close "
                                      "to being purged")
    p.add_argument("--state", required=True)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--table", help="DB.TABLE (default: every captured table)")
    which.add_argument("--tables", help="captured tables: comma-separated names or globs, e.g. 'shop.*'")
    p.add_argument("--max-stall-seconds", type=float, default=1800.0,
                   help="fail when the source moved and the tail committed nothing for this long (default 1800)")
    p.add_argument("--purge-warning-seconds", type=float, default=None,
                   help="warn when the binlog file a table still needs may be purged by age within this many "
                        "seconds (default: 20%% of binlog_expire_logs_seconds / expire_logs_days)")
    p.add_argument("--purge-warning-bytes", type=int, default=None,
                   help="warn when it would be purged by max_binlog_total_size after this many more binlog bytes "
                        "(default: 20%% of the limit)")
    checkpoint(p)
    p.set_defaults(func=cmd_health)

    p = sub.add_parser("status", help="per captured table: phase, chunks read, the lake's position, lag, last "
                                      "commit, the binlog still needed and rows in current (a text table; --json)")
    p.add_argument("--state", required=True)
    p.add_argument("--sink", required=True)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--table", help="DB.TABLE (default: every captured table)")
    which.add_argument("--tables", help="captured tables: comma-separated names or globs, e.g. 'shop.*'")
    p.add_argument("--json", action="store_true", help="print the figures as JSON (for scripts)")
    p.add_argument("--max-stall-seconds", type=float, default=1800.0,
                   help="a streaming table whose tail made no progress for this long while the source moved is "
                        "'stopped' (default 1800, as dblog health)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("maintain", help="compact, checkpoint and vacuum the lake's Delta tables")
    p.add_argument("--state", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--table", help="only this table (default: every planned table)")
    p.add_argument("--retention-hours", type=float, default=168.0,
                   help="keep files older versions need, and files no version names, for this long (default 168: a "
                        "week; keep it longer than your longest query and your longest write)")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("resnapshot", help="re-read chunks of a table (by id, key range and/or row filter) while "
                                          "the tail may run: each replaces its key range at its new HW")
    p.add_argument("--state", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--chunks", help="chunk ids, e.g. 3,5-7")
    p.add_argument("--key-lo", help="lowest key (inclusive); a JSON list for a composite key")
    p.add_argument("--key-hi", help="highest key (inclusive); a JSON list for a composite key")
    p.add_argument("--filter", help="only chunks holding a row matching this condition, e.g. \"status = 'late'\"")
    p.add_argument("--dry-run", action="store_true", help="print the selection, read nothing")
    p.set_defaults(func=cmd_resnapshot)

    p = sub.add_parser("executor-zip", help="write the package as one zip for Spark executors without it installed "
                                            "(--py-files / spark.submit.pyFiles); prints what they need installed")
    p.add_argument("out", help="the zip to write, e.g. dist/dblog-executor.zip")
    p.set_defaults(func=cmd_executor_zip)
    return parser


def _text(exc: BaseException) -> str:
    """``str(exc)``, which a Py4J error computes by asking the JVM: if that is gone, say so."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return "Spark's JVM is gone (killed, or out of memory)"


def main(argv: list[str] | None = None, spark_submit: bool = False) -> int:
    """``spark_submit``: run inside a spark-submit application (``cli/spark_app.py``): the stock session,
    none of the local start-up tuning."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.spark_submit = spark_submit
    _setup_logging(args.verbose)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for variable in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", PASSWORD_ENV):
        _redact(os.environ.get(variable, ""))
    metrics.install_from_env()  # $DBLOG_METRICS=airflow: Airflow's stats (set by the operators for spark-submit)
    try:
        result = args.func(args)
    except DblogError as exc:  # our own lines name no secret; redacted all the same (a value they quote may)
        print(f"dblog: error: {redacted(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dblog: error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, no traceback, no secrets
        log.debug("unexpected error", exc_info=True)
        first = redacted(root_cause(_text(exc)))[:300]
        print(f"dblog: error: {type(exc).__name__}: {first} (rerun with -v for details)", file=sys.stderr)
        return 1
    if result is not None:
        _print(result)
    return 0


def console() -> None:
    """The ``dblog`` command: ``main()``, then the exit without the native libraries' teardown.

    Arrow's and delta-rs's thread pools can still be running when the interpreter finalizes; a pool's
    ``std::thread`` destroyed at that moment aborts the process ("terminate called without an active
    exception", SIGABRT) after the command has done its work and printed its result (apache/arrow#34314,
    seen once in our CI on a ``dblog verify``). The handler registered here runs after every exit
    handler registered while the command ran (atexit runs them last in, first out: temporary
    directories, Spark's, pyarrow's S3 finalizer) and then leaves with the command's code."""
    outcome: dict[str, int] = {}
    atexit.register(_leave, outcome)
    try:
        outcome["code"] = main()
    except SystemExit as exc:  # argparse's usage errors and --help
        if isinstance(exc.code, int) or exc.code is None:
            outcome["code"] = exc.code or 0
        raise
    sys.exit(outcome["code"])


def _leave(outcome: dict[str, int]) -> None:
    if "code" not in outcome:  # an unexpected way out: the interpreter's own exit reports it
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say to it
            pass
    os._exit(outcome["code"])


if __name__ == "__main__":
    console()
