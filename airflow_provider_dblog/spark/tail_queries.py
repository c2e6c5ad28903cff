"""The tail's Structured Streaming queries: one per table, the binlog source into the lake's Delta tables
through ``foreachBatch`` (``LakeSink``). Exactly once without relying on Spark's checkpoint: each
micro-batch commits with the binlog position it ends at, and the lake skips what it already holds."""
from __future__ import annotations

import json
import threading
import time
from typing import Callable

from airflow_provider_dblog.core.errors import DblogError, root_cause
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.readers.change_committer import REPLANNED, ChangeCommitter
from airflow_provider_dblog.spark.session import spark_session
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir


# one micro-batch at a time per process: two queries' foreachBatch callbacks collecting at once from
# Py4J threads broke task serialization (java.io.OptionalDataException in the executors; the demo's
# two tables under spark-submit), and their lake commits share the cores anyway
_BATCH_LOCK = threading.Lock()


class LakeSink:
    """``foreachBatch`` of one table's query, in the driver: the batch's changes and schema changes are
    committed at the batch's end position (the greatest marker) by a ``ChangeCommitter``; ``current``
    follows every batch, or at most every ``merge_interval`` seconds (MERGE rewrites every file it
    touches: fewer, larger merges cost less), and at ``flush()``."""

    def __init__(self, committer: ChangeCommitter, merge_interval: float = 0.0):
        self.committer, self.lake, self.merge_interval = committer, committer.lake, merge_interval
        self.rows = 0
        self.position: BinlogPosition | None = None
        self._merged_at = 0.0
        self._pending = False

    def flush(self) -> None:
        if self._pending:
            self.lake.update_current(self.position)
            self._merged_at, self._pending = time.monotonic(), False

    def __call__(self, frame, batch_id: int) -> None:
        from airflow_provider_dblog.spark.binlog_source import open_envelopes

        with _BATCH_LOCK:
            self.committer.check_plan()
            parts, changes, end = open_envelopes(frame.toArrow())
            if end is not None:
                self._commit(parts, changes, end)

    def _commit(self, parts, changes, end: BinlogPosition) -> None:
        if self.committer.commit(parts, changes, end, update_current=False) == "committed":
            self.rows += sum(p.num_rows for p in parts)
        self.position, self._pending = end, True
        if time.monotonic() - self._merged_at >= self.merge_interval:
            self.flush()


def reread_on_spark(state: StateDir, sink: str, dialect, spark) -> Callable:
    """Read every chunk of a table's plan again as one Spark job (after a schema change)."""
    from airflow_provider_dblog.readers.chunk_reader import persist_reports
    from airflow_provider_dblog.spark.snapshot_job import run_chunks

    def reread(plan) -> None:
        from airflow_provider_dblog.core.batches import BatchGroup

        group = BatchGroup(plan.meta.qualified, tuple(c.id for c in plan.chunks))
        reports = run_chunks(sink, {group.table: plan}, [group], dialect, spark,
                             f"re-read of {group.table} after a schema change")
        persist_reports(state, sink, plan, group.chunk_ids, reports)
    return reread


def start_queries(state: StateDir, sink: str, names: list[str], available_now: bool, trigger_seconds: float,
                  max_events: int, decode_parallelism: int = 0, spark=None, merge_interval: float = 0.0,
                  schema_changes: str = "evolve") -> tuple[dict, dict]:
    """Start one query per table; returns the queries and their lake sinks by table name."""
    from airflow_provider_dblog.source import open_dialect
    from airflow_provider_dblog.spark.binlog_source import SOURCE_NAME, BinlogDataSource

    spark = spark_session("dblog-tail", spark)
    spark.dataSource.register(BinlogDataSource)
    dialect = open_dialect(state.source(), state.options())
    queries, sinks = {}, {}
    for name in names:
        meta = state.table(name).meta
        lake = LakeTables(sink, name, dialect.arrow_schema(meta), meta.key_columns)
        committer = ChangeCommitter(state, lake, dialect, schema_changes, reread_on_spark(state, sink, dialect, spark))
        sinks[name] = LakeSink(committer, merge_interval)
        reader = (spark.readStream.format(SOURCE_NAME).option("state", str(state.path)).option("sink", str(sink))
                  .option("table", name)
                  .option("decodeParallelism", str(decode_parallelism or spark.sparkContext.defaultParallelism)))
        if max_events:
            reader = reader.option("maxEventsPerTrigger", str(max_events))
        writer = (reader.load().writeStream.foreachBatch(sinks[name]).queryName(f"dblog_tail_{name}")
                  .option("checkpointLocation", str(state.checkpoint_dir(name))))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
            processingTime=f"{trigger_seconds} seconds")
        queries[name] = writer.start()
    return queries, sinks


def end_offsets(queries: dict) -> dict[str, BinlogPosition]:
    """Each query's last micro-batch end offset (tables whose query made no progress yet are absent)."""
    out = {}
    for name, query in queries.items():
        progress = query.lastProgress
        end = (progress or {}).get("sources", [{}])[0].get("endOffset") if progress else None
        if isinstance(end, str):
            end = json.loads(end)
        if end:
            out[name] = BinlogPosition.from_dict(end)
    return out


def _raise_failure(name: str, query) -> None:
    if query.exception() is not None:
        raise DblogError(f"tail of {name} failed: {root_cause(str(query.exception()))}")


def watch(queries: dict, should_stop: Callable[[], bool], tick: Callable[[], None],
          restart: Callable[[str], object] | None = None) -> None:
    """Follow the queries until all end or ``should_stop()``; ``tick()`` every half second. Stops them;
    raises the first query failure as one line. A query that stopped because its table was planned again
    (``REPLANNED``) is started again by ``restart(name)``, the others keep running."""
    try:
        while True:
            for name, query in list(queries.items()):
                if restart is not None and query.exception() is not None and REPLANNED in str(query.exception()):
                    queries[name] = restart(name)
                    continue
                _raise_failure(name, query)
            if not any(q.isActive for q in queries.values()) or should_stop():
                break
            tick()
            time.sleep(0.5)
    finally:
        for query in queries.values():
            if query.isActive:
                query.stop()
    for name, query in queries.items():
        _raise_failure(name, query)
