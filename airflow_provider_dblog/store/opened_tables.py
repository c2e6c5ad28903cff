"""Opened Delta tables, handed from one holder to the next in this process.

Opening a Delta table reads its whole log (≈3 ms of CPU locally for a few entries; a LIST and a GET per
entry on S3); an opened one is brought up to date by reading only the entries added since (≈0.5 ms).
Whether there are any is one look at the next log entry's name (a stat locally, a HEAD on S3): delta-rs's
update finds none at ≈1.1–1.5 ms of CPU, and a micro-batch asks three times per table.
A whole-database tail opens two tables per captured table in its start-up check, then commits to the same
tables on other threads: without hand-over every table was opened twice (2,000 tables: 4,000 opens).

A table object is used by one holder at a time (a holder commits from the version it checked, so another
holder must not move it meanwhile): ``HeldTables`` takes objects from the idle pool, and gives them back
when its holder is gone (``weakref.finalize``); two holders of one table at once each open their own.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from airflow_provider_dblog.store.files import Files
from airflow_provider_dblog.store.object_store import is_object_store

_LOCK = threading.Lock()
_IDLE: dict[tuple, list[Any]] = {}  # (uri, storage options) -> opened tables nobody holds
_APPS: dict[int, tuple[Any, int, dict]] = {}  # id(table) -> (a weak reference to it, its version, apps read)
_apps_limit = [4096]  # entries before dead ones are dropped (twice the live ones after each drop)
MAX_IDLE = 2  # per table: more are dropped (as many as holders of one table at once, usually one)


def _take(key: tuple):
    with _LOCK:
        idle = _IDLE.get(key)
        return idle.pop() if idle else None


def _give_back(tables: dict[tuple, Any]) -> None:
    with _LOCK:
        for key, table in tables.items():
            idle = _IDLE.setdefault(key, [])
            if len(idle) < MAX_IDLE:
                idle.append(table)
    tables.clear()


class HeldTables:
    """The Delta tables one holder has open, by URI; given back to the pool when ``holder`` is collected."""

    def __init__(self, holder: object):
        self._tables: dict[tuple, Any] = {}
        weakref.finalize(holder, _give_back, self._tables)

    def get(self, uri: str, options: dict | None, open_table: Callable[[], Any]):
        """The table at ``uri`` at its latest version: this holder's, one from the pool brought up to date,
        or ``open_table()``."""
        key = (uri, tuple(sorted((options or {}).items())))
        table = self._tables.get(key)
        if table is None:
            table = _take(key)
            if table is None or not _same_table(uri, table):
                self._tables[key] = table = open_table()
                return table
            self._tables[key] = table
        if log_has(uri, table.version() + 1):  # another commit since this object's version: read it
            table.update_incremental()
        return table


def log_has(uri: str, version: int) -> bool:
    """Whether the Delta table at ``uri`` has the log entry of ``version`` (the Delta protocol names each
    commit's entry by its version, written once: a table has moved past ``version - 1`` iff it exists)."""
    root = uri[len("file://"):] if uri.startswith("file://") else uri
    return Files(root, "--sink").has_file(f"_delta_log/{version:020d}.json")


def app_version(table, app: str) -> int | None:
    """``table.transaction_version(app)``, read once per version of the table object (≈0.3–0.5 ms each in
    delta-rs: a start-up check and the micro-batch after it ask the same table for the same app)."""
    version, key = table.version(), id(table)
    with _LOCK:
        seen = _APPS.get(key)
        if seen is None or seen[0]() is not table or seen[1] != version:
            if len(_APPS) >= _apps_limit[0]:  # entries of tables collected since: dropped now and then
                for gone in [k for k, v in _APPS.items() if v[0]() is None]:
                    del _APPS[gone]
                _apps_limit[0] = max(4096, 2 * len(_APPS))
            seen = _APPS[key] = (weakref.ref(table), version, {})
        if app in seen[2]:
            return seen[2][app]
    found = table.transaction_version(app)
    with _LOCK:
        seen[2][app] = found
    return found


def _same_table(uri: str, table) -> bool:
    """Whether an idle object still reads the table at ``uri``: a local table deleted and created again at the
    same path (tests, a user starting over) lacks the log entry the object stands at; then it is opened anew
    (on object storage that check would be a request per hand-over: tables there are not deleted in place)."""
    return is_object_store(uri) or log_has(uri, table.version())
