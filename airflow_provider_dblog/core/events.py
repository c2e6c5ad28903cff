"""Change events as plain value objects, independent of the binlog library that produced them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from airflow_provider_dblog.core.exact import same_key
from airflow_provider_dblog.core.positions import SourcePosition, check_row_index

Key = tuple
Row = Mapping[str, Any]
ROW_KINDS = {"c": "+I", "u": "+U", "d": "-D"}


@dataclass(frozen=True)
class ChangeEvent:
    """One row change. ``op`` is c (insert), u (update), d (delete).

    A primary-key-changing update never appears here: ``split_key_change`` turns it into a delete of
    the old key and an insert of the new one before anything else sees it. ``unchanged`` names columns
    of ``after`` the source did not send (PostgreSQL's unchanged TOASTed values: ``None`` in ``after``,
    not NULL): the committer takes them from the key's previous image (``readers.unchanged_values``).
    """

    table: str
    op: str
    pos: SourcePosition
    key: Key
    after: Row | None
    before: Row | None
    ts_ms: int = 0
    unchanged: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """Flink's row kind of the after image (+I, +U, -D)."""
        return ROW_KINDS[self.op]


def key_of(row: Row, key_columns: tuple[str, ...]) -> Key:
    return tuple([row[c] for c in key_columns])


def row_change(table: str, pos: SourcePosition, key_columns: tuple[str, ...],
               before: Row | None, after: Row | None, ts_ms: int = 0,
               unchanged: tuple[str, ...] = ()) -> list[ChangeEvent]:
    """The events for one binlog row: one, or two for an update that changes the key.

    Each event gets its own position (row index ``2*i`` / ``2*i+1``) so that no two events share
    a ``_pos``; ``unchanged`` goes with the after image (for a key change: the insert, whose values the
    committer takes from the deleted key at the row before it). Keys compare by exact stored value (``core.exact``):
    an update from 'abc' to 'ABC' is a key change even under a case-insensitive collation, and one from -0.0 to 0.0
    too though they are equal (the lake's merge matches keys bit for bit); a NaN key stays itself.
    """
    check_row_index(pos.row, pos)
    first = SourcePosition(pos.seq, pos.offset, pos.row * 2, pos.file)
    if before is None:
        return [ChangeEvent(table, "c", first, key_of(after, key_columns), after, None, ts_ms, unchanged)]
    if after is None:
        return [ChangeEvent(table, "d", first, key_of(before, key_columns), None, before, ts_ms)]
    old, new = key_of(before, key_columns), key_of(after, key_columns)
    if same_key(old, new):
        return [ChangeEvent(table, "u", first, new, after, before, ts_ms, unchanged)]
    second = SourcePosition(pos.seq, pos.offset, pos.row * 2 + 1, pos.file)
    return [ChangeEvent(table, "d", first, old, None, before, ts_ms),
            ChangeEvent(table, "c", second, new, after, None, ts_ms, unchanged)]
