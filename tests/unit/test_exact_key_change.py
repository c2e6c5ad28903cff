"""Whether an update changes the key is decided on the stored bits, as the lake's merge matches keys: a float key
from -0 to 0 is a key change (a delete of the old key and an insert), though -0.0 == 0.0 in Python, Arrow and SQL;
a NaN key updated to the same NaN bits is not, though NaN != NaN. The per-row path (``row_change``) and the
PostgreSQL block decoder (REPLICA IDENTITY FULL's old rows) must agree; the MySQL block decoder is held to the
per-row path on a real binlog in ``tests/integration/test_float_key_changes.py``."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_dblog.core.events import row_change
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.postgres import values as V
from airflow_provider_dblog.source.postgres.block_decoder import decode_block
from tests.unit.test_pg_block_decoder import FIRST, message, one_by_one

POS = SourcePosition.at("b.000001", 500, 3)
NAN_BITS = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF8000000000042]


def from_bits(bits: int) -> float:
    """A new float object each call: a tuple of the same object would compare equal by identity alone."""
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def bits(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0]


FLOATS = st.one_of(st.sampled_from([0x0, 0x8000000000000000, *NAN_BITS, 0x7FF0000000000000]),
                   st.integers(0, 2 ** 64 - 1)).map(from_bits)


@given(old=FLOATS, new=FLOATS, same=st.booleans(), other=st.integers(0, 2))
def test_a_float_key_changes_exactly_when_its_bits_do(old, new, same, other):
    """A composite key (float, int): one update iff both parts keep their bits, else a delete and an insert."""
    if same:
        new = from_bits(bits(old))
    events = row_change("d.t", POS, ("k", "id"), {"k": old, "id": 1, "v": 1}, {"k": new, "id": other, "v": 2})
    if bits(old) == bits(new) and other == 1:
        assert [(e.op, e.key[1]) for e in events] == [("u", 1)]
        assert bits(events[0].key[0]) == bits(new)
    else:
        assert [e.op for e in events] == ["d", "c"]
        assert [bits(e.key[0]) for e in events] == [bits(old), bits(new)]


def test_negative_zero_to_zero_is_a_key_change_and_a_nan_update_is_not():
    """The attack's case named: -0.0 == 0.0 and NaN != NaN, but the lake's keys are bits."""
    assert [e.op for e in row_change("d.t", POS, ("k",), {"k": -0.0}, {"k": 0.0})] == ["d", "c"]
    assert [e.op for e in row_change("d.t", POS, ("k",), {"k": 0.0}, {"k": -0.0})] == ["d", "c"]
    assert [e.op for e in row_change("d.t", POS, ("k",), {"k": float("nan"), "v": 1},
                                     {"k": float("nan"), "v": 2})] == ["u"]
    assert [e.op for e in row_change("d.t", POS, ("k",), {"k": 1}, {"k": 1.0})] == ["d", "c"]  # a type change


@pytest.mark.parametrize("oid", [V.FLOAT8, V.FLOAT4])
@pytest.mark.parametrize("old, new, ops", [("-0", "0", ["d", "c"]), ("0", "-0", ["d", "c"]),
                                           ("NaN", "NaN", ["u"])])
def test_the_postgres_block_decoder_gives_a_float_key_change_to_row_change(oid, old, new, ops):
    """REPLICA IDENTITY FULL: an Update carries the old row and the block compares the keys itself. A bit change
    leaves the block (``row_change`` splits it); the same NaN stays in it, an update."""
    meta = TableMeta("public", "f", (Column("k", "float", "float", False, type_oid=oid, typmod=-1),
                                     Column("v", "integer", "integer", True, type_oid=V.INT4, typmod=-1)),
                     ("k",), "primary")
    msgs = [message("UO", old=[old, "1"], new=[new, "2"])]
    block = decode_block("public.f", meta, msgs, FIRST, [FIRST.with_row(0).encode()], [0])
    events = one_by_one(meta, msgs, [0])
    assert [e.op for e in events] == ops
    assert (block is None) == (ops != ["u"])
    if block is not None:
        assert block.ops.to_pylist() == ops


@given(parts=st.lists(st.one_of(st.none(), FLOATS), max_size=6))
def test_a_float_columns_parts_unpack_to_their_bits_and_a_null_stays_null(parts):
    """``unpacked`` gives back what ``exact_key`` packed, bit for bit; a null part (a key column of a row the lake
    holds with no value) is a null, not a TypeError in the middle of a commit."""
    from airflow_provider_dblog.core.exact import exact_key, unpacked

    back = unpacked([exact_key([v])[0] for v in parts], floating=True)
    assert [None if v is None else bits(v) for v in back] == [None if v is None else bits(v) for v in parts]
