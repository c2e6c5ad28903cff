"""MariaDB's compressed binlog events (``log_bin_compress=ON``), which python-mysql-replication 1.0
does not know: it hands them over as ``NotImplementedEvent`` with the raw packet.

A compressed event is the plain event with its payload (a query event's statement, a rows event's row
images) replaced by one zlib block behind a header byte (``0x80 | bytes of the length``, the algorithm in
bits 4-6, 0 = zlib) and the uncompressed length, big-endian (MariaDB's ``binlog_buf_uncompress``).
Everything before the payload (post-header, table id, column bitmaps) is stored as in the plain event.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from airflow_provider_dblog.core.errors import DblogError

QUERY_COMPRESSED = 165
ROWS_COMPRESSED = {166: ("write", 1), 167: ("update", 1), 168: ("delete", 1),  # (kind, rows event version)
                   169: ("write", 2), 170: ("update", 2), 171: ("delete", 2)}
TRANSACTION_PAYLOAD = 40  # MySQL 8.0.20+ binlog_transaction_compression (zstd): not decoded
PACKET_HEADER = 20  # pymysql's OK byte + the 19-byte binlog event header


def uncompress(payload: bytes) -> bytes:
    header = payload[0]
    width, algorithm = header & 0x07, (header >> 4) & 0x07
    if algorithm != 0 or not 1 <= width <= 4:
        raise ValueError(f"unknown compression header 0x{header:02x}")
    length = int.from_bytes(payload[1:1 + width], "big")
    data = zlib.decompress(payload[1 + width:])
    if len(data) != length:
        raise ValueError(f"uncompressed {len(data)} bytes, the header says {length}")
    return data


def body(event) -> bytes:
    """The event's bytes after its header (without the checksum) from the library's raw packet."""
    return bytes(event.packet.packet._data[PACKET_HEADER:PACKET_HEADER + event.event_size])


def query(event) -> tuple[str, str]:
    """(default database, statement) of a ``QUERY_COMPRESSED_EVENT``."""
    data = body(event)
    db_len, status_len = data[8], int.from_bytes(data[11:13], "little")
    start = 13 + status_len
    schema = data[start:start + db_len].decode("utf-8", "replace")
    statement = uncompress(data[start + db_len + 1:]).decode("utf-8", "backslashreplace")
    return schema, statement


@dataclass(frozen=True)
class CompressedRows:
    kind: str       # write | update | delete
    table_id: int
    columns: int
    full: bool      # every column present in every image (FULL row image)
    rows: bytes     # the row images, uncompressed: the plain rows event's body after its bitmaps


def packed_int(data: bytes, p: int) -> tuple[int, int]:
    """A length-encoded integer of the binlog at ``p``, and where what follows it starts."""
    first = data[p]
    if first < 251:
        return first, p + 1
    width = {252: 2, 253: 3, 254: 8}[first]
    return int.from_bytes(data[p + 1:p + 1 + width], "little"), p + 1 + width


def rows(event) -> CompressedRows:
    """A compressed rows event (types 166-171) with its row images uncompressed."""
    kind, version = ROWS_COMPRESSED[event.event_type]
    data = body(event)
    table_id = int.from_bytes(data[0:6], "little")
    p = 8
    if version == 2:
        p += int.from_bytes(data[8:10], "little")  # the extra data's length counts its own two bytes
    columns, p = packed_int(data, p)
    width = (columns + 7) // 8
    full_mask = (1 << columns) - 1
    full = True
    for _ in range(2 if kind == "update" else 1):
        full = full and int.from_bytes(data[p:p + width], "little") & full_mask == full_mask
        p += width
    try:
        images = uncompress(data[p:])
    except (ValueError, zlib.error) as exc:
        raise DblogError(f"a compressed rows event could not be uncompressed ({exc}): dblog stops before it; "
                         f"SET GLOBAL log_bin_compress=OFF and re-snapshot the tables it holds") from None
    return CompressedRows(kind, table_id, columns, full, images)
