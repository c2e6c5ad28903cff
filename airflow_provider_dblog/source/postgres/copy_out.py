"""``COPY ... TO STDOUT`` read as it arrives: a thread copies into a pipe, the caller reads the other end.

COPY is PostgreSQL's fastest way out: one message per row and no per-value protocol, where a cursor's fetch
builds a Python tuple per row (and a ``bytea`` value comes as hex text). On a thread, the server's output,
the transfer and the caller's parse overlap (psycopg2 waits for the server without the GIL).

``binary_values`` splits a one-column ``FORMAT binary`` COPY into its values (the slot's messages:
``stream.SlotReader``); ``reader`` parses a chunk's CSV COPY with Arrow.
"""
from __future__ import annotations

import os
import struct
import threading
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from psycopg2.errors import QueryCanceled

from airflow_provider_dblog.core.errors import DblogError

BLOCK_BYTES = 1 << 20  # the pipe's buffer, and what a reader takes from it at a time
SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = struct.Struct(">4sI")  # flags, then the length of the header's extension
_TUPLE = struct.Struct(">hi")  # a row's field count, then its first field's length
_TRAILER = b"\xff\xff"  # a field count of -1


@contextmanager
def copy_out(conn, statement: str) -> Iterator[BinaryIO]:
    """The output of ``statement`` (a ``COPY ... TO STDOUT``) on ``conn``, as a file a thread is writing. A
    failed COPY raises its own error when the block ends, before any error of the reader (which may only have
    seen the output end early). A reader that stops early or fails stops the COPY (its query cancelled, its
    writes refused) and waits for the thread: ``conn`` may be left inside the COPY, to be closed or rolled back
    by the caller."""
    read_end, write_end = os.pipe()
    failed: list[BaseException] = []

    def copy() -> None:
        sink = os.fdopen(write_end, "wb", buffering=BLOCK_BYTES)
        try:
            with conn.cursor() as cur:
                cur.copy_expert(statement, sink, size=BLOCK_BYTES)
        except BaseException as exc:  # noqa: BLE001 - raised on the reader's thread
            failed.append(exc)  # before the reader sees the output end
        finally:
            try:
                sink.close()
            except BrokenPipeError:  # the reader stopped
                pass

    thread = threading.Thread(target=copy, name="dblog-copy", daemon=True)
    thread.start()
    source = os.fdopen(read_end, "rb", buffering=BLOCK_BYTES)  # a read waits for all it asks (or the end)
    try:
        yield source
    except BaseException:
        source.close()  # a COPY still writing stops (BrokenPipeError)
        cancelled = thread.is_alive() and not failed
        if cancelled:
            conn.cancel()  # one still waiting for the server's first row stops too
        thread.join()
        if failed and not isinstance(failed[0], BrokenPipeError) and not (
                cancelled and isinstance(failed[0], QueryCanceled)):
            raise failed[0] from None
        raise
    source.close()
    thread.join()
    if failed:
        raise failed[0]


def binary_values(source: BinaryIO, what: str) -> Iterator[list[bytes]]:
    """The values of a one-column, never-null ``FORMAT binary`` COPY read from ``source``, as lists of about
    ``BLOCK_BYTES``; one line naming ``what`` when the output is not that (or ends before its trailer)."""
    pending = b""
    header = None  # the header's length, once read
    while True:
        block = source.read(BLOCK_BYTES)
        if not block:
            break
        data = pending + block if pending else block
        pos = 0
        if header is None:
            if len(data) < len(SIGNATURE) + _HEADER.size:
                pending = data
                continue
            if not data.startswith(SIGNATURE):
                raise DblogError(f"{what}: COPY's output is not in its binary format")
            header = len(SIGNATURE) + _HEADER.size + _HEADER.unpack_from(data, len(SIGNATURE))[1]
            if len(data) < header:
                pending, header = data, None
                continue
            pos = header
        values, pos = _split(data, pos, what)
        pending = data[pos:]
        if values:
            yield values
    if pending != _TRAILER:
        raise DblogError(f"{what}: COPY's output ended {'before its header' if header is None else 'mid-row'}: "
                         f"read it again")


def _split(data: bytes, pos: int, what: str) -> tuple[list[bytes], int]:
    """The whole rows of ``data`` from ``pos`` (each one field), and where the first incomplete one starts."""
    values: list[bytes] = []
    append, unpack, end_of_data = values.append, _TUPLE.unpack_from, len(data) - _TUPLE.size
    while pos <= end_of_data:
        fields, length = unpack(data, pos)
        if fields != 1 or length < 0:
            if fields == -1:  # the trailer: nothing may follow it
                if pos + 2 != len(data):
                    raise DblogError(f"{what}: COPY's output goes on after its trailer")
                break
            raise DblogError(f"{what}: a COPY row of {fields} fields, or a null, where one value was expected")
        end = pos + 6 + length
        if end > len(data):
            break
        append(data[pos + 6:end])
        pos = end
    return values, pos
