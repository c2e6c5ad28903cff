"""Snapshot progress a person can follow: per table, chunks done / chunks to read, logged as chunk
commits land in the lake (the one signal every executor, driver thread and retry writes; the driver of
a Spark job sees nothing else until the job ends, and executors never write the state)."""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Sequence

from airflow_provider_dblog.core.batches import BatchGroup
from airflow_provider_dblog.store.lake_tables import chunk_commits

log = logging.getLogger("dblog")
PROGRESS_SECONDS = 5.0


def progress_lines(totals: dict[str, int], before: dict[str, int], now: dict[str, int]) -> list[str]:
    """One line per table whose count moved: ``shop.a: 3/8 chunks``, plus the batch's total."""
    moved = [t for t in totals if now.get(t, 0) != before.get(t, 0)]
    if not moved:
        return []
    done, total = sum(now.values()), sum(totals.values())
    return [f"{t}: {now.get(t, 0)}/{totals[t]} chunks (all tables: {done}/{total})" for t in moved]


class CommitWatcher:
    """Counts, per table, the chunks of ``groups`` committed to the lake since the watcher started (their
    ``dblog-chunk-N`` transaction moved)."""

    def __init__(self, sink: str, groups: Sequence[BatchGroup]):
        self.sink, self.groups = sink, list(groups)
        self.totals = {g.table: len(g.chunk_ids) for g in self.groups}
        self.before = {g.table: chunk_commits(sink, g.table, g.chunk_ids) for g in self.groups}

    def counts(self) -> dict[str, int]:
        out = {}
        for g in self.groups:
            now = chunk_commits(self.sink, g.table, g.chunk_ids)
            out[g.table] = sum(now[c] is not None and now[c] != self.before[g.table][c] for c in g.chunk_ids)
        return out


@contextmanager
def logged_progress(sink: str, groups: Sequence[BatchGroup], what: str, every: float = PROGRESS_SECONDS):
    """Log ``what``'s progress every ``every`` seconds while the block runs, and once at its end."""
    watcher, stop = CommitWatcher(sink, groups), threading.Event()
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
