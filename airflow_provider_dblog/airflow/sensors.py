"""DBLog's health check: fail when the source moved but the tail made no progress for too long.

The tail's progress is its Structured Streaming checkpoint (``STATE/checkpoints/DB.TABLE``): the end
offset of the last *committed* micro-batch (``offsets/N`` for the greatest ``commits/N``) and the time
that commit was written. The tail's offsets are binlog positions that advance with every binlog write
(events of other tables included), so "caught up" means: committed offset >= the source's current
position. Before the first micro-batch the offset map (``offsets.json``: smallest HW, build time)
stands in for the checkpoint.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_dblog.airflow.hooks import DblogHook
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.errors import DblogError


def _numbered(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def tail_progress(state_dir: str, table: str) -> tuple[BinlogPosition, float, str]:
    """(committed position, when it was committed (epoch s), where that came from) for ``table``."""
    from airflow_provider_dblog.pipeline import load_offsets
    from airflow_provider_dblog.state import StateDir, read_json

    state = StateDir(state_dir)
    checkpoint = state.checkpoint_dir(table)
    commits = _numbered(checkpoint / "commits")
    for commit in reversed(commits):
        offsets = checkpoint / "offsets" / commit.name
        if offsets.exists():
            last = offsets.read_text().strip().splitlines()[-1]
            return BinlogPosition.from_dict(json.loads(last)), commit.stat().st_mtime, f"tail batch {commit.name}"
    offsets = load_offsets(state)
    if table not in offsets:
        raise DblogError(f"{table} is not in the offset map of {state_dir}: run the initial load first")
    built_at = float(read_json(state.offsets_file).get("built_at") or state.offsets_file.stat().st_mtime)
    return offsets[table].min_hw, built_at, "offset map (no tail batch yet)"


def check_tail_health(state_dir: str, source_position: BinlogPosition, max_stall_seconds: float,
                      tables: Sequence[str] | None = None, now: float | None = None) -> dict:
    """Per table: lag and stall; raises ``DblogError`` naming every stalled table."""
    from airflow_provider_dblog.pipeline import load_offsets
    from airflow_provider_dblog.state import StateDir

    now = time.time() if now is None else now
    names = list(tables or sorted(load_offsets(StateDir(state_dir))))
    report, stalled = {}, []
    for name in names:
        position, progressed_at, origin = tail_progress(state_dir, name)
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


class DblogTailHealthSensor(BaseSensorOperator):
    """Succeeds while the tail keeps up; fails (no retry) when the source moved but no tail micro-batch
    committed for ``max_stall_seconds`` -- DBLog's health check. Works for the scheduled
    ``--available-now`` tail and for a detached ``--continuous`` one.

    It never waits for the tail to catch up: a check that passes returns at once (``poke`` True). Use
    ``soft_fail=True`` to turn a stall into a skip instead of a failure.
    """

    template_fields: Sequence[str] = ("dblog_conn_id", "state_dir", "max_stall_seconds", "tables")
    ui_color = "#f0e8f8"

    def __init__(self, *, state_dir: str, dblog_conn_id: str = DblogHook.default_conn_name,
                 max_stall_seconds: float | str = 1800, tables: str | Sequence[str] | None = None, **kwargs) -> None:
        kwargs.setdefault("poke_interval", 30)
        kwargs.setdefault("timeout", 600)
        super().__init__(**kwargs)
        self.dblog_conn_id = dblog_conn_id
        self.state_dir = state_dir
        self.max_stall_seconds = max_stall_seconds
        self.tables = tables

    def poke(self, context) -> bool:
        from airflow_provider_dblog.airflow.operators import parse_tables
        from airflow_provider_dblog.pipeline import dialect_for
        from airflow_provider_dblog.state import StateDir

        try:
            max_stall = float(self.max_stall_seconds)
            state = StateDir(self.state_dir)
            if not state.offsets_file.exists():
                self.log.info("no offset map in %s yet (initial load not reported): waiting", self.state_dir)
                return False
            config = DblogHook(self.dblog_conn_id).check_state_source(state.load_raw()["source"])
            dialect = dialect_for(config, state.options())
            try:
                position = dialect.current_position()
            finally:
                dialect.close()
            report = check_tail_health(self.state_dir, position, max_stall, parse_tables(self.tables) or None)
        except (DblogError, ValueError) as exc:
            raise AirflowFailException(f"dblog: {exc}") from None
        for name, info in report.items():
            self.log.info("tail of %s: %s", name, info)
        return True
