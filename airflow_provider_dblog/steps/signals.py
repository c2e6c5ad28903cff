"""The tail's side of the signal table (``core.signals``): new rows are read from the source (at the tail's
start and every ``--signal-seconds`` while it runs) and each ``execute-snapshot`` is done as a re-snapshot of
the tables it names (``steps.resnapshot``: the chunks holding a row that matches its filter, read again at a
new high watermark while the stream goes on). Every row is acted on once: its outcome is recorded in the state
(``signals.json``), a refused one with its one-line reason."""
from __future__ import annotations

import logging
import time

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.signals import SignalError, parse_signal
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
SIGNAL_SECONDS = 5.0


class SignalWatcher:
    def __init__(self, state: StateDir, sink: str, dialect, table: str, every: float, executor):
        """``executor``: where the signalled re-snapshots read (``steps.executor``)."""
        self.state, self.sink, self.dialect, self.table = state, sink, dialect, table
        self.every, self.executor, self.last = every, executor, 0.0

    def due(self) -> bool:
        return time.time() - self.last >= self.every

    def poll(self) -> list[str]:
        """Act on the signal rows not acted on yet; the ids done now."""
        from airflow_provider_dblog.steps.resnapshot import resnapshot

        self.last = time.time()
        done = self.state.signals()
        rows = [r for r in self.dialect.read_signals(self.table) if r[0] not in done]
        captured = set(self.state.tables())
        acted = []
        for signal_id, kind, data in rows:
            try:
                signal = parse_signal(signal_id, kind, data, captured)
            except SignalError as exc:
                log.error("signal table %s: %s", self.table, exc)
                self.state.record_signal(signal_id, {"status": "refused", "error": str(exc)})
                continue
            if signal is None:
                log.info("signal table %s: signal %s of type %s ignored (dblog acts on execute-snapshot)", self.table,
                         signal_id, kind)
                self.state.record_signal(signal_id, {"status": "ignored", "type": kind})
                continue
            results = {}
            try:
                for name in signal.tables:
                    log.info("signal %s: reading %s again%s", signal_id, name,
                             f" where {signal.filters[name]}" if name in signal.filters else "")
                    result = resnapshot(str(self.state.path), self.sink, name, filter=signal.filters.get(name),
                                        executor=self.executor)
                    results[name] = {"chunks": result["chunks"], "rows": result["rows"]}
            except DblogError as exc:
                log.error("signal %s: %s", signal_id, exc)
                self.state.record_signal(signal_id, {"status": "failed", "error": str(exc), "tables": results})
                continue
            self.state.record_signal(signal_id, {"status": "done", "tables": results})
            log.info("signal %s: done: %s", signal_id, results)
            acted.append(signal_id)
        return acted
