"""dblog's own binlog dump loop: python-mysql-replication's events, with each table map parsed once per read.

The server sends a table map before every rows event of every transaction. The library parses each one in full
(columns, optional metadata, a ``Table`` built from every column's ``data`` dict): 0.57 ms per map, more than
half of a single-row transaction's cost in the tail (docs/benchmarks.md, thirty-first session). A map whose
bytes are the same as one seen before in this read (same table id, same columns and metadata) parses to the
same thing, so this loop takes it from a cache: the library's ``Table`` and column list are reused, and dblog's
per-layout work (``rows.ByColumns``) is found by the list's identity as well.

The two other events of every transaction, its GTID (MariaDB) and its XID, are read here too: a few bytes each,
for which the library's wrapper and parser cost more than the event. So is the header of a rows event of full
images of a mapped table (table id, flags, v2's extra data, the columns-present bitmaps): dblog decodes its images
itself (``rows``, ``block_decoder``), and the library's parse of the header alone (building its ``Table``'s dict
on the way) was the last per-transaction parse; its ``rows`` are still the library's, parsed when asked for.
Anything else (MINIMAL images, 251 columns or more) is the library's event (a rows event of a table the read keeps
no map of, and a map the read's filters leave out, give no event, as the library gives none), and so is every
other event, as its ``BinLogStreamReader`` does it (the dump command, its parser per event through
``BinLogPacketWrapper``, a rotate's file and table-map reset, a Format_description's version). It reads the pinned
pymysql's packets with ``_read_packet``/``_write_bytes``, as the library does.
"""
from __future__ import annotations

import struct
from typing import Any, Iterator, Sequence

import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication.constants.BINLOG import (
    DELETE_ROWS_EVENT_V1, DELETE_ROWS_EVENT_V2, FORMAT_DESCRIPTION_EVENT, MARIADB_GTID_EVENT, ROTATE_EVENT,
    TABLE_MAP_EVENT, UPDATE_ROWS_EVENT_V1, UPDATE_ROWS_EVENT_V2, WRITE_ROWS_EVENT_V1, WRITE_ROWS_EVENT_V2, XID_EVENT,
)
from pymysqlreplication.event import FormatDescriptionEvent, MariadbGtidEvent, RotateEvent, XidEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_dblog.source.mysql.table_map import relabel

COM_BINLOG_DUMP = 0x12
BINLOG_DUMP_NON_BLOCK = 0x01
RECONNECT_ERRORS = (2006, 2013)  # as the library: the stream reconnects at the last event's position
_HEADER = struct.Struct("<xIBIIIH")  # the OK byte, then timestamp, type, server id, event size, log_pos, flags
_CHECKSUM = 4
_BODY = 20  # where an event's body starts in its packet
_GTID = struct.Struct("<QIB")  # MariaDB's GTID event: sequence number, domain, flags
_XID = struct.Struct("<Q")
MAP_CACHE_LIMIT = 4096


class _Control:
    """What the library's event parsers ask of their control connection: its character set and the server's
    kind (names come from the table maps: FULL metadata; the library's information_schema fallback is off)."""

    charset = "utf8"

    def __init__(self, dbms: str):
        self.dbms = dbms

    def _get_dbms(self) -> str:
        return self.dbms


class _Header:
    """An event's common header, for the events this loop makes itself (their ``event.packet``, as the library's)."""

    __slots__ = ("timestamp", "event_type", "server_id", "event_size", "log_pos", "flags")

    def __init__(self, data) -> None:
        (self.timestamp, self.event_type, self.server_id, self.event_size, self.log_pos,
         self.flags) = _HEADER.unpack_from(data)


class MappedAgain(TableMapEvent):
    """A table map whose bytes were parsed before in this read: the parsed event's values, this event's header."""

    def __init__(self, parsed: TableMapEvent, header: _Header, table_map: dict):  # noqa: the parse is the cached one
        self.__dict__.update(parsed.__dict__)
        self.packet, self.timestamp, self.table_map = header, header.timestamp, table_map


class Commit(XidEvent):
    """An XID event (a transaction's commit: 8 bytes of body) read by dblog: the library's wrapper and parser
    cost more than the event, one per transaction."""

    def __init__(self, header: _Header, data):  # noqa: the body is read here
        self.packet, self.timestamp, self.event_type = header, header.timestamp, header.event_type
        (self.xid,) = _XID.unpack_from(data, _BODY)


class MariadbGtid(MariadbGtidEvent):
    """A MariaDB GTID event (a transaction's start) read by dblog, with the library's attributes."""

    def __init__(self, header: _Header, data):  # noqa: the body is read here
        self.packet, self.timestamp, self.event_type = header, header.timestamp, header.event_type
        self.server_id = header.server_id
        self.gtid_seq_no, self.domain_id, self.flags = _GTID.unpack_from(data, _BODY)
        self.gtid = f"{self.domain_id}-{self.server_id}-{self.gtid_seq_no}"


_OWN = {XID_EVENT: (XidEvent, Commit), MARIADB_GTID_EVENT: (MariadbGtidEvent, MariadbGtid)}


class _RowsHeader:
    """A rows event whose header (table id, flags, the columns-present bitmaps) dblog read, with the library's
    attributes; ``images``: (buffer, start, end) of its row images. Only full images of a mapped table come
    so (anything else is the library's event). ``rows`` (the library's decoding, asked for tables dblog does not
    decode itself) parses the same packet with the library, against the table map this event was read with."""

    def __init__(self, header: _Header, table_id: int, table, images: tuple, bitmaps: tuple,
                 stream: "EventStream"):  # noqa: the header is read by EventStream._rows_event
        self.packet, self.timestamp, self.event_type = header, header.timestamp, header.event_type
        self.event_size = images[2] - _BODY  # as the library's: without the header and the checksum
        self.table_id, self.table_map, self.images = table_id, stream.table_map, images
        self.flags = int.from_bytes(images[0][_BODY + 6:_BODY + 8], "little")
        self.schema, self.table, self.columns = table.schema, table.table, table.columns
        self.number_of_columns = len(table.columns)
        self.columns_present_bitmap = bitmaps[0]
        if len(bitmaps) > 1:
            self.columns_present_bitmap2 = bitmaps[1]
        self._library = (stream, {table_id: table}, stream.parse_settings())  # as they are now, not when asked
        self._parsed = None

    @property
    def rows(self):
        if self._parsed is None:
            stream, table_map, settings = self._library
            self._parsed = stream.library_event(self.images[0], table_map, settings)
        return self._parsed.rows


class WrittenRows(_RowsHeader, WriteRowsEvent):
    pass


class UpdatedRows(_RowsHeader, UpdateRowsEvent):
    pass


class DeletedRows(_RowsHeader, DeleteRowsEvent):
    pass


# event type -> (the library's class, dblog's, its post-header length, its images per row)
_ROWS = {WRITE_ROWS_EVENT_V1: (WriteRowsEvent, WrittenRows, 8, 1),
         WRITE_ROWS_EVENT_V2: (WriteRowsEvent, WrittenRows, 10, 1),
         UPDATE_ROWS_EVENT_V1: (UpdateRowsEvent, UpdatedRows, 8, 2),
         UPDATE_ROWS_EVENT_V2: (UpdateRowsEvent, UpdatedRows, 10, 2),
         DELETE_ROWS_EVENT_V1: (DeleteRowsEvent, DeletedRows, 8, 1),
         DELETE_ROWS_EVENT_V2: (DeleteRowsEvent, DeletedRows, 10, 1)}


class EventStream:
    """The events of ``only_events`` from ``log_file:log_pos`` to the binlog's end (a non-blocking dump), as the
    library's ``BinLogStreamReader(resume_stream=True, blocking=False, is_mariadb=False)`` yields them; its
    ``log_file`` and ``table_map`` too. ``checksums``: whether events carry a CRC32 (None: as the server logs now)."""

    def __init__(self, connect, dbms: str, server_id: int, log_file: str, log_pos: int, only_events: Sequence,
                 checksums: bool | None, only_schemas: Sequence[str] | None, only_tables: Sequence[str] | None):
        self._connect_fn, self._server_id = connect, server_id
        self.log_file, self.log_pos = log_file, log_pos
        self._wanted = frozenset(only_events)
        self._in_packet = frozenset([FormatDescriptionEvent, TableMapEvent, RotateEvent, *only_events])
        self._checksums = checksums
        self._only_schemas, self._only_tables = only_schemas, only_tables
        self._control = _Control(dbms)
        self.table_map: dict = {}
        self._maps: dict[bytes, TableMapEvent] = {}  # a table map's body -> its parse
        self._conn = None
        self._use_checksum = False
        self._full_metadata: bool | None = None  # the library parses a map's names only when FULL
        self.mysql_version = (0, 0, 0)
        self._post_header_lengths = None

    def _open(self) -> None:
        conn = self._connect_fn()
        with conn.cursor() as cur:
            if self._checksums is None:
                cur.execute("SHOW GLOBAL VARIABLES LIKE 'BINLOG_CHECKSUM'")
                row = cur.fetchone()
                self._use_checksum = row is not None and row[1] != "NONE"
            else:
                self._use_checksum = self._checksums
            if self._use_checksum:
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum" if self._checksums is None
                            else "SET @master_binlog_checksum = 'CRC32'")
            cur.execute("SET @mariadb_slave_capability = 4")  # GTID events as they are (the library's reason)
            if self._full_metadata is None:  # once per read, as the library: a reconnect parses maps as before
                cur.execute("SHOW VARIABLES LIKE 'BINLOG_ROW_METADATA'")
                row = cur.fetchone()
                self._full_metadata = row is not None and str(row[1]).upper() == "FULL"
        name = self.log_file.encode()
        conn._write_bytes(struct.pack("<iBIHI", len(name) + 11, COM_BINLOG_DUMP, self.log_pos,
                                      BINLOG_DUMP_NON_BLOCK, self._server_id) + name)
        conn._next_seq_id = 1
        self._conn = conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __iter__(self) -> Iterator:
        while True:
            if self._conn is None:
                self._open()
            try:
                packet = self._conn._read_packet()
            except pymysql.OperationalError as exc:
                if exc.args and exc.args[0] in RECONNECT_ERRORS:
                    self.close()
                    continue
                raise
            if packet.is_eof_packet():
                self.close()
                return
            if not packet.is_ok_packet():
                continue
            data = packet._data
            own = _OWN.get(data[5])
            if own is not None and own[0] in self._wanted:
                yield own[1](self._header(data), data)
                continue
            rows = _ROWS.get(data[5])
            if rows is not None:
                table_id, table = self._map_of(data)
                if table is None:  # no map kept (a table the read filters out): the library drops it too
                    self._header(data)
                    continue
                if rows[0] in self._wanted:
                    event = self._rows_event(data, rows, table_id, table)
                    if event is not None:
                        yield event
                        continue
            body = None
            if data[5] == TABLE_MAP_EVENT:
                body = bytes(data[_BODY:len(data) - _CHECKSUM if self._use_checksum else len(data)])
                parsed = self._maps.get(body)
                if parsed is not None:
                    header = self._header(data)
                    self.table_map[parsed.table_id] = parsed.get_table()
                    if TableMapEvent in self._wanted:
                        yield MappedAgain(parsed, header, self.table_map)
                    continue
                if self._filtered_out(data):
                    self._header(data)  # as the library: no event, no map kept
                    continue
            event = self._parse(packet, body)
            if event is not None:
                yield event

    def _header(self, data) -> _Header:
        """The header of an event this loop reads itself; the read's position moves past it."""
        header = _Header(data)
        self.log_pos = header.log_pos or self.log_pos
        return header

    def _map_of(self, data) -> tuple[int, Any]:
        """A rows event's table id and the map this read keeps for it (None: none, so the library gives no event)."""
        table_id = int.from_bytes(data[_BODY:_BODY + 6], "little")
        return table_id, self.table_map.get(table_id)

    def _known_post_header(self, event_type: int, length: int) -> bool:
        """Whether events of ``event_type`` have the post-header ``length`` this loop reads (the format description
        event of the file says; none read yet: the default)."""
        lengths = self._post_header_lengths
        return not (lengths and len(lengths) >= event_type and lengths[event_type - 1] != length)

    def _filtered_out(self, data) -> bool:
        """Whether a table map names a table the read's filters leave out (read here: the library's wrapper and
        parser cost more than a skipped map, one per transaction of every table the capture does not hold)."""
        if self._only_tables is None and self._only_schemas is None:
            return False
        if not self._known_post_header(TABLE_MAP_EVENT, 8):
            return False  # a post-header this loop does not know: the library's parse
        at = _BODY + 8
        schema = bytes(data[at + 1:at + 1 + data[at]]).decode()
        at += data[at] + 2  # the name and its terminating NUL
        table = bytes(data[at + 1:at + 1 + data[at]]).decode()
        return ((self._only_tables is not None and table not in self._only_tables)
                or (self._only_schemas is not None and schema not in self._only_schemas))

    def _rows_event(self, data, kind: tuple, table_id: int, table) -> _RowsHeader | None:
        """A rows event of full images of ``table`` (mapped as ``table_id``) that the filters keep, its header read
        here (the library would build its ``Table``'s ``data`` dict and read the header byte by byte: about a fifth
        of a single-row transaction's read); None: anything else, which the library parses."""
        if (not self._known_post_header(data[5], kind[2])
                or (self._only_schemas is not None and table.schema not in self._only_schemas)
                or (self._only_tables is not None and table.table not in self._only_tables)):
            return None
        at = _BODY + 8
        if kind[2] == 10:  # v2: the extra data's length counts its own two bytes
            at += int.from_bytes(data[at:at + 2], "little")
        columns = data[at]
        if columns >= 251 or columns != len(table.columns):  # a longer count (or a map that does not match)
            return None
        at += 1
        width = (columns + 7) // 8
        full = (1 << columns) - 1
        bitmaps = tuple(bytes(data[at + i * width:at + (i + 1) * width]) for i in range(kind[3]))
        if any(int.from_bytes(b, "little") & full != full for b in bitmaps):
            return None  # MINIMAL/NOBLOB images: the library's event, which the reader refuses in one line
        end = len(data) - _CHECKSUM if self._use_checksum else len(data)
        return kind[1](self._header(data), table_id, table, (data, at + kind[3] * width, end), bitmaps, self)

    def parse_settings(self) -> tuple:
        """What the library's parse of an event depends on besides its bytes: the server's version, whether events
        carry a checksum, FULL metadata, the post-header lengths (each may change as the read goes on)."""
        return self.mysql_version, self._use_checksum, self._full_metadata, self._post_header_lengths

    def library_event(self, data, table_map: dict, settings: tuple | None = None):
        """The library's parse of a rows event's packet ``data`` against ``table_map`` with the ``settings`` it was
        read with (``parse_settings``; None: the stream's now). The stream's position is not moved."""
        version, checksum, full_metadata, lengths = settings or self.parse_settings()
        return BinLogPacketWrapper(
            MysqlPacket(data, "utf8"), table_map, self._control, version, checksum, self._in_packet, None, None,
            None, None, False, False, False, full_metadata, False, False, lengths).event

    def _parse(self, packet, map_body: bytes | None):
        """The library's event for ``packet`` (None when not wanted); ``map_body``: a table map's body, its key in
        the cache."""
        wrapper = BinLogPacketWrapper(
            packet, self.table_map, self._control, self.mysql_version, self._use_checksum, self._in_packet,
            self._only_tables, None, self._only_schemas, None, False, False, False, self._full_metadata, False,
            False, self._post_header_lengths)
        event = wrapper.event
        if wrapper.event_type == ROTATE_EVENT:
            self.log_pos, self.log_file = event.position, event.next_binlog
            if wrapper.timestamp != 0:  # a server restart may reuse table ids: maps are read again
                self.table_map = {}
        elif wrapper.log_pos:
            self.log_pos = wrapper.log_pos
        if wrapper.event_type == FORMAT_DESCRIPTION_EVENT and event is not None:
            if (event.mysql_version, event.post_header_len) != (self.mysql_version, self._post_header_lengths):
                self._maps.clear()  # a map's parse depends on them
            self.mysql_version, self._post_header_lengths = event.mysql_version, event.post_header_len
        if wrapper.event_type == TABLE_MAP_EVENT and event is not None:
            if map_body is not None and self._known_post_header(TABLE_MAP_EVENT, 8):
                relabel(event.columns, map_body)  # the ENUM/SET labels in their columns' character sets
            self.table_map[event.table_id] = event.get_table()
            self._remember(map_body, event)
        if event is None or event.__class__ not in self._wanted:
            return None
        return event

    def _remember(self, body: bytes, event: TableMapEvent) -> None:
        if not self._full_metadata or not event.optional_metadata.column_name_list:
            return  # names from elsewhere than the map's bytes: parsed again each time
        if len(self._maps) >= MAP_CACHE_LIMIT:
            self._maps.clear()
        self._maps[body] = event
