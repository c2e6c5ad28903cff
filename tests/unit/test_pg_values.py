"""PostgreSQL text values -> typed values and Arrow types, by type OID (source/postgres/values.py)."""
from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_provider_dblog.source.postgres import values as V
from airflow_provider_dblog.source.postgres.pgoutput import UNCHANGED_TOAST
from tests.support.pg_typing import typed_values


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


UTC = dt.timezone.utc


CONVERSIONS = [  # (type OID, typmod, pgoutput text, the lake's value): also tests/unit/test_pg_row_decoder.py
    (V.INT2, -1, "-32768", -32768),
    (V.INT4, -1, "2147483647", 2147483647),
    (V.INT8, -1, "-9223372036854775808", -9223372036854775808),
    (V.OID, -1, "4294967295", 4294967295),
    (V.NUMERIC, numeric_typmod(20, 6), "-12345678901234.567890", Decimal("-12345678901234.567890")),
    (V.NUMERIC, numeric_typmod(38, 0), "9" * 38, Decimal("9" * 38)),
    (V.NUMERIC, -1, "3.141592653589793238462643383279502884197", "3.141592653589793238462643383279502884197"),
    (V.NUMERIC, -1, "NaN", "NaN"),
    (V.NUMERIC, numeric_typmod(50, 10), "1.0000000000", "1.0000000000"),
    (V.FLOAT4, -1, "1.1", 1.1),
    (V.FLOAT8, -1, "0.1", 0.1),
    (V.FLOAT8, -1, "-Infinity", -math.inf),
    (V.BOOL, -1, "t", True),
    (V.BOOL, -1, "f", False),
    (V.TEXT, -1, "héllo", "héllo"),
    (V.BPCHAR, numeric_typmod(0, 5), "ab   ", "ab   "),
    (V.BYTEA, -1, "\\x00ff10", b"\x00\xff\x10"),
    (V.BYTEA, -1, "\\x", b""),
    (V.BYTEA, -1, "a\\\\b\\000\\377", b"a\\b\x00\xff"),  # bytea_output = escape
    (V.DATE, -1, "2024-02-29", dt.date(2024, 2, 29)),
    (V.DATE, -1, "0001-01-01", dt.date(1, 1, 1)),
    (V.TIMESTAMP, -1, "2024-01-02 03:04:05.000001", dt.datetime(2024, 1, 2, 3, 4, 5, 1)),
    (V.TIMESTAMP, -1, "9999-12-31 23:59:59.999999", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    (V.TIMESTAMPTZ, -1, "2024-01-02 03:04:05.5+00", dt.datetime(2024, 1, 2, 3, 4, 5, 500000, UTC)),
    (V.TIMESTAMPTZ, -1, "2024-01-02 03:04:05+05:30", dt.datetime(2024, 1, 1, 21, 34, 5, tzinfo=UTC)),
    (V.TIMESTAMPTZ, -1, "1900-01-01 00:00:00+00:19:32", dt.datetime(1899, 12, 31, 23, 40, 28, tzinfo=UTC)),
    (V.TIME, -1, "23:59:59.999999", "23:59:59.999999"),  # text: Delta Lake has no TIME type
    (V.TIME, -1, "24:00:00", "24:00:00"),
    (V.UUID, -1, "550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000"),
    (V.JSONB, -1, '{"a": 1}', '{"a": 1}'),
    (V.INTERVAL, -1, "P1Y2M3DT4H5M6.789S", "P1Y2M3DT4H5M6.789S"),
    (1007, -1, "{1,2,NULL}", "{1,2,NULL}"),  # int4[]: text for now
    (16385, -1, "happy", "happy"),  # an enum (a user type OID)
]


@pytest.mark.parametrize("oid, typmod, text, expected", CONVERSIONS)
def test_converter(oid, typmod, text, expected):
    value = V.converter(oid, typmod)(text)
    assert value == expected and type(value) is type(expected)
    if isinstance(expected, dt.datetime) and expected.tzinfo is not None:
        assert value.tzinfo is UTC
    # and it lands in its Arrow type unchanged
    arrow = V.arrow_type(oid, typmod)
    assert pa.array([value], arrow).equals(pa.array([expected], arrow))


def test_float4_keeps_its_single_precision_value():
    value = V.converter(V.FLOAT4)("3.4028235e+38")
    assert pa.array([value], pa.float32()).to_pylist()[0] == pa.array([3.4028235e38], pa.float32()).to_pylist()[0]
    assert math.isnan(V.converter(V.FLOAT4)("NaN"))


REFUSALS = [  # values with no lake value: (type OID, typmod, text)
    (V.DATE, -1, "infinity"),
    (V.DATE, -1, "0044-03-15 BC"),
    (V.TIMESTAMP, -1, "-infinity"),
    (V.TIMESTAMP, -1, "10000-01-01 00:00:00"),
    (V.TIMESTAMPTZ, -1, "infinity"),
    (V.TIMESTAMPTZ, -1, "2024-01-02 03:04:05"),  # no offset: not ISO output of timestamptz
    (V.NUMERIC, numeric_typmod(10, 2), "NaN"),
]


@pytest.mark.parametrize("oid, typmod, text", REFUSALS)
def test_values_without_a_lake_twin_are_refused(oid, typmod, text):
    with pytest.raises(V.UnrepresentableValue):
        V.converter(oid, typmod)(text)


def test_arrow_types():
    assert V.arrow_type(V.NUMERIC, numeric_typmod(12, 2)) == pa.decimal128(12, 2)
    assert V.arrow_type(V.NUMERIC, numeric_typmod(38, 38)) == pa.decimal128(38, 38)
    assert V.arrow_type(V.NUMERIC, numeric_typmod(39, 2)) == pa.string()  # beyond decimal128
    assert V.arrow_type(V.NUMERIC, -1) == pa.string()  # unbounded: no fixed scale
    assert V.arrow_type(V.NUMERIC, numeric_typmod(5, -2)) == pa.string()  # PostgreSQL 15's negative scale
    assert V.arrow_type(V.NUMERIC, numeric_typmod(2, 5)) == pa.string()  # scale above precision
    assert V.numeric_precision_scale(numeric_typmod(5, -2)) == (5, -2)
    assert V.numeric_precision_scale(-1) is None
    assert V.arrow_type(V.TIMESTAMPTZ) == pa.timestamp("us", tz="UTC")
    assert V.arrow_type(V.TIMESTAMP) == pa.timestamp("us")
    assert V.arrow_type(V.TIME) == pa.string()
    assert V.arrow_type(V.DATE) == pa.date32()
    assert V.arrow_type(V.BYTEA) == pa.binary()
    for text_oid in (V.TEXT, V.VARCHAR, V.UUID, V.JSON, V.JSONB, V.INET, V.CIDR, V.MONEY, V.INTERVAL, V.TIMETZ,
                     1007, 16385):
        assert V.arrow_type(text_oid) == pa.string()


def test_null_and_unchanged_toast_pass_through_and_a_short_tuple_is_refused():
    types = [(V.INT8, -1), (V.NUMERIC, numeric_typmod(10, 2)), (V.TEXT, -1), (V.TIMESTAMPTZ, -1)]
    row = typed_values(types, ("7", "12.50", UNCHANGED_TOAST, None))
    assert row == (7, Decimal("12.50"), UNCHANGED_TOAST, None)
    assert row[2] is UNCHANGED_TOAST and row[3] is None
    with pytest.raises(ValueError, match="out of date"):
        typed_values(types, ("7",))


def test_session_settings_as_libpq_options():
    options = V.libpq_options()
    assert "-c DateStyle=ISO" in options and "-c TimeZone=UTC" in options and "-c bytea_output=hex" in options
