"""What a statement-logged statement may change besides the tables it names. Under ``binlog_format`` STATEMENT
or MIXED a DML statement is logged as its text, and a replica runs it again with its triggers: an ``INSERT INTO
src`` whose trigger updates a captured table, an ``UPDATE v`` of a view over one, a ``SELECT f()`` whose stored
function writes to one, each leave no row event and no statement naming the captured table. Before, the tail
went on (exit 0) and the lake kept the old rows.

So a statement-logged statement that names no captured table is followed through the server's catalog: the
triggers of the tables it names, the views among them, and the stored functions it calls, and on through every
view and routine their text names. A captured table named in any of those texts may have changed (a body that
only reads it is taken as writing it: a false stop is loud, a missed change silent; a body the user may not
read reaches every captured table). The catalog is read once per read of the binlog, and only when such a
statement appears: a binlog written in ROW format holds none, and pays nothing."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import pymysql

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source.mysql.connection import MySqlClient

_CALL = re.compile(r"(?:`((?:[^`]|``)+)`|([A-Za-z0-9_$\u0080-\uffff]+))\s*\(")  # a name before "(" (a call)


@dataclass(frozen=True)
class Routines:
    """Per lower-case ``db.name``: the text of each trigger of a table (joined), each view and each stored routine
    (None: a body the user may not read)."""

    triggers: dict[str, str | None]
    views: dict[str, str | None]
    routines: dict[str, str | None]


def read_routines(client: MySqlClient) -> Routines:
    """Every trigger, view and stored routine the server shows this user."""
    try:
        bodies: dict[str, list[str | None]] = {}
        for db, table, body in client.query("SELECT EVENT_OBJECT_SCHEMA, EVENT_OBJECT_TABLE, ACTION_STATEMENT "
                                            "FROM information_schema.TRIGGERS"):
            bodies.setdefault(f"{db}.{table}".lower(), []).append(body)
        triggers = {key: None if None in texts else "\n".join(texts) for key, texts in bodies.items()}
        views = {f"{db}.{name}".lower(): body for db, name, body in client.query(
            "SELECT TABLE_SCHEMA, TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS")}
        routines = {f"{db}.{name}".lower(): body for db, name, body in client.query(
            "SELECT ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_DEFINITION FROM information_schema.ROUTINES")}
    except pymysql.MySQLError as exc:
        raise DblogError(f"reading the triggers, views and stored routines on {client.config.address} failed: "
                         f"{exc.args[-1]}; dblog needs them to tell which tables a statement-logged statement "
                         f"changed") from None
    return Routines(triggers, views, routines)


def _mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` (a bare, lower-case name) as a word of its own, quoted or not."""
    return re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", text, re.I) is not None


def called(statement: str, routines: Routines) -> list[str]:
    """The stored functions (lower-case ``db.name``) whose bare name is called in ``statement``."""
    names = {(quoted or plain).replace("``", "`").lower() for quoted, plain in _CALL.findall(statement)}
    return [full for full in routines.routines if full.split(".", 1)[1] in names]


def reached(named: Iterable[str], statement: str, routines: Routines, captured: Iterable[str]) -> set[str]:
    """The ``captured`` tables (their own spelling) that a statement naming ``named`` tables (``db.table``) may
    change through triggers, views and stored functions, followed through every view and routine they name."""
    captured = list(captured)
    bare = {c: c.split(".", 1)[1].lower() for c in captured}
    # every text a statement may run, by key: a table's triggers, a view, a routine; each with the bare name that
    # a text naming it would use
    texts = {**{f"trigger:{t}": body for t, body in routines.triggers.items()}, **routines.views, **routines.routines}
    names = {key: key.removeprefix("trigger:").split(".", 1)[1] for key in texts}
    todo = [f"trigger:{n.lower()}" for n in named if n.lower() in routines.triggers]
    todo += [n.lower() for n in named if n.lower() in routines.views] + called(statement, routines)
    seen, out = set(todo), set()
    while todo:
        text = texts[todo.pop()]
        if text is None:  # a body this user may not read: any captured table
            return set(captured)
        out.update(c for c, name in bare.items() if _mentions(text, name))
        for key, name in names.items():  # the views, routines and triggered tables it names: their texts too
            if key not in seen and _mentions(text, name):
                seen.add(key)
                todo.append(key)
    return out
