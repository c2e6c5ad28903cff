"""Type mapping and value conversions, including the MySQL-only paths MariaDB never takes here."""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.tables import Column
from airflow_provider_dblog.source.mysql.connection import binlog_status_sql
from airflow_provider_dblog.source.mysql.types import arrow_type, binlog_converter, enum_labels, quote_labels
from airflow_provider_dblog.core.errors import DblogError


def col(data_type, column_type=None, **kw):
    return Column("c", data_type, column_type or data_type, **kw)


@pytest.mark.parametrize("version, sql", [
    ("8.4.3", "SHOW BINARY LOG STATUS"), ("8.2.0", "SHOW BINARY LOG STATUS"), ("8.0.36", "SHOW MASTER STATUS"),
    ("5.7.44-log", "SHOW MASTER STATUS"), ("10.11.19-MariaDB-0+deb12u1-log", "SHOW MASTER STATUS"),
    ("11.8.2-MariaDB", "SHOW MASTER STATUS")])
def test_binlog_status_statement_per_server(version, sql):
    assert binlog_status_sql(version) == sql


@pytest.mark.parametrize("column, expected", [
    (col("bigint", "bigint(20) unsigned"), pa.decimal128(20, 0)),
    (col("bigint", "bigint(20)"), pa.int64()),
    (col("int", "int(10) unsigned"), pa.int64()),
    (col("tinyint", "tinyint(3) unsigned"), pa.int16()),
    (col("decimal", "decimal(30,10)", precision=30, scale=10), pa.decimal128(30, 10)),
    (col("decimal", "decimal(65,2)", precision=65, scale=2), pa.string()),
    (col("datetime", "datetime(6)"), pa.timestamp("us")),
    (col("timestamp", "timestamp(3)"), pa.timestamp("us", tz="UTC")),
    (col("json", "longtext"), pa.string()),
    (col("blob"), pa.binary()),
    (col("varbinary", "varbinary(10)"), pa.binary()),
    (col("time", "time(3)"), pa.string()),
    (col("year"), pa.int16()),
])
def test_arrow_types_keep_meaning(column, expected):
    assert arrow_type(column) == expected


def convert(column, value):
    fn = binlog_converter(column, arrow_type(column))
    return value if fn is None else fn(value)


def test_binlog_values_become_the_snapshot_representation():
    assert convert(col("bigint", "bigint(20) unsigned"), 2**64 - 1) == Decimal(2**64 - 1)
    assert convert(col("time", "time(3)"), -dt.timedelta(hours=12, seconds=1, microseconds=500_000)) == "-12:00:01.500"
    assert convert(col("time", "time"), dt.timedelta(hours=838, minutes=59, seconds=59)) == "838:59:59"
    assert convert(col("set", "set('y','x','it''s')"), {"x", "y", "it's"}) == "y,x,it's"
    assert convert(col("bit", "bit(5)"), "10101") == b"\x15"
    assert convert(col("bit", "bit(12)"), "000100000001") == b"\x01\x01"
    assert convert(col("timestamp", "timestamp(3)"), dt.datetime(2024, 1, 2)).tzinfo == dt.timezone.utc
    assert convert(col("varchar", "varchar(10)"), b"caf\xc3\xa9") == "café"
    assert convert(col("blob"), "raw") == b"raw"
    assert convert(col("blob"), None) is None
    assert binlog_converter(col("decimal", "decimal(10,2)", precision=10, scale=2), pa.decimal128(10, 2)) is None
    assert binlog_converter(col("int"), pa.int32()) is None


def test_mysql_binary_json_becomes_json_text():
    """MySQL (not MariaDB) decodes JSON columns to dicts with bytes keys."""
    value = {b"k": [1, b"x", {b"n": None}]}
    assert json.loads(convert(col("json", "json"), value)) == {"k": [1, "x", {"n": None}]}
    assert convert(col("json", "longtext"), '{"a": 1}') == '{"a": 1}'  # MariaDB: already text


def test_source_uri_parsing_keeps_the_password_out_of_public_forms():
    cfg = SourceConfig.parse("mysql://app:p%40ss@db.example:3307/shop")
    assert (cfg.user, cfg.password, cfg.host, cfg.port, cfg.database) == ("app", "p@ss", "db.example", 3307, "shop")
    assert "p@ss" not in cfg.public_uri and "p@ss" not in repr(cfg)
    with pytest.raises(DblogError, match="expected mysql://"):
        SourceConfig.parse("mysql://hostonly")
    with pytest.raises(DblogError, match="the host is not a name or an address") as refused:
        SourceConfig.parse("postgresql://app:Secr3tPW@[::1:5432/db")  # before: "ValueError: Invalid IPv6 URL"
    assert "Secr3tPW" not in str(refused.value)


def test_every_character_set_the_decoders_take_has_a_python_codec():
    """``rows._text_expression`` takes ``PYTHON_CODECS`` as the authority: a name Python does not know would fail
    every decoder of such a column."""
    import codecs

    from airflow_provider_dblog.source.mysql.types import PYTHON_CODECS

    for charset, codec in PYTHON_CODECS.items():
        if codec is not None:
            assert codecs.lookup(codec), charset
    assert PYTHON_CODECS["utf16"] == PYTHON_CODECS["ucs2"] == "utf-16-be" and PYTHON_CODECS["utf32"] == "utf-32-be"


def test_enum_labels_read_column_type_as_the_server_quotes_it():
    """As MariaDB 10.11's information_schema.COLUMNS.COLUMN_TYPE shows them (read from a server)."""
    shown = "enum('x y','it''s','back\\\\slash','com,ma','',' lead','ü','n\\nl','nul\\0x','t\tb')"
    assert enum_labels(col("enum", shown)) == ["x y", "it's", "back\\slash", "com,ma", "", " lead", "ü", "n\nl",
                                               "nul\0x", "t\tb"]


@given(st.lists(st.text(), max_size=6))
def test_quote_labels_round_trips_through_enum_labels(labels):
    assert enum_labels(col("enum", f"enum({quote_labels(labels)})")) == labels
    assert enum_labels(col("set", f"set({quote_labels(labels)})")) == labels
