"""Snapshot progress a person can follow: per table, chunks done / chunks to read, logged as chunk
reports appear in the state directory (the one signal every executor, driver thread and retry
writes; the driver of a Spark job sees nothing else until the job ends)."""
from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Sequence

from airflow_provider_dblog.core.batches import BatchGroup
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
PROGRESS_SECONDS = 5.0


def progress_lines(totals: dict[str, int], before: dict[str, int], now: dict[str, int]) -> list[str]:
    """One line per table whose count moved: ``shop.a: 3/8 chunks``, plus the batch's total."""
    moved = [t for t in totals if now.get(t, 0) != before.get(t, 0)]
    if not moved:
        return []
    done, total = sum(now.values()), sum(totals.values())
    return [f"{t}: {now.get(t, 0)}/{totals[t]} chunks (all tables: {done}/{total})" for t in moved]


class ReportWatcher:
    """Counts, per table, the chunks of ``groups`` whose report was written since the watcher started."""

    def __init__(self, state: StateDir, groups: Sequence[BatchGroup]):
        self.state, self.groups = state, list(groups)
        self.started = time.time() - 1.0  # file times may be coarser than the clock
        self.totals = {g.table: len(g.chunk_ids) for g in self.groups}

    def _reported(self, table: str, chunk_id: int) -> bool:
        try:
            return os.stat(self.state.report_file(table, chunk_id)).st_mtime >= self.started
        except OSError:
            return False

    def counts(self) -> dict[str, int]:
        return {g.table: sum(self._reported(g.table, c) for c in g.chunk_ids) for g in self.groups}


@contextmanager
def logged_progress(state: StateDir, groups: Sequence[BatchGroup], what: str, every: float = PROGRESS_SECONDS):
    """Log ``what``'s progress every ``every`` seconds while the block runs, and once at its end."""
    watcher, stop = ReportWatcher(state, groups), threading.Event()
    last: dict[str, int] = {}

    def report() -> None:
        nonlocal last
        now = watcher.counts()
        for line in progress_lines(watcher.totals, last, now):
            log.info("%s: %s", what, line)
        last = now

    def loop() -> None:
        while not stop.wait(every):
            report()

    thread = threading.Thread(target=loop, name="dblog-progress", daemon=True)
    thread.start()
    try:
        yield watcher
    finally:
        stop.set()
        thread.join()
        report()
