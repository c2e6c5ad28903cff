"""Schema events of a binlog: the DDL statements that name a captured table, and the table layout in
force from a position on (DBLog's schema store, fed by the binlog itself).

A ``SchemaChange`` is a DDL statement (ALTER, TRUNCATE, RENAME, DROP, CREATE) seen at a position; a
``SchemaVersion`` is the table's columns as a rows event's table map describes them, from the first
rows event decoded with them. Rows are always decoded with the version in force at their position.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.core.tables import TableMeta

SCHEMA_CHANGE_BEHAVIOURS = ("evolve", "fail", "freeze")


@dataclass(frozen=True)
class SchemaChange:
    """A DDL statement naming ``table``: ``start`` is the (transaction) boundary before it, ``pos`` its end."""

    table: str
    kind: str  # alter | truncate | rename | drop | create
    statement: str
    start: BinlogPosition
    pos: BinlogPosition

    def describe(self) -> str:
        text = " ".join(self.statement.split())
        return f"{self.kind.upper()} of {self.table} at {self.pos}: `{text[:200]}`"


@dataclass(frozen=True)
class SchemaVersion:
    """The columns of ``meta.qualified`` in force for rows events from ``pos`` on."""

    meta: TableMeta
    pos: BinlogPosition


_NAME = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_QUALIFIED = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_COMMENTS = re.compile(r"/\*(?!!).*?\*/|--[^\n]*|#[^\n]*", re.S)
_VERSIONED = re.compile(r"/\*!\d*\s*(.*?)\*/", re.S)
_STATEMENTS = [
    ("alter", re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?({_QUALIFIED})", re.I)),
    ("truncate", re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?({_QUALIFIED})", re.I)),
    ("drop", re.compile(r"^DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?(.+)$", re.I | re.S)),
    ("rename", re.compile(r"^RENAME\s+TABLES?\s+(.+)$", re.I | re.S)),
    ("create", re.compile(rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                          rf"({_QUALIFIED})", re.I)),
]


def _unquote(name: str) -> str:
    name = name.strip()
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _qualify(name: str, default_db: str) -> str:
    parts = re.findall(_NAME, name)
    if len(parts) >= 2:
        return f"{_unquote(parts[0])}.{_unquote(parts[1])}"
    return f"{default_db}.{_unquote(parts[0])}"


def ddl_tables(statement: str, default_db: str) -> tuple[str, list[str]] | None:
    """(kind, tables the statement changes) of a DDL statement, or None if it changes no table's rows or
    columns. ``RENAME TABLE a TO b`` names both ``a`` and ``b`` (a table swap renames onto a captured name)."""
    text = _VERSIONED.sub(r"\1", _COMMENTS.sub(" ", statement)).strip()
    for kind, pattern in _STATEMENTS:
        match = pattern.match(text)
        if match is None:
            continue
        if kind in ("alter", "truncate", "create"):
            return kind, [_qualify(match.group(1), default_db)]
        body = re.split(r"\s+(?:RESTRICT|CASCADE)\s*$", match.group(1).strip(), flags=re.I)[0]
        if kind == "drop":
            return kind, [_qualify(n, default_db) for n in body.split(",") if n.strip()]
        names = []
        for pair in body.split(","):
            sides = re.split(r"\s+TO\s+", pair.strip(), flags=re.I)
            names.extend(_qualify(s, default_db) for s in sides if s.strip())
        return kind, names
    return None
