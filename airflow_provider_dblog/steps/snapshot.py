"""Snapshot: read a batch's chunks in their watermark windows on Spark's executors."""
from __future__ import annotations

import logging
from typing import Sequence

from airflow_provider_dblog.readers.chunk_reader import persist_reports
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.spark.snapshot_job import run_chunks
from airflow_provider_dblog.store.object_store import check_sink
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


def snapshot_batch(state_dir: str, batch_index: int, sink: str, force: bool = False,
                   chunk_ids: Sequence[int] | None = None, spark=None) -> list[dict]:
    """Read a batch's unreported chunks (all of ``chunk_ids`` with ``force``) on Spark; this driver checks
    that each chunk's commit is in the lake and persists its report. Returns the reports."""
    state = StateDir(state_dir)
    table, todo = state.pending_chunks(batch_index, force, chunk_ids)
    if not todo:
        log.info("batch %d (%s): every chunk already reported; nothing to read (--force re-reads)", batch_index, table)
        return []
    check_sink(sink)  # before Spark starts: a wrong bucket or credentials is one line, nothing written
    dialect = open_dialect(state.source(), state.options())
    dialect.check_source()  # fail fast, before Spark starts, on a bad password, settings or privileges
    dialect.close()
    log.info("batch %d (%s): reading %d chunks", batch_index, table, len(todo))
    plan = state.table(table)
    return persist_reports(state, sink, plan, todo, run_chunks(sink, plan, todo, dialect, spark))
