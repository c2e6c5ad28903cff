"""``copy_stream``: the values of a binary COPY, whatever the messages its bytes come in; bytes out of the format
refused in one line, never read as values."""
from __future__ import annotations

import queue
import threading

import pytest

from airflow_provider_dblog.source.postgres.copy_stream import SIGNATURE, CopyFormatError, _Values

VALUES = [b"abc", b"", b"x" * 300, b"\x00\x01\xff\xff", b"\xff\xff"]


def _row(value: bytes) -> bytes:
    return b"\x00\x01" + len(value).to_bytes(4, "big") + value


def _copy(values, extension: bytes = b"") -> bytes:
    return SIGNATURE + bytes(4) + len(extension).to_bytes(4, "big") + extension + b"".join(map(_row, values)) + \
        b"\xff\xff"


def _read(messages, batch_rows: int = 2) -> list[bytes]:
    out: queue.Queue = queue.Queue()
    values = _Values(out, batch_rows, threading.Event())
    for message in messages:
        values.write(message)
    values.finish()
    got, sizes = [], []
    while (batch := out.get()) is not None:
        got += batch
        sizes.append(len(batch))
    assert all(size == batch_rows for size in sizes[:-1])
    return got


@pytest.mark.parametrize("cut", [1, 2, 5, 7, 19, 64, 10_000])
def test_values_whatever_the_messages(cut):
    stream = _copy(VALUES, b"EXT")
    assert _read([stream[i:i + cut] for i in range(0, len(stream), cut)]) == VALUES


def test_a_row_per_message_as_the_server_sends_them():
    """The header with the first row, a row per message, the trailer alone."""
    header = SIGNATURE + bytes(8)
    assert _read([header + _row(VALUES[0]), *map(_row, VALUES[1:]), b"\xff\xff"], batch_rows=3) == VALUES
    assert _read([header + b"\xff\xff"]) == []


@pytest.mark.parametrize("stream,problem", [
    (b"COPY\n" + bytes(30), "signature"),
    (SIGNATURE + bytes(8) + b"\x00\x02" + bytes(12), "2 fields"),
    (SIGNATURE + bytes(8) + b"\x00\x01\xff\xff\xff\xff", "NULL"),
    (SIGNATURE + bytes(8) + _row(b"abc")[:-1], "inside a row"),
    (SIGNATURE + bytes(8) + _row(b"abc"), "without its trailer"),
    (_copy([b"a"]) + b"\x00", "after the trailer"),
])
def test_bytes_out_of_the_format_are_refused(stream, problem):
    with pytest.raises(CopyFormatError, match=problem):
        _read([stream])


class _ServerThatWaitsUntilCancelled:
    """A stand-in for a psycopg2 connection (not a database): its COPY sends one batch of rows, then waits for
    the server's next row as a long peek does, until ``cancel()``."""

    def __init__(self):
        self.cancelled = threading.Event()

    def cursor(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def copy_expert(self, statement, file):
        file.write(SIGNATURE + bytes(8) + _row(b"first"))
        file.write(_row(b"second"))
        if not self.cancelled.wait(30):
            raise AssertionError("never cancelled")
        raise RuntimeError("canceling statement due to user request")

    def cancel(self):
        self.cancelled.set()


def test_a_reader_that_stops_while_the_server_is_still_busy_cancels_the_copy():
    from airflow_provider_dblog.source.postgres.copy_stream import copied_values

    conn = _ServerThatWaitsUntilCancelled()
    batches = copied_values(conn, "SELECT 1", 2)
    assert next(batches) == [b"first", b"second"]
    batches.close()
    assert conn.cancelled.is_set()
    assert not [t for t in threading.enumerate() if t.name == "dblog-slot-copy"]
