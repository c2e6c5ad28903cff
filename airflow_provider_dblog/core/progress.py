"""Progress of a long loop in the log, a line every few seconds ("verify shop.orders: source checksums: 120/4000
chunks"), so that a task log shows work going on where one step takes minutes."""
from __future__ import annotations

import logging
import time

log = logging.getLogger("dblog")
PROGRESS_SECONDS = 5.0


class ProgressLog:
    """Counts the steps of ``total``; ``step`` logs ``what: done/total unit`` when ``every`` seconds passed since
    the last line (never for the last step: the caller's own line says it finished)."""

    def __init__(self, what: str, total: int, unit: str = "chunks", every: float | None = None):
        self.what, self.total, self.unit = what, total, unit
        self.every = PROGRESS_SECONDS if every is None else every
        self.done, self._last = 0, time.monotonic()

    def step(self, count: int = 1) -> None:
        self.done += count
        if self.done < self.total and time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            log.info("%s: %d/%d %s", self.what, self.done, self.total, self.unit)
