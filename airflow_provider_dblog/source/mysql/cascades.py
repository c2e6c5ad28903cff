"""Foreign-key cascades the binlog does not show. InnoDB runs ``ON DELETE/UPDATE CASCADE``, ``SET NULL`` and
``SET DEFAULT`` below the binlog (MySQL before 9.6, every MariaDB; MySQL bug #32506): only the parent's row
change is logged, and the child rows it deleted or changed leave no event. A lake following only the binlog
would keep them, silently.

So a read watches every table a captured table's rows cascade from (directly, or through tables between
them, whose own cascaded changes are not logged either): a parent's DELETE, or an UPDATE of the columns a
cascading key references, marks the captured table changed without an event, and the committer reads it
again (a ``rewrite``, as for PostgreSQL's changes outside the WAL). Correct, and loud in the log; its cost is
one read of the child table per read of the binlog that holds such a parent change.

A MERGE (``MRG_MyISAM``) table over captured MyISAM tables is watched the same way: a write through it is logged
as rows events of the MERGE table only (the child gets a table map and no rows), so each of its rows events marks
its captured children changed (before: the tail went on with exit 0, and the lake missed the insert, kept the
deleted row and the old values)."""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import pymysql

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.ddl import (
    QUALIFIED, ddl_tables, plain_statement, qualified_names, without_strings,
)
from airflow_provider_dblog.source.mysql.types import quote_ident

log = logging.getLogger("dblog")

ACTIONS = ("CASCADE", "SET NULL", "SET DEFAULT")  # the rules that change child rows (RESTRICT, NO ACTION refuse)
REFRESH_SECONDS = 60.0


@dataclass(frozen=True)
class Cascade:
    """One foreign key of ``child`` referencing ``parent`` whose rules change child rows."""

    name: str
    child: str
    parent: str
    referenced: tuple[str, ...]  # the parent's columns
    on_delete: bool
    on_update: bool
    every_change: bool = False  # a MERGE table over ``child``: each of its rows events lands in its children


def cascades(client: MySqlClient, databases: Sequence[str]) -> list[Cascade]:
    """Every foreign key of a table in ``databases`` whose DELETE or UPDATE rule changes child rows."""
    if not databases:
        return []
    marks = ", ".join(["%s"] * len(databases))
    try:
        rows = client.query(
            "SELECT rc.CONSTRAINT_SCHEMA, rc.TABLE_NAME, rc.CONSTRAINT_NAME, k.REFERENCED_TABLE_SCHEMA, "
            "rc.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME, rc.DELETE_RULE, rc.UPDATE_RULE "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS rc JOIN information_schema.KEY_COLUMN_USAGE k "
            "ON k.CONSTRAINT_SCHEMA = rc.CONSTRAINT_SCHEMA AND k.CONSTRAINT_NAME = rc.CONSTRAINT_NAME "
            "AND k.TABLE_NAME = rc.TABLE_NAME "
            f"WHERE rc.CONSTRAINT_SCHEMA IN ({marks}) AND (rc.DELETE_RULE IN ('CASCADE', 'SET NULL', 'SET DEFAULT') "
            "OR rc.UPDATE_RULE IN ('CASCADE', 'SET NULL', 'SET DEFAULT')) ORDER BY k.ORDINAL_POSITION",
            list(databases))
    except pymysql.MySQLError as exc:
        raise DblogError(f"reading the foreign keys of {', '.join(databases)} on {client.config.address} failed: "
                         f"{exc.args[-1]}; dblog needs them to follow cascaded deletes the binlog does not show"
                         ) from None
    found: dict[tuple, dict] = {}
    for schema, table, name, ref_schema, ref_table, ref_column, on_delete, on_update in rows:
        entry = found.setdefault((schema, table, name), {
            "parent": f"{ref_schema or schema}.{ref_table}", "columns": [],
            "on_delete": str(on_delete).upper() in ACTIONS, "on_update": str(on_update).upper() in ACTIONS})
        entry["columns"].append(str(ref_column).lower())
    return [Cascade(name, f"{schema}.{table}", e["parent"], tuple(e["columns"]), e["on_delete"], e["on_update"])
            for (schema, table, name), e in found.items()]


_UNION = re.compile(r"\bUNION\s*=\s*\(([^)]*)\)", re.I)


def merge_unions(client: MySqlClient, databases: Sequence[str]) -> tuple[list[Cascade], set[str]]:
    """(per MERGE table of the server and per table of its UNION, an edge that changes the child on every row
    change; the MyISAM tables of ``databases``, which a MERGE table may write without the catalog knowing it).
    The MERGE table's ``SHOW CREATE TABLE`` names its tables: ``db.t`` or ``t`` of its own database."""
    marks = ", ".join(["%s"] * len(databases)) or "NULL"
    try:
        tables = client.query("SELECT TABLE_SCHEMA, TABLE_NAME, ENGINE FROM information_schema.TABLES "
                              f"WHERE ENGINE = 'MRG_MyISAM' OR (ENGINE = 'MyISAM' AND TABLE_SCHEMA IN ({marks}))",
                              list(databases))
    except pymysql.MySQLError as exc:
        raise DblogError(f"reading the MERGE tables on {client.config.address} failed: {exc.args[-1]}; dblog needs "
                         f"them to follow writes through a MERGE table the binlog logs as its own") from None
    edges, myisam = [], set()
    for schema, table, engine in tables:
        if str(engine).upper() == "MYISAM":
            myisam.add(f"{schema}.{table}".lower())
            continue
        try:
            created = client.query(f"SHOW CREATE TABLE {quote_ident(schema)}.{quote_ident(table)}")
        except pymysql.MySQLError as exc:  # a MERGE table that cannot open its tables takes no write either
            log.debug("MERGE table %s.%s left out: %s", schema, table, exc.args[-1])
            continue
        options = created[0][1].rsplit("\n) ", 1)[-1] if created else ""  # the table's options: no column comment
        union = _UNION.search(options)
        for child in qualified_names(union.group(1), schema) if union else ():
            edges.append(Cascade("MERGE", child, f"{schema}.{table}", (), True, True, every_change=True))
    return edges, myisam


def watched_parents(edges: Iterable[Cascade], captured: Iterable[str]) -> dict[str, list[tuple[Cascade, str]]]:
    """Per table whose row changes may cascade into a captured table: (the key it cascades through, the
    captured table that may change). Chains count: a captured grandchild changes when its parent's rows are
    cascaded from the grandparent, since neither cascade is logged."""
    by_child: dict[str, list[Cascade]] = {}
    for edge in edges:
        by_child.setdefault(edge.child, []).append(edge)
    watched: dict[str, list[tuple[Cascade, str]]] = {}
    for table in captured:
        seen, todo = {table}, [table]
        while todo:
            child = todo.pop()
            for edge in by_child.get(child, ()):
                watched.setdefault(edge.parent, []).append((edge, table))
                if edge.parent not in seen:
                    seen.add(edge.parent)
                    todo.append(edge.parent)
    return watched


def changed_through(kind: str, images: Sequence[tuple] | None, through: Sequence[tuple[Cascade, str]]) -> set[str]:
    """The captured tables a parent's rows event changes without an event of theirs: any DELETE through a
    cascading delete rule; an UPDATE whose referenced columns differ before and after, through an update
    rule. ``images``: (before, after) of each updated row as dicts of lower-case column names; None when they
    are not decoded (then any UPDATE counts)."""
    changed = set()
    for edge, table in through:
        if edge.every_change or (kind == "delete" and edge.on_delete):
            changed.add(table)
        elif kind == "update" and edge.on_update and (images is None or any(
                any(before.get(c) != after.get(c) for c in edge.referenced) for before, after in images)):
            changed.add(table)
    return changed


_DROPS_KEY = re.compile(r"\bDROP\s+(?:FOREIGN\s+KEY|CONSTRAINT)\b", re.I)
_REFERENCES = re.compile(rf"\bREFERENCES\s+({QUALIFIED})", re.I)
_CHANGING_RULE = re.compile(r"\bON\s+(?:DELETE|UPDATE)\s+(?:CASCADE|SET\s+NULL|SET\s+DEFAULT)\b", re.I)


def keys_changed(default_db: str, statement: str, watched: Mapping[str, Sequence[tuple[Cascade, str]]],
                 captured: Iterable[str]) -> list[str]:
    """The captured tables whose rows a DDL statement's change of foreign keys may have left the catalog blind
    to: the catalog is the server's now, a read covers a range before it. A key dropped (or a constraint: it may
    have been one) after a parent's DELETE cascaded through it; a cascading key the catalog does not know (added
    and dropped, or added since its last read); a parent renamed since (the key follows it, the events before
    name it as it was). Each such table, and those its rows cascade into, is read again (before: the tail went
    on with exit 0 and the lake kept the cascaded rows)."""
    upper = statement.upper()
    if not any(word in upper for word in ("FOREIGN", "CONSTRAINT", "REFERENCES", "RENAME")):
        return []
    parsed = ddl_tables(statement, default_db)
    if parsed is None:
        return []
    kind, tables = parsed
    lowered = {name.lower(): name for name in watched}
    mine = {name.lower(): name for name in captured}

    def reached(table: str) -> set[str]:  # ``table`` if captured, and the captured tables it cascades into
        low = table.lower()
        return ({mine[low]} if low in mine else set()) | {child for _, child in watched.get(lowered.get(low, ""), ())}

    if kind == "rename":  # either name of a pair may be a watched parent's now
        return sorted(set().union(*(reached(name) - {mine.get(name.lower())} for name in tables)))
    if kind not in ("alter", "create"):
        return []
    table = tables[0]
    text = without_strings(plain_statement(statement))
    if kind == "alter" and _DROPS_KEY.search(text):
        return sorted(reached(table))
    if not _CHANGING_RULE.search(text):
        return []
    own_db = table.split(".", 1)[0]  # an unqualified REFERENCES names a table of the child's database
    known = {edge.parent.lower() for through in watched.values() for edge, _ in through
             if edge.child.lower() == table.lower()}
    if all(name.lower() in known for name in qualified_names(" ".join(_REFERENCES.findall(text)), own_db)):
        return []
    return sorted(reached(table))


class CascadeCatalog:
    """The foreign keys of the captured databases, read again after ``REFRESH_SECONDS`` (a key added later)."""

    def __init__(self, client: MySqlClient):
        self.client = client
        self._read: tuple[float, tuple, list[Cascade], set[str]] | None = None

    def watched(self, captured: Iterable[str]) -> Mapping[str, list[tuple[Cascade, str]]]:
        """Per watched parent of ``captured``."""
        tables = tuple(sorted(set(captured)))
        return watched_parents(self._current(tables)[2], tables)

    def myisam(self, captured: Iterable[str]) -> list[str]:
        """The ``captured`` tables on MyISAM (a MERGE table may write them)."""
        tables = sorted(set(captured))
        myisam = self._current(tables)[3] if tables else set()
        return [t for t in tables if t.lower() in myisam]

    def _current(self, tables: Sequence[str]) -> tuple[float, tuple, list[Cascade], set[str]]:
        """The catalog read for the databases of ``tables``, read again after ``REFRESH_SECONDS``. The keys of
        databases already read serve a read of fewer of them (a chunk's window after the tail's read of every
        table: before, each switch between the two read the catalog again)."""
        databases = {t.split(".", 1)[0] for t in tables}
        fresh = self._read is not None and time.monotonic() - self._read[0] <= REFRESH_SECONDS
        known = set(self._read[1]) if fresh else set()
        if self._read is None or not databases <= known:
            read = tuple(sorted(known | databases))
            self._read = (time.monotonic(), read, *self._edges(read))
        return self._read

    def truncated_unknown(self, truncated: Sequence[str], watched: Mapping[str, object],
                          myisam: Sequence[str]) -> list[str]:
        """The captured MyISAM tables a ``TRUNCATE`` (of the ``truncated`` tables: ``ddl.truncated_tables``) of a
        table the catalog does not show may have emptied: one gone since, or a MERGE table it has not read yet
        (truncating a MERGE table empties its tables, with no event of theirs). A table that is there now on
        another engine truncated itself only."""
        if not myisam or not truncated:
            return []
        known = {name.lower() for name in (*watched, *myisam)}
        for name in truncated:
            if name.lower() in known:
                continue
            schema, table = name.split(".", 1)
            engine = self.client.query("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                                       "TABLE_NAME = %s", [schema, table])
            if not engine or str(engine[0][0]).upper() == "MRG_MYISAM":
                return list(myisam)
        return []

    def _edges(self, databases: Sequence[str]) -> tuple[list[Cascade], set[str]]:
        """The cascading keys of ``databases`` and of every database a chain of them reaches (a captured
        ``a.g`` whose parent ``b.c`` cascades from ``b.p``), the MERGE tables' unions; the MyISAM tables of
        ``databases``."""
        edges, myisam = merge_unions(self.client, databases)
        read, todo = set(), set(databases)
        while todo:
            read |= todo
            found = cascades(self.client, sorted(todo))
            edges.extend(found)
            todo = {e.parent.split(".", 1)[0] for e in found} - read
        return edges, myisam
