"""The Spark executor (``steps.executor.Executor``): chunks read as Spark jobs, the tail as one Structured
Streaming query. ``spark``: a session, a factory of one (a local session that starts only when a step needs
it), or None: the stock session of a spark-submit application."""
from __future__ import annotations

import logging
from typing import Callable, Sequence

from airflow_provider_dblog.core.batches import Batch, BatchGroup
from airflow_provider_dblog.spark import tail_queries
from airflow_provider_dblog.spark.snapshot_job import run_chunks
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


class SparkExecutor:
    def __init__(self, spark=None):
        self.spark = spark

    def warm_up(self, snapshots: bool) -> None:
        """Nothing to start ahead: the session is the application's, or starts when first used."""

    def read_chunks(self, sink: str, plans: dict, groups: Sequence[BatchGroup], dialect, label: str = "") -> list[dict]:
        return run_chunks(sink, plans, groups, dialect, self.spark, label=label)

    def snapshot_tables(self, state_dir: str, sink: str, batches: Sequence[Batch], tables: Sequence[str],
                        read_batch: Callable[[int, list[BatchGroup]], list[dict]]) -> list[dict]:
        """Batch by batch, every unreported chunk of ``tables`` through ``read_batch``."""
        state, wanted = StateDir(state_dir), set(tables)
        done = {t: state.reports(t) for t in wanted}
        reports: list[dict] = []
        for number, batch in enumerate(batches, start=1):
            groups = batch.groups_where(lambda table, chunk: table in wanted and chunk not in done[table])
            if groups:
                log.info("run: batch %d (%d/%d) on Spark", batch.index, number, len(batches))
                reports += read_batch(batch.index, groups)
        return reports

    def catch_up(self, state, sink, dialect, tables, now, committers, gtid) -> None:
        """None: on Spark every range is the query's."""
        return None

    def start_tail(self, state, sink, tables, available_now, trigger_seconds, max_events, decode_parallelism,
                   merge_interval, committers, batch_memory_bytes):
        return tail_queries.start_query(state, sink, tables, available_now, trigger_seconds, max_events,
                                        decode_parallelism, self.spark, merge_interval, committers,
                                        batch_memory_bytes)

    def watch(self, query, should_stop, tick, restart=None):
        return tail_queries.watch(query, should_stop, tick, restart)
