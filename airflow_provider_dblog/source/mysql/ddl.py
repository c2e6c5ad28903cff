"""MySQL / MariaDB DDL and DML statements of the binlog read as far as the capture needs them: which tables a
statement names (``ddl_tables``, ``dml_tables``: a statement-logged change of a captured table stops the
capture) and what an ALTER TABLE does to the rows (``alter_actions``: an in-place follow, or a re-read)."""
from __future__ import annotations

import re

from airflow_provider_dblog.core.schema_events import ColumnAction

# an identifier: backquoted, double-quoted (ANSI_QUOTES or ORACLE in the session that ran the statement; a string
# is no table name in any mode, so reading one as a name is never wrong), or unquoted, which MySQL and MariaDB
# allow to hold any character from U+0080 to U+FFFF (before, ``TRUNCATE tablé`` named a table ``tabl``)
_NAME = r"(?:`(?:[^`]|``)+`|\"(?:[^\"]|\"\")+\"|[A-Za-z0-9_$\u0080-\uffff]+)"
QUALIFIED = rf"{_NAME}(?:\s*\.\s*{_NAME})?"  # a table's name, ``db.t`` or ``t``
# one lexeme of a statement: quoted text whole (a comment's marks inside a string or a name are text), the opening
# of an executable comment (``/*!50100``, MariaDB's ``/*M!100000``), a comment, or a run of other characters
_LEXEME = re.compile(r"'(?:[^'\\]|\\.|'')*'?|\"(?:[^\"\\]|\\.|\"\")*\"?|`(?:[^`]|``)*`?|/\*M?!\d*|\*/|/\*.*?(?:\*/|$)|"
                     r"--(?=[\x00-\x20]|$)[^\n]*|#[^\n]*|[^'\"`/*#-]+|.", re.S)
# MariaDB's ``SET STATEMENT var = value [, ...] FOR statement``: the statement it runs
_SET_STATEMENT = re.compile(r"^SET\s+STATEMENT\s+(?:'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|[^'\"])*?\bFOR\s+",
                            re.I | re.S)
# MariaDB's lock wait of a DDL statement (``ALTER TABLE t WAIT 5 ...``, ``RENAME TABLE a NOWAIT TO b``)
_WAIT = r"(?:\s+(?:WAIT\s+\d+|NOWAIT)\b)?"


def plain_statement(statement: str) -> str:
    """The statement as the server runs it: comments out, executable comments opened, a ``SET STATEMENT ... FOR``
    prefix dropped, quoted text kept whole. Before, a comment's marks inside a string were cut as a comment
    (``DEFAULT '/* c */'`` read as ``DEFAULT ' '``: every old row's value differed), and ``/*M!...*/`` and ``SET
    STATEMENT ... FOR TRUNCATE t`` named no table (the truncate was not followed: the lake kept the rows)."""
    out, opened = [], 0
    for lexeme in _LEXEME.finditer(statement):
        text = lexeme.group()
        if text.startswith("/*") and text[2:4].lstrip("M").startswith("!"):
            opened += 1
            out.append(" ")
        elif text == "*/" and opened:
            opened -= 1
            out.append(" ")
        elif text.startswith(("/*", "--", "#")):
            out.append(" ")
        else:
            out.append(text)
    text = "".join(out).strip()
    while (prefix := _SET_STATEMENT.match(text)) is not None:
        text = text[prefix.end():].lstrip()
    return text


# CREATE / DROP of a TEMPORARY table (MIXED or STATEMENT sessions log them; a session that ends logs a DROP of
# its temporary tables): before, one named like a captured table read the captured table again
_TEMPORARY = re.compile(r"^(?:CREATE\s+(?:OR\s+REPLACE\s+)?|DROP\s+)TEMPORARY\s+TABLE\b", re.I)
_STATEMENTS = [
    ("alter", re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?({QUALIFIED}){_WAIT}", re.I)),
    ("truncate", re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?({QUALIFIED})", re.I)),
    ("drop", re.compile(r"^DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(.+)$", re.I | re.S)),
    ("drop_database", re.compile(rf"^DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?({_NAME})", re.I)),
    ("rename", re.compile(r"^RENAME\s+TABLES?\s+(?:IF\s+EXISTS\s+)?(.+)$", re.I | re.S)),
    ("create", re.compile(rf"^CREATE\s+(?:OR\s+REPLACE\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                          rf"({QUALIFIED})", re.I)),
    # a MyISAM/Aria repair keeps the rows it can read and logs none it dropped or changed: a ``rewrite``
    ("repair", re.compile(r"^REPAIR\s+(?:NO_WRITE_TO_BINLOG\s+|LOCAL\s+)?TABLES?\s+(.+?)"
                          r"(?:\s+(?:QUICK|EXTENDED|USE_FRM|FORCE)\b.*)?$", re.I | re.S)),
]


def _unquote(name: str) -> str:
    name = name.strip()
    if name[:1] in ("`", '"'):
        return name[1:-1].replace(name[0] * 2, name[0])
    return name


def _qualify(name: str, default_db: str) -> str:
    """``db.table`` of a (maybe qualified) name at the start of ``name`` (a lock wait or more words after it are
    not part of it: ``t3 WAIT 5`` was read as ``t3.WAIT``)."""
    found = re.match(rf"\s*({_NAME})(?:\s*\.\s*({_NAME}))?", name)
    if found.group(2) is not None:
        return f"{_unquote(found.group(1))}.{_unquote(found.group(2))}"
    return f"{default_db}.{_unquote(found.group(1))}"


_LISTED = re.compile(rf"\s*({QUALIFIED})")
_NEXT = re.compile(rf"{_WAIT}\s*,", re.I)
_PAIR = re.compile(rf"\s*({QUALIFIED}){_WAIT}\s*\bTO\b\s*({QUALIFIED})", re.I)


def _listed(text: str, default_db: str, pairs: bool = False) -> list[str]:
    """``db.table`` of each name of a comma-separated list (``a, s.b``; ``a TO b, c TO a`` when ``pairs``), read
    name by name: a quoted name may hold commas, spaces and ``TO`` (before, the list was cut at each comma and
    each `` TO `` first: ``DROP TABLE `x,y``` crashed the tail, every tail after it too)."""
    names, at = [], 0
    while (found := (_PAIR if pairs else _LISTED).match(text, at)) is not None:
        names.extend(_qualify(name, default_db) for name in found.groups())
        following = _NEXT.match(text, found.end())
        if following is None:
            break
        at = following.end()
    return names


def qualified_names(text: str, default_db: str) -> list[str]:
    """``db.table`` of each (maybe qualified, maybe quoted) name of a comma-separated list."""
    return [_qualify(name, default_db) for name in re.findall(QUALIFIED, text)]


# storage engines whose rows the binlog does not follow: ``schema.engine_refusal`` says why
REFUSED_ENGINES = ("BLACKHOLE", "MRG_MYISAM", "MERGE", "FEDERATED", "CONNECT", "SPIDER", "SPHINX", "OQGRAPH",
                   "COLUMNSTORE", "CSV", "SEQUENCE")

# ALTER TABLE clauses that remove, swap or replace a table's rows without a row event: the table (and the
# other table they name) is read again, whatever the behaviour (``rewrite``)
_ROWS_REPLACED = re.compile(r"\b(?:DROP|TRUNCATE|EXCHANGE|CONVERT|REPAIR)\s+PARTITION\b|\bCONVERT\s+TABLE\b|"
                            r"\bDROP\s+SYSTEM\s+VERSIONING\b|"  # the history rows applied while it was versioned
                            r"\bIMPORT\s+(?:PARTITION\b.*?\b)?TABLESPACE\b|"
                            # an engine whose rows the binlog does not follow (the re-read's describe refuses it)
                            r"\bENGINE\s*=?\s*['\"`]?(?:" + "|".join(REFUSED_ENGINES) + r")\b", re.I | re.S)
_TABLE_RENAME = re.compile(rf"^RENAME\s+(?:(?:TO|AS)\s+)?(?!(?:COLUMN|INDEX|KEY)\s)({QUALIFIED})\s*$", re.I)
_OTHER_TABLE = re.compile(rf"\b(?:WITH|TO|CONVERT)\s+TABLE\s+({QUALIFIED})", re.I)


def ddl_tables(statement: str, default_db: str) -> tuple[str, list[str]] | None:
    """(kind, tables the statement changes) of a DDL statement, or None if it changes no table's rows or
    columns (``DROP DATABASE d`` drops ``d.*``). ``RENAME TABLE a TO b`` names both ``a`` and ``b`` (a table swap renames onto a captured name);
    ``ALTER TABLE a EXCHANGE PARTITION p WITH TABLE b`` is a ``rewrite`` of both (``_ROWS_REPLACED``)."""
    text = plain_statement(statement)
    if _TEMPORARY.match(text):  # a session's own table, even under a captured table's name: never that table
        return None
    for kind, pattern in _STATEMENTS:
        match = pattern.match(text)
        if match is None:
            continue
        if kind == "alter" and _ROWS_REPLACED.search(text, match.end()):
            others = [_qualify(name, default_db) for name in _OTHER_TABLE.findall(text, match.end())]
            return "rewrite", [_qualify(match.group(1), default_db), *others]
        if kind == "alter":  # ALTER TABLE a RENAME TO b is a RENAME TABLE a TO b (with its other clauses)
            renamed = [found.group(1) for clause in _clauses(text[match.end():])
                       if (found := _TABLE_RENAME.match(clause)) is not None]
            if renamed:
                return "rename", [_qualify(match.group(1), default_db), *(_qualify(n, default_db) for n in renamed)]
        if kind in ("alter", "truncate", "create"):
            return kind, [_qualify(match.group(1), default_db)]
        if kind == "drop_database":  # every table of it: ``db.*``
            return "drop", [f"{_unquote(match.group(1))}.*"]
        if kind in ("drop", "repair"):
            return ("rewrite" if kind == "repair" else kind), _listed(match.group(1), default_db)
        return kind, _listed(match.group(1), default_db, pairs=True)
    return None


def truncated_tables(statement: str, default_db: str) -> list[str]:
    """The tables a ``TRUNCATE`` statement names; none for any other statement."""
    if "TRUNCATE" not in statement.upper():
        return []
    parsed = ddl_tables(statement, default_db)
    return parsed[1] if parsed is not None and parsed[0] == "truncate" else []


_ENGINE = re.compile(r"\bENGINE\s*=?\s*['\"`]?", re.I)


def altered_engine(statement: str) -> str | None:
    """The storage engine an ``ALTER TABLE`` statement puts its table on, or None (``ENGINE='MyISAM'`` is a
    string; a COMMENT 'ENGINE=x' is none)."""
    text = plain_statement(statement)
    found = _ENGINE.search(without_strings(text)) if re.match(r"^ALTER\b", text, re.I) else None
    name = re.match(r"[A-Za-z_]+", text[found.end():]) if found else None
    return name.group() if name else None


# ---- statement-logged DML (binlog_format STATEMENT or MIXED) ----------------------------------------
_DML = re.compile(r"^(INSERT|REPLACE|UPDATE|DELETE|LOAD\s+(?:DATA|XML))\b(.*)$", re.I | re.S)
_MODIFIERS = re.compile(r"^(?:\s+(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|QUICK|IGNORE|CONCURRENT|LOCAL))*\s*", re.I)
_REFERENCE_END = re.compile(r"\s(?:SET|WHERE|ORDER\s+BY|LIMIT|VALUES?|SELECT|PARTITION|RETURNING)\b", re.I)
_JOIN_WORDS = re.compile(r"\b(?:(?:NATURAL|INNER|CROSS|STRAIGHT_JOIN|LEFT|RIGHT|OUTER)\s+)*JOIN\b|\bON\b.*?(?=\bJOIN\b|,|$)"
                         r"|\bUSING\s*\(.*?\)|\bAS\b", re.I | re.S)


def dml_tables(statement: str, default_db: str) -> tuple[str, list[str]] | None:
    """(kind, tables it may change) of a DML statement logged as a statement, or None if it is no DML.
    Multi-table UPDATE and DELETE name every table of their table references (more than they change: a
    false match stops a capture loudly, a missed one would lose changes)."""
    text = plain_statement(statement)
    match = _DML.match(text)
    if match is None:
        return None
    kind = match.group(1).split()[0].lower()
    rest = _MODIFIERS.sub(" ", " " + match.group(2), count=1)
    if kind == "load":
        into = re.search(rf"\bINTO\s+TABLE\s+({QUALIFIED})", rest, re.I)
        return kind, [_qualify(into.group(1), default_db)] if into else []
    if kind == "delete":
        using = re.search(r"\bUSING\b", rest, re.I)
        source = re.match(r"^\s*FROM\b", rest, re.I)
        if source and not using:  # DELETE FROM t [WHERE ...]: one table (or FROM refs of a multi-table form)
            rest = rest[source.end():]
        elif using:  # DELETE FROM t1, t2 USING refs: the tables before USING
            rest = re.sub(r"^\s*FROM\b", " ", rest[:using.start()], flags=re.I)
        else:  # DELETE t1, t2 FROM refs: the tables before FROM
            rest = re.split(r"\bFROM\b", rest, maxsplit=1, flags=re.I)[0]
    elif kind in ("insert", "replace"):
        rest = re.sub(r"^\s*INTO\b", " ", rest, flags=re.I)
        target = re.match(rf"\s*({QUALIFIED})", rest)
        return kind, [_qualify(target.group(1), default_db)] if target else []
    end = _REFERENCE_END.search(rest)
    # parentheses group table references (``UPDATE (t) SET``, ``(a JOIN b ON ...)``): before, the list ended at the
    # first one and ``UPDATE (t)`` named no table
    references = _JOIN_WORDS.sub(",", re.sub(r"[()]", " ", rest[:end.start()] if end else rest))
    names = []
    for reference in references.split(","):
        first = re.match(rf"\s*({QUALIFIED})", reference)
        if first:
            names.append(_qualify(first.group(1), default_db))
    return kind, names


# ---- what an ALTER TABLE does to the rows ----------------------------------------------------------
_NO_ROW_CHANGE = re.compile(r"^(ADD|DROP)\s+(INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|FOREIGN|CONSTRAINT|CHECK)\b|"
                            r"^(ALGORITHM|LOCK|ENGINE|COMMENT|AUTO_INCREMENT|ROW_FORMAT)\b|"
                            r"^ALTER\s+(COLUMN\s+)?\S+\s+(SET|DROP)\s+DEFAULT\b|^RENAME\s+(INDEX|KEY)\b|"
                            r"^(FORCE|ENABLE\s+KEYS|DISABLE\s+KEYS)$|"
                            # partitions: rows move between them, none is added or removed
                            r"^(ADD|REORGANIZE|COALESCE|REBUILD|OPTIMIZE|ANALYZE|CHECK)\s+PARTITION\b|"
                            r"^PARTITION\s+BY\b|^REMOVE\s+PARTITIONING$|"
                            r"^ADD\s+SYSTEM\s+VERSIONING$", re.I)  # (reads refuse a versioned table)
_UNIQUE = re.compile(r"\bUNIQUE\b|\bPRIMARY\b", re.I)
# under ALTER IGNORE, clauses that delete rows without a row event besides a unique key's: the rows a new
# partitioning has no partition for, and the rows a new CHECK constraint refuses
_IGNORED_ROWS_DELETED = re.compile(r"^(?:PARTITION\s+BY|REORGANIZE\s+PARTITION)\b|^ADD\b.*\bCHECK\b", re.I | re.S)
_REBUILT = re.compile(r"^(?:MODIFY|CHANGE|DROP\s+(?:COLUMN\s+)?(?!(?:INDEX|KEY|FOREIGN|CONSTRAINT|CHECK)\b))", re.I)
_DEFAULT = re.compile(r"\bDEFAULT\s+('(?:[^']|'')*'|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|NULL)(?=\s|,|$)", re.I)


_COMPUTED = re.compile(r"\bGENERATED\b|\bAS\s*\(|\bAUTO_INCREMENT\b|\bSERIAL\b|\bVIRTUAL\b|\bPERSISTENT\b|"
                       r"\bSTORED\b|\bINVISIBLE\b.*\bDEFAULT\s*\(", re.I | re.S)
_NULLABLE = re.compile(r"(?<!NOT)\s+NULL\b", re.I)


# column types whose DEFAULT the server may store as another value than the literal reads: YEAR (69 is 2069), BIT
# (5 is b'101'), BINARY (zero-padded), TIMESTAMP (read in the DDL session's time zone)
_DEFAULT_REINTERPRETED = {"year", "bit", "binary", "timestamp"}
_TEMPORAL = {"date", "datetime", "time"}
# column types that take a number literal as the number (anything else takes its text as the server prints it:
# ``VARCHAR DEFAULT 007`` is '7', ``1e3`` is '1000'; an ENUM or SET takes it as a label's index)
_NUMERIC = {"tinyint", "smallint", "mediumint", "middleint", "int", "integer", "bigint", "int1", "int2", "int3",
            "int4", "int8", "decimal", "dec", "numeric", "fixed", "float", "double", "real", "bool", "boolean"}
_LABEL = re.compile(r"\s*'((?:[^'\\]|'')*)'\s*([,)])")


def _labels(definition: str) -> list[str] | None:
    """The labels of an ENUM or SET column definition as the server keeps them (trailing spaces cut), or None when
    they are not plain quoted strings."""
    opening = re.match(r"\s*(?:ENUM|SET)\s*\(", definition, re.I)
    labels, at = [], opening.end() if opening else None
    while at is not None:
        label = _LABEL.match(definition, at)
        if label is None:
            return None
        labels.append(label.group(1).replace("''", "'").rstrip(" "))
        if label.group(2) == ")":
            return labels
        at = label.end()
    return None


def _stored_as_written(type_word: str, definition: str, text: str) -> bool:
    """Whether the server stores the string DEFAULT ``text`` of a column of ``type_word`` as it is written: an ENUM
    label or SET members exactly as declared, in the declared order (``'A'`` is stored as ``'a'``, ``'b,a'`` as
    ``'a,b'``, ``'a '`` as ``'a'``), a TIME as ``HH:MM:SS`` of a column without fractions (``'9:00'`` is
    ``09:00:00``; a TIME(3) shows ``.000``); any other type's text."""
    if type_word in ("enum", "set"):
        labels = _labels(definition)
        if labels is None:
            return False
        if type_word == "enum":
            return text in labels
        members = text.split(",") if text else []
        return all(m in labels for m in members) and members == sorted(set(members), key=labels.index)
    if type_word == "time":
        return (re.fullmatch(r"\d{2}:[0-5]\d:[0-5]\d", text) is not None
                and re.match(r"\s*time\s*\(\s*0*[1-9]", definition, re.I) is None)
    return True


def _default_value(definition: str, default: re.Match):
    """The value an ADD COLUMN's DEFAULT literal gives the rows already there, or ``...`` when only the server can
    say: a string with a backslash (an escape, or not, by the DDL session's sql_mode) or followed by another (MySQL
    joins adjacent literals), a fraction of a second (rounded to the column's precision), trailing spaces in a CHAR
    (cut when read), a number for a date or time, and the types of ``_DEFAULT_REINTERPRETED``. Before, these were
    taken as written and every old row differed from the source; so were an ENUM or SET default not spelled as
    declared, a TIME not in full, and a number for a text column not as the server prints it (``_stored_as_written``:
    before the thirty-first session, ``DEFAULT 'A'`` of ``ENUM('a','b')`` left 'A' in every old row)."""
    literal = default.group(1)
    if literal.upper() == "NULL":
        return None
    word = re.match(r"\s*(\w+)", definition)
    type_word = word.group(1).lower() if word else ""
    if type_word in _DEFAULT_REINTERPRETED:
        return ...
    if not literal.startswith("'"):  # a number: a numeric column's value, or text only when the server prints it so
        if type_word in _NUMERIC:
            return literal
        plain = re.fullmatch(r"0|-?[1-9]\d*", literal) is not None
        return literal if plain and type_word not in _TEMPORAL and type_word not in ("enum", "set") else ...
    text = literal[1:-1].replace("''", "'")
    if "\\" in literal or definition[default.end():].lstrip().startswith("'"):
        return ...
    if (type_word in _TEMPORAL and "." in text) or (type_word == "char" and text != text.rstrip(" ")):
        return ...
    return text if _stored_as_written(type_word, definition, text) else ...


def without_strings(definition: str) -> str:
    """A clause with each string literal blanked, its length kept (a DEFAULT or COMMENT saying 'AS (x) STORED' is
    no keyword)."""
    return re.sub(r"'(?:[^'\\]|\\.|'')*'", lambda found: "'" + " " * (len(found.group()) - 2) + "'", definition)


def _clauses(body: str) -> list[str]:
    """Top-level comma-separated clauses (commas inside parentheses or quotes belong to their clause)."""
    out, depth, quote, current = [], 0, "", ""
    for ch in body:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
            continue
        current += ch
    return [c for c in [*out, current.strip()] if c]


def _column_name(text: str) -> tuple[str, str]:
    match = re.match(rf"\s*({_NAME})\s*(.*)$", text, re.S)
    return (_unquote(match.group(1)), match.group(2)) if match else ("", text)


def alter_actions(statement: str) -> list[ColumnAction]:
    """The clauses of an ``ALTER TABLE`` statement, as far as they change rows."""
    text = plain_statement(statement)
    head = re.match(rf"^ALTER\s+((?:ONLINE\s+|IGNORE\s+)*)TABLE\s+(?:IF\s+EXISTS\s+)?{QUALIFIED}{_WAIT}\s*", text, re.I)
    if head is None:
        return [ColumnAction("other")]
    ignore = "IGNORE" in head.group(1).upper()
    actions = []
    for clause in _clauses(text[head.end():]):
        if ignore and (_UNIQUE.search(without_strings(clause)) or _REBUILT.match(clause)
                       or _IGNORED_ROWS_DELETED.match(without_strings(clause))):
            # ALTER IGNORE deletes the rows a unique key would then hold twice (a new unique index, column or key
            # part; a column's values cut, or compared by a new collation), without a row event: read again
            # (before: followed in place, tail exit 0, the lake kept 50 and 29 rows the source had deleted); so
            # do ``PARTITION BY`` and ``REORGANIZE PARTITION`` (rows no partition takes) and an added CHECK
            # (rows it refuses): before, taken for clauses that keep rows, the lake kept 11 and 1 deleted rows
            actions.append(ColumnAction("other", clause))
            continue
        if _NO_ROW_CHANGE.match(clause):
            actions.append(ColumnAction("keep"))
            continue
        if re.match(r"^ADD\s+PRIMARY\b|^DROP\s+PRIMARY\b", clause, re.I):
            actions.append(ColumnAction("other", clause))
            continue
        verb = re.match(r"^(ADD|DROP|RENAME|CHANGE|MODIFY)\s+(?:COLUMN\s+)?(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(.*)$",
                        clause, re.I | re.S)
        if verb is None or verb.group(2).lstrip().startswith("("):
            actions.append(ColumnAction("other", clause))
            continue
        kind, rest = verb.group(1).lower(), verb.group(2)
        name, rest = _column_name(rest)
        if kind == "add":
            default = _DEFAULT.search(rest)
            bare = without_strings(rest)
            if _COMPUTED.search(bare) or (re.match(r"\s*TIMESTAMP\b", bare, re.I) and not _NULLABLE.search(bare)):
                # a generated or AUTO_INCREMENT column, or a TIMESTAMP that may take CURRENT_TIMESTAMP by
                # itself: the value of the rows already there is the server's to say (a re-read)
                value = ...
            elif default is not None:
                value = _default_value(rest, default)
            else:
                value = ... if re.search(r"\bNOT\s+NULL\b|\bDEFAULT\b", rest, re.I) else None
            actions.append(ColumnAction("add", name, default=value))
        elif kind == "drop":
            actions.append(ColumnAction("drop", name))
        elif kind == "rename":
            to = re.match(rf"^TO\s+({_NAME})\s*$", rest.strip(), re.I)
            actions.append(ColumnAction("rename", name, _unquote(to.group(1))) if to else ColumnAction("other", clause))
        else:  # CHANGE a b TYPE: a rename when the names differ, and a new type either way; MODIFY a TYPE
            new, definition = _column_name(rest) if kind == "change" else (name, rest)
            if _COMPUTED.search(without_strings(definition)):
                # a generated column's new expression (every row's value may change, without a row event), or an
                # AUTO_INCREMENT that numbers the zeros: read again (before: followed in place, verify: 59 rows
                # different)
                actions.append(ColumnAction("other", clause))
                continue
            if new != name:
                actions.append(ColumnAction("rename", name, new))
            actions.append(ColumnAction("modify", new))
    return actions
