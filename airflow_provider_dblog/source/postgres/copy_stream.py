"""The rows of one query as raw bytes, streamed by ``COPY (query) TO STDOUT (FORMAT binary)`` on a thread of their own.

A slot's messages are ``bytea`` values. Read through a cursor, the server prints each one in hex and psycopg2
parses the hex back, 5,000 rows per round trip, while the reader waits. ``COPY ... (FORMAT binary)`` sends each
value's bytes as they are, and psycopg2 hands each COPY message to a file's ``write`` with the GIL released while
it waits for the next one: a thread runs the COPY and passes the values on in batches through a bounded queue, so
the server's decoding and the transfer go on while the reader decodes the batch before.

The binary COPY format: a 19-byte header (signature, flags, header extension length) and its extension, then per
row a field count (Int16, 1 here) and per field a length (Int32, -1 for NULL) and the bytes, then a trailer (Int16
-1). The server sends a row per message (the header with the first, the trailer alone), which is read without
copying it twice; anything else is read from a carried buffer.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterator

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = len(SIGNATURE) + 8  # the signature, flags (Int32), the header extension's length (Int32)
_ONE_FIELD = b"\x00\x01"
_TRAILER = b"\xff\xff"
QUEUED_BATCHES = 4  # batches the thread may read ahead of the reader


class CopyFormatError(Exception):
    """Bytes out of the binary COPY format (or a NULL value): the server sent something this reader does not read."""


class _Stopped(Exception):
    """The reader stopped reading: the COPY is abandoned (its connection is closed after it)."""


class _Values:
    """The file psycopg2's ``copy_expert`` writes to: each row's value, in batches of ``batch_rows`` put on ``out``."""

    def __init__(self, out: queue.Queue, batch_rows: int, stop: threading.Event):
        self.out, self.batch_rows, self.stop = out, batch_rows, stop
        self.batch: list[bytes] = []
        self.carry = b""
        self.header = True  # the header is still to be read
        self.ended = False  # the trailer was read

    def write(self, data: bytes) -> int:
        if self.stop.is_set():
            raise _Stopped
        if (not self.carry and not self.header and data[:2] == _ONE_FIELD
                and len(data) == 6 + int.from_bytes(data[2:6], "big")):
            self.batch.append(data[6:])  # one row in one message: the usual case
        else:
            self._read(self.carry + data)
        if len(self.batch) >= self.batch_rows:
            self._put(self.batch)
            self.batch = []
        return len(data)

    def _read(self, data: bytes) -> None:
        at = 0
        if self.header:
            if len(data) < _HEADER:
                self.carry = data
                return
            if data[:len(SIGNATURE)] != SIGNATURE:
                raise CopyFormatError("not a binary COPY stream (its signature is missing)")
            extension = _HEADER + int.from_bytes(data[_HEADER - 4:_HEADER], "big")
            if len(data) < extension:
                self.carry = data
                return
            self.header, at = False, extension
        while at + 2 <= len(data):
            if data[at:at + 2] == _TRAILER:
                self.ended, at = True, at + 2
                break
            if data[at:at + 2] != _ONE_FIELD:
                raise CopyFormatError(f"a row of {int.from_bytes(data[at:at + 2], 'big', signed=True)} fields, "
                                      f"not 1")
            if at + 6 > len(data):
                break
            length = int.from_bytes(data[at + 2:at + 6], "big", signed=True)
            if length < 0:
                raise CopyFormatError("a NULL value")
            if at + 6 + length > len(data):
                break
            self.batch.append(data[at + 6:at + 6 + length])
            at += 6 + length
        self.carry = data[at:]
        if self.ended and self.carry:
            raise CopyFormatError(f"{len(self.carry)} bytes after the trailer")

    def _put(self, item) -> None:
        while True:  # wait for room, unless the reader stops meanwhile
            try:
                self.out.put(item, timeout=0.2)
                return
            except queue.Full:
                if self.stop.is_set():
                    raise _Stopped from None

    def finish(self) -> None:
        if self.carry or not self.ended:
            raise CopyFormatError("the COPY stream ended inside a row" if self.carry else
                                  "the COPY stream ended without its trailer")
        if self.batch:
            self._put(self.batch)
        self._put(None)


def copied_values(conn, statement: str, batch_rows: int) -> Iterator[list[bytes]]:
    """The values of ``statement``'s rows (one ``bytea`` column, never NULL) as lists of up to ``batch_rows``,
    read by ``COPY (statement) TO STDOUT (FORMAT binary)`` on ``conn`` in a thread. The COPY's error (a
    ``psycopg2.Error``) is raised here, where the reader is; a reader that stops early stops the thread, and then
    ``conn`` is in the middle of a COPY: close it."""
    out: queue.Queue = queue.Queue(QUEUED_BATCHES)
    stop = threading.Event()
    values = _Values(out, batch_rows, stop)

    def run() -> None:
        try:
            with conn.cursor() as cur:
                cur.copy_expert(f"COPY ({statement}) TO STDOUT (FORMAT binary)", values)
            values.finish()
        except _Stopped:
            pass
        except BaseException as exc:  # the reader raises it
            try:
                values._put(exc)
            except _Stopped:
                pass

    thread = threading.Thread(target=run, name="dblog-slot-copy", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()  # the thread stops at its next row, or at once when it waits for room
        thread.join(0.5)
        if thread.is_alive():  # it waits for the server (a long peek still decoding): the query is cancelled
            conn.cancel()
            thread.join()
