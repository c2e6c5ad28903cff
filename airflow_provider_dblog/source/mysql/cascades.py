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
from airflow_provider_dblog.source.mysql.ddl import qualified_names
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


def merge_unions(client: MySqlClient) -> list[Cascade]:
    """Per MERGE table of the server and per table of its UNION, an edge that changes the child on every row
    change (the MERGE table's ``SHOW CREATE TABLE`` names its tables; ``db.t`` or ``t`` of its own database)."""
    try:
        merges = client.query("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                              "WHERE ENGINE = 'MRG_MyISAM'")
    except pymysql.MySQLError as exc:
        raise DblogError(f"reading the MERGE tables on {client.config.address} failed: {exc.args[-1]}; dblog needs "
                         f"them to follow writes through a MERGE table the binlog logs as its own") from None
    edges = []
    for schema, table in merges:
        try:
            created = client.query(f"SHOW CREATE TABLE {quote_ident(schema)}.{quote_ident(table)}")
        except pymysql.MySQLError as exc:  # a MERGE table that cannot open its tables takes no write either
            log.debug("MERGE table %s.%s left out: %s", schema, table, exc.args[-1])
            continue
        options = created[0][1].rsplit("\n) ", 1)[-1] if created else ""  # the table's options: no column comment
        union = _UNION.search(options)
        for child in qualified_names(union.group(1), schema) if union else ():
            edges.append(Cascade("MERGE", child, f"{schema}.{table}", (), True, True, every_change=True))
    return edges


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


class CascadeCatalog:
    """The foreign keys of the captured databases, read again after ``REFRESH_SECONDS`` (a key added later)."""

    def __init__(self, client: MySqlClient):
        self.client = client
        self._read: tuple[float, tuple, list[Cascade]] | None = None

    def watched(self, captured: Iterable[str]) -> Mapping[str, list[tuple[Cascade, str]]]:
        """Per watched parent of ``captured``. The keys of databases already read serve a read of fewer of them
        (a chunk's window after the tail's read of every table: before, each switch between the two read the
        catalog again)."""
        tables = tuple(sorted(set(captured)))
        databases = {t.split(".", 1)[0] for t in tables}
        fresh = self._read is not None and time.monotonic() - self._read[0] <= REFRESH_SECONDS
        known = set(self._read[1]) if fresh else set()
        if self._read is None or not databases <= known:
            read = tuple(sorted(known | databases))
            self._read = (time.monotonic(), read, self._edges(read))
        return watched_parents(self._read[2], tables)

    def _edges(self, databases: Sequence[str]) -> list[Cascade]:
        """The cascading keys of ``databases`` and of every database a chain of them reaches (a captured
        ``a.g`` whose parent ``b.c`` cascades from ``b.p``)."""
        read, edges, todo = set(), merge_unions(self.client), set(databases)
        while todo:
            read |= todo
            found = cascades(self.client, sorted(todo))
            edges.extend(found)
            todo = {e.parent.split(".", 1)[0] for e in found} - read
        return edges
