"""Chunks read in this process (local CLI runs only): while a local Spark starts, or instead of a local
Spark that would run no more tasks at once than these threads (docs/benchmarks.md, "local path")."""
from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

from airflow_provider_dblog.local.session import BackgroundSession, task_slots
from airflow_provider_dblog.readers.chunk_reader import persist_reports, run_chunk
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
DRIVER_THREADS = 2


class DriverChunkReader:
    """Reads chunks in the driver, last first, on ``threads`` connections until stopped. Each chunk is
    claimed before it is read, so after ``stop()`` Spark reads exactly the unclaimed ones; a chunk that
    failed here has no report and is read again by the caller's next pass."""

    def __init__(self, state_dir: str, sink: str, table: str, chunk_ids: Sequence[int], threads: int = DRIVER_THREADS):
        self.state_dir, self.sink, self.table = state_dir, sink, table
        self._order = list(reversed(chunk_ids))
        self._lock = threading.Lock()
        self._stopped = False
        self.claimed: list[int] = []
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

    def _next(self) -> int | None:
        with self._lock:
            if self._stopped or len(self.claimed) == len(self._order):
                return None
            self.claimed.append(self._order[len(self.claimed)])
            return self.claimed[-1]

    def _read(self) -> None:
        state = StateDir(self.state_dir)
        plan = state.table(self.table)
        dialect = open_dialect(state.source(), state.options())
        try:
            while (chunk_id := self._next()) is not None:
                persist_reports(state, self.sink, plan, [chunk_id], [run_chunk(self.sink, plan, chunk_id, dialect)])
        except Exception as exc:  # noqa: BLE001 - the chunk stays unreported; Spark's pass reads it
            log.warning("reading a chunk of %s in the driver failed (Spark reads it instead): %s", self.table, exc)
        finally:
            dialect.close()

    def stop(self) -> set[int]:
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


def snapshot_table(state_dir: str, sink: str, table: str, read_on_spark: Callable[[int, list[int]], list[dict]],
                   spark=None, driver_threads: int = DRIVER_THREADS) -> list[dict]:
    """Read every unreported chunk of ``table``. With ``driver_threads``, the driver reads chunks itself,
    last first: all of them if ``spark`` is None, else while ``spark`` (a ``BackgroundSession``) starts;
    a table the driver finishes first never waits for Spark. ``read_on_spark(batch, chunk_ids)`` reads
    the rest batch by batch, and any chunk the driver failed. Returns the reports of the chunks Spark read."""
    state = StateDir(state_dir)
    batches = [b for b in state.batches() if b.table == table]
    reader, in_driver = None, set()
    starting = isinstance(spark, BackgroundSession) and not spark.ready()
    if driver_threads > 0 and (spark is None or starting):
        reader = DriverChunkReader(state_dir, sink, table, state.unreported_chunks(table), threads=driver_threads)
        reader.start()
        while reader.alive() and not (starting and spark.ready()):
            reader.join(0.05)
        in_driver = reader.stop()
        log.info("%s: %d chunks read in the driver%s", table, len(in_driver), " while Spark started" if starting else "")
    reports = []
    for i, batch in enumerate(batches, start=1):
        chunk_ids = [c for c in batch.chunk_ids if c not in in_driver]
        if chunk_ids:
            log.info("run: batch %d/%d of %s on Spark", i, len(batches), table)
            reports += read_on_spark(batch.index, chunk_ids)
    if reader:
        reader.join()
        failed = set(state.unreported_chunks(table))  # chunks the driver failed to read
        for batch in batches:
            if chunk_ids := [c for c in batch.chunk_ids if c in failed]:
                reports += read_on_spark(batch.index, chunk_ids)
    return reports
