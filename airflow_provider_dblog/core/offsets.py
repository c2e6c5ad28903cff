"""The binlog-split offset map and Flink CDC's emit rule for the handover to streaming."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

from airflow_provider_dblog.core.chunks import ChunkRange, encode_key, decode_key
from airflow_provider_dblog.core.positions import SourcePosition


@dataclass(frozen=True)
class TableOffsets:
    """Per table: chunk boundaries in database order and the high watermark of each chunk."""

    table: str
    boundaries: tuple  # n key tuples -> n+1 chunks
    high_watermarks: tuple[SourcePosition, ...]

    @cached_property
    def min_hw(self) -> SourcePosition:
        return min(self.high_watermarks)

    @cached_property
    def max_hw(self) -> SourcePosition:
        return max(self.high_watermarks)

    @cached_property
    def _snapshot_positions(self) -> tuple[SourcePosition, SourcePosition, tuple[SourcePosition, ...]]:
        """The HWs as snapshot-row positions, computed once: ``should_emit`` runs for every event."""
        return (self.min_hw.as_snapshot(), self.max_hw.as_snapshot(),
                tuple(hw.as_snapshot() for hw in self.high_watermarks))

    @classmethod
    def from_chunks(cls, table: str, chunks: Sequence[ChunkRange],
                    hws: dict[int, SourcePosition]) -> "TableOffsets":
        ordered = sorted(chunks, key=lambda c: c.id)
        return cls(table, tuple(c.hi for c in ordered[:-1]), tuple(hws[c.id] for c in ordered))

    def to_dict(self) -> dict:
        return {
            "table": self.table,
            "boundaries": [encode_key(b) for b in self.boundaries],
            "high_watermarks": [{**hw.to_dict(), "encoded": hw.encode()} for hw in self.high_watermarks],
            "min_hw": self.min_hw.to_dict(),
            "max_hw": self.max_hw.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "TableOffsets":
        return cls(data["table"], tuple(decode_key(b) for b in data["boundaries"]),
                   tuple(SourcePosition.from_dict(h) for h in data["high_watermarks"]))

    def needs_key(self, pos: SourcePosition) -> bool:
        """True when the emit decision for an event at ``pos`` depends on its key's chunk."""
        return not is_after(pos, self.max_hw) and is_after(pos, self.min_hw)

    def should_emit(self, pos: SourcePosition, chunk: int | None = None) -> bool:
        """Emit an event only after its chunk's HW; after the largest HW everything is emitted.

        ``chunk`` may be None only when ``needs_key(pos)`` is False.
        """
        lowest, highest, per_chunk = self._snapshot_positions
        if pos > highest:
            return True
        if not pos > lowest:
            return False
        if chunk is None:
            raise ValueError("the chunk of the event's key is needed between min and max HW")
        return pos > per_chunk[chunk]


def is_after(pos: SourcePosition, hw: SourcePosition) -> bool:
    """True if the event at ``pos`` was written after the high watermark ``hw`` (not in the snapshot)."""
    return pos > hw.as_snapshot()
