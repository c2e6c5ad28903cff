"""A binary COPY's framing split into its values (``source.postgres.copy_out.binary_values``): every value once,
in order, wherever the reads cut the stream, and one line for a stream that is not one value per row or is cut
short. The real server's output: tests/integration/test_postgres_stream.py, test_reconnect.py."""
from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source.postgres.copy_out import SIGNATURE, binary_values


def copy_bytes(values: list[bytes], extension: bytes = b"") -> bytes:
    """What ``COPY (SELECT data ...) TO STDOUT WITH (FORMAT binary)`` sends for ``values``."""
    rows = b"".join(struct.pack(">hi", 1, len(v)) + v for v in values)
    return SIGNATURE + struct.pack(">II", 0, len(extension)) + extension + rows + b"\xff\xff"


class Trickle(io.RawIOBase):
    """A source whose reads return at most ``step`` bytes (a pipe gives what has arrived)."""

    def __init__(self, data: bytes, step: int):
        self.data, self.pos, self.step = data, 0, step

    def read(self, n: int = -1) -> bytes:
        piece = self.data[self.pos:self.pos + min(n if n >= 0 else len(self.data), self.step)]
        self.pos += len(piece)
        return piece


def read_all(source) -> list[bytes]:
    return [value for block in binary_values(source, "reading replication slot s") for value in block]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(1, 50), st.binary(max_size=8))
def test_every_value_comes_once_in_order_wherever_the_reads_cut(values, step, extension):
    assert read_all(Trickle(copy_bytes(values, extension), step)) == values


def test_a_large_stream_comes_in_blocks_of_about_a_megabyte():
    values = [bytes([i % 251]) * 300 for i in range(10_000)]  # ≈3 MB
    blocks = list(binary_values(io.BytesIO(copy_bytes(values)), "slot"))
    assert [v for b in blocks for v in b] == values
    assert 3 <= len(blocks) <= 4


@pytest.mark.parametrize("data, says", [
    (b"", "ended before its header"),
    (SIGNATURE[:5], "ended before its header"),
    (b"COPY 1\n" + b"\x00" * 20, "not in its binary format"),
    (copy_bytes([b"abc", b"de"])[:-4], "ended mid-row"),  # cut inside the last value
    (copy_bytes([b"abc"])[:-2], "ended mid-row"),  # no trailer
    (copy_bytes([b"abc"]) + b"\x00\x01\x00\x00", "goes on after its trailer"),
    (SIGNATURE + struct.pack(">II", 0, 0) + struct.pack(">hi", 2, 1) + b"a", "2 fields"),
    (SIGNATURE + struct.pack(">II", 0, 0) + struct.pack(">hi", 1, -1) + b"\xff\xff", "a null"),
])
def test_a_stream_that_is_not_one_value_per_row_or_is_cut_fails_in_one_line(data, says):
    with pytest.raises(DblogError, match=says) as raised:
        read_all(Trickle(data, 3))
    assert "\n" not in str(raised.value) and "reading replication slot s" in str(raised.value)
