"""Tables a statement maps but writes no row of. A row-logged statement's events start with a ``Table_map`` of every
table it locked for writing, then its rows events. A write through a MERGE table maps each table of its UNION and
logs rows of the MERGE table only: the captured MyISAM table changed and the binlog holds its map, no row of it.
When the catalog of MERGE tables no longer shows that MERGE table (dropped, or its UNION changed, before the read
asked), the map is all that is left, so a MyISAM table mapped by a statement without a rows event of its own is
read again. Triggers that did not fire into the table, and multi-table statements that changed no row of it,
map it too: a re-read that was not needed, never a change lost.

A table that is not MyISAM when the read starts may have been one earlier in the range (a legacy MERGE setup
moved to InnoDB: the last writes through the MERGE table, then ``ALTER TABLE c ENGINE=InnoDB``): its unwritten
maps are kept as suspects, and an ``ENGINE`` change of it later in the range makes them count; one made MyISAM in
the range counts from there on. (Foreign-key children are mapped by their parents' statements too: InnoDB tables
are only suspects, never read again for that alone.)

Only the maps and rows events of captured tables are seen (the replication library drops other tables' events),
so a statement's end is read from what follows: a map of a table already mapped, a map after a rows event, or a
statement or commit event."""
from __future__ import annotations

from typing import Iterable

from airflow_provider_dblog.core.positions import SourcePosition


class MappedWithoutRows:
    """Which captured tables a statement mapped and wrote no row of, statement by statement: those that are (or
    have become) MyISAM at once, the others if their engine changes later in the read."""

    def __init__(self, captured: Iterable[str], myisam: Iterable[str]):
        self.captured = {name.lower(): name for name in captured}
        self.myisam = {name.lower() for name in myisam}
        self._mapped: set[str] = set()
        self._written: set[str] = set()
        self._rows_seen = False  # a rows event since the statement's maps: the next map starts another
        self._suspects: dict[str, SourcePosition] = {}  # not MyISAM now: unwritten maps, the first one's position

    @property
    def myisam_tables(self) -> list[str]:
        return sorted(self.captured[low] for low in self.myisam if low in self.captured)

    def mapped(self, table: str, pos: SourcePosition) -> list[str]:
        """A ``Table_map`` of ``table`` at ``pos``: the MyISAM tables the statement it ends (if it ends one) left
        unwritten."""
        low = table.lower()
        ended = self.ended(pos) if self._rows_seen or low in self._mapped else []
        if low in self.captured:
            self._mapped.add(low)
        return ended

    def wrote(self, table: str) -> None:
        """A rows event of ``table``."""
        self._rows_seen = True
        self._written.add(table.lower())

    def ended(self, pos: SourcePosition) -> list[str]:
        """A statement or commit event at ``pos``, or the read's end: the MyISAM tables the open statement left
        unwritten (the others become suspects)."""
        unwritten = self._mapped - self._written
        self._mapped, self._written, self._rows_seen = set(), set(), False
        for low in unwritten - self.myisam:
            self._suspects.setdefault(low, pos)
        return sorted(self.captured[low] for low in unwritten & self.myisam)

    def engine_changed(self, table: str, engine: str) -> list[tuple[str, SourcePosition]]:
        """``ALTER TABLE table ENGINE=engine``: (the table, where) for its unwritten maps before, which a MERGE table
        may have written while it was MyISAM."""
        low = table.lower()
        if engine.upper() == "MYISAM":
            self.myisam.add(low)
        else:
            self.myisam.discard(low)
        at = self._suspects.pop(low, None)
        return [(self.captured[low], at)] if at is not None and low in self.captured else []
