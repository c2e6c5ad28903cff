"""pgoutput row images decoded straight into the lake's Python values, one generated function per table version.

``pgoutput.decode_tuple`` then a converter per value would walk every column twice through generic code (a kind
dispatch, a text decode, a converter call); on a tail that is most of the time per row. For each version of a
captured table (its columns' type OIDs and typmods, ``stream._Version``) this module compiles one straight-line
function that reads a whole TupleData: integers and floats parsed from the wire bytes, ``bool`` from its one
byte, text decoded once, every other type through its ``values.converter`` (the one definition of each type's
meaning). The result is the image dict (column -> value; NULL is ``None``, an unchanged TOASTed value
``UNCHANGED_TOAST``), the offset after the tuple and whether any value was ``UNCHANGED_TOAST``.
"""
from __future__ import annotations

import struct
from typing import Callable

from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.codegen import Builder, compile_function
from airflow_provider_dblog.source.postgres import values
from airflow_provider_dblog.source.postgres.pgoutput import UNCHANGED_TOAST, PgOutputError

TupleDecoder = Callable[[bytes, int], "tuple[dict, int, bool]"]
_INLINE = {int: "int({data})", float: "float({data})"}


def _column_kind(kind: int, offset: int, table: str) -> PgOutputError:
    what = "binary ('b': the binary option is not used)" if kind == ord("b") else repr(chr(kind))
    return PgOutputError(f"a change of {table}: unexpected tuple column kind {what} at offset {offset}")


def _column_count(count: int, expected: int, table: str) -> PgOutputError:
    return PgOutputError(f"a change of {table} has {count} columns, its Relation {expected}: the stream is out of "
                         f"step; report it")


def _unrepresentable(exc: values.UnrepresentableValue, column: str) -> values.UnrepresentableValue:
    """The converter's refusal naming the column (a tail stopped on it must say which of the table's columns)."""
    return values.UnrepresentableValue(f"column {column}: {exc}")


def compile_tuple_decoder(meta: TableMeta) -> TupleDecoder:
    """The decoder of ``meta``'s TupleData (columns in ``meta.columns``' order, typed by ``type_oid``/``typmod``)."""
    b = Builder()
    b.env.update(I16=struct.Struct("!H").unpack_from, LEN=struct.Struct("!i").unpack_from, TOAST=UNCHANGED_TOAST,
                 KIND=_column_kind, COUNT=_column_count, UNREPRESENTABLE=values.UnrepresentableValue,
                 NAMED=_unrepresentable)
    table, count = meta.qualified, len(meta.columns)
    b.emit("toast = False", 1)
    b.emit(f"if I16(buf, p)[0] != {count}:", 1)
    b.emit(f"raise COUNT(I16(buf, p)[0], {count}, {table!r})")
    b.emit("p += 2", 1)
    for i, column in enumerate(meta.columns):
        convert = values.converter(column.type_oid or 0, -1 if column.typmod is None else column.typmod)
        v = f"v{i}"
        b.emit("k = buf[p]", 1)
        b.emit("if k == 116:", 1)  # 't': Int32 length + the value's text
        b.emit("e = p + 5 + LEN(buf, p + 1)[0]")
        data = "buf[p + 5:e]"
        if convert in _INLINE:
            b.emit(f"{v} = {_INLINE[convert].format(data=data)}")
        elif convert is values.converter(values.BOOL):
            b.emit(f"{v} = buf[p + 5] == 116")
        elif convert is str:
            b.emit(f"{v} = {data}.decode()")
        else:  # a try costs nothing until it raises (Python 3.11+)
            b.emit("try:")
            b.emit(f"    {v} = {b.const('C', convert)}({data}.decode())")
            b.emit("except UNREPRESENTABLE as exc:")
            b.emit(f"    raise NAMED(exc, {column.name!r}) from None")
        b.emit("p = e")
        b.emit("elif k == 110:", 1)  # 'n': NULL (or, in an old key image, a column that is not part of the key)
        b.emit(f"{v} = None; p += 1")
        b.emit("elif k == 117:", 1)  # 'u': unchanged TOASTed value, not sent
        b.emit(f"{v} = TOAST; toast = True; p += 1")
        b.emit("else:", 1)
        b.emit(f"raise KIND(k, p, {table!r})")
    items = ", ".join(f"{c.name!r}: v{i}" for i, c in enumerate(meta.columns))
    b.emit(f"return {{{items}}}, p, toast", 1)
    return compile_function(b, "decode", f"pgoutput tuple decoder {table}")


def key_image(image: dict) -> dict:
    """An old-key ('K') image: only the replica identity's columns were sent (the others read as NULL)."""
    return {name: value for name, value in image.items() if value is not None}


_INSERT, _UPDATE, _DELETE, _NEW, _KEY, _OLD = (ord(c) for c in "IUDNKO")


def decode_row_message(buf: bytes, decode: TupleDecoder) -> tuple[dict | None, dict | None, str | None, bool]:
    """An Insert / Update / Delete message (``buf[0]``) of a table whose tuples ``decode`` reads: ``(after, before,
    old_kind, toast)``. ``before`` is the old row ('O', REPLICA IDENTITY FULL), the old key ('K': its key columns
    only) or None (an UPDATE that kept its key under REPLICA IDENTITY DEFAULT); ``toast``: ``after`` holds an
    unchanged TOASTed value (``UNCHANGED_TOAST``). ``PgOutputError`` for a message out of the protocol."""
    tag = buf[0]
    after = before = old_kind = None
    toast = False
    try:
        kind, p = buf[5], 6
        if tag != _INSERT and (kind == _KEY or kind == _OLD):
            before, p, _ = decode(buf, 6)
            old_kind = "K" if kind == _KEY else "O"
            if kind == _KEY:
                before = key_image(before)
            if tag == _UPDATE:
                kind, p = buf[p], p + 1
        elif tag == _DELETE:
            raise PgOutputError(f"Delete: expected 'K' or 'O', got {chr(kind)!r}")
        if tag != _DELETE:
            if kind != _NEW:
                raise PgOutputError(f"{'Insert' if tag == _INSERT else 'Update'}: expected 'N', got {chr(kind)!r}")
            after, p, toast = decode(buf, p)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise PgOutputError(f"truncated or malformed pgoutput message {chr(tag)!r} ({len(buf)} bytes): {exc}"
                            ) from None
    if p != len(buf):
        raise PgOutputError(f"{chr(tag)!r}: {len(buf) - p} trailing bytes (another protocol version?)")
    return after, before, old_kind, toast
