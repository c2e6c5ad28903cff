"""Re-snapshot selection: which chunks a re-snapshot re-reads: by chunk id, by key range, and/or by a row filter.

The parsing and validation are pure functions; ``select_chunks`` is the step the CLI
(``dblog resnapshot``) and ``ResnapshotPlannerOperator`` both call.

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

from airflow_provider_dblog.core.chunks import locate
from airflow_provider_dblog.core.config import SourceConfig, compress_ids, parse_chunk_ids
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.state import StateDir

FILTER_HELP = ("a filter is one boolean condition on the table's columns, e.g. status = 'late' AND id >= 100; "
               "allowed: column names (in `backticks` on every source when they hold spaces, quotes or capitals "
               "another column differs by), numbers, 'strings', = <> != < <= > >=, AND OR NOT, IS [NOT] NULL, "
               "IN (...), BETWEEN, LIKE, parentheses")
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


def filter_sql(text: str, columns: Sequence[str], quote_ident) -> str:
    """The filter rebuilt from validated tokens, identifiers quoted by ``quote_ident`` (the dialect's);
    raises ``DblogError`` otherwise."""
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
            quoted = ("; a \"double-quoted\" name is written `Name` here (a string takes single quotes)"
                      if text[pos] == '"' else "")
            unexpected = DblogError(f"filter rejected: unexpected {text[pos:pos + 10]!r} at character {pos + 1}"
                                    f"{quoted}; {FILTER_HELP}")
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
            # the name as written first: PostgreSQL's "ORDER" and "order" are two columns
            column = name if name in columns else by_lower.get(name.lower())
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


def chunks_in_range(dialect, meta, chunks, lo: tuple | None, hi: tuple | None) -> list[int]:
    """Ids of the chunks whose bounds overlap ``lo <= key <= hi``, in the database's key order."""
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


def select_chunks(state_dir: str, table: Any, key_lo: Any = None, key_hi: Any = None, chunk_ids: Any = None,
                  filter: Any = None, source: SourceConfig | None = None) -> dict:
    """The chunks of ``table`` to re-read (each selection optional, combined with AND), grouped by batch:
    ``{"table", "what", "chunks": [...], "batches": [{"batch", "table", "chunks", "label"}]}``. ``source``: the
    connection to use (default: the state's, with its stored password)."""
    if filter not in (None, ""):
        reject_unsafe(filter)  # before anything else touches the input
    if not table or not str(table).strip():
        raise DblogError("say which table to re-snapshot (table = DB.TABLE)")
    table = str(table).strip()
    state = StateDir(state_dir)
    plan = state.table(table)
    if not plan.startup.snapshots:
        raise DblogError(f"{table} was planned with startup mode {plan.startup} and has no snapshot chunks to "
                         f"re-read: capture it again with --startup initial in a new --state and --sink")
    meta = plan.meta
    if filter not in (None, ""):
        filter_sql(filter, meta.column_names, str)  # every column and token checked before connecting
    wanted = parse_chunk_ids(chunk_ids)
    all_ids = [c.id for c in plan.chunks]
    if wanted is not None:
        unknown = sorted(set(wanted) - set(all_ids))
        if unknown:
            raise DblogError(f"{table} has chunks 0-{len(all_ids) - 1}; no chunk {compress_ids(unknown)}")
    ids = wanted if wanted is not None else all_ids
    lo, hi = parse_key(key_lo, meta), parse_key(key_hi, meta)
    condition = None
    if lo is not None or hi is not None or filter not in (None, ""):
        dialect = open_dialect(source or state.source(), state.options())
        try:
            if filter not in (None, ""):
                condition = filter_sql(filter, meta.column_names, dialect.quote_identifier)
            if lo is not None or hi is not None:
                in_range = set(chunks_in_range(dialect, meta, plan.chunks, lo, hi))
                ids = [c for c in ids if c in in_range]
            if condition and ids:
                chosen_chunks = [plan.chunk(c) for c in ids]
                ids = dialect.chunks_matching(meta, chosen_chunks, condition, lo, hi)
        finally:
            dialect.close()
    chosen = sorted(set(ids))
    what = " and ".join(part for part in (
        f"chunks {compress_ids(wanted)}" if wanted else "",
        f"keys {key_lo if lo is not None else '-∞'} .. {key_hi if hi is not None else '∞'}"
        if lo is not None or hi is not None else "",
        f"rows where {condition}" if condition else "") if part) or "the whole table"
    batches = []
    for batch in state.batches():
        mine = [c for c in batch.chunk_ids(table) if c in chosen]
        if mine:
            batches.append({"batch": batch.index, "table": table, "chunks": mine,
                            "label": f"re-snapshot {table} chunks {compress_ids(mine)} {plan.key_span(mine)}"})
    return {"table": table, "what": what, "chunks": chosen, "batches": batches}


def resnapshot(state_dir: str, sink: str, table: Any, key_lo: Any = None, key_hi: Any = None, chunk_ids: Any = None,
               filter: Any = None, dry_run: bool = False, executor=None) -> dict:
    """Select chunks (``select_chunks``) and re-read them (``--force``) on ``executor`` (``steps.executor``;
    None only with ``dry_run``): each replaces its key range at its new high watermark while a tail may keep
    running."""
    from airflow_provider_dblog.steps.snapshot import snapshot_batch

    selection = select_chunks(state_dir, table, key_lo, key_hi, chunk_ids, filter)
    rows = 0
    if not dry_run:
        if selection["batches"] and executor is None:
            raise TypeError("resnapshot reads chunks again: pass the executor that reads them")
        for batch in selection["batches"]:
            reports = snapshot_batch(state_dir, batch["batch"], sink, force=True, chunk_ids=batch["chunks"],
                                     executor=executor, table=batch["table"])
            rows += sum(r["rows"] for r in reports)
    return {**selection, "rows": rows, "dry_run": dry_run}
