"""``dblog``: the pipeline's steps without Airflow (local runs, demos, debugging, scripting).

Every command exits non-zero with a one-line reason on any error.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading

from airflow_provider_dblog.errors import DblogError

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


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s dblog %(levelname)s %(message)s")
    for noisy in ("py4j", "pymysqlreplication"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


_SECRETS: set[str] = set()


def _redact(secret: str) -> None:
    if secret:
        _SECRETS.add(secret)
        for handler in logging.getLogger().handlers:
            handler.addFilter(RedactingFilter(secret))


def _source(uri: str):
    from airflow_provider_dblog.dialects.base import SourceConfig

    config = SourceConfig.parse(uri).resolve_password()
    _redact(config.password)
    return config


def _print(data) -> None:
    print(json.dumps(data, indent=1, default=str))


def cmd_plan(args) -> dict:
    from airflow_provider_dblog.pipeline import plan_table

    return plan_table(_source(args.source), args.table, args.state, args.chunk_size, args.batch_size,
                      args.chunk_key.split(",") if args.chunk_key else None, args.watermark, args.watermark_table)


def cmd_snapshot(args) -> dict:
    from airflow_provider_dblog.pipeline import snapshot_batch

    reports = snapshot_batch(args.state, args.batch, args.sink, args.force,
                             chunk_ids=[int(c) for c in args.chunks.split(",")] if args.chunks else None)
    return {"batch": args.batch, "chunks": [r["chunk"] for r in reports], "rows": sum(r["rows"] for r in reports)}


def cmd_report(args) -> dict:
    from airflow_provider_dblog.pipeline import build_offsets

    return build_offsets(args.state)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def cmd_tail(args) -> dict:
    from airflow_provider_dblog.spark.tail_job import run_tail

    return run_tail(args.state, args.sink, available_now=not args.continuous, trigger_seconds=args.trigger_seconds,
                    max_events=args.max_events, tables=[args.table] if args.table else None,
                    stop_event=_stop_on_signals(),
                    **({} if args.driver_catch_up_mb is None else
                       {"driver_catch_up_bytes": int(args.driver_catch_up_mb * 2**20)}))


def cmd_mirror(args) -> dict:
    from airflow_provider_dblog.spark.tail_job import write_mirror

    return write_mirror(args.state, args.sink, args.table, args.out)


def cmd_verify(args) -> dict:
    from airflow_provider_dblog.pipeline import verify_mirror
    from airflow_provider_dblog.spark.tail_job import write_mirror

    out = args.out or tempfile.mkdtemp(prefix="dblog-mirror-")
    write_mirror(args.state, args.sink, args.table, out)
    result = verify_mirror(args.state, out, args.table)
    if not result["equal"]:
        _print(result)
        raise DblogError(f"mirror of {args.table} differs from the source: {result['missing']} missing, "
                         f"{result['extra']} extra, {result['different']} different rows")
    return result


def cmd_run(args) -> dict:
    from airflow_provider_dblog.pipeline import (
        DRIVER_THREADS, build_offsets, driver_reading_needs_spark, plan_table, snapshot_table, unreported_chunks,
    )
    from airflow_provider_dblog.spark.session import BackgroundSession, local_master
    from airflow_provider_dblog.spark.tail_job import run_tail
    from airflow_provider_dblog.state import StateDir

    source = _source(args.source)
    threads = DRIVER_THREADS if args.driver_threads is None else args.driver_threads
    if threads < 0:
        raise DblogError("--driver-threads must be 0 (Spark reads every chunk) or a positive number of threads")
    # a Spark with more task slots than the driver's threads starts while the table is planned and its
    # first chunks are read; otherwise none starts unless the tail needs one
    spark = (BackgroundSession("dblog-run") if driver_reading_needs_spark(threads, local_master())
             else None)
    plan = plan_table(source, args.table, args.state, args.chunk_size, args.batch_size,
                      args.chunk_key.split(",") if args.chunk_key else None, args.watermark, args.watermark_table)
    state = StateDir(args.state)
    batches = [b for b in state.batches() if b.table == args.table]
    todo = len(unreported_chunks(state, args.table))
    on_spark = len(snapshot_table(args.state, args.sink, args.table, spark, driver_threads=threads))
    summary = build_offsets(args.state)
    tail = run_tail(args.state, args.sink, available_now=True, tables=[args.table], spark=spark)
    return {"plan": {"chunks": plan["tables"][args.table]["chunks"], "batches": len(batches)},
            "snapshot": {"chunks_read": todo, "on_spark": on_spark, "in_driver": todo - on_spark},
            "report": summary, "tail": tail}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dblog", description=(
        "Lock-free chunked snapshots of MySQL/MariaDB tables on Spark, kept current from the binlog."))
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def planning(p):
        p.add_argument("--source", required=True, help="mysql://USER[:PASSWORD]@HOST:PORT[/DB] (or password in "
                                                        "$DBLOG_SOURCE_PASSWORD)")
        p.add_argument("--table", required=True, help="DB.TABLE")
        p.add_argument("--state", required=True, help="state directory (plan, chunk reports, offsets, checkpoints)")
        p.add_argument("--chunk-size", type=int, default=100_000, help="rows per chunk (default 100000)")
        p.add_argument("--batch-size", type=int, default=8, help="chunks per Spark application (default 8)")
        p.add_argument("--chunk-key", help="COL[,COL]: split on these columns (tables without a primary key)")
        p.add_argument("--watermark", default="auto",
                       help="auto | position | watermark_table | consistent_snapshot (default auto)")
        p.add_argument("--watermark-table", help="DB.TABLE for watermark_table (default DB._dblog_watermark)")

    p = sub.add_parser("plan", help="split a table into chunks and batches; prints the batches as JSON")
    planning(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("snapshot", help="read one batch of chunks (a Spark application)")
    p.add_argument("--state", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--sink", required=True, help="lake directory")
    p.add_argument("--force", action="store_true", help="re-read chunks that already reported")
    p.add_argument("--chunks", help="only these chunk ids of the batch (comma separated)")
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
    p.add_argument("--driver-catch-up-mb", type=float, default=None,
                   help="--available-now without a checkpoint: read at most this much binlog in this process "
                        "instead of starting a streaming query (default 64; 0: always Spark)")
    p.set_defaults(func=cmd_tail)

    p = sub.add_parser("mirror", help="write the table's current state as Parquet")
    p.add_argument("--state", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_mirror)

    p = sub.add_parser("verify", help="mirror the table and compare it with the live source row by row")
    p.add_argument("--state", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--out", help="where to write the mirror (default: a temporary directory)")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("run", help="plan, every batch, report and an available-now tail")
    planning(p)
    p.add_argument("--sink", required=True)
    p.add_argument("--driver-threads", type=int, default=None,
                   help="chunks read in this process at once (default 2); a local Spark starts only if it runs "
                        "more tasks at once ($DBLOG_SPARK_MASTER, default local[2]); 0: Spark reads every chunk")
    p.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        result = args.func(args)
    except DblogError as exc:
        print(f"dblog: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dblog: error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, no traceback, no secrets
        log.debug("unexpected error", exc_info=True)
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        for secret in _SECRETS:
            first = first.replace(secret, "***")
        print(f"dblog: error: {type(exc).__name__}: {first} (rerun with -v for details)", file=sys.stderr)
        return 1
    if result is not None:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
