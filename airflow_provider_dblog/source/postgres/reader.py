"""A chunk's rows into Arrow: ``COPY (SELECT ...) TO STDOUT (FORMAT csv)`` parsed by Arrow's CSV reader.

COPY is PostgreSQL's fastest way out (one message per row, no per-value protocol overhead), and its
CSV form tells NULL (an unquoted empty field) from the empty string (``""``). Arrow's multi-threaded C++
parser turns the text straight into the lake's types (``values.arrow_type``): integers, floats (NaN and
±Infinity kept), ``numeric(p,s)`` as exact decimal128, ``date``, ``timestamp`` and ``timestamptz`` (printed in
UTC: ``SESSION_SETTINGS``) to microseconds, ``bool`` from ``t``/``f``; every other type is its text, as
PostgreSQL prints it (uuid, json/jsonb, inet, interval in ISO 8601, money, enums, arrays, time). No Python
object is made per value. ``bytea`` arrives as hex (``\\x..``) and is decoded with numpy, in bulk.

A value the lake cannot hold (``infinity`` timestamps, BC or year > 9999 dates, ``NaN`` in a bounded
``numeric``) stops the read with one line naming the table, column and value: never a null or a clamp.
"""
from __future__ import annotations

import io
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.postgres.copy_out import copy_out

BLOCK_BYTES = 1 << 20  # Arrow's parse blocks (larger ones parsed slower here)
# hex digit -> its value; 255 marks a byte that is not a hex digit
_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def copy_sql(select: str) -> str:
    return f"COPY ({select}) TO STDOUT WITH (FORMAT csv)"


def _read_types(schema: pa.Schema) -> dict[str, pa.DataType]:
    """What the CSV reader parses each column as (positional names ``c0``, ``c1``...): binary as its hex text."""
    return {f"c{i}": pa.string() if pa.types.is_binary(f.type) else f.type for i, f in enumerate(schema)}


class _Rows(io.RawIOBase):
    """COPY's CSV output as Arrow's CSV reader must see it: after one empty line, and in pieces that each end at
    the end of a row (a newline outside quotes), however long the row.

    Arrow drops a UTF-8 byte order mark at the start of its input, which there is the first value of the chunk's
    first row: a text value starting with U+FEFF lost it (silently, only in the snapshot); the empty line before it
    is skipped (``ignore_empty_lines``) and the mark kept. And Arrow fails a row longer than its block
    (``straddling object straddles two block boundaries``): a chunk holding a value of ~1 MB (a 512 kB ``bytea``
    in hex) could not be read at all. A piece that ends at a row's end leaves Arrow nothing to carry over."""

    def __init__(self, source):
        super().__init__()
        self._source, self._pending = source, b"\n"  # read, not yet returned; it starts at a row's start
        self._ready = b""  # the rest of a piece a ``readinto`` buffer could not take: it ends at a row's end

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._ready:
            ready, self._ready = self._ready, b""
            return ready
        size = BLOCK_BYTES if size is None or size < 0 else max(size, 1)
        pieces, odd = [self._pending], self._pending.count(b'"') & 1  # inside quotes after the pending bytes
        self._pending = b""
        while True:
            piece = self._source.read(size)
            if not piece:  # the end: whatever is left
                return b"".join(pieces)
            end = _row_end(piece, odd)
            if end >= 0:
                pieces.append(piece[:end])
                self._pending = piece[end:]
                return b"".join(pieces)
            pieces.append(piece)
            odd ^= piece.count(b'"') & 1

    def readinto(self, buffer) -> int:
        """Arrow calls ``read``; a caller of ``readinto`` gets what fits, the rest at its next call (or read)."""
        data = self.read(len(buffer))
        taken = min(len(data), len(buffer))
        buffer[:taken], self._ready = data[:taken], data[taken:]
        return taken


def _row_end(piece: bytes, odd: int) -> int:
    """The offset after the last newline of ``piece`` outside quotes (``odd``: inside quotes at its start), or -1.
    A doubled quote inside a quoted value counts twice, so the count of quotes before a byte says where it is."""
    odd ^= piece.count(b'"') & 1  # at the piece's end
    end = len(piece)
    while True:
        p = piece.rfind(b"\n", 0, end)
        if p < 0:
            return -1
        odd ^= piece.count(b'"', p, end) & 1
        if not odd:
            return p + 1
        end = p


def parse_csv(data, schema: pa.Schema, table: str) -> pa.Table:
    """COPY's CSV output (no header; ``bytes`` or a binary file) in ``schema``'s columns and types; one line
    for a value with no lake twin."""
    source = _Rows(io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data)
    names = [f"c{i}" for i in range(len(schema))]
    try:
        raw = pcsv.read_csv(
            source,
            read_options=pcsv.ReadOptions(column_names=names, block_size=BLOCK_BYTES),
            parse_options=pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=True),
            convert_options=pcsv.ConvertOptions(column_types=_read_types(schema), null_values=[""],
                                                strings_can_be_null=True, quoted_strings_can_be_null=False,
                                                true_values=["t"], false_values=["f"]))
    except pa.ArrowInvalid as exc:
        if "Empty CSV file" in str(exc):
            return schema.empty_table()
        raise DblogError(_value_error(str(exc), schema, table)) from None
    columns = []
    for i, field in enumerate(schema):
        column = raw.column(i)
        if pa.types.is_binary(field.type):
            column = pa.chunked_array([hex_to_binary(c, table, field.name) for c in column.chunks], pa.binary())
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _value_error(message: str, schema: pa.Schema, table: str) -> str:
    """Arrow's conversion error (``In CSV column #3: ... invalid value 'infinity'``) as one line naming the
    table, column and value."""
    text = " ".join(message.split())
    column, values = re.search(r"column #(\d+)", text), re.findall(r"'([^']*)'", text)
    if not column or not values or int(column.group(1)) >= len(schema):
        return f"reading {table} failed: {text}"
    field = schema.field(int(column.group(1)))
    return (f"{table}.{field.name} holds {values[-1]!r}, which has no {field.type} value in the lake (infinity, BC "
            f"dates, years after 9999 and NaN in a bounded numeric have none): change the value or exclude the table")


def hex_to_binary(array: pa.Array, table: str = "", column: str = "") -> pa.Array:
    """``\\x0a1b``-form bytea text -> binary, in bulk: every value loses its ``\\x`` and its hex digits pair
    into bytes (offsets halve); nulls stay null."""
    if len(array) == 0:
        return pa.array([], pa.binary())
    valid = array.is_valid()
    bad = pc.and_kleene(valid, pc.invert(pc.starts_with(array, "\\x")))
    if pc.any(bad).as_py():
        raise DblogError(f"{table}.{column}: a bytea value not in hex form (bytea_output must be hex)")
    digits = pc.utf8_slice_codeunits(pc.fill_null(array, "\\x"), 2)  # nulls: no digits
    offsets = np.frombuffer(digits.buffers()[1], dtype=np.int32)[digits.offset: digits.offset + len(digits) + 1]
    start, end = int(offsets[0]), int(offsets[-1])
    nibbles = _HEX[np.frombuffer(digits.buffers()[2], dtype=np.uint8)[start:end]] if end > start \
        else np.zeros(0, np.uint8)
    if (nibbles == 255).any() or len(nibbles) % 2:
        raise DblogError(f"{table}.{column}: a bytea value that is not hex")
    data = (nibbles[0::2] << 4) | nibbles[1::2]
    halves = ((offsets - start) // 2).astype(np.int32)
    validity = valid.buffers()[1] if array.null_count else None  # is_valid(): a fresh bitmap, offset 0
    return pa.Array.from_buffers(pa.binary(), len(array), [validity, pa.py_buffer(halves.tobytes()),
                                                           pa.py_buffer(data.tobytes())], array.null_count)


def read_rows(conn, meta: TableMeta, schema: pa.Schema, select: str, params) -> pa.Table:
    """Run the chunk's COPY on ``conn`` (in whatever transaction it is in) and parse it as it arrives
    (``copy_out``: PostgreSQL's output, the transfer and Arrow's parse overlap, ≈1.3-1.6x a copy-then-parse on
    2 cores). A failed COPY raises its own error, a failed parse stops the COPY (the caller drops the
    connection: it may be left inside the COPY)."""
    with conn.cursor() as cur:
        statement = copy_sql(cur.mogrify(select, params).decode())
    with copy_out(conn, statement) as source:
        return parse_csv(source, schema, meta.qualified)
