"""Startup modes (Flink CDC's ``scan.startup.mode``, Debezium's ``snapshot.mode``): whether a capture
snapshots its tables and where their binlog stream starts. See docs/startup-modes.md."""
from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition

MODES = ("initial", "snapshot-only", "latest", "position:FILE:POS", "gtid:SET", "timestamp:EPOCH_MS")
_FILE_RE = re.compile(r"^[^\s/:]+\.\d+$")


@dataclass(frozen=True)
class StartupMode:
    """``kind`` is initial | snapshot-only | latest | position | gtid | timestamp; the argument (a
    position, a GTID set or a timestamp) is set for the last three."""

    kind: str = "initial"
    position: SourcePosition | None = None
    gtid: str | None = None
    timestamp_ms: int | None = None

    @property
    def snapshots(self) -> bool:
        """Whether the tables are read (chunks in batches); otherwise the stream starts at a position."""
        return self.kind in ("initial", "snapshot-only")

    @property
    def tails(self) -> bool:
        """Whether ``dblog run`` / the initial-load DAG follow the binlog after the snapshot."""
        return self.kind != "snapshot-only"

    def __str__(self) -> str:
        if self.kind == "position":
            return f"position:{self.position.file}:{self.position.offset}"
        if self.kind == "gtid":
            return f"gtid:{self.gtid}"
        if self.kind == "timestamp":
            return f"timestamp:{self.timestamp_ms}"
        return self.kind

    @classmethod
    def parse(cls, value) -> "StartupMode":
        """``initial`` (default) | ``snapshot-only`` | ``latest`` | ``position:FILE:POS`` | ``gtid:SET`` |
        ``timestamp:EPOCH_MS``; one line naming the forms otherwise."""
        text = str(value or "initial").strip()
        kind, _, arg = text.partition(":")
        if kind in ("initial", "snapshot-only", "latest") and not arg:
            return cls(kind)
        if kind == "position":
            file, _, pos = arg.rpartition(":")
            if _FILE_RE.match(file) and pos.isdigit() and int(pos) >= 4:
                return cls(kind, position=SourcePosition.at(file, int(pos)))
            raise DblogError(f"bad startup mode {text!r}: use position:FILE:POS with a binlog file name and a "
                             f"byte offset, e.g. position:mysql-bin.000003:4")
        if kind == "gtid":
            if arg.strip():
                return cls(kind, gtid=arg.strip())
            raise DblogError(f"bad startup mode {text!r}: use gtid:SET, e.g. gtid:0-1-1500")
        if kind == "timestamp":
            if arg.isdigit():
                return cls(kind, timestamp_ms=int(arg))
            raise DblogError(f"bad startup mode {text!r}: use timestamp:EPOCH_MS (milliseconds since 1970, "
                             f"e.g. timestamp:1767225600000)")
        raise DblogError(f"unknown startup mode {text!r}: use one of {', '.join(MODES)}")

    def to_dict(self) -> dict:
        return {"mode": str(self)}

    @classmethod
    def from_dict(cls, data: dict | None) -> "StartupMode":
        return cls.parse((data or {}).get("mode"))
