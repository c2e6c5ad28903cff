"""Ad-hoc snapshots requested in SQL (Debezium's signal table): one row of the source's signal table asks the
running tail to read tables' chunks again, recorded like a re-snapshot from the Airflow UI.

The table has Debezium's columns, ``id`` (a unique text), ``type`` and ``data`` (JSON)::

    CREATE TABLE shop.dblog_signal (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT);
    INSERT INTO shop.dblog_signal VALUES ('resync-1', 'execute-snapshot',
      '{"data-collections": ["shop.orders"], "additional-conditions": [{"data-collection": "shop.orders",
        "filter": "status = ''late''"}]}');

``execute-snapshot`` is the one type acted on (its ``type`` field, ``incremental`` or absent, is the only kind:
dblog's re-reads never block the stream); every other type is recorded as ignored. Debezium 1.x's single
``additional-condition`` (a filter for every named table) is read too. ``parse_signal`` is pure: it says what a
row asks for, or why it cannot be done, in one line.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

EXECUTE_SNAPSHOT = "execute-snapshot"


class SignalError(ValueError):
    """A signal row that cannot be acted on (the tail records it with this one line and goes on)."""


@dataclass(frozen=True)
class SnapshotSignal:
    """Read again every chunk of ``tables`` that holds a row matching its filter (no filter: every chunk)."""

    id: str
    tables: tuple[str, ...]
    filters: dict[str, str] = field(default_factory=dict)


def parse_signal(signal_id: str, kind: str, data: str | None, captured) -> SnapshotSignal | None:
    """What one signal row asks for; None for a type other than ``execute-snapshot`` (ignored)."""
    if (kind or "").strip().lower() != EXECUTE_SNAPSHOT:
        return None
    try:
        payload = json.loads(data or "{}")
    except ValueError as exc:
        raise SignalError(f"signal {signal_id}: its data is not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise SignalError(f"signal {signal_id}: its data must be a JSON object with data-collections")
    if payload.get("type", "incremental").lower() not in ("incremental", ""):
        raise SignalError(f"signal {signal_id}: snapshot type {payload['type']!r} is not supported (dblog re-reads "
                          f"are incremental: they never stop the stream); use \"incremental\" or leave it out")
    tables = payload.get("data-collections")
    if isinstance(tables, str):
        tables = [tables]
    if not tables or not all(isinstance(t, str) and t.strip() for t in tables):
        raise SignalError(f"signal {signal_id}: data-collections must name the tables to read again, e.g. "
                          f"[\"shop.orders\"]")
    tables = [t.strip() for t in tables]
    unknown = [t for t in tables if t not in captured]
    if unknown:
        raise SignalError(f"signal {signal_id}: {', '.join(unknown)} not captured (captured: "
                          f"{', '.join(sorted(captured)[:10])}{', ...' if len(captured) > 10 else ''})")
    filters: dict[str, str] = {}
    if isinstance(payload.get("additional-condition"), str) and payload["additional-condition"].strip():
        filters = {t: payload["additional-condition"].strip() for t in tables}
    for condition in payload.get("additional-conditions") or []:
        if not isinstance(condition, dict) or condition.get("data-collection") not in tables \
                or not str(condition.get("filter", "")).strip():
            raise SignalError(f"signal {signal_id}: each additional-conditions entry needs a data-collection among "
                              f"data-collections and a filter")
        filters[condition["data-collection"]] = str(condition["filter"]).strip()
    return SnapshotSignal(signal_id, tuple(tables), filters)
