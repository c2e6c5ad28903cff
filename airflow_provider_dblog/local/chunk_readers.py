"""Chunks read in this process (local CLI runs only): while a local Spark starts, or instead of a local
Spark that would run no more tasks at once than these threads (docs/benchmarks.md, "local path")."""
from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

from airflow_provider_dblog.core.batches import Batch, BatchGroup
from airflow_provider_dblog.local.session import BackgroundSession, task_slots
from airflow_provider_dblog.readers.chunk_reader import persist_reports, run_chunk
from airflow_provider_dblog.readers.progress import logged_progress
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
DRIVER_THREADS = 2


class DriverChunkReader:
    """Reads chunks in the driver, last first, on ``threads`` connections until stopped. Each chunk is
    claimed before it is read, so after ``stop()`` Spark reads exactly the unclaimed ones; a chunk that
    failed here has no report and is read again by the caller's next pass."""

    def __init__(self, state_dir: str, sink: str, items: Sequence[tuple[str, int]], threads: int = DRIVER_THREADS):
        self.state_dir, self.sink = state_dir, sink
        self._order = list(reversed(items))
        self._lock = threading.Lock()
        self._stopped = False
        self.claimed: list[tuple[str, int]] = []
        self._threads = [threading.Thread(target=self._read, name="dblog-driver-chunks", daemon=True)
                         for _ in range(min(threads, len(self._order)))]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def join(self, timeout: float | None = None) -> None:
        for thread in self._threads:
            thread.join(timeout)

    def _next(self) -> tuple[str, int] | None:
        with self._lock:
            if self._stopped or len(self.claimed) == len(self._order):
                return None
            self.claimed.append(self._order[len(self.claimed)])
            return self.claimed[-1]

    def _read(self) -> None:
        """Opening the source is inside the ``try`` too: a thread's uncaught error printed its traceback on stderr,
        past the one error line."""
        dialect, table = None, None
        try:
            state = StateDir(self.state_dir)
            dialect = open_dialect(state.source(), state.options())
            while (item := self._next()) is not None:
                table, chunk_id = item
                plan = state.table(table)
                persist_reports(state, self.sink, plan, [chunk_id], [run_chunk(self.sink, plan, chunk_id, dialect)])
        except Exception as exc:  # noqa: BLE001 - the chunk stays unreported; Spark's pass reads it
            log.warning("reading a chunk of %s in the driver failed (Spark reads it instead): %s",
                        table or "the capture", exc)
        finally:
            if dialect is not None:
                dialect.close()

    def stop(self) -> set[tuple[str, int]]:
        """No new chunk from now on; returns every chunk this reader started (some may still be in flight)."""
        with self._lock:
            self._stopped = True
            return set(self.claimed)


def driver_reading_needs_spark(driver_threads: int, master: str) -> bool:
    """Whether `dblog run` should start a local Spark for its snapshot: only if Spark runs more tasks at
    once than the driver's reader threads. Under local[2] the driver's two threads use the same two
    cores, and the JVM's start-up took ≈3 s of their CPU on lineitem (SF1) for no extra capacity."""
    slots = task_slots(master)
    return driver_threads == 0 or slots is None or slots > driver_threads


def _groups(items: Sequence[tuple[str, int]]) -> list[BatchGroup]:
    by_table: dict[str, list[int]] = {}
    for table, chunk_id in items:
        by_table.setdefault(table, []).append(chunk_id)
    return [BatchGroup(t, tuple(ids)) for t, ids in by_table.items()]


def snapshot_batches(state_dir: str, sink: str, batches: Sequence[Batch], tables: Sequence[str],
                     read_on_spark: Callable[[int, list[BatchGroup]], list[dict]], spark=None,
                     driver_threads: int = DRIVER_THREADS) -> list[dict]:
    """Read every unreported chunk of ``tables`` in ``batches``. With ``driver_threads``, the driver reads
    chunks itself, last first: all of them if ``spark`` is None, else while ``spark`` (a
    ``BackgroundSession``) starts; a capture the driver finishes first never waits for Spark.
    ``read_on_spark(batch, groups)`` reads the rest batch by batch, and any chunk the driver failed.
    Returns the reports of the chunks Spark read."""
    state = StateDir(state_dir)
    wanted = set(tables)
    done = {t: state.reports(t) for t in wanted}
    items = [(g.table, c) for b in batches for g in b.groups if g.table in wanted
             for c in g.chunk_ids if c not in done[g.table]]
    reader, in_driver = None, set()
    starting = isinstance(spark, BackgroundSession) and not spark.ready()
    if driver_threads > 0 and items and (spark is None or starting):
        with logged_progress(sink, _groups(items), "snapshot in the driver"):
            reader = DriverChunkReader(state_dir, sink, items, threads=driver_threads)
            reader.start()
            while reader.alive() and not (starting and spark.ready()):
                reader.join(0.05)
            in_driver = reader.stop()
            if spark is None:
                reader.join()
        log.info("%d chunks read in the driver%s", len(in_driver), " while Spark started" if starting else "")
    reports = []
    todo = set(items) - in_driver
    for number, batch in enumerate(batches, start=1):
        groups = batch.groups_where(lambda table, chunk: (table, chunk) in todo)
        if groups:
            log.info("run: batch %d (%d/%d) on Spark", batch.index, number, len(batches))
            reports += read_on_spark(batch.index, groups)
    if reader:
        reader.join()
        failed = {t: set(state.unreported_chunks(t)) for t in wanted}  # chunks the driver failed to read
        for batch in batches:
            groups = batch.groups_where(lambda table, chunk: table in wanted and chunk in failed[table])
            if groups:
                reports += read_on_spark(batch.index, groups)
    return reports


def snapshot_table(state_dir: str, sink: str, table: str,
                   read_on_spark: Callable[[int, list[BatchGroup]], list[dict]], spark=None,
                   driver_threads: int = DRIVER_THREADS) -> list[dict]:
    """``snapshot_batches`` of one table: every unreported chunk of ``table``."""
    batches = [b for b in StateDir(state_dir).batches() if table in b.tables]
    return snapshot_batches(state_dir, sink, batches, [table], read_on_spark, spark, driver_threads)
