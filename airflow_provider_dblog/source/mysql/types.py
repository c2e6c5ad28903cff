"""MySQL/MariaDB column types -> Arrow types, and the value conversions that keep their meaning.

Both read paths land in the same Arrow schema: the snapshot SELECT (connectorx, with a few
columns cast in SQL where connectorx would lose exactness) and binlog row images
(python-mysql-replication's Python values). DECIMAL stays exact, DATETIME/TIMESTAMP keep
microseconds (TIMESTAMP as UTC instants), unsigned BIGINT becomes DECIMAL(20,0), TIME is its
``[-]HH:MM:SS[.ffffff]`` text (it can exceed 24 hours), BIT is big-endian bytes, SET is its
comma-joined text, JSON is its text.
"""
from __future__ import annotations

import codecs
import datetime as dt
import ipaddress
import json
import uuid
from decimal import Decimal
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.tables import DECLARED_ORDER, Column, TableMeta

TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
GEOMETRY_TYPES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                  "geometrycollection"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit"} | GEOMETRY_TYPES
SIGNED_INTS = {"tinyint": pa.int8(), "smallint": pa.int16(), "mediumint": pa.int32(), "int": pa.int32(),
               "integer": pa.int32(), "bigint": pa.int64()}
UNSIGNED_INTS = {"tinyint": pa.int16(), "smallint": pa.int32(), "mediumint": pa.int32(), "int": pa.int64(),
                 "integer": pa.int64(), "bigint": pa.decimal128(20, 0)}


def arrow_type(col: Column) -> pa.DataType:
    t = col.data_type
    if t in SIGNED_INTS:
        return (UNSIGNED_INTS if col.unsigned else SIGNED_INTS)[t]
    if t == "decimal":
        return pa.decimal128(col.precision, col.scale) if (col.precision or 0) <= 38 else pa.string()
    if t == "float":
        return pa.float32()
    if t == "double":
        return pa.float64()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")
    if t == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if t == "year":
        return pa.int16()
    if t == "time" or t in TEXT_TYPES:
        return pa.string()
    if t in BINARY_TYPES:
        return pa.binary()
    return pa.string()


# MariaDB's UUID, INET6 and INET4 hold bytes (the binlog's BINARY(16) / BINARY(4), trailing zero bytes dropped)
# and print as text: what a SELECT prints is what the lake holds, so the binlog's bytes are printed the same way
def uuid_text(value: bytes) -> str:
    return str(uuid.UUID(bytes=value.ljust(16, b"\0")))


def inet4_text(value: bytes) -> str:
    return ".".join(str(b) for b in value.ljust(4, b"\0"))


def inet6_text(value: bytes) -> str:
    """As MariaDB prints an INET6: lower-case hex words, the first longest run of zero words (even of one) as
    '::', the IPv4-compatible (six zero words) and IPv4-mapped (five, then ffff) forms with a dotted quad."""
    value = value.ljust(16, b"\0")
    words = [int.from_bytes(value[i:i + 2], "big") for i in range(0, 16, 2)]
    best, run = (-1, 0), (0, 0)
    for i, word in enumerate(words):
        run = (run[0] if run[1] else i, run[1] + 1) if word == 0 else (0, 0)
        if run[1] > best[1]:
            best = run
    start, length = best
    if start == 0 and (length == 6 or (length == 5 and words[5] == 0xFFFF)):
        return "::" + ("ffff:" if length == 5 else "") + inet4_text(value[12:])
    if length == 0:
        return ":".join(f"{w:x}" for w in words)
    head = ":".join(f"{w:x}" for w in words[:start])
    tail = ":".join(f"{w:x}" for w in words[start + length:])
    return f"{head}::{tail}"


def uuid_order(text: str) -> bytes:
    """MariaDB's order of UUIDs: an RFC 4122 UUID of version 1 to 5 compares by its segments last to first
    (node, clock, time high, mid, low: time-based ones sort by time), any other by its bytes."""
    b = uuid.UUID(text).bytes
    return b[10:] + b[8:10] + b[6:8] + b[4:6] + b[:4] if 0 < b[6] < 0x60 and b[8] & 0x80 else b


def _packed_address(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


# MariaDB's types that hold bytes and print as text: their width in the binlog, how they print, how they order
BYTES_AS_TEXT: dict[str, tuple[int, Callable[[bytes], str], Callable[[str], bytes]]] = {
    "uuid": (16, uuid_text, uuid_order),
    "inet6": (16, inet6_text, _packed_address),
    "inet4": (4, inet4_text, _packed_address),
}


# MySQL's character sets and the Python codec that decodes the bytes the binlog holds exactly as the server reads
# them: its utf16, utf32 and ucs2 are big-endian (Python's "utf16" guessed little-endian: every character of the
# tail's rows differed), its latin1 is cp1252 (``rows._text_expression``); None: bytes (``binary``). A text column
# of a character set not here (dec8, hp8, swe7, armscii8, keybcs2, geostd8, eucjpms: no exact Python codec) is
# refused by ``schema.describe_table``.
PYTHON_CODECS: dict[str, str | None] = {
    "utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8", "ascii": "ascii", "latin1": "cp1252", "binary": None,
    "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be", "ucs2": "utf-16-be",
    "latin2": "iso8859-2", "latin5": "iso8859-9", "latin7": "iso8859-13", "greek": "iso8859-7", "hebrew": "iso8859-8",
    "cp1250": "cp1250", "cp1251": "cp1251", "cp1256": "cp1256", "cp1257": "cp1257", "cp850": "cp850",
    "cp852": "cp852", "cp866": "cp866", "koi8r": "koi8-r", "koi8u": "koi8-u", "macce": "mac-latin2",
    "macroman": "mac-roman", "tis620": "tis-620", "big5": "big5", "gbk": "gbk", "gb2312": "gb2312",
    "gb18030": "gb18030", "euckr": "euc-kr", "ujis": "euc-jp", "sjis": "shift-jis", "cp932": "cp932",
}


# Where MySQL's character set decodes bytes otherwise than Python's codec of ``PYTHON_CODECS`` (MariaDB 10.11's
# conversion of every character a utf8mb4 client can store in such a column, compared by
# tests/integration/test_mysql_value_edges.py). Single-byte sets: the byte's character. Before, the tail wrote
# the codec's character (cp866 'ⁿ' as '№', greek 'ʽ' as '‘', hebrew '‾' as '¯', koi8u '•' as '∙') where the
# snapshot had the server's: silent. Multi-byte sets: what the codec gets wrong or cannot decode at all.
SINGLE_BYTE_CHARSETS = {"latin1", "latin2", "latin5", "latin7", "greek", "hebrew", "cp1250", "cp1251", "cp1256",
                        "cp1257", "cp850", "cp852", "cp866", "koi8r", "koi8u", "macce", "macroman", "tis620"}
_SINGLE_BYTE_DIFFERENCES = {
    "latin1": {i: chr(i) for i in b"\x81\x8d\x8f\x90\x9d"},  # cp1252's five undefined bytes: C1 controls
    "cp866": {0xFC: "\u207f", 0xFD: "\u00b2"}, "greek": {0xA1: "\u02bd", 0xA2: "\u02bc"},
    "hebrew": {0xAF: "\u203e"}, "koi8u": {0x95: "\u2022"},
}
# sjis: 0x815F is '\\' (Python: U+FF3C); euckr is CP949 (Python's euc-kr stops at its 8,822 extra syllables);
# big5 has seven ETEN characters Python's big5 refuses; ujis maps its user-defined rows (0xF5-0xFE, also after
# 0x8F) to the private use area from U+E000. Before, a value holding one stopped the tail in a line that blamed a
# COMPRESSED column, at every restart.
_BIG5_ETEN = dict(zip((bytes([0xF9, b]) for b in range(0xD6, 0xDD)), "碁銹裏墻恒粧嫺"))


def _ujis_user_defined(data: bytes, at: int) -> tuple[str, int] | None:
    lead = 1 if data[at] == 0x8F else 0  # JIS X 0212's rows after 0x8F: the second 940 code points
    if at + lead + 1 < len(data) and 0xF5 <= data[at + lead] <= 0xFE and 0xA1 <= data[at + lead + 1] <= 0xFE:
        code = 0xE000 + 940 * lead + (data[at + lead] - 0xF5) * 94 + data[at + lead + 1] - 0xA1
        return chr(code), at + lead + 2
    return None


def _decode_error_handler(extra: Callable[[bytes, int], tuple[str, int] | None]):
    def handle(exc: UnicodeDecodeError):
        found = extra(exc.object, exc.start)
        if found is None:
            raise exc
        return found
    return handle


codecs.register_error("dblog-big5", _decode_error_handler(
    lambda data, at: (_BIG5_ETEN[data[at:at + 2]], at + 2) if data[at:at + 2] in _BIG5_ETEN else None))
codecs.register_error("dblog-ujis", _decode_error_handler(_ujis_user_defined))
_MULTI_BYTE_DECODERS: dict[str, Callable[[bytes], str]] = {
    "euckr": lambda data: data.decode("cp949"),
    "big5": lambda data: data.decode("big5", "dblog-big5"),
    "ujis": lambda data: data.decode("euc-jp", "dblog-ujis"),
    "sjis": lambda data: data.decode("shift-jis").replace("\uff3c", "\\"),
}


def _single_byte_table(charset: str) -> str:
    """Per byte its character as the server reads it ('\\ufffe', undefined, makes ``charmap_decode`` raise)."""
    fixes, codec = _SINGLE_BYTE_DIFFERENCES.get(charset, {}), PYTHON_CODECS[charset]
    return "".join(fixes.get(i) or bytes([i]).decode(codec, "replace").replace("\ufffd", "\ufffe") for i in range(256))


def text_decoder(charset: str | None) -> Callable[[bytes], str] | None:
    """bytes of a text column in ``charset`` -> its text exactly as the server converts it to utf8mb4 (what the
    snapshot's SELECT reads); None for ``binary`` and for a character set without one (``PYTHON_CODECS``)."""
    charset = (charset or "utf8mb4").lower()
    codec = PYTHON_CODECS.get(charset)
    if codec is None:
        return None
    if charset in SINGLE_BYTE_CHARSETS:
        table = _single_byte_table(charset)
        return lambda data: codecs.charmap_decode(data, "strict", table)[0]
    if charset in _MULTI_BYTE_DECODERS:
        return _MULTI_BYTE_DECODERS[charset]
    return lambda data: codecs.decode(data, codec)


def arrow_schema(meta: TableMeta) -> pa.Schema:
    """The lake's columns of a table (key columns never null)."""
    return pa.schema([pa.field(c.name, arrow_type(c), c.nullable or c.name in meta.key_columns) for c in meta.columns])


# the collations whose order is Python's order of the decoded text: code points, no padding
CODE_POINT_COLLATIONS = {"utf8mb4_nopad_bin", "utf8mb3_nopad_bin", "utf8_nopad_bin", "utf8mb4_0900_bin"}


def is_collated_text(col: Column) -> bool:
    """Text whose order the collation decides. That includes the PAD SPACE ``_bin`` collations ('a' sorts
    after 'a\\t': it is compared as 'a ') and single-byte ``_bin`` ones (latin1 is cp1252: byte 0x80, '€',
    sorts before 'é'); only the no-pad UTF-8 ``_bin`` collations order text as Python does."""
    return (col.data_type in TEXT_TYPES and col.data_type not in DECLARED_ORDER and bool(col.collation)
            and col.collation.lower() not in CODE_POINT_COLLATIONS)


def declared_numbers(col: Column) -> Callable[[Any], int]:
    """For an ENUM or SET column: a value's number, which the server orders and compares it by (an ENUM
    label's index in the declared list, the empty error value 0; a SET's bits, one per declared member).
    Its text orders otherwise: ENUM('zeta', 'alpha') sorts 'zeta' first, while ``k > 'alpha'`` compares
    text."""
    members = enum_labels(col)
    if col.data_type == "enum":
        index = {label: i for i, label in enumerate([""] + members)}
        return lambda v: v if isinstance(v, int) else index[v] if v in index else _undeclared(col, v)
    bits = {member: 1 << i for i, member in enumerate(members)}
    return lambda v: v if isinstance(v, int) else sum(bits[m] if m in bits else _undeclared(col, m)
                                                      for m in (v.split(",") if v else ()))


def _undeclared(col: Column, value) -> int:
    raise DblogError(f"{value!r} is not a value of {col.name} {col.column_type}: the column's declared values "
                     f"changed under a running read; run the command again (the next plan reads them)")


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# A DECIMAL of up to 18 digits travels as its unscaled BIGINT (exact: |value * 10**scale| < 2**63):
# connectorx parses an integer far more cheaply than the decimal's text, and Arrow reinterprets it
# without a per-value cast (benchmarks/analysis.md).
UNSCALED_DECIMAL_DIGITS = 18


def _unscaled_decimal(col: Column) -> bool:
    return col.data_type == "decimal" and (col.precision or 0) <= UNSCALED_DECIMAL_DIGITS


def known_date_sql(col: Column) -> str:
    """The column as SQL with MySQL's zero, partial and invalid dates (``0000-00-00``, ``2020-00-15``, ``2020-02-30``
    under ALLOW_INVALID_DATES, year 0, a zero TIMESTAMP: stored under a lax ``sql_mode``) as NULL, which is what the
    binlog decoders (``rows``, ``block_decoder``) make of them: the lake has no such date (a year-0 value in a lake
    file's statistics even stopped the next tail). Other columns as they are."""
    q = quote_ident(col.name)
    if col.data_type in ("date", "datetime"):  # date arithmetic is NULL for a date that does not exist
        return f"IF(YEAR({q}) = 0 OR ({q} + INTERVAL 0 DAY) IS NULL, NULL, {q})"
    if col.data_type == "timestamp":  # a valid TIMESTAMP is at least 1970-01-01 00:00:01 UTC
        return f"NULLIF(UNIX_TIMESTAMP({q}), 0)"
    return q


def plain_sql(col: Column) -> str:
    """The column as SQL whose text is its digits: a ZEROFILL number prints padded with zeros ('0001.50'), ``c + 0``
    does not (exact for every DECIMAL: the server adds in decimal). Before, a DECIMAL wider than 38 digits ZEROFILL
    was read padded by the snapshot and unpadded by the tail (silent), and verify hashed the padded text."""
    q = quote_ident(col.name)
    return f"({q} + 0)" if "zerofill" in col.column_type else q


def select_expression(col: Column, known_dates: bool = False) -> str:
    """The SELECT item that connectorx reads exactly for this column. DATE and DATETIME as stored unless
    ``known_dates`` (``known_date_sql``: twice the server's time for a table of dates, so only for a chunk whose
    plain read met a date that does not exist, ``dialect.read_snapshot``)."""
    q = quote_ident(col.name)
    t = col.data_type
    if _unscaled_decimal(col):
        return f"CAST({q} * 1{'0' * (col.scale or 0)} AS SIGNED) AS {q}"
    if t in ("decimal", "time"):  # a wide DECIMAL ZEROFILL prints padded with zeros: its digits, as the binlog's
        return f"CAST({plain_sql(col)} AS CHAR) AS {q}"
    if t == "timestamp":
        return f"CAST({known_date_sql(col)} * 1000000 AS SIGNED) AS {q}"
    if t in ("date", "datetime") and known_dates:
        return f"{known_date_sql(col)} AS {q}"
    if t in GEOMETRY_TYPES:  # the stored bytes (SRID and WKB) as the binlog holds them: connectorx reads no GEOMETRY
        return f"CAST({q} AS BINARY) AS {q}"
    if t == "bigint" and col.unsigned:
        return f"CAST({q} AS CHAR) AS {q}"
    return q


FIRST_DAY = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days  # year 0 (which MySQL keeps) is before it: NULL


def cast_snapshot_column(array: pa.ChunkedArray, col: Column, target: pa.DataType) -> pa.ChunkedArray:
    """connectorx's column (read through ``select_expression``) in the target Arrow type; a DATE or DATETIME in
    year 0 is NULL, as the binlog decoders make it (``known_date_sql``)."""
    if _unscaled_decimal(col):
        return pa.chunked_array([unscaled_decimal(c, target) for c in array.cast(pa.int64()).chunks], target)
    if col.data_type == "timestamp":
        return array.cast(pa.int64()).cast(target)
    if col.data_type in ("date", "datetime"):
        days = array.cast(pa.date32()).cast(pa.int32())
        first = pc.min(days).as_py() if len(array) else None
        if first is not None and first < FIRST_DAY:
            array = pc.if_else(pc.less(days, FIRST_DAY), pa.scalar(None, array.type), array)
    return array.cast(target)


def unscaled_decimal(integers: pa.Array, target: pa.DataType) -> pa.Array:
    """A DECIMAL of up to 18 digits from its unscaled integers (int64): their decimal128 bits with scale 0 are
    the target's bits, so no value is scaled or parsed."""
    wide = integers.cast(pa.int64()).cast(pa.decimal128(19, 0))
    return pa.Array.from_buffers(target, len(wide), wide.buffers(), wide.null_count, wide.offset)


def _format_time(value: dt.timedelta, fsp: int) -> str:
    micros = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    seconds, frac = divmod(micros, 1_000_000)
    hours, rem = divmod(seconds, 3600)
    text = f"{sign}{hours:02d}:{rem // 60:02d}:{rem % 60:02d}"
    return text + (f".{frac:06d}"[: fsp + 1] if fsp else "")


def _type_argument(col: Column) -> int:
    inside = col.column_type[col.column_type.find("(") + 1: col.column_type.find(")")] if "(" in col.column_type else "0"
    return int(inside or 0)


def binlog_converter(col: Column, target: pa.DataType) -> Callable[[Any], Any] | None:
    """Turns a python-mysql-replication value into the Python value of ``target``; None where the
    library's value already is that (ints, floats, dates, datetimes, DECIMAL): the tail's hot path
    then leaves those values alone."""
    t = col.data_type
    if t in BYTES_AS_TEXT:
        text = BYTES_AS_TEXT[t][1]
        return lambda v: v if v is None or isinstance(v, str) else text(v)
    if t == "time":
        fsp = _type_argument(col)
        return lambda v: v if v is None or isinstance(v, str) else _format_time(v, fsp)
    if t == "set":
        order = enum_labels(col)
        return lambda v: v if v is None or isinstance(v, str) else ",".join(x for x in order if x in v)
    if t == "bit":
        width = max(1, (_type_argument(col) + 7) // 8)
        return lambda v: v if v is None or isinstance(v, bytes) else int(v, 2).to_bytes(width, "big")
    if pa.types.is_decimal(target):  # DECIMAL decodes as Decimal already; unsigned BIGINT as int
        return None if t == "decimal" else (lambda v: v if v is None else Decimal(v))
    if t == "decimal":  # wider than 38 digits: kept as text
        return lambda v: v if v is None else str(v)
    if t == "json":
        return lambda v: v if v is None or isinstance(v, str) else (
            v.decode() if isinstance(v, bytes) else json.dumps(_json_text_keys(v)))
    if pa.types.is_string(target):
        return lambda v: v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v
    if pa.types.is_binary(target):  # BINARY(n) drops trailing zero bytes in the binlog; SELECT pads them
        width = _type_argument(col) if t == "binary" else 0
        return lambda v: (v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v).ljust(width, b"\0") \
            if v is not None else None
    if pa.types.is_timestamp(target) and target.tz:
        return lambda v: v if v is None or v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
    return None


def _json_text_keys(value: Any) -> Any:
    """MySQL's binary JSON decodes with bytes keys and strings; make it plain JSON."""
    if isinstance(value, dict):
        return {(k.decode() if isinstance(k, bytes) else k): _json_text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_text_keys(v) for v in value]
    return value.decode() if isinstance(value, bytes) else value


_LABEL_ESCAPES = {"n": "\n", "r": "\r", "0": "\0", "Z": "\x1a", "t": "\t", "b": "\b"}  # after a backslash


def enum_labels(col: Column) -> list[str]:
    """The labels of an ENUM/SET ``col`` from its COLUMN_TYPE, unquoted as the server quotes them (a quote
    doubled; a backslash, newline, CR and NUL after a backslash): ``quote_labels`` is the inverse."""
    inside = col.column_type[col.column_type.find("(") + 1: col.column_type.rfind(")")]
    values, current, quoted, i = [], [], False, 0
    while i < len(inside):
        ch = inside[i]
        if quoted and ch == "\\" and i + 1 < len(inside):
            i += 1
            current.append(_LABEL_ESCAPES.get(inside[i], inside[i]))
        elif ch == "'" and quoted and i + 1 < len(inside) and inside[i + 1] == "'":
            current.append("'")
            i += 1
        elif ch == "'":
            quoted = not quoted
            if not quoted:
                values.append("".join(current))
                current = []
        elif quoted:
            current.append(ch)
        i += 1
    return values


def quote_labels(labels) -> str:
    """``labels`` as COLUMN_TYPE lists them inside ``enum(...)``/``set(...)`` (``enum_labels`` reads it back)."""
    def quoted(label: str) -> str:
        label = str(label).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\0", "\\0")
        return "'" + label.replace("'", "''") + "'"
    return ",".join(quoted(v) for v in labels)


# ---- ALTER TABLE ... MODIFY: which type changes keep every value ----
_INT_RANGES = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
_TEXT_BYTES = {"tinytext": 255, "text": 65535, "mediumtext": 16777215, "longtext": 4294967295}
_BLOB_BYTES = {"tinyblob": 255, "blob": 65535, "mediumblob": 16777215, "longblob": 4294967295}
_CHAR_BYTES = {"ascii": 1, "latin1": 1, "binary": 1, "utf8": 3, "utf8mb3": 3, "utf8mb4": 4, "ucs2": 2, "utf16": 4,
               "utf32": 4}
# a conversion that maps every character of the first set to the same character of the second
_LOSSLESS_CHARSETS = {("ascii", "latin1"), ("ascii", "utf8mb3"), ("ascii", "utf8"), ("ascii", "utf8mb4"),
                      ("latin1", "utf8mb3"), ("latin1", "utf8"), ("latin1", "utf8mb4"), ("utf8mb3", "utf8mb4"),
                      ("utf8", "utf8mb4"), ("utf8mb3", "utf8"), ("utf8", "utf8mb3")}


def _int_range(col: Column) -> tuple[int, int]:
    bits = _INT_RANGES[col.data_type]
    return (0, 2 ** bits - 1) if col.unsigned else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)


def _chars(col: Column, guaranteed: bool) -> int:
    """How many characters a text column holds: at most (``guaranteed`` False) or at least (True)."""
    if col.data_type in ("char", "varchar"):
        return col.char_length or 0
    width = 1 if not guaranteed else _CHAR_BYTES.get((col.charset or "").lower(), 4)
    return _TEXT_BYTES[col.data_type] // width


def keeps_values(before: Column, after: Column) -> bool:
    """Whether ``ALTER TABLE … MODIFY`` from ``before``'s declared type to ``after``'s keeps every value as it was
    (the change can then be followed in place; otherwise the table is read again). Before, a narrowing that keeps
    the lake's type (VARCHAR(40) to VARCHAR(5), utf8mb4 to latin1, an ENUM losing a label, DATETIME(6) to DATETIME,
    SMALLINT to TINYINT UNSIGNED, NULL to NOT NULL) was followed in place and the lake kept values the source had
    cut."""
    a, b = before.data_type, after.data_type
    if before.nullable and not after.nullable:  # outside strict mode NULL becomes 0, '' or a zero date
        return False
    if before.column_type == after.column_type and (before.charset or "") == (after.charset or ""):
        return True
    if a in _INT_RANGES and b in _INT_RANGES:
        (lo, hi), (new_lo, new_hi) = _int_range(before), _int_range(after)
        return new_lo <= lo and hi <= new_hi
    if before.unsigned != after.unsigned and after.unsigned:  # negative values become 0
        return False
    if a == b == "decimal":
        return ((after.scale or 0) >= (before.scale or 0)
                and (after.precision or 0) - (after.scale or 0) >= (before.precision or 0) - (before.scale or 0))
    if (a, b) in (("float", "double"),) and "(" not in before.column_type and "(" not in after.column_type:
        return True
    if a in ("datetime", "timestamp", "time") and a == b:
        return _type_argument(after) >= _type_argument(before)  # fractional digits
    if a == b == "bit":
        return _type_argument(after) >= _type_argument(before)
    if a in ("enum", "set") and a == b:
        was, now = enum_labels(before), enum_labels(after)
        if (before.charset or "") != (after.charset or "") or not set(was) <= set(now):
            return False
        # a SET value lists its members in the definition's order: members moved change the text ('a,b' to 'b,a')
        return a == "enum" or [label for label in now if label in set(was)] == was
    text = ("char", "varchar", *_TEXT_BYTES)
    if a in text and b in text:
        same = (before.charset or "").lower() == (after.charset or "").lower()
        lossless = same or ((before.charset or "").lower(), (after.charset or "").lower()) in _LOSSLESS_CHARSETS
        if not lossless or (b == "char" and a != "char"):  # CHAR drops the trailing spaces VARCHAR and TEXT keep
            return False
        if b in _TEXT_BYTES and a in ("char", "varchar"):  # characters of the old, bytes of the new
            return _chars(before, False) * _CHAR_BYTES.get((after.charset or "").lower(), 4) <= _TEXT_BYTES[b]
        return _chars(after, True) >= _chars(before, False)
    binary = ("binary", "varbinary", *_BLOB_BYTES)
    if a in binary and b in binary:
        if "binary" in (a, b):  # BINARY(n) pads with zero bytes to its new width
            return False
        size = lambda col: _BLOB_BYTES.get(col.data_type) or col.char_length or _type_argument(col)  # noqa: E731
        return size(after) >= size(before)
    return False
