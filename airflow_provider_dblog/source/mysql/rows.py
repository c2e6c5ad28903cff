"""Row images of binlog rows events, decoded straight into the lake's Python values.

python-mysql-replication decodes every value through generic per-column Python (a dozen calls and
a dict of "none sources" per value: ≈70–80 µs per row of TPC-H ``orders``), and dblog then had to
convert some of its values again. For each table layout this module compiles one straight-line
function that reads a whole row image with precompiled ``struct`` formats and produces the values
the lake stores (the Arrow schema of ``types.arrow_type``): several times faster per row.

Each table map layout gets its own decoder, with the columns that table map describes (a schema
change starts a new layout: ``table_map``). A layout it cannot decode exactly (MySQL's binary JSON is
decoded through the library's parser, but pre-5.6 temporal types or unknown character sets are not)
gets no decoder: ``compile_row_decoder`` returns None and the caller uses the library for those events.
"""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from struct import Struct
from typing import Callable, Sequence

import pyarrow as pa

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.codegen import Builder, compile_function
from airflow_provider_dblog.source.mysql.field_types import (
    BIT, BLOB, DATE, DATETIME2, DOUBLE, ENUM, FLOAT, GEOMETRY, INT24, JSON, LONG, LONG_BLOB, LONGLONG, MEDIUM_BLOB,
    NEWDECIMAL, SET, SHORT, STRING, TIME2, TIMESTAMP2, TINY, TINY_BLOB, VAR_STRING, VARCHAR, YEAR,
)
from airflow_provider_dblog.source.mysql.table_map import meta_from_table_map
from airflow_provider_dblog.source.mysql.types import (
    BYTES_AS_TEXT, PYTHON_CODECS, enum_labels, _format_time, _json_text_keys, _type_argument, arrow_type,
    text_decoder,
)

INT_FORMATS = {(TINY, False): "b", (TINY, True): "B", (SHORT, False): "h", (SHORT, True): "H",
               (LONG, False): "i", (LONG, True): "I", (LONGLONG, False): "q", (LONGLONG, True): "Q",
               (FLOAT, False): "f", (FLOAT, True): "f", (DOUBLE, False): "d", (DOUBLE, True): "d"}
DECIMAL_DIGITS_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

RowDecoder = Callable[[bytes, int], tuple[dict, int]]


# ---- helpers for the types that need more than a struct format -------------------------------------------
def _fraction_reader(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """(bytes, reader of microseconds) of a temporal value's fractional part: (fsp + 1) // 2 bytes
    big-endian; an odd fsp keeps one more digit than it needs."""
    width = (fsp + 1) // 2
    if width == 0:
        return 0, lambda buf, p: 0
    divisor, scale = (10 if fsp % 2 else 1), 10 ** (6 - fsp)

    def read(buf, p):
        return int.from_bytes(buf[p:p + width], "big") // divisor * scale
    return width, read


def _date(x: int):
    if not x:
        return None
    try:
        return dt.date(x >> 9, (x >> 5) & 15, x & 31)
    except ValueError:  # zero month or day
        return None


def _datetime2_reader(fsp: int):
    width, fraction = _fraction_reader(fsp)

    def read(buf, p):
        x = int.from_bytes(buf[p:p + 5], "big")
        ym = (x >> 22) & 0x1FFFF
        try:
            value = dt.datetime(ym // 13, ym % 13, (x >> 17) & 31, (x >> 12) & 31, (x >> 6) & 63, x & 63)
        except ValueError:  # zero dates
            return None
        return value.replace(microsecond=fraction(buf, p + 5)) if width else value
    return 5 + width, read


def _timestamp2_reader(fsp: int):
    width, fraction = _fraction_reader(fsp)

    def read(buf, p):
        seconds = int.from_bytes(buf[p:p + 4], "big")
        if not seconds:  # the zero TIMESTAMP (a valid one is at least 1 s): NULL, as zero dates
            return None
        return EPOCH + dt.timedelta(seconds=seconds, microseconds=fraction(buf, p + 4))
    return 4 + width, read


def _time2_reader(fsp: int):
    """TIME(fsp) as its text; negative values store their fraction reversed (my_time.cc)."""
    width = (fsp + 1) // 2

    def read(buf, p):
        if fsp >= 5:
            packed = int.from_bytes(buf[p:p + 6], "big") - 0x800000000000
        else:
            intpart = int.from_bytes(buf[p:p + 3], "big") - 0x800000
            frac = int.from_bytes(buf[p + 3:p + 3 + width], "big") if width else 0
            if intpart < 0 and frac:
                intpart += 1
                frac -= 1 << (8 * width)
            packed = (intpart << 24) + frac * (10000 if width == 1 else 100)
        sign, t = (-1, -packed) if packed < 0 else (1, packed)
        hms, micros = t >> 24, t % (1 << 24)
        seconds = ((hms >> 12) % 1024) * 3600 + ((hms >> 6) % 64) * 60 + hms % 64
        return _format_time(dt.timedelta(microseconds=sign * (seconds * 1_000_000 + micros)), fsp)
    return 3 + width, read


def _decimal_code(b: Builder, v: str, precision: int, scale: int, as_text: bool) -> None:
    """Lines that set ``v`` to DECIMAL(precision, scale) in MySQL's binary format: big-endian groups
    of 9 digits in 4 bytes, the leftover digits in 1–4 bytes, the sign in the first bit (set for
    positive values), negative values bit-inverted. One integer holds it all; digits are sliced out."""
    integral = precision - scale
    groups = ([(DECIMAL_DIGITS_BYTES[integral % 9], 10 ** (integral % 9))] if integral % 9 else []) + \
        [(4, 10 ** 9)] * (integral // 9 + scale // 9) + \
        ([(DECIMAL_DIGITS_BYTES[scale % 9], 10 ** (scale % 9))] if scale % 9 else [])
    size = sum(n for n, _ in groups)
    digits, shift = "", 8 * size
    for n, base in groups:  # Horner's scheme, most significant group first
        shift -= 8 * n
        group = f"((x >> {shift}) & {(1 << (8 * n)) - 1})" if shift else f"(x & {(1 << (8 * n)) - 1})"
        digits = f"({digits}) * {base} + {group}" if digits else group
    sign = 1 << (8 * size - 1)
    b.emit(f"x = int.from_bytes(buf[p:p + {size}], 'big') ^ {sign}; p += {size}")
    b.emit(f"if x & {sign}:")
    b.emit(f"    x ^= {(1 << (8 * size)) - 1}; {v} = -({digits})")
    b.emit("else:")
    b.emit(f"    {v} = {digits}")
    if precision <= 28 and not as_text:  # exact in Decimal's default 28-digit context
        b.env["Decimal"] = Decimal
        b.emit(f"{v} = Decimal({v}).scaleb({-scale})" if scale else f"{v} = Decimal({v})")
    else:
        b.emit(f"{v} = {b.const('F', _decimal_text(scale, as_text))}({v})")


def _decimal_text(scale: int, as_text: bool) -> Callable[[int], object]:
    """MySQL's text of a wide DECIMAL: every digit of the scale, no exponent."""
    def text(digits: int):
        whole, fraction = divmod(abs(digits), 10 ** scale)
        out = f"{'-' if digits < 0 else ''}{whole}" + (f".{fraction:0{scale}d}" if scale else "")
        return out if as_text else Decimal(out)
    return text


def _decimal_reader(precision: int, scale: int, as_text: bool) -> tuple[int, Callable[[bytes, int], object]]:
    """(size, reader) of one DECIMAL value, compiled like a row decoder's column."""
    b = Builder()
    b.emit("if buf:  # a column's lines sit one level deeper, under a row decoder's NULL check", 1)
    _decimal_code(b, "v", precision, scale, as_text)
    b.emit("return v, p", 1)
    read = compile_function(b, "read", "decimal")
    return read(bytes(66), 0)[1], lambda buf, p: read(buf, p)[0]


def _json_reader(length_size: int):
    from pymysqlreplication.json_binary import parse_json  # only MySQL's binary JSON needs it

    def read(buf, p):
        n = int.from_bytes(buf[p:p + length_size], "little")
        if n == 0:
            return None, p + length_size
        data = buf[p + length_size:p + length_size + n]
        return json.dumps(_json_text_keys(parse_json(data[0], data[1:]))), p + length_size + n
    return read


def _text_expression(b: Builder, charset: str | None, data: str) -> str | None:
    """The expression that decodes ``data`` (bytes) of a text column as the server reads it, or None for bytes and
    for a character set without an exact decoder (``types.text_decoder``; refused when the table is described)."""
    name = (charset or "utf8mb4").lower()
    if PYTHON_CODECS.get(name) in ("utf-8", "ascii"):  # the common case inline: no call
        return f"{data}.decode({PYTHON_CODECS[name]!r})"
    decode = text_decoder(name)
    return None if decode is None else f"{b.const('C', decode)}({data})"


# ---- code generation ----------------------------------------------------------------------------------------
def _column_code(b: Builder, i: int, tm, col: Column, mariadb: bool) -> bool:
    """Lines that set ``v{i}`` and advance ``p`` for one non-NULL value; False if it can't be decoded."""
    t, target = tm.type, arrow_type(col)
    v = f"v{i}"
    unsigned = bool(getattr(tm, "unsigned", False)) or col.unsigned
    if (t, unsigned) in INT_FORMATS:
        fmt = Struct("<" + INT_FORMATS[(t, unsigned)])
        unpack = b.const("S", fmt.unpack_from)
        wrap = "Decimal" if pa.types.is_decimal(target) else ""  # unsigned BIGINT
        b.env["Decimal"] = Decimal
        zero = " + 0.0" if mariadb and t in (FLOAT, DOUBLE) else ""  # -0.0 + 0.0 is 0.0: as MariaDB's SELECT shows
        b.emit(f"{v} = {wrap}({unpack}(buf, p)[0]){zero}; p += {fmt.size}")
    elif t == INT24:
        b.emit(f"{v} = int.from_bytes(buf[p:p + 3], 'little', signed={not unsigned}); p += 3")
    elif t == YEAR:
        b.emit(f"{v} = buf[p]; {v} = {v} + 1900 if {v} else 0; p += 1")
    elif t == DATE:
        b.env["_date"] = _date
        b.emit(f"{v} = _date(int.from_bytes(buf[p:p + 3], 'little')); p += 3")
    elif t in (DATETIME2, TIMESTAMP2, TIME2):
        make = {DATETIME2: _datetime2_reader, TIMESTAMP2: _timestamp2_reader, TIME2: _time2_reader}[t]
        size, read = make(tm.fsp)
        b.emit(f"{v} = {b.const('R', read)}(buf, p); p += {size}")
    elif t == NEWDECIMAL:
        _decimal_code(b, v, tm.precision, tm.decimals, as_text=pa.types.is_string(target))
    elif t == ENUM:
        values = b.const("E", [""] + enum_labels(col))
        b.emit(f"{v} = {values}[int.from_bytes(buf[p:p + {tm.size}], 'little')]; p += {tm.size}")
    elif t == SET:
        members = enum_labels(col)
        join = b.const("J", lambda mask: ",".join(m for k, m in enumerate(members) if mask >> k & 1))
        b.emit(f"{v} = {join}(int.from_bytes(buf[p:p + {tm.size}], 'little')); p += {tm.size}")
    elif t == BIT:
        b.emit(f"{v} = buf[p:p + {tm.bytes}]; p += {tm.bytes}")
    elif t == JSON:
        b.emit(f"{v}, p = {b.const('R', _json_reader(tm.length_size))}(buf, p)")
    elif t in (VARCHAR, VAR_STRING, STRING, BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, GEOMETRY):
        width = tm.length_size if t in (BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, GEOMETRY) else (
            2 if tm.max_length > 255 else 1)
        length = "buf[p]" if width == 1 else f"int.from_bytes(buf[p:p + {width}], 'little')"
        b.emit(f"n = {length}; p += {width}")
        if col.data_type in BYTES_AS_TEXT:  # MariaDB's UUID, INET6, INET4: printed as a SELECT prints them
            b.emit(f"{v} = {b.const('T', BYTES_AS_TEXT[col.data_type][1])}(bytes(buf[p:p + n])); p += n")
        elif pa.types.is_string(target):
            text = _text_expression(b, col.charset, "buf[p:p + n]")
            if text is None:
                return False
            b.emit(f"{v} = {text}; p += n")
        elif col.data_type == "binary":  # BINARY(n) drops trailing zero bytes in the binlog; SELECT pads them
            b.emit(f"{v} = bytes(buf[p:p + n]).ljust({_type_argument(col)}, b'\\0'); p += n")
        else:
            b.emit(f"{v} = bytes(buf[p:p + n]); p += n")
    else:
        return False
    return True


def compile_row_decoder(columns: Sequence, meta: TableMeta, mariadb: bool = False) -> RowDecoder | None:
    """One row image decoder for a table map's ``columns`` (python-mysql-replication's ``Column``
    objects: type and type metadata), or None if any column can't be decoded exactly. ``mariadb``: a FLOAT or
    DOUBLE -0 is read as 0.0, as MariaDB's SELECT (the snapshot) shows it (``positive_zeros``)."""
    names = [c.name for c in meta.columns]
    if [getattr(c, "name", None) for c in columns] != names:
        return None  # a table map without column names (binlog_row_metadata not FULL)
    b = Builder()
    null_bytes = (len(columns) + 7) // 8
    b.emit(f"nulls = int.from_bytes(buf[p:p + {null_bytes}], 'little'); p += {null_bytes}", 1)
    for i, (tm, col) in enumerate(zip(columns, meta.columns)):
        b.emit(f"if nulls & {1 << i}:", 1)
        b.emit(f"v{i} = None")
        b.emit("else:", 1)
        if not _column_code(b, i, tm, col, mariadb):
            return None
    items = ", ".join(f"{name!r}: v{i}" for i, name in enumerate(names))
    b.emit(f"return {{{items}}}, p", 1)
    return compile_function(b, "decode", f"row decoder {meta.qualified}")


def decode_rows(decoder: RowDecoder, buf: bytes, p: int, end: int, images: int) -> list[tuple]:
    """Every row of a rows event body ``buf[p:end]``: tuples of ``images`` (1, or 2 for updates)."""
    rows = []
    while p < end:
        first, p = decoder(buf, p)
        if images == 2:
            second, p = decoder(buf, p)
            rows.append((first, second))
        else:
            rows.append((first,))
    return rows


class ByColumns:
    """Values computed from a table map's list of columns, kept per list object: the library shares one list among
    the rows events after a table map, so a run of them computes the value once (the list is kept alive here, so
    its identity is not reused while it is known)."""

    def __init__(self, limit: int = 1024):
        self.limit, self._items = limit, {}

    def get(self, columns: Sequence, compute: Callable[[], object]):
        known = self._items.get(id(columns))
        if known is not None and known[0] is columns:
            return known[1]
        value = compute()
        if len(self._items) >= self.limit:
            self._items.clear()
        self._items[id(columns)] = (columns, value)
        return value


_LAYOUTS = ByColumns()


def layout_of(columns: Sequence) -> tuple:
    """What a decoder and the table's version depend on in a table map's columns."""
    return _LAYOUTS.get(columns, lambda: _layout(columns))


def _layout(columns: Sequence) -> tuple:
    return tuple((c.name, c.type, getattr(c, "unsigned", False), getattr(c, "max_length", None),
                  getattr(c, "length_size", None), getattr(c, "precision", None), getattr(c, "decimals", None),
                  getattr(c, "fsp", None), getattr(c, "size", None), getattr(c, "bytes", None),
                  getattr(c, "collation_name", None), tuple(getattr(c, "enum_values", None) or ()),
                  tuple(getattr(c, "set_values", None) or ()), getattr(c, "is_primary", False)) for c in columns)


_DECODERS: dict[tuple, RowDecoder | None] = {}  # per process: a window reader lives for one window only


def positive_zeros(meta: TableMeta, convert: Callable[[dict | None], dict | None]
                   ) -> Callable[[dict | None], dict | None]:
    """``convert`` (library row images -> the lake's values), then each FLOAT/DOUBLE -0.0 as 0.0. MariaDB stores
    a FLOAT -0 (an underflow makes one) and logs it as -0, but its SELECT shows 0: the snapshot reads 0.0, so a
    later change of the row read as -0.0 was another key (two rows in the lake for one source row)."""
    floats = [c.name for c in meta.columns if pa.types.is_floating(arrow_type(c))]
    if not floats:
        return convert

    def positive(values: dict | None) -> dict | None:
        values = convert(values)
        if values is not None:
            for name in floats:
                if values.get(name) is not None:
                    values[name] += 0.0
        return values
    return positive


class RowImages:
    """The row images of python-mysql-replication's rows events as the lake's values, each decoded with
    the table's columns in force at its position (its table map: ``meta_of``): by a compiled decoder
    per layout, or by the library and ``converter(meta)`` where no decoder can be compiled. ``mariadb``: a
    FLOAT/DOUBLE -0 is read as 0.0 either way (what the server's SELECT shows: ``positive_zeros``)."""

    def __init__(self, metas: dict[str, TableMeta], converter: Callable[[TableMeta], Callable], mariadb: bool = False):
        self.metas = metas
        self.converter = (lambda meta: positive_zeros(meta, converter(meta))) if mariadb else converter
        self.mariadb = mariadb
        self._versions: dict[tuple, TableMeta] = {}
        self._metas, self._decoders = ByColumns(), ByColumns()
        self._converters: dict[TableMeta, Callable] = {}

    def meta_of(self, event, qualified: str) -> TableMeta:
        """The table's version of this event's table map (the planned meta while nothing changed)."""
        return self._metas.get(event.columns, lambda: self._meta_of(event, qualified))

    def _meta_of(self, event, qualified: str) -> TableMeta:
        layout = (qualified, layout_of(event.columns))
        meta = self._versions.get(layout)
        if meta is None:
            planned = self.metas[qualified]
            meta = meta_from_table_map(planned.database, planned.name, event.columns, planned)
            if meta == planned:
                meta = planned
            self._versions[layout] = meta
        return meta

    def decoder(self, event, meta: TableMeta) -> RowDecoder | None:
        """The compiled decoder of the event's table map (``meta``: its ``meta_of``), or None."""
        return self._decoders.get(event.columns, lambda: self._decoder(event, meta))

    def _decoder(self, event, meta: TableMeta) -> RowDecoder | None:
        """By layout: the library builds new column objects for every table map event."""
        layout = (meta, layout_of(event.columns), self.mariadb)
        if layout not in _DECODERS:
            _DECODERS[layout] = compile_row_decoder(event.columns, meta, self.mariadb)
        return _DECODERS[layout]

    def of_compressed(self, table_map, qualified: str, images: bytes, count: int) -> list[tuple]:
        """Each row's images of a compressed rows event (``count``: 1, or 2 for updates), decoded from
        ``images`` with its table map's columns (``table_map``: the library's ``Table``); only a
        compiled decoder reads them (the library never saw these bytes)."""
        decoder = self.decoder(table_map, self.meta_of(table_map, qualified))
        if decoder is None:
            raise DblogError(f"a compressed rows event of {qualified} holds a column type dblog's decoder does not "
                             f"read: SET GLOBAL log_bin_compress=OFF (then re-snapshot {qualified})")
        return decode_rows(decoder, images, 0, len(images), count)

    def of(self, event, qualified: str, keys: tuple[str, ...]) -> list[tuple]:
        """Each row's images (``keys``: the library's names, one image or before and after)."""
        if qualified not in self.metas:  # not a planned table (the watermark table): the library's values
            return [tuple(row[k] for k in keys) for row in event.rows]
        meta = self.meta_of(event, qualified)
        decoder = self.decoder(event, meta)
        body = body_of(event) if decoder is not None else None
        if body is not None:
            return decode_rows(decoder, *body, len(keys))
        convert = self._converters.get(meta) or self._converters.setdefault(meta, self.converter(meta))
        return [tuple(convert(row[k]) for k in keys) for row in event.rows]


def body_of(event) -> tuple[bytes, int, int] | None:
    """(buffer, start, end) of the row images of a library event not read yet, or None when the
    event is not a plain full-image one (a partial JSON update, a columns-present bitmap with gaps). A rows event
    whose header dblog read (``event_stream``) says where its images are."""
    images = getattr(event, "images", None)
    if images is not None:
        return images
    # private fields of python-mysql-replication 1.0.17 (pinned in pyproject; tests/integration/test_row_decoder.py)
    wrapper = event.packet
    packet = wrapper.packet
    if getattr(wrapper, "_BinLogPacketWrapper__data_buffer", b"") or event.event_type == 39:  # PARTIAL_UPDATE_ROWS
        return None
    if not full_image(event):
        return None
    start = packet._position
    return packet._data, start, start + event.event_size - wrapper.read_bytes


def full_image(event) -> bool:
    """Whether every row image of a library rows event holds every column (``binlog_row_image=FULL``):
    MINIMAL and NOBLOB leave columns out, and such an image cannot be written to the lake as a row."""
    full = (1 << event.number_of_columns) - 1
    for bitmap in ("columns_present_bitmap", "columns_present_bitmap2"):
        present = getattr(event, bitmap, None)
        if present is not None and int.from_bytes(present, "little") & full != full:
            return False
    return event.event_type != 39  # PARTIAL_UPDATE_ROWS: a JSON diff, not an image


def has_column_names(columns) -> bool:
    """Whether a table map names its columns (``binlog_row_metadata=FULL``)."""
    return all(getattr(c, "name", None) for c in columns)
