"""A captured table's phase and the status report's summary and text (``dblog status``): pure rules over
what the state, the lake and the health check found (``steps/status.py`` gathers them).

Phases, in the order a table goes through them:

* ``planned``: planned, no chunk read yet;
* ``snapshotting``: some chunks read, not all (or all read and ``dblog report`` has not built the offset
  map yet; or, with an offset map, a re-read of the table's chunks after a re-plan is under way);
* ``streaming``: in the offset map, every chunk read: the tail has committed or can start;
* ``stopped``: streaming, but the tail made no progress for longer than the health check allows while
  the source moved (``steps/health.py``);
* ``needs re-snapshot``: the binlog file its tail still needs is already purged: its changes since then
  are lost to the tail, which reads the table again (``dblog tail --on-purge resnapshot``).
"""
from __future__ import annotations

from typing import Mapping

from airflow_provider_dblog.core.retention import _duration, _size

PLANNED, SNAPSHOTTING, STREAMING, STOPPED, NEEDS_RESNAPSHOT = (
    "planned", "snapshotting", "streaming", "stopped", "needs re-snapshot")
PHASES = (PLANNED, SNAPSHOTTING, STREAMING, STOPPED, NEEDS_RESNAPSHOT)


def table_phase(chunks_total: int, chunks_done: int, in_offset_map: bool, stalled: bool = False,
                binlog_purged: bool = False) -> str:
    """The phase of one table: ``chunks_total`` its planned chunks to read (0 for a startup mode that reads
    no snapshot), ``chunks_done`` those reported, ``in_offset_map`` whether ``dblog report`` put it in the
    offset map, ``stalled`` the health check's verdict on its tail, ``binlog_purged`` whether the binlog
    file its tail resumes in is gone (both only mean something for a table in the offset map)."""
    if in_offset_map and binlog_purged:
        return NEEDS_RESNAPSHOT
    if chunks_done < chunks_total:
        return PLANNED if chunks_done == 0 and not in_offset_map else SNAPSHOTTING
    if not in_offset_map:
        return SNAPSHOTTING if chunks_total else PLANNED
    return STOPPED if stalled else STREAMING


def summarize(tables: Mapping[str, dict]) -> dict:
    """Tables per phase (every phase listed) and the greatest lag, from the per-table entries."""
    phases = dict.fromkeys(PHASES, 0)
    for entry in tables.values():
        phases[entry["phase"]] += 1
    seconds = [e["lag_seconds"] for e in tables.values() if e.get("lag_seconds") is not None]
    size = [e["lag_bytes"] for e in tables.values() if e.get("lag_bytes") is not None]
    return {"tables": len(tables), "phases": phases, "max_lag_seconds": max(seconds, default=None),
            "max_lag_bytes": max(size, default=None)}


COLUMNS = ("TABLE", "PHASE", "CHUNKS", "LAKE POSITION", "LAG", "LAG BYTES", "LAST COMMIT (UTC)", "BINLOG NEEDED",
           "PURGE IN", "ROWS")
_RIGHT = {"CHUNKS", "LAG", "LAG BYTES", "PURGE IN", "ROWS"}


def render(report: dict) -> str:
    """The report as an aligned text table, one line per table, then the summary and one line per table
    that needs attention (a stall, a purged or soon purged binlog file)."""
    rows = [COLUMNS] + [_cells(name, entry) for name, entry in report["tables"].items()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.rjust(w) if COLUMNS[i] in _RIGHT else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    summary = report["summary"]
    counts = ", ".join(f"{n} {phase}" for phase, n in summary["phases"].items() if n)
    line = f"{summary['tables']} tables" + (f": {counts}" if counts else "")
    if summary.get("max_lag_seconds") is not None or summary.get("max_lag_bytes") is not None:
        line += f"; max lag {_seconds(summary.get('max_lag_seconds'))} / {_bytes(summary.get('max_lag_bytes'))}"
    if summary.get("source_position"):
        line += f"; source at {summary['source_position']}"
    lines += ["", line]
    if summary.get("source_error"):
        lines.append(f"source: {summary['source_error']}")
    for entry in report["tables"].values():
        for note in (entry.get("stalled"), entry.get("purge_warning")):
            if note:
                lines.append(f"! {note}")
    return "\n".join(lines)


def _cells(name: str, e: dict) -> tuple[str, ...]:
    if e.get("lake_position"):
        position = e["lake_position"]
    elif e.get("chunk_hw_min"):
        low, high = e["chunk_hw_min"], e["chunk_hw_max"]
        position = f"hw {low}" if low == high else f"hw {low}..{high}"
    else:
        position = "-"
    if e.get("binlog_purged"):
        purge = "purged"
    else:
        purge = " / ".join(p for p in (_seconds(e.get("purge_in_seconds"), ""), _bytes(e.get("purge_in_bytes"), ""))
                           if p) or "-"
    committed = e.get("last_commit_at")
    return (name, e["phase"], f"{e['chunks_done']}/{e['chunks_total']}", position, _seconds(e.get("lag_seconds")),
            _bytes(e.get("lag_bytes")), committed.replace("T", " ").removesuffix("Z") if committed else "-",
            e.get("binlog_needed") or "-", purge, "-" if e.get("rows_current") is None else str(e["rows_current"]))


def _seconds(value: float | None, missing: str = "-") -> str:
    return missing if value is None else _duration(value)


def _bytes(value: int | None, missing: str = "-") -> str:
    return missing if value is None else _size(value)


LISTED_TABLES = 20  # past this many tables, a log line gives totals and the extremes, not every table


def rows_text(rows: Mapping[str, int], limit: int = LISTED_TABLES) -> str:
    """The tail's rows per table for a log line: every table up to ``limit``, else the total, how many tables
    changed and the busiest (a whole database must not log a line of every table each tick)."""
    if len(rows) <= limit:
        return f"{dict(rows)} rows"
    changed = sorted(((n, t) for t, n in rows.items() if n), reverse=True)
    busiest = ", ".join(f"{t} {n}" for n, t in changed[:5])
    return (f"{sum(rows.values())} rows in {len(changed)} of {len(rows)} tables"
            + (f" (most: {busiest})" if busiest else ""))


def lag_text(lag: Mapping[str, dict], limit: int = LISTED_TABLES) -> str:
    """The tail's lag per table for a log line: every table up to ``limit``, else the furthest behind."""
    if len(lag) <= limit:
        return str(dict(lag))
    if not lag:
        return "{}"
    behind = sorted(((e.get("seconds_behind") or 0, e.get("bytes_behind") or 0, t) for t, e in lag.items()),
                    reverse=True)
    seconds, size, table = behind[0]
    late = sum(1 for s, b, _ in behind if s or b)
    return f"at most {_duration(seconds)} / {_size(size)} behind ({table}); {late} of {len(lag)} tables behind"
