"""Status: per captured table its phase (``core/status.py``), chunks read, the position the lake records,
lag, last commit, the binlog it still needs against the purge horizon, and the rows in ``current``.

Cheap for many tables: the state's files, two Delta logs per table (no data file is read, no Spark) and
a few queries to the source. The stall verdict, the purge horizon and the progress figures are the health
check's (``steps/health.py``), so ``dblog status`` and ``dblog health`` never disagree. A source that
cannot be reached leaves the source's figures empty and says why; the rest is still reported.
"""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from typing import Sequence

from airflow_provider_dblog.core import metrics
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.status import summarize, table_phase
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.steps.health import check_same_server, check_tail_health, purge_horizon
from airflow_provider_dblog.store.lake_figures import lake_figures
from airflow_provider_dblog.store.object_store import check_sink
from airflow_provider_dblog.store.state import StateDir

DEFAULT_MAX_STALL_SECONDS = 1800.0  # as `dblog health` and the health sensor


def capture_status(state_dir: str, sink: str, tables: Sequence[str] | None = None,
                   max_stall_seconds: float = DEFAULT_MAX_STALL_SECONDS, source: SourceConfig | None = None,
                   now: float | None = None) -> dict:
    """``{"tables": {name: figures}, "summary": ...}`` for ``tables`` (default every planned table).
    ``source``: the connection to use (default: the state's, with its stored password)."""
    check_sink(sink)
    state = StateDir(state_dir)
    plans = state.tables()
    names = sorted(tables or plans)
    offsets = state.offsets() if state.has_offsets() else {}
    recorded = state.tail_positions()
    streaming = [n for n in names if n in offsets]
    now = time.time() if now is None else now

    source_position, horizon, lag_bytes, health, source_error = None, {}, {}, {}, None
    if streaming:
        try:
            dialect = open_dialect(source or state.source(), state.options())
            try:
                source_position = check_same_server(state, dialect)
                horizon = purge_horizon(state_dir, dialect, streaming)
                lag_bytes = {p: dialect.range_bytes(p, source_position) for p in {r.needed for r in horizon.values()}}
            finally:
                dialect.close()
        except DblogError as exc:
            source_error = str(exc)
        if source_position is not None:
            health = _tail_health(state_dir, streaming, source_position, max_stall_seconds, now)

    report = {}
    for name in names:
        plan = state.table_of(plans, name)  # (one line for a table not planned)
        reports = state.reports(name)
        total = len(plan.chunks) if plan.startup.snapshots else 0
        planned = {c.id for c in plan.chunks}
        hws = [SourcePosition.from_dict(r["hw"]) for c, r in reports.items() if c in planned]
        lake = lake_figures(sink, name)
        risk, progress = horizon.get(name), health.get(name, {})
        named = source_position or plan.planned_at  # the lake's positions get the server's file names
        behind = progress.get("behind")
        entry = {
            "phase": table_phase(total, min(len(hws), total), name in offsets, bool(progress.get("stalled")),
                                 bool(risk and risk.purged)),
            "chunks_done": min(len(hws), total), "chunks_total": total,
            "lake_position": _named(lake.changelog_position, named),
            "current_position": _named(lake.current_position, named),
            "chunk_hw_min": str(min(hws)) if hws else None, "chunk_hw_max": str(max(hws)) if hws else None,
            "tail_position": progress.get("tail"), "progress_from": progress.get("from"),
            "behind": behind,
            "lag_seconds": None if behind is None else (progress["seconds_since_progress"] if behind else 0.0),
            "lag_bytes": lag_bytes.get(risk.needed) if risk else None,
            "seconds_since_progress": progress.get("seconds_since_progress"),
            "last_commit_at": _iso(recorded[name][1] if name in recorded else lake.committed_at),
            "rows_current": lake.rows,
            "stalled": progress.get("stalled"),
        }
        if risk is not None:
            entry.update(risk.fields())
        report[name] = entry
    status_metrics(report)
    summary = summarize(report)
    summary.update({"source_position": None if source_position is None else str(source_position),
                    "source_error": source_error, "checked_at": _iso(now)})
    return {"tables": report, "summary": summary}


def status_metrics(tables: dict[str, dict]) -> None:
    """The per-table gauges of a status report: ``lag_seconds``, ``lag_bytes``, ``chunks_done``,
    ``chunks_total``, ``rows_current`` (an unknown figure is not sent)."""
    for name, entry in tables.items():
        for metric, key in ((metrics.LAG_SECONDS, "lag_seconds"), (metrics.LAG_BYTES, "lag_bytes"),
                            (metrics.CHUNKS_DONE, "chunks_done"), (metrics.CHUNKS_TOTAL, "chunks_total"),
                            (metrics.ROWS_CURRENT, "rows_current")):
            metrics.gauge(metric, entry.get(key), table=name)


def _tail_health(state_dir: str, names: list[str], position: SourcePosition, max_stall_seconds: float,
                 now: float) -> dict[str, dict]:
    """The health check's per-table report (``check_tail_health``); a table it finds stalled gets the
    check's line under ``stalled``. One check of every table in the common case, none stalled."""
    try:
        return check_tail_health(state_dir, position, max_stall_seconds, names, now=now)
    except DblogError:
        pass  # some table stalled: ask per table which
    report = {}
    for name in names:
        try:
            report.update(check_tail_health(state_dir, position, max_stall_seconds, [name], now=now))
        except DblogError as exc:
            report.update(check_tail_health(state_dir, position, math.inf, [name], now=now))
            report[name]["stalled"] = str(exc)
    return report


def _named(position: SourcePosition | None, reference: SourcePosition) -> str | None:
    """A position the lake recorded (a number: no file name) named like ``reference``'s binlog files."""
    return None if position is None else str(position.in_file_of(reference))


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
