"""The generated pgoutput tuple decoders (source/postgres/row_decoder.py) against the generic path they replace:
``pgoutput.decode_tuple`` then ``values.converter`` per column, on every conversion test_pg_values checks, on
random rows (NULLs and unchanged TOASTed values anywhere), and their refusals; with the rate of both."""
from __future__ import annotations

import math
import re
import struct
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.postgres import values as V
from airflow_provider_dblog.source.postgres.pgoutput import UNCHANGED_TOAST, PgOutputError, decode_tuple
from airflow_provider_dblog.source.postgres.row_decoder import compile_tuple_decoder, decode_row_message, key_image
from tests.support.pg_typing import typed_values
from tests.unit.test_pg_values import CONVERSIONS, REFUSALS
from tests.unit.test_pgoutput import tuple_data


def meta_of(types) -> TableMeta:
    columns = tuple(Column(f"c{i}", "t", "t", True, type_oid=oid, typmod=typmod) for i, (oid, typmod) in enumerate(types))
    return TableMeta("public", "t", columns, ("c0",), "primary")


def generic(meta: TableMeta, buf: bytes, p: int) -> tuple[dict, int]:
    """What the stream did before: the wire decoder, then each column's converter (``tests.support.pg_typing``)."""
    raw, end = decode_tuple(buf, p)
    return dict(zip(meta.column_names, typed_values([(c.type_oid, c.typmod) for c in meta.columns], raw))), end


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b and type(a) is type(b)


def test_every_conversion_in_one_row():
    meta = meta_of([(oid, typmod) for oid, typmod, _, _ in CONVERSIONS])
    buf = b"xyz" + tuple_data(*[text for _, _, text, _ in CONVERSIONS]) + b"tail"
    image, end, toast = compile_tuple_decoder(meta)(buf, 3)
    assert buf[end:] == b"tail" and toast is False
    for (oid, typmod, text, expected), (name, value) in zip(CONVERSIONS, image.items()):
        assert same(value, expected), (oid, typmod, text, value)
    assert (image, end) == generic(meta, buf, 3)


ROW_TYPES = [(oid, typmod) for oid, typmod, _, _ in CONVERSIONS]
TEXTS = {(oid, typmod): [text for o, t, text, _ in CONVERSIONS if (o, t) == (oid, typmod)]
         for oid, typmod in ROW_TYPES}


@given(st.lists(st.sampled_from(ROW_TYPES), min_size=1, max_size=20).flatmap(
    lambda types: st.tuples(st.just(types), st.tuples(*[
        st.one_of(st.none(), st.just(UNCHANGED_TOAST), st.sampled_from(TEXTS[t])) for t in types]))))
def test_random_rows_decode_as_the_generic_path(case):
    types, row = case
    meta = meta_of(types)
    buf = tuple_data(*row)
    image, end, toast = compile_tuple_decoder(meta)(buf, 0)
    expected, expected_end = generic(meta, buf, 0)
    assert end == expected_end == len(buf)
    assert list(image) == list(expected) and all(same(image[k], expected[k]) for k in image)
    assert toast == any(v is UNCHANGED_TOAST for v in row)


def test_old_key_image_keeps_the_sent_columns():
    meta = meta_of([(V.INT8, -1), (V.TEXT, -1), (V.INT4, -1)])
    image, _, _ = compile_tuple_decoder(meta)(tuple_data("7", None, "3"), 0)
    assert key_image(image) == {"c0": 7, "c2": 3}


@pytest.mark.parametrize("oid, typmod, text", REFUSALS)
def test_values_without_a_lake_value_are_refused(oid, typmod, text):
    with pytest.raises(V.UnrepresentableValue):
        compile_tuple_decoder(meta_of([(oid, typmod)]))(tuple_data(text), 0)


@pytest.mark.parametrize("buf, says", [
    (tuple_data("1", "2"), "has 2 columns, its Relation 1"),
    (struct.pack("!H", 1) + b"b" + struct.pack("!i", 1) + b"\x01", "binary ('b'"),
    (struct.pack("!H", 1) + b"x", "unexpected tuple column kind 'x'"),
])
def test_refusals_name_the_table(buf, says):
    with pytest.raises(PgOutputError, match="public.t") as raised:
        compile_tuple_decoder(meta_of([(V.INT8, -1)]))(buf, 0)
    assert says in str(raised.value)


def test_rate_against_the_generic_path():
    """Benchmark-like: prints both rates on 100k rows of 9 columns (no timing assertion)."""
    types = [(V.INT8, -1), (V.TEXT, -1), (V.TIMESTAMPTZ, -1), (V.NUMERIC, ((15 << 16) | 2) + 4), (V.BOOL, -1),
             (V.INT4, -1), (V.BYTEA, -1), (V.UUID, -1), (V.FLOAT8, -1)]
    meta = meta_of(types)
    row = ["0", "customer name 42", "2024-01-02 03:04:05.123456+00", "12345.67", "t", None, "\\x0102ff",
           "550e8400-e29b-41d4-a716-446655440000", "3.14159"]
    rows = []
    for i in range(100_000):
        row[0] = str(i)
        rows.append(tuple_data(*row))
    decoder, rates = compile_tuple_decoder(meta), {}
    for name, run in (("generated", lambda buf: decoder(buf, 0)), ("generic", lambda buf: generic(meta, buf, 0))):
        started = time.process_time()
        last = [run(buf) for buf in rows][-1]
        rates[name] = len(rows) / (time.process_time() - started)
        assert last[0]["c0"] == 99_999
    print(f"\npgoutput tuples to typed images: generated {rates['generated']:,.0f}/s CPU, "
          f"generic {rates['generic']:,.0f}/s ({rates['generated'] / rates['generic']:.1f}x)")


# -- whole Insert / Update / Delete messages (the stream's hot path) -------------------------------------------
OID = struct.pack("!I", 16391)
ROW_META = meta_of([(V.INT8, -1), (V.TEXT, -1), (V.INT4, -1)])


@pytest.mark.parametrize("message, expected", [
    (b"I" + OID + b"N" + tuple_data("1", "a", None), ({"c0": 1, "c1": "a", "c2": None}, None, None, False)),
    (b"U" + OID + b"N" + tuple_data("1", "b", "2"), ({"c0": 1, "c1": "b", "c2": 2}, None, None, False)),
    (b"U" + OID + b"K" + tuple_data("1", None, None) + b"N" + tuple_data("5", "b", "2"),
     ({"c0": 5, "c1": "b", "c2": 2}, {"c0": 1}, "K", False)),
    (b"U" + OID + b"O" + tuple_data("1", "a", None) + b"N" + tuple_data("1", UNCHANGED_TOAST, "2"),
     ({"c0": 1, "c1": UNCHANGED_TOAST, "c2": 2}, {"c0": 1, "c1": "a", "c2": None}, "O", True)),
    (b"D" + OID + b"K" + tuple_data("1", None, None), (None, {"c0": 1}, "K", False)),
    (b"D" + OID + b"O" + tuple_data("1", "a", "3"), (None, {"c0": 1, "c1": "a", "c2": 3}, "O", False)),
])
def test_row_messages(message, expected):
    assert decode_row_message(message, compile_tuple_decoder(ROW_META)) == expected


@pytest.mark.parametrize("message, says", [
    (b"I" + OID + b"K" + tuple_data("1", None, None), "Insert: expected 'N'"),
    (b"D" + OID + b"N" + tuple_data("1", "a", "3"), "Delete: expected 'K' or 'O'"),
    (b"U" + OID + b"K" + tuple_data("1", None, None) + b"X" + tuple_data("1", "a", "3"), "Update: expected 'N'"),
    (b"I" + OID + b"N" + tuple_data("1", "a", "3") + b"!", "1 trailing bytes"),
    (b"I" + OID + b"N" + tuple_data("1", "a", "3")[:-2], "truncated or malformed pgoutput message 'I'"),
    (b"D" + OID, "truncated or malformed pgoutput message 'D'"),
])
def test_row_message_refusals(message, says):
    with pytest.raises(PgOutputError, match=re.escape(says)):
        decode_row_message(message, compile_tuple_decoder(ROW_META))
