"""Tables a statement maps but writes no row of. A row-logged statement's events start with a ``Table_map`` of every
table it locked for writing, then its rows events. A write through a MERGE table maps each table of its UNION and
logs rows of the MERGE table only: the captured MyISAM table changed and the binlog holds its map, no row of it.
When the catalog of MERGE tables no longer shows that MERGE table (dropped, or its UNION changed, before the read
asked), the map is all that is left, so a MyISAM table mapped by a statement without a rows event of its own is
read again. Triggers that did not fire into the table, and multi-table statements that changed no row of it,
map it too: a re-read that was not needed, never a change lost.

Only the maps and rows events of captured tables are seen (the replication library drops other tables' events),
so a statement's end is read from what follows: a map of a table already mapped, a map after a rows event, or a
statement or commit event."""
from __future__ import annotations

from typing import Iterable


class MappedWithoutRows:
    """Which of ``watched`` a statement mapped and wrote no row of, statement by statement."""

    def __init__(self, watched: Iterable[str]):
        self.watched = {name.lower(): name for name in watched}
        self._mapped: set[str] = set()
        self._written: set[str] = set()
        self._rows_seen = False  # a rows event since the statement's maps: the next map starts another

    def mapped(self, table: str) -> list[str]:
        """A ``Table_map`` of ``table``: the tables the statement it ends (if it ends one) left unwritten."""
        low = table.lower()
        ended = self.ended() if self._rows_seen or low in self._mapped else []
        if low in self.watched:
            self._mapped.add(low)
        return ended

    def wrote(self, table: str) -> None:
        """A rows event of ``table``."""
        if self.watched:  # (no captured MyISAM table: nothing to track, once per rows event)
            self._rows_seen = True
            self._written.add(table.lower())

    def ended(self) -> list[str]:
        """A statement or commit event, or the read's end: the tables the open statement left unwritten."""
        unwritten = sorted(self.watched[low] for low in self._mapped - self._written)
        self._mapped, self._written, self._rows_seen = set(), set(), False
        return unwritten
