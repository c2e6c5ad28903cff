"""The one reader of Spark's Structured Streaming checkpoint (``CHECKPOINT/tail``): which micro-batch
offsets were planned (``offsets/N``) and which committed (``commits/N``). The tail's progress is not
read from here (``StateDir.tail_positions``); this says what Spark itself will do on a restart."""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from airflow_provider_dblog.core.positions import SourcePosition


def _numbered(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def _end_offset(offsets_file: Path) -> SourcePosition:
    return SourcePosition.from_dict(json.loads(offsets_file.read_text().strip().split("\n")[-1]))


class CheckpointState(NamedTuple):
    """``kind``: "none" (no offset logged yet), "committed" (the last planned batch committed) or
    "pending" (it did not: a restarted query runs it again); ``position``: that batch's end offset."""

    kind: str
    position: SourcePosition | None


def checkpoint_state(checkpoint: Path) -> CheckpointState:
    files = _numbered(checkpoint / "offsets")
    if not files:
        return CheckpointState("none", None)
    committed = (checkpoint / "commits" / files[-1].name).exists()
    return CheckpointState("committed" if committed else "pending", _end_offset(files[-1]))

