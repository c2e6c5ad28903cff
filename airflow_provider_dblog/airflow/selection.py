"""Which chunks a re-snapshot re-reads: by chunk id, by key range, and/or by a row filter.

Pure functions over the plan and a dialect (no Airflow), so they are testable alone.

* **Key range** ``lo``/``hi`` (both inclusive, either may be omitted): every chunk whose ``[lo, hi)``
  bounds overlap the range. Overlap is decided in the database's key order (the dialect's
  ``sort_keys``: collation weights for text keys), the same order the tail uses to locate keys.
* **Filter**: a boolean condition on the table's columns (``status = 'late' AND amount > 100``);
  only chunks that currently hold a row matching it (inside the key range) are re-read. The filter
  is tokenised and rebuilt: only column names (quoted as identifiers), literals, comparison and
  boolean operators, ``IS [NOT] NULL``, ``IN``, ``BETWEEN`` and ``LIKE`` pass. Statement separators,
  comments, functions, sub-queries and unknown words are rejected with a message saying why.

A re-read chunk is always read whole with ``--force``: that is what keeps the lake exact (rows
carry the chunk's new high watermark, so they replace older output and lose to later binlog events).
"""
from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Sequence

from airflow_provider_dblog.errors import DblogError

FILTER_HELP = ("a filter is one boolean condition on the table's columns, e.g. status = 'late' AND id >= 100; "
               "allowed: column names, numbers, 'strings', = <> != < <= > >=, AND OR NOT, IS [NOT] NULL, IN (...), "
               "BETWEEN, LIKE, parentheses")
# JSON-schema pattern for the trigger form / API (a first line of defence; filter_sql() decides).
FILTER_PARAM_PATTERN = r"^(?!.*(--|/\*|\*/))[^;#\\]*$"
MAX_FILTER_LENGTH = 2000

_KEYWORDS = {"AND", "OR", "NOT", "IS", "NULL", "IN", "BETWEEN", "LIKE", "TRUE", "FALSE", "XOR"}
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>'(?:[^'\\]|'')*')
  | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<quoted>`(?:[^`]|``)+`)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<op><=|>=|<>|!=|=|<|>)
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<comma>,)
""", re.VERBOSE)


def reject_unsafe(text) -> str:
    """The checks that need no table: empty, too long, statement separators, comments, backslashes."""
    if text is None or not str(text).strip():
        raise DblogError("filter rejected: it is empty; " + FILTER_HELP)
    text = str(text)
    if len(text) > MAX_FILTER_LENGTH:
        raise DblogError(f"filter rejected: longer than {MAX_FILTER_LENGTH} characters")
    for bad, why in ((";", "';' (a second statement)"), ("--", "'--' (a comment)"), ("#", "'#' (a comment)"),
                     ("/*", "'/*' (a comment)"), ("*/", "'*/' (a comment)"), ("\\", "a backslash")):
        if bad in text:
            raise DblogError(f"filter rejected: {why} is not allowed in a filter; {FILTER_HELP}")
    return text


def filter_sql(text: str, columns: Sequence[str]) -> str:
    """The filter rebuilt from validated tokens, identifiers quoted; raises ``DblogError`` otherwise."""
    from airflow_provider_dblog.dialects.mysql_types import quote_ident

    text = reject_unsafe(text)
    by_lower = {c.lower(): c for c in columns}
    out: list[str] = []
    depth = 0
    pos = 0
    tokens = []
    unexpected = None  # reported after the tokens before it, so the first problem is the one named
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            unexpected = DblogError(f"filter rejected: unexpected {text[pos:pos + 10]!r} at character {pos + 1}; "
                                    f"{FILTER_HELP}")
            break
        pos = match.end()
        if match.lastgroup != "ws":
            tokens.append((match.lastgroup, match.group()))
    for i, (kind, value) in enumerate(tokens):
        following = tokens[i + 1][0] if i + 1 < len(tokens) else None
        if kind in ("word", "quoted"):
            name = value[1:-1].replace("``", "`") if kind == "quoted" else value
            if kind == "word" and name.upper() in _KEYWORDS:
                out.append(name.upper())
                continue
            if following == "lparen":
                raise DblogError(f"filter rejected: function calls ({name}(...)) are not allowed; {FILTER_HELP}")
            column = by_lower.get(name.lower())
            if column is None:
                raise DblogError(f"filter rejected: {name!r} is not a column of the table (columns: "
                                 f"{', '.join(columns)}); {FILTER_HELP}")
            out.append(quote_ident(column))
        elif kind == "lparen":
            depth += 1
            out.append("(")
        elif kind == "rparen":
            depth -= 1
            if depth < 0:
                raise DblogError("filter rejected: unbalanced ')'")
            out.append(")")
        else:
            out.append(value)
    if unexpected is not None:
        raise unexpected
    if depth:
        raise DblogError("filter rejected: unbalanced '('")
    return " ".join(out)


# ---- key ranges -------------------------------------------------------------------------------
def parse_key(value: Any, meta) -> tuple | None:
    """A key bound from a trigger-form value: a scalar for one key column, a JSON list for several."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DblogError(f"bad key bound {value!r}: not a JSON list") from None
    parts = list(value) if isinstance(value, (list, tuple)) else [value]
    keys = list(meta.key_columns)
    if len(parts) != len(keys):
        raise DblogError(f"bad key bound {value!r}: {meta.qualified} has key ({', '.join(keys)}), give "
                         f"{len(keys)} value(s){' as a JSON list' if len(keys) > 1 else ''}")
    return tuple(_convert(p, meta.column(k)) for p, k in zip(parts, keys))


def _convert(value: Any, col) -> Any:
    t = col.data_type
    try:
        if t in ("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year", "bit"):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(str(value).strip())
        if t in ("decimal", "numeric"):
            return Decimal(str(value).strip())
        if t in ("float", "double", "real"):
            return float(value)
        if t in ("datetime", "timestamp"):
            return dt.datetime.fromisoformat(str(value).strip())
        if t == "date":
            return dt.date.fromisoformat(str(value).strip())
        if t in ("binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob"):
            return str(value).encode()
    except (ValueError, InvalidOperation):
        raise DblogError(f"bad key bound {value!r} for column {col.name} ({col.column_type})") from None
    return str(value)


def parse_chunk_ids(value: Any) -> list[int] | None:
    if value is None or value == "" or value == []:
        return None
    parts = value if isinstance(value, (list, tuple)) else re.split(r"[,\s]+", str(value).strip())
    ids: set[int] = set()
    for part in parts:
        text = str(part).strip()
        if not text:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
        if not match:
            raise DblogError(f"bad chunk id {text!r}: use numbers and ranges like 3,5-7")
        lo = int(match.group(1))
        hi = int(match.group(2) or lo)
        ids.update(range(lo, hi + 1))
    return sorted(ids)


def chunks_in_range(dialect, meta, chunks, lo: tuple | None, hi: tuple | None) -> list[int]:
    """Ids of the chunks whose bounds overlap ``lo <= key <= hi``, in the database's key order."""
    from airflow_provider_dblog.core.chunks import locate

    ordered = sorted(chunks, key=lambda c: c.id)
    if lo is None and hi is None:
        return [c.id for c in ordered]
    boundaries = [c.hi for c in ordered[:-1]]
    bounds = [b for b in (lo, hi) if b is not None]
    sort_keys = dialect.sort_keys(meta, boundaries + bounds)
    boundary_sk, bound_sk = sort_keys[:len(boundaries)], sort_keys[len(boundaries):]
    lo_sk = bound_sk[0] if lo is not None else None
    hi_sk = bound_sk[-1] if hi is not None else None
    if lo_sk is not None and hi_sk is not None and lo_sk > hi_sk:
        raise DblogError(f"empty key range: lo {lo} is after hi {hi}")
    first = locate(lo_sk, boundary_sk) if lo_sk is not None else 0
    last = locate(hi_sk, boundary_sk) if hi_sk is not None else len(ordered) - 1
    return [c.id for c in ordered[first:last + 1]]


def chunks_matching(dialect, meta, chunks, chunk_ids: Sequence[int], condition: str,
                    lo: tuple | None, hi: tuple | None) -> list[int]:
    """Of ``chunk_ids``, those holding at least one row with ``condition`` inside ``[lo, hi]`` now."""
    by_id = {c.id: c for c in chunks}
    table = dialect.table_sql(meta)
    key_range = []
    if lo is not None:
        key_range.append(dialect.range_condition(meta, lo, None))
    if hi is not None:
        key_range.append(f"NOT {dialect._compare(meta, hi, '>', '>')}")
    try:
        dialect.query(f"SELECT 1 FROM {table} WHERE ({condition}) LIMIT 0")
    except Exception as exc:  # the server's own verdict on the (validated) condition
        message = str(exc.args[-1]) if getattr(exc, "args", None) else str(exc)
        raise DblogError(f"filter rejected by the database: {message}") from None
    found = []
    for cid in chunk_ids:
        chunk = by_id[cid]
        where = " AND ".join([dialect.range_condition(meta, chunk.lo, chunk.hi), *key_range, f"({condition})"])
        if dialect.query(f"SELECT 1 FROM {table} WHERE {where} LIMIT 1"):
            found.append(cid)
    return found
