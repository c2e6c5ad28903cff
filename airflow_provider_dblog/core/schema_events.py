"""Schema events of a binlog: the DDL statements that name a captured table, and the table layout in
force from a position on (DBLog's schema store, fed by the binlog itself).

A ``SchemaChange`` is a DDL statement (ALTER, TRUNCATE, RENAME, DROP, CREATE) seen at a position; a
``SchemaVersion`` is the table's columns as a rows event's table map describes them, from the first
rows event decoded with them. Rows are always decoded with the version in force at their position. A
``ColumnAction`` is what one clause of a change does to the rows, as the source's dialect reads its
statement (``DataSourceDialect.column_actions``; MySQL's DDL parsing is ``source/mysql/ddl.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.tables import TableMeta

SCHEMA_CHANGE_BEHAVIOURS = ("evolve", "fail", "freeze")
# changes a source's catalog shows and its log does not (PostgreSQL): a column dropped and added again, a table
# whose files were replaced; their position is the end of the read that found them
CATALOG_KINDS = ("recreate", "rewrite")
# a change the source cannot give as rows (PostgreSQL: an UPDATE or DELETE whose old key the table's replica
# identity does not carry): the statement says why and what to do; the capture stops when the lake needs it
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class SchemaChange:
    """A DDL statement naming ``table``: ``start`` is the (transaction) boundary before it, ``pos`` its end."""

    table: str
    kind: str  # alter | truncate | rename | drop | create | recreate | rewrite (the catalog says these two) | identity
    statement: str
    start: SourcePosition
    pos: SourcePosition

    def describe(self) -> str:
        text = " ".join(self.statement.split())
        return f"{self.kind.upper()} of {self.table} at {self.pos}: `{text[:200]}`"


@dataclass(frozen=True)
class SchemaVersion:
    """The columns of ``meta.qualified`` in force for rows events from ``pos`` on."""

    meta: TableMeta
    pos: SourcePosition


@dataclass(frozen=True)
class ColumnAction:
    """One clause of an ALTER TABLE: ``add`` (``default``: the literal's text, None for NULL, ``...``
    when unknown: an expression or NOT NULL without one), ``drop``, ``rename`` (``name`` -> ``new``),
    ``modify``, ``keep`` (no row changes: indexes, defaults, table options), ``other`` (unknown)."""

    kind: str
    name: str = ""
    new: str = ""
    default: object = None
