"""DBLog's health check: fail when the source moved but the tail made no progress for too long.

The tail's progress is what it records after each micro-batch it committed (``STATE/tail_positions.json``):
per table, the batch's end position and when it was written. The tail's positions are binlog positions
that advance with every binlog write (events of other tables included), so "caught up" means: recorded
position >= the source's current position. Before the first micro-batch the offset map (``offsets.json``:
smallest HW, build time) stands in for it. An available-now catch-up that found no row event of the table
since that position (``STATE/caught_up/DB.TABLE.json``) moves it to where the check ended.

The purge horizon: per table, the binlog file its tail resumes in (its floor) and how long until the server
may delete it (``core/retention.py``); a table within the warning margin is reported, not failed.
"""
from __future__ import annotations

import time
from typing import Sequence

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.retention import PurgeRisk, purge_risks
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.state import StateDir, describe_server


def check_same_server(state: StateDir, dialect, floors: Sequence[SourcePosition] = ()) -> SourcePosition:
    """Refuse, in one line, a source that is not the server the state's positions belong to: another
    ``server_id`` (a promoted replica, a restored copy), or a binlog behind a position the lake already
    reached (``RESET MASTER``, a server rebuilt under the same id). Returns the source's position."""
    recorded, live = state.server(), dialect.server_identity()
    if recorded is not None and recorded != live:
        raise DblogError(f"the state's binlog positions belong to server {describe_server(recorded)}; the source "
                         f"now answers as {describe_server(live)} (a promoted replica or another server): its "
                         f"binlog positions do not apply; capture it anew (a new --state and --sink)")
    now = dialect.current_position()
    ahead = [f for f in floors if f > now]
    if ahead:
        raise DblogError(f"the lake holds changes up to {max(ahead)}, but the source's binlog is only at {now} "
                         f"(RESET MASTER, or a server rebuilt under the same id): its positions do not apply; "
                         f"capture it anew (a new --state and --sink)")
    return now


def tail_progress(state_dir: str, table: str, checkpoint: str | None = None) -> tuple[SourcePosition, float, str]:
    """(committed position, when it was committed (epoch s), where that came from) for ``table``;
    ``checkpoint`` is accepted for callers that pass the tail's ``--checkpoint``: progress lives in the state."""
    state = StateDir(state_dir, checkpoint)
    recorded = state.tail_positions().get(table)
    found = (*recorded, "tail batch") if recorded else None
    if found is None:
        offsets = state.offsets()
        if table not in offsets:
            raise DblogError(f"{table} is not in the offset map of {state_dir}: run the initial load first")
        found = offsets[table].min_hw, state.offsets_built_at(), "offset map (no tail batch yet)"
    checked = state.caught_up(table, found[0])  # a catch-up that found no change of the table since then
    if checked is not None and checked[0] > found[0]:
        return checked[0], checked[1], f"catch-up check (no changes of the table since {found[2]})"
    return found


def check_tail_health(state_dir: str, source_position: SourcePosition, max_stall_seconds: float,
                      tables: Sequence[str] | None = None, now: float | None = None,
                      checkpoint: str | None = None) -> dict:
    """Per table: lag and stall; raises ``DblogError`` naming every stalled table."""
    now = time.time() if now is None else now
    names = list(tables or sorted(StateDir(state_dir).offsets()))
    report, stalled = {}, []
    for name in names:
        position, progressed_at, origin = tail_progress(state_dir, name, checkpoint)
        behind = source_position > position
        idle = max(0.0, now - progressed_at)
        report[name] = {"tail": str(position), "source": str(source_position), "behind": behind,
                        "seconds_since_progress": round(idle, 1), "from": origin}
        if behind and idle > max_stall_seconds:
            stalled.append(f"{name}: source at {source_position}, tail at {position} ({origin}), no progress for "
                           f"{idle:.0f}s (> {max_stall_seconds:.0f}s)")
    if stalled:
        raise DblogError("tail stalled: " + "; ".join(stalled) + ". Check the tail job (its logs, the binlog "
                         "retention, the source connection).")
    return report


def purge_horizon(state_dir: str, dialect, tables: Sequence[str] | None = None, warn_seconds: float | None = None,
                  warn_bytes: int | None = None, checkpoint: str | None = None) -> dict[str, PurgeRisk]:
    """Per table, how close the server is to purging the binlog file its tail resumes in (``core/retention.py``;
    the margins default to a share of the server's limits)."""
    state = StateDir(state_dir, checkpoint)
    offsets, recorded, plans = state.offsets(), state.tail_positions(), state.tables()
    needed = {name: state.resume_position(name, offsets[name].min_hw, recorded, plans)
              for name in (tables or sorted(offsets)) if name in offsets}
    retention = dialect.binlog_retention(list(needed.values()))
    return purge_risks(needed, retention, retention.checked_at, warn_seconds, warn_bytes)


def purge_messages(report: dict) -> tuple[list[str], list[str]]:
    """(tables whose binlog is already purged, tables close to it): one line each, from a health report."""
    purged = [info["purge_warning"] for info in report.values() if info.get("binlog_purged")]
    close = [info["purge_warning"] for info in report.values()
             if info.get("purge_warning") and not info.get("binlog_purged")]
    return purged, close


def check_health(state_dir: str, max_stall_seconds: float, tables: Sequence[str] | None = None,
                 source=None, checkpoint: str | None = None, purge_warning_seconds: float | None = None,
                 purge_warning_bytes: int | None = None) -> dict | None:
    """The health check against the live source; None while the initial load has no offset map yet.
    ``source``: the ``SourceConfig`` to use (default: the state's, with its stored password). Each table's
    entry also says how close its binlog is to being purged (``purge_horizon``): that never fails the
    check, but a stall's error names those tables too."""
    state = StateDir(state_dir, checkpoint)
    if not state.has_offsets():
        return None
    dialect = open_dialect(source or state.source(), state.options())
    try:
        position = dialect.current_position()
        horizon = purge_horizon(state_dir, dialect, tables, purge_warning_seconds, purge_warning_bytes, checkpoint)
    finally:
        dialect.close()
    try:
        report = check_tail_health(state_dir, position, max_stall_seconds, tables, checkpoint=checkpoint)
    except DblogError as exc:
        risky = [risk.message() for risk in horizon.values() if risk.message()]
        if risky:
            raise DblogError(f"{exc} Binlog purge horizon: {'; '.join(risky)}") from None
        raise
    for name, risk in horizon.items():
        report[name].update(risk.fields())
    return report
