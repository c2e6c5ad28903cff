"""The replication-protocol reader (``event_stream``: dblog's dump loop over python-mysql-replication's event
parsers), each binlog file read with the checksum setting that file was written with.

A dump reads every event as carrying a 4-byte CRC32 or not, decided once per connection (from the server's
*current* ``binlog_checksum`` unless pinned); the server sends each file's events as they were written. After a DBA's
``SET GLOBAL binlog_checksum`` a range mixes files with and without checksums: read with the wrong setting,
every event of a file loses (or keeps) 4 bytes and decodes wrong, silently (a change was lost), or the server
stops the dump ("Slave can not handle replication events with the checksum ..."). Each file begins with a
Format_description event naming its algorithm; where that differs from the connection's, the read goes on
from that file on a new connection pinned to it (``EventStream``'s ``checksums``).
"""
from __future__ import annotations

import logging
import random
from functools import partial
from typing import Iterator, Sequence

import pymysql
# imported at module level, not where used: two reader threads importing the package at once can see one of
# its modules half initialised (a circular import inside python-mysql-replication)
from pymysqlreplication.event import FormatDescriptionEvent

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.source.mysql.connection import MySqlClient, SharedTlsConnection, login_password
from airflow_provider_dblog.source.mysql.event_stream import EventStream

log = logging.getLogger("dblog")
_HEADER = 19  # an event's common header
_CHECKSUM = 4  # a CRC32 after an event's body
DUMP_REFUSED = 1236  # ER_MASTER_FATAL_ERROR_READING_BINLOG


def reads_checksums(event) -> bool:
    """Whether ``event`` was read as carrying a CRC32 (its body is the event less header and CRC)."""
    return event.packet.event_size - event.event_size == _HEADER + _CHECKSUM


def written_with_checksums(event: FormatDescriptionEvent) -> bool:
    """Whether the file this Format_description event opens was written with checksums (algorithm 1: CRC32;
    0: none; None: a server older than checksums)."""
    return bool(event.checksum_algorithm)


def _refused_for_checksums(exc: pymysql.MySQLError) -> bool:
    return bool(exc.args) and exc.args[0] == DUMP_REFUSED and "checksum" in str(exc.args[-1]).lower()


def _reader(client: MySqlClient, server_ids: tuple[int, int], at: SourcePosition, only_events: Sequence,
            checksums: bool | None, schemas: Sequence[str] | None, tables: Sequence[str] | None) -> EventStream:
    config = client.config
    connect = partial(SharedTlsConnection, host=config.host, port=config.port, user=config.user,
                      passwd=login_password(config), charset="utf8")
    return EventStream(connect, "mariadb" if client.is_mariadb else "mysql", random.randint(*server_ids), at.file,
                       at.offset, [*only_events, FormatDescriptionEvent], checksums,
                       None if schemas is None else list(schemas), None if tables is None else list(tables))


def binlog_events(client: MySqlClient, server_ids: tuple[int, int], start: SourcePosition, only_events: Sequence,
                  schemas: Sequence[str] | None = None, tables: Sequence[str] | None = None
                  ) -> Iterator[tuple[EventStream, object]]:
    """(reader, event) for the events of ``only_events`` from ``start`` to the binlog's end, every file
    decoded with its own checksum setting; ``reader`` holds the file being read (``log_file``) and its table
    maps. Format_description events come too when asked for. A server that refuses a pinned setting stops the read in
    one line."""
    wanted_fd = FormatDescriptionEvent in only_events
    checksums: bool | None = None  # None: as the server logs now (its current binlog_checksum)
    at = start
    tried: set = set()
    while True:
        if (at, checksums) in tried:  # the pin did not take: never read a file again with the same setting
            raise DblogError(_pin_failed(client, at.file, bool(checksums)))
        tried.add((at, checksums))
        reader = _reader(client, server_ids, at, only_events, checksums, schemas, tables)
        switch: bool | None = None
        try:
            for event in reader:
                if isinstance(event, FormatDescriptionEvent):
                    written = written_with_checksums(event)
                    if reads_checksums(event) != written:
                        if checksums is written:
                            raise DblogError(_pin_failed(client, reader.log_file, written))
                        switch = written
                        break
                    if not wanted_fd:
                        continue
                yield reader, event
        except pymysql.MySQLError as exc:
            if not _refused_for_checksums(exc):
                raise
            if checksums is True:
                raise DblogError(_pin_failed(client, reader.log_file, True)) from None
            switch = True  # the server will not send a file with checksums to a reader that does not take them
        finally:
            reader.close()
        if switch is None:
            return
        resume = start if reader.log_file == start.file else client.position(reader.log_file, 4)
        if resume < at:
            raise DblogError(_pin_failed(client, reader.log_file, switch))
        log.info("binlog %s was written %s checksums: read with that setting", reader.log_file,
                 "with" if switch else "without")
        checksums, at = switch, resume


def _pin_failed(client: MySqlClient, file: str, written: bool) -> str:
    setting = "CRC32" if written else "NONE"
    return (f"binlog {file} on {client.config.address} was written with binlog_checksum={setting} and the "
            f"replication reader could not be made to read it so (the server refused the pinned setting): "
            f"SET GLOBAL binlog_checksum='{setting}' until the tail is past {file}; the lake keeps nothing past it")
