"""A decoder of the built-in ``pgoutput`` plugin's logical replication messages, protocol version 1.

``decode(payload)`` turns one message (a ``ReplicationMessage.payload`` of psycopg2's
``LogicalReplicationConnection`` started with ``decode=False``) into one small frozen value object:

======  ==================  ====================================================================
byte    class               fields (the wire order; integers big-endian)
======  ==================  ====================================================================
``B``   ``Begin``           final LSN of the transaction, commit timestamp, xid
``C``   ``Commit``          flags (unused, 0), commit LSN, end LSN, commit timestamp
``O``   ``Origin``          commit LSN on the origin server, origin name
``R``   ``Relation``        OID, namespace (``''`` = ``pg_catalog``), name, replica identity
                            (``d`` default, ``n`` nothing, ``f`` full, ``i`` index), columns
                            (flags: 1 = part of the replica identity key; name; type OID; typmod)
``Y``   ``Type``            OID, namespace, name (sent before a Relation using a non-built-in type)
``I``   ``Insert``          relation OID, ``N`` + the new tuple
``U``   ``Update``          relation OID, [``K`` + old key | ``O`` + old row], ``N`` + the new tuple
``D``   ``Delete``          relation OID, ``K`` + old key | ``O`` + old row
``T``   ``Truncate``        relation count, options (1 = CASCADE, 2 = RESTART IDENTITY), OIDs
``M``   ``LogicalMessage``  flags (1 = transactional), LSN, prefix, content
                            (``pg_logical_emit_message``; needs the ``messages 'true'`` option)
======  ==================  ====================================================================

Tuple data: an Int16 column count, then per column ``n`` (null: ``None``), ``u`` (an unchanged
TOASTed value the server did not send: ``UNCHANGED_TOAST``, never ``None``), ``t`` + Int32 length +
the value's text in the connection's ``client_encoding`` (a ``str``), or ``b`` + Int32 length +
its binary send format (``bytes``; only with the ``binary 'true'`` option, PostgreSQL 14+). In a
``K`` (old key) tuple only the replica identity's columns carry values; the others are ``None``
meaning *not sent*, not SQL NULL (``Update.old_kind`` / ``Delete.old_kind`` say which image it is).

LSNs are ``int`` (``format_lsn`` prints them as PostgreSQL does, ``X/XXXXXXXX``); timestamps are
microseconds since the Unix epoch, UTC (the wire counts from 2000-01-01).

Protocol 2 (PostgreSQL 14+, ``proto_version '2'`` with ``streaming 'on'``) would add streamed
in-progress transactions: ``S`` Stream Start (xid, first-segment flag), ``E`` Stream Stop, ``c``
Stream Commit (xid, flags, commit LSN, end LSN, timestamp) and ``A`` Stream Abort (xid, sub-xid),
and inside a Start..Stop block every ``R``/``Y``/``I``/``U``/``D``/``T``/``M`` message carries an
Int32 xid right after its byte; a consumer must then buffer each xid's (and sub-xid's) changes until
its Stream Commit or drop them on Abort, which needs a stateful decoder. Protocol 3 adds two-phase
commit messages (``b``/``P``/``K``/``r``/``p``), 4 parallel streaming (abort LSN and timestamp).
This decoder refuses those bytes with one line rather than guess.

Speed: ``struct.Struct.unpack_from`` at offsets of the payload, one Python step per column and
none per byte. The payload is handled as ``bytes`` (psycopg2 hands out ``bytes``; other buffers
are copied once): slicing ``bytes`` and ``.decode()`` measured faster than ``str(memoryview
slice, 'utf-8')`` for the values. ``tests/unit/test_pgoutput.py`` prints the rate.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

__all__ = [
    "Begin", "Column", "Commit", "Delete", "Insert", "LogicalMessage", "Origin", "PgOutputError", "Relation",
    "Truncate", "Type", "UNCHANGED_TOAST", "Update", "decode", "decode_tuple", "format_lsn", "parse_lsn",
]

PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01T00:00:00Z in microseconds since 1970-01-01


class PgOutputError(ValueError):
    """A payload this decoder cannot read (unknown message, other protocol, truncated or trailing bytes)."""


class _UnchangedToast:
    """The ``u`` marker: a TOASTed value the UPDATE did not change, so the server did not send it.
    Keep the value the lake has; it is not NULL. One instance (``UNCHANGED_TOAST``), also after pickling."""

    __slots__ = ()
    _instance: "_UnchangedToast | None" = None

    def __new__(cls) -> "_UnchangedToast":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _UnchangedToast()

Value = Union[str, bytes, None, _UnchangedToast]


# -- the messages ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    commit_ts_us: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True, slots=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class Column:
    flags: int
    name: str
    type_oid: int
    typmod: int

    @property
    def key(self) -> bool:
        """Part of the replica identity (the primary key, the REPLICA IDENTITY index, or every column if FULL)."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # 'd' default (primary key), 'n' nothing, 'f' full, 'i' index
    columns: tuple[Column, ...]

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.flags & 1)


@dataclass(frozen=True, slots=True)
class Type:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    relation_oid: int
    new: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Update:
    relation_oid: int
    new: tuple[Value, ...]
    old: tuple[Value, ...] | None = None  # the before image: REPLICA IDENTITY FULL ('O'), or the old key
    old_kind: str | None = None  # 'O' old row, 'K' old key (only when the key changed), None: not sent


@dataclass(frozen=True, slots=True)
class Delete:
    relation_oid: int
    old: tuple[Value, ...]
    old_kind: str  # 'K' key columns only (the others None: not sent), 'O' the whole old row (FULL)


@dataclass(frozen=True, slots=True)
class Truncate:
    options: int
    relation_oids: tuple[int, ...]

    @property
    def cascade(self) -> bool:
        return bool(self.options & 1)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & 2)


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = Union[Begin, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate, LogicalMessage]


# -- LSNs --------------------------------------------------------------------------------------------
def format_lsn(lsn: int) -> str:
    """``0x16B3748`` -> ``'0/16B3748'``, as PostgreSQL prints a ``pg_lsn``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    if not low:
        raise ValueError(f"not an LSN: {text!r} (expected X/X)")
    return (int(high, 16) << 32) | int(low, 16)


# -- decoding ----------------------------------------------------------------------------------------
_U8 = struct.Struct("!B").unpack_from
_I16 = struct.Struct("!H").unpack_from
_I32 = struct.Struct("!I").unpack_from
_LEN = struct.Struct("!i").unpack_from
_BEGIN = struct.Struct("!QqI").unpack_from
_COMMIT = struct.Struct("!BQQq").unpack_from
_ORIGIN = struct.Struct("!Q").unpack_from
_COLUMN_TAIL = struct.Struct("!Ii").unpack_from  # type OID, typmod
_TRUNCATE = struct.Struct("!IB").unpack_from
_MESSAGE = struct.Struct("!BQ").unpack_from

_T, _N, _U, _B = ord("t"), ord("n"), ord("u"), ord("b")


def decode_tuple(buf: bytes, pos: int) -> tuple[tuple[Value, ...], int]:
    """The TupleData at ``pos``: its values and the offset after it."""
    (count,) = _I16(buf, pos)
    pos += 2
    values: list[Value] = []
    append = values.append
    length_at = _LEN
    for _ in range(count):
        kind = buf[pos]
        if kind == _T:
            (length,) = length_at(buf, pos + 1)
            pos += 5
            end = pos + length
            append(buf[pos:end].decode())
            pos = end
        elif kind == _N:
            append(None)
            pos += 1
        elif kind == _U:
            append(UNCHANGED_TOAST)
            pos += 1
        elif kind == _B:
            (length,) = length_at(buf, pos + 1)
            pos += 5
            end = pos + length
            append(buf[pos:end])
            pos = end
        else:
            raise PgOutputError(f"unknown tuple column kind {chr(kind)!r} at offset {pos}")
    if pos > len(buf):
        raise PgOutputError(f"truncated tuple data: {pos} > {len(buf)} bytes")
    return tuple(values), pos


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(0, pos)
    return buf[pos:end].decode(), end + 1


def _end(buf: bytes, pos: int, what: str) -> None:
    if pos != len(buf):
        raise PgOutputError(f"{what}: {len(buf) - pos} trailing bytes (another protocol version?)")


def _begin(buf: bytes) -> Begin:
    if len(buf) != 21:
        raise PgOutputError(f"Begin: {len(buf)} bytes, expected 21")
    final_lsn, ts, xid = _BEGIN(buf, 1)
    return Begin(final_lsn, ts + PG_EPOCH_US, xid)


def _commit(buf: bytes) -> Commit:
    if len(buf) != 26:
        raise PgOutputError(f"Commit: {len(buf)} bytes, expected 26")
    flags, commit_lsn, end_lsn, ts = _COMMIT(buf, 1)
    return Commit(flags, commit_lsn, end_lsn, ts + PG_EPOCH_US)


def _origin(buf: bytes) -> Origin:
    (lsn,) = _ORIGIN(buf, 1)
    name, pos = _cstring(buf, 9)
    _end(buf, pos, "Origin")
    return Origin(lsn, name)


def _relation(buf: bytes) -> Relation:
    (oid,) = _I32(buf, 1)
    namespace, pos = _cstring(buf, 5)
    name, pos = _cstring(buf, pos)
    identity = chr(buf[pos])
    (count,) = _I16(buf, pos + 1)
    pos += 3
    columns = []
    for _ in range(count):
        flags = buf[pos]
        column, pos = _cstring(buf, pos + 1)
        type_oid, typmod = _COLUMN_TAIL(buf, pos)
        pos += 8
        columns.append(Column(flags, column, type_oid, typmod))
    _end(buf, pos, "Relation")
    return Relation(oid, namespace, name, identity, tuple(columns))


def _type(buf: bytes) -> Type:
    (oid,) = _I32(buf, 1)
    namespace, pos = _cstring(buf, 5)
    name, pos = _cstring(buf, pos)
    _end(buf, pos, "Type")
    return Type(oid, namespace, name)


# The DML messages are built without the frozen dataclass __init__ (object.__setattr__ per field costs
# about as much as decoding a short row): the slots' own descriptors set the fields.
_new = object.__new__
_insert_oid, _insert_new = Insert.relation_oid.__set__, Insert.new.__set__
_update_oid, _update_new = Update.relation_oid.__set__, Update.new.__set__
_update_old, _update_old_kind = Update.old.__set__, Update.old_kind.__set__
_delete_oid, _delete_old, _delete_old_kind = Delete.relation_oid.__set__, Delete.old.__set__, Delete.old_kind.__set__


def _insert(buf: bytes) -> Insert:
    (oid,) = _I32(buf, 1)
    if buf[5] != 78:  # 'N'
        raise PgOutputError(f"Insert: expected 'N', got {buf[5:6]!r}")
    new, pos = decode_tuple(buf, 6)
    if pos != len(buf):
        _end(buf, pos, "Insert")
    message = _new(Insert)
    _insert_oid(message, oid)
    _insert_new(message, new)
    return message


def _update(buf: bytes) -> Update:
    (oid,) = _I32(buf, 1)
    kind = buf[5]
    old = old_kind = None
    pos = 6
    if kind == 75 or kind == 79:  # 'K' old key, 'O' old row
        old_kind = "K" if kind == 75 else "O"
        old, pos = decode_tuple(buf, 6)
        kind = buf[pos]
        pos += 1
    if kind != 78:
        raise PgOutputError(f"Update: expected 'N', got {chr(kind)!r}")
    new, pos = decode_tuple(buf, pos)
    if pos != len(buf):
        _end(buf, pos, "Update")
    message = _new(Update)
    _update_oid(message, oid)
    _update_new(message, new)
    _update_old(message, old)
    _update_old_kind(message, old_kind)
    return message


def _delete(buf: bytes) -> Delete:
    (oid,) = _I32(buf, 1)
    kind = buf[5]
    if kind != 75 and kind != 79:
        raise PgOutputError(f"Delete: expected 'K' or 'O', got {chr(kind)!r}")
    old, pos = decode_tuple(buf, 6)
    if pos != len(buf):
        _end(buf, pos, "Delete")
    message = _new(Delete)
    _delete_oid(message, oid)
    _delete_old(message, old)
    _delete_old_kind(message, "K" if kind == 75 else "O")
    return message


def _truncate(buf: bytes) -> Truncate:
    count, options = _TRUNCATE(buf, 1)
    _end(buf, 6 + 4 * count, "Truncate")
    return Truncate(options, struct.unpack_from(f"!{count}I", buf, 6))


def _message(buf: bytes) -> LogicalMessage:
    flags, lsn = _MESSAGE(buf, 1)
    prefix, pos = _cstring(buf, 10)
    (length,) = _LEN(buf, pos)
    pos += 4
    _end(buf, pos + length, "Message")
    return LogicalMessage(bool(flags & 1), lsn, prefix, buf[pos:pos + length])


_DECODERS = {
    ord("B"): _begin, ord("C"): _commit, ord("O"): _origin, ord("R"): _relation, ord("Y"): _type,
    ord("I"): _insert, ord("U"): _update, ord("D"): _delete, ord("T"): _truncate, ord("M"): _message,
}
_LATER = {"S": "Stream Start", "E": "Stream Stop", "c": "Stream Commit", "A": "Stream Abort",
          "b": "Begin Prepare", "P": "Prepare", "K": "Commit Prepared", "r": "Rollback Prepared",
          "p": "Stream Prepare"}


def decode(payload: bytes | bytearray | memoryview) -> Message:
    """One pgoutput message (protocol 1) as its value object; ``PgOutputError`` for anything else."""
    buf = payload if type(payload) is bytes else bytes(payload)
    try:
        return _DECODERS[buf[0]](buf)
    except PgOutputError:
        raise
    except (KeyError, IndexError, struct.error, ValueError) as exc:
        raise _why(buf, exc) from None


def _why(buf: bytes, exc: Exception) -> PgOutputError:
    if not buf:
        return PgOutputError("empty pgoutput message")
    tag = chr(buf[0])
    if buf[0] not in _DECODERS:
        later = _LATER.get(tag)
        return PgOutputError(f"pgoutput message {tag!r} ({later}) belongs to a later protocol than 1: start the "
                             f"replication with proto_version '1'" if later else f"unknown pgoutput message {tag!r}")
    if isinstance(exc, (IndexError, struct.error)):
        return PgOutputError(f"truncated pgoutput message {tag!r} ({len(buf)} bytes): {exc}")
    return PgOutputError(f"malformed pgoutput message {tag!r}: {exc}")  # a missing NUL, bad UTF-8
