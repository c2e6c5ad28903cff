"""Run: plan, every batch, report and an available-now tail, in one local process (``dblog run``).

The single-machine path: chunks are read in this process while a local Spark starts (or without Spark
where it would add no task slots), and a small cold catch-up is read here too (``local/``)."""
from __future__ import annotations

import logging
from typing import Sequence

from airflow_provider_dblog.core.config import DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.local.catch_up import DRIVER_CATCH_UP_BYTES
from airflow_provider_dblog.local.chunk_readers import DRIVER_THREADS, driver_reading_needs_spark, snapshot_batches
from airflow_provider_dblog.local.session import BackgroundSession, lazy_local_session
from airflow_provider_dblog.spark.session import local_master
from airflow_provider_dblog.steps.preflight import check_later_steps
from airflow_provider_dblog.steps.plan import check_startup, plan_tables, validate_plan_options
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.steps.tail import run_tail
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


def run_capture(source: SourceConfig, tables: Sequence[str], state_dir: str, sink: str,
                chunk_size: int = DEFAULT_CHUNK_SIZE, batch_size: int = DEFAULT_BATCH_SIZE,
                chunk_keys: dict[str, Sequence[str]] | None = None, watermark: str = "auto",
                watermark_table: str | None = None, driver_threads: int | None = None,
                batch_rows: int | None = None, startup: str | None = None,
                schema_changes: str = "evolve", checkpoint: str | None = None, options: dict | None = None) -> dict:
    """Plan, snapshot (startup modes that read one), report and an available-now tail (unless every
    table's startup mode is snapshot-only). ``checkpoint``: the tail's Spark checkpoint directory
    (``steps.tail.run_tail``)."""
    # what the snapshot and the tail need (sink, the tail's checkpoint), then the state's location: before any work
    check_later_steps(state_dir, StartupMode.parse(startup), sink=sink, checkpoint=checkpoint or "")
    StateDir(state_dir, checkpoint)
    threads = DRIVER_THREADS if driver_threads is None else driver_threads
    if threads < 0:
        raise DblogError("--driver-threads must be 0 (Spark reads every chunk) or a positive number of threads")
    validate_plan_options(chunk_size, batch_size, watermark, batch_rows, startup)  # before a Spark starts
    check_startup(source, startup, options)  # a mode the source does not support: one line, nothing started
    # a Spark with more task slots than the driver's threads starts while the tables are planned and the
    # first chunks are read; otherwise none starts unless the tail needs one
    snapshots = StartupMode.parse(startup).snapshots
    needs_spark = snapshots and driver_reading_needs_spark(threads, local_master())
    spark = BackgroundSession("dblog-run") if needs_spark else None
    plan = plan_tables(source, tables, state_dir, chunk_keys, chunk_size=chunk_size, batch_size=batch_size,
                       watermark=watermark, watermark_table=watermark_table, batch_rows=batch_rows, startup=startup,
                       options=options)
    state = StateDir(state_dir)
    batches = [b for b in state.batches() if set(b.tables) & set(tables)]
    todo = sum(len(state.unreported_chunks(table)) for table in tables)

    session = spark or lazy_local_session("dblog-run")

    def read_on_spark(batch: int, groups) -> list[dict]:
        return snapshot_batch(state_dir, batch, sink, only=groups, spark=session)

    on_spark = len(snapshot_batches(state_dir, sink, batches, tables, read_on_spark, spark, driver_threads=threads))
    if todo:
        log.info("run: snapshot of %d tables done (%d chunks in %d batches)", len(tables), todo, len(batches))
    summary = build_offsets(state_dir)
    plans = state.tables()
    following = [t for t in tables if plans[t].startup.tails]
    if following:
        tail = run_tail(state_dir, sink, available_now=True, tables=following, spark=session,
                        driver_catch_up_bytes=DRIVER_CATCH_UP_BYTES, schema_changes=schema_changes,
                        checkpoint=checkpoint)
    else:
        tail = {"skipped": "startup mode snapshot-only: no tail (run `dblog tail` later to follow the source's "
                           "changes)"}
        log.info("run: %s", tail["skipped"])
    return {"plan": {"tables": len(tables), "chunks": sum(plan["tables"][t]["chunks"] for t in tables),
                     "batches": len(batches)},
            "snapshot": {"chunks_read": todo, "on_spark": on_spark, "in_driver": todo - on_spark},
            "report": summary, "tail": tail}
