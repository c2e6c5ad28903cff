"""A table's columns as a rows event's table map describes them (``binlog_row_metadata=FULL``: names,
types, signedness, character sets, ENUM/SET values, the primary key), so every row is decoded with the
schema in force at its position, not with the table as it was planned or as it is now.

Where a column keeps its name and binlog type, the known column (planned, or an earlier version) is
kept: it carries what a table map does not (exact COLUMN_TYPE, nullability).
"""
from __future__ import annotations

from typing import Sequence

from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.mysql.compressed import packed_int
from airflow_provider_dblog.source.mysql.field_types import (
    BIT, BLOB, DATE, DATETIME2, DOUBLE, ENUM, FLOAT, GEOMETRY, INT24, JSON, LONG, LONG_BLOB, LONGLONG, MEDIUM_BLOB,
    NEWDECIMAL, SET, SHORT, STRING, TIME2, TIMESTAMP2, TINY, TINY_BLOB, VAR_STRING, VARCHAR, YEAR,
)
from airflow_provider_dblog.source.mysql.types import BYTES_AS_TEXT, enum_labels, quote_labels, text_decoder

_FIXED = {TINY: "tinyint", SHORT: "smallint", INT24: "mediumint", LONG: "int", LONGLONG: "bigint",
          FLOAT: "float", DOUBLE: "double", DATE: "date", YEAR: "year", JSON: "json"}
_NUMERIC = {TINY, SHORT, INT24, LONG, LONGLONG, FLOAT, DOUBLE}
_TEMPORAL = {DATETIME2: "datetime", TIMESTAMP2: "timestamp", TIME2: "time"}
_BLOBS = {1: ("tinytext", "tinyblob"), 2: ("text", "blob"), 3: ("mediumtext", "mediumblob"),
          4: ("longtext", "longblob")}


_SET_STR_VALUE, _ENUM_STR_VALUE = 5, 6  # optional metadata fields of a table map: the labels of SET/ENUM columns


def label_bytes(body: bytes) -> dict[int, list[list[bytes]]]:
    """The ENUM (``_ENUM_STR_VALUE``) and SET (``_SET_STR_VALUE``) labels of a table map event's ``body`` (after the
    common header, before any checksum; a post-header of 8 bytes), as bytes, per column of the kind in column
    order. The library decodes each label as UTF-8 and makes one that is not ''; the column's character set decodes
    them here (``relabel``)."""
    at = 8
    at += body[at] + 2  # the schema's name and its NUL
    at += body[at] + 2  # the table's
    count, at = packed_int(body, at)
    at += count
    length, at = packed_int(body, at)
    at += length + (count + 7) // 8  # the columns' metadata, then the null bitmap
    found: dict[int, list[list[bytes]]] = {}
    while at < len(body):
        kind = body[at]
        length, at = packed_int(body, at + 1)
        end = at + length
        if kind in (_SET_STR_VALUE, _ENUM_STR_VALUE):
            columns = []
            while at < end:
                labels, at = packed_int(body, at)
                column = []
                for _ in range(labels):
                    size, at = packed_int(body, at)
                    column.append(bytes(body[at:at + size]))
                    at += size
                columns.append(column)
            found[kind] = columns
        at = end
    return found


def relabel(columns: Sequence, body: bytes) -> None:
    """Set the ENUM/SET labels of a table map's ``columns`` (the library's, parsed from ``body``) to its label
    bytes decoded in each column's character set. Before, a label not in UTF-8 (latin1 'é', cp866 'ⁿ') was '' in
    every table map, so the tail took the table for changed and wrote '' for it (silent); latin1 bytes that happen
    to be UTF-8 ('Ã©') were read as another label."""
    if not any(getattr(c, "type", None) in (ENUM, SET) for c in columns):
        return
    found = label_bytes(body)
    enums, sets = iter(found.get(_ENUM_STR_VALUE, ())), iter(found.get(_SET_STR_VALUE, ()))
    for column in columns:
        if column.type not in (ENUM, SET):
            continue
        raw = next(enums if column.type == ENUM else sets, None)
        if raw is None:  # no labels in the map (binlog_row_metadata=MINIMAL): the library's stand
            continue
        collation = getattr(column, "collation_name", None)
        decode = text_decoder(collation.split("_")[0] if collation else None)
        labels = [decode(v) if decode is not None else v.decode("utf-8", "replace") for v in raw]
        if column.type == ENUM:
            column.enum_values = ["", *labels]
        else:
            column.set_values = labels


def column_from_table_map(tm) -> Column:
    """One python-mysql-replication table-map column as a ``Column`` (information_schema's terms)."""
    t, name = tm.type, tm.name
    collation = getattr(tm, "collation_name", None)
    charset = collation.split("_")[0] if collation else None
    binary = collation == "binary"
    unsigned = " unsigned" if getattr(tm, "unsigned", False) else ""
    if t in _FIXED:
        data_type = _FIXED[t]
        return Column(name, data_type, data_type + (unsigned if t in _NUMERIC else ""))
    if t in _TEMPORAL:
        data_type = _TEMPORAL[t]
        fsp = getattr(tm, "fsp", 0) or 0
        return Column(name, data_type, f"{data_type}({fsp})" if fsp else data_type)
    if t == NEWDECIMAL:
        return Column(name, "decimal", f"decimal({tm.precision},{tm.decimals}){unsigned}",
                      precision=tm.precision, scale=tm.decimals)
    if t == BIT:
        return Column(name, "bit", f"bit({tm.bits})")
    if t in (ENUM, SET):
        data_type = "enum" if t == ENUM else "set"
        values = [v for v in (tm.enum_values or [])[1:]] if t == ENUM else list(tm.set_values or [])
        return Column(name, data_type, f"{data_type}({quote_labels(values)})", charset=charset, collation=collation)
    if t in (VARCHAR, VAR_STRING, STRING):
        fixed = t == STRING
        data_type = ("binary" if fixed else "varbinary") if binary else ("char" if fixed else "varchar")
        return Column(name, data_type, f"{data_type}({tm.max_length})", charset=None if binary else charset,
                      collation=None if binary else collation)
    if t in (BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB):
        text, blob = _BLOBS.get(getattr(tm, "length_size", 2), ("longtext", "longblob"))
        return Column(name, blob if binary else text, blob if binary else text,
                      charset=None if binary else charset, collation=None if binary else collation)
    if t == GEOMETRY:
        return Column(name, "geometry", "geometry")
    return Column(name, f"type{t}", f"type{t}")


def _same_type(known: Column, derived: Column) -> bool:
    """Whether ``known`` still describes the column (its exact COLUMN_TYPE may say more than a table map)."""
    if {known.data_type, derived.data_type} == {"json", "longtext"}:  # MariaDB's JSON is LONGTEXT
        return True
    if known.data_type in BYTES_AS_TEXT:  # MariaDB's UUID, INET6, INET4: BINARY(16) or (4) in a table map
        return derived.column_type == f"binary({BYTES_AS_TEXT[known.data_type][0]})"
    if (known.data_type, known.unsigned) != (derived.data_type, derived.unsigned):
        return False
    if derived.data_type == "decimal":
        return (known.precision, known.scale) == (derived.precision, derived.scale)
    if derived.data_type in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext"):
        return (known.charset or "") == (derived.charset or "")  # a length alone does not change the values
    if derived.data_type in ("enum", "set"):  # a label may hold a space, a quote or a backslash
        return enum_labels(known) == enum_labels(derived)
    if derived.data_type in ("binary", "bit", "datetime", "timestamp", "time"):
        return known.column_type.split(" ")[0] == derived.column_type.split(" ")[0]
    return True


def meta_from_table_map(database: str, table: str, columns: Sequence, known: TableMeta) -> TableMeta:
    """The table's ``TableMeta`` for rows of a table map with ``columns``; ``known`` is the planned (or an
    earlier) version. The key stays ``known``'s while all its columns remain; else the table map's
    primary key."""
    by_name = {c.name: c for c in known.columns}
    out = []
    for tm in columns:
        derived = column_from_table_map(tm)
        old = by_name.get(derived.name)
        out.append(old if old is not None and _same_type(old, derived) else derived)
    names = [c.name for c in out]
    if all(k in names for k in known.key_columns):
        keys, source = known.key_columns, known.key_source
    else:
        keys, source = tuple(tm.name for tm in columns if getattr(tm, "is_primary", False)), "primary"
    return TableMeta(database, table, tuple(out), tuple(keys), source)
