"""Run: plan, every batch, report and an available-now tail, in one process (``dblog run``).

On the single-machine executor of CLI runs (``local.executor``) chunks are read in this process while a local
Spark starts (or without Spark where it would add no task slots), and a small cold catch-up is read here too."""
from __future__ import annotations

import logging
from typing import Sequence

from airflow_provider_dblog.core.config import DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, SourceConfig
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.steps.executor import Executor
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
                watermark_table: str | None = None, batch_rows: int | None = None, startup: str | None = None,
                schema_changes: str = "evolve", checkpoint: str | None = None, options: dict | None = None, *,
                executor: Executor) -> dict:
    """Plan, snapshot (startup modes that read one), report and an available-now tail (unless every
    table's startup mode is snapshot-only), reading on ``executor``. ``checkpoint``: the tail's Spark
    checkpoint directory (``steps.tail.run_tail``)."""
    # what the snapshot and the tail need (sink, the tail's checkpoint), then the state's location: before any work
    check_later_steps(state_dir, StartupMode.parse(startup), sink=sink, checkpoint=checkpoint or "")
    StateDir(state_dir, checkpoint)
    validate_plan_options(chunk_size, batch_size, watermark, batch_rows, startup)  # before a Spark starts
    check_startup(source, startup, options)  # a mode the source does not support: one line, nothing started
    executor.warm_up(StartupMode.parse(startup).snapshots)  # e.g. a local Spark starts while the tables are planned
    plan = plan_tables(source, tables, state_dir, chunk_keys, chunk_size=chunk_size, batch_size=batch_size,
                       watermark=watermark, watermark_table=watermark_table, batch_rows=batch_rows, startup=startup,
                       options=options)
    state = StateDir(state_dir)
    batches = [b for b in state.batches() if set(b.tables) & set(tables)]
    todo = sum(len(state.unreported_chunks(table)) for table in tables)

    def read_batch(batch: int, groups) -> list[dict]:
        return snapshot_batch(state_dir, batch, sink, only=groups, executor=executor)

    on_spark = len(executor.snapshot_tables(state_dir, sink, batches, tables, read_batch))
    if todo:
        log.info("run: snapshot of %d tables done (%d chunks in %d batches)", len(tables), todo, len(batches))
    summary = build_offsets(state_dir)
    plans = state.tables()
    following = [t for t in tables if plans[t].startup.tails]
    if following:
        tail = run_tail(state_dir, sink, available_now=True, tables=following, executor=executor,
                        schema_changes=schema_changes, checkpoint=checkpoint)
    else:
        tail = {"skipped": "startup mode snapshot-only: no tail (run `dblog tail` later to follow the source's "
                           "changes)"}
        log.info("run: %s", tail["skipped"])
    return {"plan": {"tables": len(tables), "chunks": sum(plan["tables"][t]["chunks"] for t in tables),
                     "batches": len(batches)},
            "snapshot": {"chunks_read": todo, "on_spark": on_spark, "in_driver": todo - on_spark},
            "report": summary, "tail": tail}
