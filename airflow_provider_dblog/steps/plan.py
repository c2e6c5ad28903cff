"""Plan: check the source, split tables into chunks and batches, persist the plan."""
from __future__ import annotations

import logging
import time
from typing import Sequence

from airflow_provider_dblog.core.config import (
    DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, SourceConfig, positive_int, watermark_strategy,
)
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.credentials import remember
from airflow_provider_dblog.store.state import StateDir, TablePlan

log = logging.getLogger("dblog")


def plan_table(source: SourceConfig, table: str, state_dir: str, chunk_size: int = DEFAULT_CHUNK_SIZE,
               batch_size: int = DEFAULT_BATCH_SIZE, chunk_key: Sequence[str] | None = None,
               watermark: str = "auto", watermark_table: str | None = None, save_password: bool = True,
               options: dict | None = None) -> dict:
    """Check the source, split the table into chunks, persist the plan; returns the plan summary."""
    watermark = watermark_strategy(watermark)
    batch_size = positive_int(batch_size, "--batch-size (chunks per Spark application)")
    chunk_size = positive_int(chunk_size, "--chunk-size (rows per chunk)")
    state = StateDir(state_dir)
    if state.has_plan() and table in state.tables():
        # Idempotent: a second plan (or `dblog run`) resumes the first one. Re-reading the table is a
        # forced rerun of its chunks; a different split needs a new state and sink.
        log.info("%s is already planned in %s: keeping that plan (re-read chunks with `dblog snapshot "
                 "--force`; a new split needs a new --state and --sink)", table, state_dir)
        if save_password:
            remember(source)
        return plan_summary(state)
    options = {**(options or {}), **({"watermark_table": watermark_table} if watermark_table else {})}
    dialect = open_dialect(source, options)
    try:
        dialect.check_source()
        meta = dialect.describe_table(table, chunk_key)
        strategy = dialect.resolve_strategy(watermark, meta)
        started = time.time()
        planned_at, planned_gtid = dialect.current_position(), dialect.gtid_position()
        chunks = dialect.split_chunks(meta, chunk_size)
    finally:
        dialect.close()
    if save_password:
        remember(source)
    batches = state.save_plan(source, TablePlan(meta, tuple(chunks), strategy, planned_at, planned_gtid), batch_size,
                              options)
    log.info("planned %s: %d chunks in %d batches (key %s, %s watermarks) in %.1fs", meta.qualified, len(chunks),
             sum(b.table == meta.qualified for b in batches), ",".join(meta.key_columns), strategy,
             time.time() - started)
    return plan_summary(state)


def plan_tables(source: SourceConfig, tables: Sequence[str], state_dir: str, **options) -> dict:
    """``plan_table`` for each table; returns the summary of the whole plan."""
    summary = {}
    for table in tables:
        summary = plan_table(source, table, state_dir, **options)
    return summary


def plan_summary(state: StateDir) -> dict:
    tables = state.tables()
    return {"state": str(state.path), "source": state.load_raw()["source"],
            "tables": {name: {"chunks": len(t.chunks), "key": list(t.meta.key_columns), "watermark": t.strategy}
                       for name, t in tables.items()},
            "batches": [{"batch": b.index, "table": b.table, "chunks": list(b.chunk_ids),
                         "label": b.label(tables[b.table])} for b in state.batches()]}
