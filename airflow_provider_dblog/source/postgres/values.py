"""pgoutput's text values -> typed Python values and their Arrow types, by type OID, keeping their meaning.

pgoutput sends every column in its type's text output form (the session's output settings apply:
the replication connection must carry ``SESSION_SETTINGS``, e.g. ``options=libpq_options()``, or a
server whose default ``DateStyle``/``bytea_output``/``TimeZone`` differs would change the text).

=========================================  ==========================  ==============================
PostgreSQL type                            Python value                Arrow type
=========================================  ==========================  ==============================
``numeric(p,s)``, 0 <= s <= p <= 38        ``Decimal`` (exact)         ``decimal128(p, s)``
``numeric`` unbounded, p > 38, s < 0,      ``str``: its exact text     ``string`` (decimal128 has a
s > p                                      (``NaN``/``Infinity`` too)  fixed scale, Spark/Delta no
                                                                       negative one)
``int2`` / ``int4`` / ``int8`` / ``oid``   ``int``                     ``int16`` / ``int32`` /
                                                                       ``int64`` / ``int64``
``float4`` / ``float8``                    ``float`` (NaN, ±inf kept)  ``float32`` / ``float64``
``bool``                                   ``bool``                    ``bool``
``bytea`` (hex ``\\x..``, or escape form)  ``bytes``                   ``binary``
``date``                                   ``datetime.date``           ``date32``
``timestamp``                              naive ``datetime`` (µs)     ``timestamp('us')``
``timestamptz``                            ``datetime`` in UTC (µs)    ``timestamp('us', 'UTC')``
``time``                                   ``str`` ``HH:MM:SS[.ffffff]`` ``string`` (Delta Lake has no
                                                                       TIME type; the text orders as the
                                                                       times do, 24:00:00 included)
``uuid``                                   ``str`` (canonical text)    ``string``
text, varchar, char (padded), name,        ``str``                     ``string``
json, jsonb, inet, cidr, macaddr, money (as
``lc_monetary = C`` prints it: ``$1,234.50``),
interval (ISO 8601 with ``SESSION_SETTINGS``), timetz, bit, xml, tsvector, ranges,
arrays (PostgreSQL's ``{...}`` literal, for now), enums and every unknown OID
=========================================  ==========================  ==============================

Values with no lake twin raise ``UnrepresentableValue`` (never a silent null or a clamped value):
``infinity``/``-infinity`` and BC or year > 9999 dates and timestamps, and ``NaN`` in a bounded
``numeric``. A converter sees only non-null values; ``row_decoder`` compiles them into one function per table
version (NULL and unchanged TOASTed values never reach them). Domains arrive with their own OID: the stream
types them as their base (``schema.resolve_types``), as ``schema.describe_table`` does.
Converters read the text format only (not the ``binary 'true'`` option's ``bytes``).
"""
from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Any, Callable

import pyarrow as pa


# the output settings the text forms below assume: the replication connection and the snapshot reads
SESSION_SETTINGS = {
    "DateStyle": "ISO",
    "TimeZone": "UTC",
    "IntervalStyle": "iso_8601",
    "bytea_output": "hex",
    "extra_float_digits": "1",  # the shortest text that reads back to the same float (PostgreSQL 12+)
    "client_encoding": "UTF8",
    # money prints by the locale (``1.234,50 €`` in de_DE, no decimals in ja_JP), which a DBA may change at run
    # time: C prints ``$1,234.50``, two decimals, whatever the server's setting
    "lc_monetary": "C",
    # a peek of a large range, a chunk's read and a chunk window's transaction (idle while its rows are converted)
    # run longer than a DBA's limits for applications: off, as pg_dump turns them off
    "statement_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    # a row-level security policy that would hide rows from the role fails the read instead (as pg_dump does):
    # the stream carries every row's changes, so a snapshot of some rows would mix into a lake of neither
    "row_security": "off",
}

BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
JSON, XML, CIDR, FLOAT4, FLOAT8, MONEY, INET = 114, 142, 650, 700, 701, 790, 869
BPCHAR, VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1042, 1043, 1082, 1083, 1114, 1184, 1186, 1266
NUMERIC, UUID, JSONB = 1700, 2950, 3802

Converter = Callable[[str], Any]


class UnrepresentableValue(ValueError):
    """A source value the lake has no value for (the caller names the table and column and stops)."""


def libpq_options() -> str:
    """``SESSION_SETTINGS`` as a libpq ``options`` value (``-c name=value ...``)."""
    return " ".join(f"-c {name}={value}" for name, value in SESSION_SETTINGS.items())


def numeric_precision_scale(typmod: int) -> tuple[int, int] | None:
    """``numeric(p, s)``'s precision and scale from its typmod; ``None`` when unbounded (typmod -1)."""
    if typmod < 4:
        return None
    packed = typmod - 4  # VARHDRSZ
    return (packed >> 16) & 0xFFFF, ((packed & 0x7FF) ^ 1024) - 1024  # scale: 11-bit signed (PostgreSQL 15+)


def _decimal_bounds(typmod: int) -> tuple[int, int] | None:
    bounds = numeric_precision_scale(typmod)
    if bounds is None:
        return None
    precision, scale = bounds
    return bounds if 1 <= precision <= 38 and 0 <= scale <= precision else None


_SIMPLE_ARROW = {
    BOOL: pa.bool_(), BYTEA: pa.binary(), INT2: pa.int16(), INT4: pa.int32(), INT8: pa.int64(), OID: pa.int64(),
    FLOAT4: pa.float32(), FLOAT8: pa.float64(), DATE: pa.date32(), TIMESTAMP: pa.timestamp("us"),
    TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
}


def arrow_type(oid: int, typmod: int = -1) -> pa.DataType:
    """The lake's Arrow type of a column of type ``oid`` with ``typmod`` (see the module's table)."""
    if oid == NUMERIC:
        bounds = _decimal_bounds(typmod)
        return pa.decimal128(*bounds) if bounds else pa.string()
    return _SIMPLE_ARROW.get(oid, pa.string())


# -- converters ----------------------------------------------------------------------------------------
_UTC = dt.timezone.utc
_BOOLS = {"t": True, "f": False, "true": True, "false": False}  # the output function; ::text
_BYTEA_ESCAPE = re.compile(r"\\(\\|[0-7]{3})")


def _bool(text: str) -> bool:
    return _BOOLS[text]


def _decimal(text: str) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise UnrepresentableValue(f"numeric {text} has no decimal128 value")
    return value


def _bytea(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    # bytea_output = escape: printable ASCII as is, a backslash doubled, other bytes as \ooo
    return _BYTEA_ESCAPE.sub(lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1), 8)), text).encode("latin-1")


def _unrepresentable(kind: str, text: str) -> UnrepresentableValue:
    return UnrepresentableValue(f"{kind} {text!r} has no lake value (infinity, BC and years after 9999 have none; "
                                f"DateStyle must be ISO)")


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise _unrepresentable("date", text) from None


def _timestamp(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise _unrepresentable("timestamp", text) from None
    if value.tzinfo is not None:
        raise UnrepresentableValue(f"timestamp without time zone {text!r} carries an offset")
    return value


def _timestamptz(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise _unrepresentable("timestamptz", text) from None
    if value.tzinfo is _UTC:
        return value
    if value.tzinfo is None:
        raise UnrepresentableValue(f"timestamptz {text!r} has no offset")
    return value.astimezone(_UTC)


_SIMPLE_CONVERTERS: dict[int, Converter] = {
    BOOL: _bool, BYTEA: _bytea, INT2: int, INT4: int, INT8: int, OID: int, FLOAT4: float, FLOAT8: float,
    DATE: _date, TIMESTAMP: _timestamp, TIMESTAMPTZ: _timestamptz,
}


def converter(oid: int, typmod: int = -1) -> Converter:
    """The function turning one non-null text value of type ``oid`` into its Python value (``str`` for text)."""
    if oid == NUMERIC:
        return _decimal if _decimal_bounds(typmod) else str
    return _SIMPLE_CONVERTERS.get(oid, str)
