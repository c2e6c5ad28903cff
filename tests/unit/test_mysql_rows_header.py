"""The rows-event header dblog's dump loop reads (``source/mysql/event_stream.EventStream._rows_event``) on
synthetic events of both versions: v1 (MariaDB) and v2 (MySQL, with and without extra data such as the partition
info MySQL 8 logs for partitioned tables), with and without a CRC32. Where its row images start must be where the
library's own parse of the same bytes says (MySQL's v2 events are not written by the MariaDB the integration
tests run: tests/integration/test_event_stream.py compares v1 events on a real server)."""
from __future__ import annotations

import struct

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication.constants.BINLOG import (
    DELETE_ROWS_EVENT_V1, TABLE_MAP_EVENT, UPDATE_ROWS_EVENT_V1, UPDATE_ROWS_EVENT_V2, WRITE_ROWS_EVENT_V1,
    WRITE_ROWS_EVENT_V2,
)
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_dblog.source.mysql.event_stream import _ROWS, EventStream
from airflow_provider_dblog.source.mysql.rows import body_of


class _Table:
    """The few attributes of the library's ``Table`` a rows event's header needs."""

    def __init__(self, width: int):
        self.schema, self.table, self.columns, self.data = "s", "t", [object()] * width, {"primary_key": None}


def _event(event_type: int, extra: bytes, bitmaps: bytes, images: bytes, crc: bool, table_id: int = 5,
           columns: int = 3) -> bytes:
    body = table_id.to_bytes(6, "little") + b"\x01\x00"
    if event_type in (WRITE_ROWS_EVENT_V2, UPDATE_ROWS_EVENT_V2):
        body += struct.pack("<H", 2 + len(extra)) + extra
    body += bytes([columns]) + bitmaps + images
    size = 19 + len(body) + (4 if crc else 0)
    return b"\x00" + struct.pack("<IBIIIH", 1700000000, event_type, 1, size, 4321, 0) + body + (b"CRC!" if crc else b"")


def _stream(crc: bool, width: int = 3) -> EventStream:
    stream = EventStream(None, "mysql", 1, "binlog.000001", 4, [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                         crc, None, None)
    stream._use_checksum, stream.table_map = crc, {5: _Table(width)}
    return stream


@pytest.mark.parametrize("crc", [False, True], ids=["no-crc", "crc32"])
@pytest.mark.parametrize("event_type,extra,bitmaps", [
    (WRITE_ROWS_EVENT_V1, b"", b"\x07"),
    (DELETE_ROWS_EVENT_V1, b"", b"\x07"),
    (UPDATE_ROWS_EVENT_V1, b"", b"\x07\x07"),
    (WRITE_ROWS_EVENT_V2, b"", b"\x07"),
    (WRITE_ROWS_EVENT_V2, b"\x01\x02\x00", b"\x07"),  # partition info: type 1, partition id
    (UPDATE_ROWS_EVENT_V2, b"\x01\x02\x00\x03\x00", b"\x07\x07"),  # partition info: both partition ids
], ids=["write-v1", "delete-v1", "update-v1", "write-v2", "write-v2-partition", "update-v2-partition"])
def test_the_images_start_where_the_library_says(event_type, extra, bitmaps, crc):
    data = _event(event_type, extra, bitmaps, b"ROW IMAGES", crc)
    stream = _stream(crc)
    ours = stream._rows_event(data, _ROWS[event_type], *stream._map_of(data))
    library = stream.library_event(data, stream.table_map)
    assert ours is not None and isinstance(ours, type(library)) and type(ours) is not type(library)
    assert ours.images[1:] == body_of(library)[1:]
    assert bytes(data[ours.images[1]:ours.images[2]]) == b"ROW IMAGES"
    assert ours.images[0] is data and ours.packet.log_pos == 4321 == stream.log_pos
    assert (ours.schema, ours.table, ours.number_of_columns, ours.event_size) == ("s", "t", 3, library.event_size)
    assert ours.flags == library.flags == 1
    assert ours.columns_present_bitmap == library.columns_present_bitmap
    assert getattr(ours, "columns_present_bitmap2", None) == getattr(library, "columns_present_bitmap2", None)


@pytest.mark.parametrize("case", ["minimal-image", "minimal-after-image", "map-of-other-width", "filtered-schema"])
def test_anything_else_is_left_to_the_library(case):
    """Images without every column (MINIMAL, NOBLOB), a map whose width is not the event's, a table the read
    filters out: None (the library parses the event: the reader refuses or skips it)."""
    event_type, bitmaps, width = UPDATE_ROWS_EVENT_V1, b"\x07\x07", 3
    if case == "minimal-image":
        bitmaps = b"\x01\x07"
    elif case == "minimal-after-image":
        bitmaps = b"\x07\x03"
    elif case == "map-of-other-width":
        width = 4
    stream = _stream(False, width)
    if case == "filtered-schema":
        stream._only_schemas = ["other"]
    data = _event(event_type, b"", bitmaps, b"ROW IMAGES", False)
    assert stream._map_of(data)[1] is not None
    assert stream._rows_event(data, _ROWS[event_type], *stream._map_of(data)) is None
    assert stream.log_pos == 4  # not read: the library's parse moves the position


def test_a_rows_event_of_a_table_without_a_map_is_dropped_as_the_library_drops_it():
    stream = _stream(False)
    data = _event(WRITE_ROWS_EVENT_V1, b"", b"\x07", b"ROW IMAGES", False, table_id=6)
    assert stream._map_of(data)[1] is None and stream.library_event(data, stream.table_map) is None


def _table_map(schema: bytes, table: bytes) -> bytes:
    body = (9).to_bytes(6, "little") + b"\x01\x00" + bytes([len(schema)]) + schema + b"\x00" + bytes([len(table)])
    body += table + b"\x00" + b"\x01\x03\x00\x00"  # one INT column, no metadata, its null bitmap
    return b"\x00" + struct.pack("<IBIIIH", 1700000000, TABLE_MAP_EVENT, 1, 19 + len(body), 99, 0) + body


@pytest.mark.parametrize("schemas,tables,dropped", [
    (None, None, False), (["shop"], None, False), (["other"], None, True), (None, ["orders"], False),
    (None, ["items"], True), (["shop"], ["items"], True), (["shop", "x"], ["orders", "items"], False),
])
def test_a_table_map_the_filters_leave_out_is_dropped_as_the_library_drops_it(schemas, tables, dropped):
    stream = _stream(False)
    stream._only_schemas, stream._only_tables = schemas, tables
    data = _table_map("shop".encode(), "orders".encode())
    assert stream._filtered_out(data) is dropped
    library = BinLogPacketWrapper(MysqlPacket(data, "utf8"), {}, stream._control, (0, 0, 0), False,
                                  frozenset([TableMapEvent]), tables, None, schemas, None, False, False, False, False,
                                  False, False, None).event
    assert (library is None) is dropped


@pytest.mark.parametrize("width", [8, 9, 20, 64, 250])
def test_bitmaps_of_every_width(width):
    full = ((1 << width) - 1).to_bytes((width + 7) // 8, "little")
    data = _event(UPDATE_ROWS_EVENT_V2, b"", full + full, b"ROW IMAGES", True, columns=width)
    stream = _stream(True, width)
    ours, library = stream._rows_event(data, _ROWS[UPDATE_ROWS_EVENT_V2], *stream._map_of(data)), stream.library_event(data, stream.table_map)
    assert ours.images[1:] == body_of(library)[1:] and ours.columns_present_bitmap2 == library.columns_present_bitmap2


def test_a_post_header_of_another_length_is_left_to_the_library():
    stream = _stream(False)
    stream._post_header_lengths = [0] * 40
    stream._post_header_lengths[WRITE_ROWS_EVENT_V2 - 1] = 12  # a server that writes two more bytes
    data = _event(WRITE_ROWS_EVENT_V2, b"", b"\x07", b"ROW IMAGES", False)
    assert stream._rows_event(data, _ROWS[WRITE_ROWS_EVENT_V2], *stream._map_of(data)) is None


def test_rows_asked_later_are_parsed_with_the_settings_the_event_was_read_with():
    """The checksum setting of the file an event came from, not the stream's after it moved on (a reconnect
    after a DBA's change of binlog_checksum): else the CRC would be read as row data."""
    stream = _stream(True)
    data = _event(WRITE_ROWS_EVENT_V1, b"", b"\x07", b"ROW IMAGES", True)
    ours = stream._rows_event(data, _ROWS[WRITE_ROWS_EVENT_V1], *stream._map_of(data))
    stream._use_checksum = False  # the stream moved on to a file without checksums
    kept = ours._library[2]
    assert kept == ((0, 0, 0), True, None, None) and stream.parse_settings()[1] is False
    assert stream.library_event(data, stream.table_map, kept).event_size == ours.event_size
    assert stream.library_event(data, stream.table_map).event_size == ours.event_size + 4  # the CRC as row data
