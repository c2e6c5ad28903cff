"""The tail's Structured Streaming query: one for every table, the binlog source into the lake's Delta
tables through ``foreachBatch`` (``LakeSink``). Exactly once without relying on Spark's checkpoint: each
micro-batch commits with the binlog position it ends at, and the lake skips what it already holds."""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable

from airflow_provider_dblog.core import metrics
from airflow_provider_dblog.core.errors import REPLANNED, DblogError, root_cause
from airflow_provider_dblog.core.positions import SourcePosition, merge_gtids
from airflow_provider_dblog.spark.session import spark_session
from airflow_provider_dblog.store.object_store import table_threads
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


class LakeSink:
    """``foreachBatch`` of the tail's query, in the driver: each table's changes and schema changes in the
    micro-batch are committed at the batch's end position by that table's committer (``committers(dialect,
    table)``, the step's ``ChangeCommitter``, made when the table first brings changes); then the tail's progress (``StateDir.record_tail_positions``) moves
    every table read up to the end, changes or not, in one small write. ``current`` follows every batch,
    or at most every ``merge_interval`` seconds (MERGE rewrites every file it touches: fewer, larger merges
    cost less), and at ``flush()``. Tables commit side by side (``commit_threads``): a Delta commit waits
    on storage more than it computes."""

    def __init__(self, state: StateDir, dialect, committers: Callable, merge_interval: float = 0.0,
                 commit_threads: int = 4):
        self.state, self.dialect, self.make_committer = state, dialect, committers
        self.merge_interval, self.commit_threads = merge_interval, commit_threads
        self.committers: dict = {}
        self.rows: dict[str, int] = {}
        self.positions: dict[str, SourcePosition] = {}  # per table, the end of the last batch that read it
        self._merged_at = 0.0
        self._pending: dict[str, SourcePosition] = {}  # tables whose current lags their changelog
        self._gtid: tuple[SourcePosition, str] | None | bool = None  # (position, GTID state there); False: none
        self._pool: ThreadPoolExecutor | None = None
        self._source_tag: str | None = None

    def committer(self, name: str):
        if name not in self.committers:
            self.committers[name] = self.make_committer(self.dialect, name)
        return self.committers[name]

    def follow_recorded(self, names: list[str]) -> None:
        """Before the first micro-batch: schema changes the state recorded but the lake did not follow yet
        (a crash between the changelog commit and the follow) are followed now, whether or not the table
        changes again (its read starts after that commit)."""
        for name in names:
            if self.state.schema_changes(name):
                committer = self.committer(name)
                end = committer.lake.tail_position()
                if end is not None and committer.pending(end):
                    committer.commit([], [], end)

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        self._each(lambda name: self.committers[name].lake.update_current(pending[name]), sorted(pending))
        self._merged_at = time.monotonic()

    def __call__(self, frame, batch_id: int) -> None:
        from airflow_provider_dblog.spark.change_source import open_envelopes

        for committer in self.committers.values():
            committer.check_plan()
        started = time.monotonic()
        batch = open_envelopes(frame.toArrow())
        if batch.end is None:
            return
        read = time.monotonic()
        touched = sorted(set(batch.parts) | set(batch.changes) | set(batch.staged))
        self._each(lambda name: self._commit(name, batch), touched)
        self.state.record_tail_positions({name: batch.end for name in batch.read}, self._gtid_at_end(batch))
        self.positions.update({name: batch.end for name in batch.read})
        committed = time.monotonic()
        if committed - self._merged_at >= self.merge_interval:
            self.flush()
        log.info("tail: micro-batch %d to %s: %d of %d tables changed; read %.1fs%s, changelog commits %.1fs, "
                 "current %.1fs", batch_id, batch.end, len(touched), len(batch.read), read - started,
                 f" in {batch.pieces} pieces" if batch.pieces > 1 else "", committed - read, time.monotonic() - committed)
        self._batch_metrics(batch.end, time.monotonic() - started)

    def _batch_metrics(self, end: SourcePosition, seconds: float) -> None:
        """``micro_batch_seconds`` and ``binlog_bytes_behind`` (from the batch's end to the server's position
        now) of this tail, tagged with its source's ``host:port``."""
        if not metrics.enabled():
            return
        try:
            if self._source_tag is None:
                source = self.state.source()
                self._source_tag = metrics.source_tag(source.host, source.port)
            metrics.timing(metrics.MICRO_BATCH_SECONDS, seconds, source=self._source_tag)
            metrics.gauge(metrics.BINLOG_BYTES_BEHIND, self.dialect.range_bytes(end, self.dialect.current_position()),
                          source=self._source_tag)
        except Exception as exc:  # noqa: BLE001 - a figure, not the capture: never fails a micro-batch
            log.debug("tail: no metrics for this micro-batch: %s", exc)

    def _gtid_at_end(self, batch) -> str | None:
        """The server's GTID state at the batch's end: the state at its start (the previous batch's end, or
        asked of the server once) with the GTIDs the read passed. None without GTIDs (MySQL here)."""
        if self._gtid is False or batch.start is None:
            return None
        if self._gtid is None or self._gtid[0] != batch.start:
            base = self.dialect.gtid_at(batch.start)
            if base is None:
                self._gtid = False
                return None
            self._gtid = (batch.start, base)
        state = merge_gtids(self._gtid[1], batch.gtids.values())
        self._gtid = (batch.end, state)
        return state

    def _commit(self, name: str, batch) -> None:
        parts, staged = batch.parts.get(name, []), batch.staged.get(name, [])
        if self.committer(name).commit(parts, batch.changes.get(name, []), batch.end, update_current=False,
                                       staged=staged) == "committed":
            self.rows[name] = self.rows.get(name, 0) + sum(p.num_rows for p in parts) + sum(f.rows for f in staged)
        self._pending[name] = batch.end

    def _each(self, work: Callable[[str], None], names: list[str]) -> None:
        """``work(name)`` for every table on ``commit_threads`` threads, the next table to the first thread
        free (each table's ``LakeTables`` keeps its opened Delta tables whatever thread uses it: later
        commits read only the log entries added since); the first failure is raised after the others
        finished (each table's commits are its own: one failing leaves the others exact)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, self.commit_threads), thread_name_prefix="dblog-commit")
        futures = [self._pool.submit(work, name) for name in names]
        wait(futures)
        for future in futures:
            future.result()

    def close(self) -> None:
        """Flush, and end the commit threads."""
        try:
            self.flush()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
            self._pool = None


def start_query(state: StateDir, sink: str, tables: list[str] | None, available_now: bool, trigger_seconds: float,
                max_events: int, decode_parallelism: int, spark, merge_interval: float, committers: Callable,
                batch_memory_bytes: int = 256 * 2**20) -> tuple[object, LakeSink]:
    """Start the tail's one query over ``tables`` (None: every table of the offset map, tables that join
    it while the query runs included); returns the query and its lake sink. ``batch_memory_bytes``: half
    of it for the rows the decoding tasks hand to the driver in memory (more are staged as files)."""
    from airflow_provider_dblog.source import open_dialect
    from airflow_provider_dblog.spark.change_source import ALL_TABLES, SOURCE_NAME, ChangeDataSource

    spark = spark_session("dblog-tail", spark)
    spark.dataSource.register(ChangeDataSource)
    dialect = open_dialect(state.source(), state.options())
    lake_sink = LakeSink(state, dialect, committers, merge_interval, table_threads(sink))
    parallelism = decode_parallelism or spark.sparkContext.defaultParallelism
    lake_sink.follow_recorded(sorted(state.offsets()) if tables is None else tables)
    reader = (spark.readStream.format(SOURCE_NAME).option("state", str(state.path)).option("sink", str(sink))
              .option("tables", ALL_TABLES if tables is None else ",".join(tables))
              .option("decodeParallelism", str(parallelism))
              .option("inlineBytes", str(max(1, batch_memory_bytes // (2 * parallelism)))))
    if max_events:
        reader = reader.option("maxEventsPerTrigger", str(max_events))
    writer = (reader.load().writeStream.foreachBatch(lake_sink).queryName("dblog_tail")
              .option("checkpointLocation", str(state.checkpoint_dir())))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
        processingTime=f"{trigger_seconds} seconds")
    return writer.start(), lake_sink


def _raise_failure(query) -> None:
    if query.exception() is not None:
        raise DblogError(f"tail failed: {root_cause(str(query.exception()))}")


JVM_GONE = ("the tail's Spark JVM stopped (killed, or out of memory): start the tail again; the lake holds every "
            "micro-batch it committed")


def watch(query, should_stop: Callable[[], bool], tick: Callable[[], None],
          restart: Callable[[], object] | None = None):
    """Follow the query until it ends or ``should_stop()``; ``tick()`` every half second. Stops it; raises
    its failure as one line. A query that stopped because a table was planned again (``REPLANNED``) is
    started again by ``restart()`` (the new plan is read as the query starts). Returns the last query.

    A stop asked for by a signal often reaches Spark's JVM too (the same process group): a JVM gone then
    is a clean stop; a JVM gone otherwise is one line (``JVM_GONE``)."""
    try:
        while True:
            try:
                replanned = restart is not None and query.exception() is not None and REPLANNED in str(query.exception())
                if not replanned:
                    _raise_failure(query)
                    active = query.isActive
            except DblogError:
                raise
            except Exception:  # noqa: BLE001 - Py4J: the JVM is gone
                if should_stop():
                    return query
                raise DblogError(JVM_GONE) from None
            if replanned:  # outside the JVM check: a restart that fails says why itself
                query = restart()
                continue
            if not active or should_stop():
                break
            tick()
            time.sleep(0.5)
    finally:
        gone = not _stopped(query)
    if gone:
        if not should_stop():
            raise DblogError(JVM_GONE)
        return query
    _raise_failure(query)
    return query


def _stopped(query) -> bool:
    """Stop the query if it runs; False when that cannot be asked (the JVM is gone)."""
    try:
        if query.isActive:
            query.stop()
        return True
    except Exception:  # noqa: BLE001 - Py4J: the JVM is gone
        return False
