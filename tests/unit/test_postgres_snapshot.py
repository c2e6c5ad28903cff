"""PostgreSQL snapshot pieces that need no server: WAL locations as positions (one codec), postgresql://
URIs, COPY's CSV into the lake's Arrow types, key bounds as SQL, and the startup modes a PostgreSQL source
accepts for now. The same paths against a real server: tests/integration/test_postgres_snapshot.py."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import EPOCH_SPAN, SourcePosition, lsn_position, position_lsn
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.source.postgres.dialect import NO_STREAM, arrow_schema
from airflow_provider_dblog.source.postgres.reader import hex_to_binary, parse_csv
from airflow_provider_dblog.source.postgres.sql import key_text, quote_ident, range_condition, snapshot_sql

LSNS = [0, 1, 0xFFFFFFFF, 0x1_00000000, 0x1_00000001, 0x16B3748, 0xA_FFFFFFFF, 0xF423F_FFFFFFFF]


def test_wal_locations_are_positions_that_sort_in_wal_order():
    positions = [lsn_position(lsn) for lsn in LSNS]
    assert [position_lsn(p) for p in positions] == LSNS
    ordered = sorted(LSNS)
    assert sorted(positions) == [lsn_position(v) for v in ordered]
    encoded = [p.encode() for p in positions]
    assert len({len(e) for e in encoded}) == 1  # fixed width: _pos sorts as text
    assert sorted(encoded) == [lsn_position(v).encode() for v in ordered]
    assert sorted(p.to_version() for p in positions) == [lsn_position(v).to_version() for v in ordered]
    assert max(p.to_version() for p in positions) < 2 ** 63  # a Delta app transaction version
    for p in positions:
        assert SourcePosition.from_dict(p.to_dict()) == p and SourcePosition.from_dict(p.to_dict()).file == p.file
        assert SourcePosition.decode(p.encode(), "lsn") == p and SourcePosition.decode(p.encode(), "lsn").file == p.file
        assert SourcePosition.from_version(p.to_version()) == p.boundary()
        assert p.epoch == 0
    p = lsn_position(0x1_016B3748, row=3)
    assert (p.seq, p.offset, p.row, p.file) == (1, 0x16B3748, 3, "lsn.000001")
    assert str(p) == "1/16B3748#3" and str(p.boundary()) == "1/16B3748"
    assert p.as_snapshot() > lsn_position(0x1_016B3748, row=10**6) > p
    with pytest.raises(ValueError):
        lsn_position(EPOCH_SPAN << 32)
    with pytest.raises(ValueError):
        lsn_position(-1)


def test_postgresql_uris():
    config = SourceConfig.parse("postgresql://app:p%40ss@db.example:6543/shop")
    assert (config.scheme, config.host, config.port, config.user, config.password, config.database) == (
        "postgresql", "db.example", 6543, "app", "p@ss", "shop")
    assert config.public_uri == "postgresql://app@db.example:6543/shop"
    assert SourceConfig.parse(config.public_uri) == config.with_password("")
    assert SourceConfig.parse("postgres://app@db/shop").port == 5432  # the alias, the default port
    assert SourceConfig.parse("mysql://root@db").port == 3306
    with pytest.raises(DblogError, match="names its database"):
        SourceConfig.parse("postgresql://app@db:5432")
    with pytest.raises(DblogError, match="postgresql://USER"):
        SourceConfig.parse("oracle://app@db/x")


def test_startup_modes_without_a_slot_position_are_refused_without_touching_the_server():
    dialect = open_dialect(SourceConfig.parse("postgresql://app:secret@127.0.0.1:1/shop"))  # nothing listens there
    for mode in ("snapshot-only", "initial", "latest"):
        dialect.check_startup(StartupMode.parse(mode))
    for mode in ("timestamp:1767225600000", "position:mysql-bin.000001:4", "gtid:0-1-1"):
        with pytest.raises(DblogError) as exc:
            dialect.check_startup(StartupMode.parse(mode))
        assert str(exc.value).endswith("use initial, latest or snapshot-only"), str(exc.value)
    with pytest.raises(DblogError) as exc:  # a capture planned snapshot-only has no slot: no stream
        dialect.read_changes(lsn_position(1), None, [])
    assert str(exc.value) == f"reading changes: {NO_STREAM}"
    with pytest.raises(DblogError, match="snapshot-only"):
        dialect.check_stream([])
    dialect.close()


def meta(*columns: Column, key=("id",)) -> TableMeta:
    return TableMeta("public", "t", columns, tuple(key), "primary")


def col(name, oid, typmod=-1, nullable=True, column_type=None):
    return Column(name, column_type or str(oid), column_type or str(oid), nullable, type_oid=oid, typmod=typmod)


TYPES = meta(col("id", 20, nullable=False), col("n", 1700, (20 << 16 | 6) + 4), col("t", 25), col("by", 17),
             col("ts", 1114), col("tz", 1184), col("d", 1082), col("b", 16), col("f4", 700), col("tm", 1083),
             col("u", 2950))


def test_copy_csv_into_the_lake_types():
    schema = arrow_schema(TYPES)
    assert [f.type for f in schema] == [pa.int64(), pa.decimal128(20, 6), pa.string(), pa.binary(), pa.timestamp("us"),
                                        pa.timestamp("us", "UTC"), pa.date32(), pa.bool_(), pa.float32(), pa.string(),
                                        pa.string()]
    data = (b'1,-12345678901234.567890,"multi\nline ""q"", comma",\\x00ff0a,2024-01-02 03:04:05.123456,'
            b'2024-03-10 06:59:59.999999+00,2024-02-29,t,1.1,23:59:59.999999,550e8400-e29b-41d4-a716-446655440000\n'
            b'2,,,,,,,,,,\n'
            b'3,0.000001,"",\\x,9999-12-31 23:59:59.999999,1970-01-01 00:00:00+00,0001-01-01,f,NaN,24:00:00,\n')
    rows = parse_csv(data, schema, "public.t").to_pylist()
    assert rows[0] == {"id": 1, "n": Decimal("-12345678901234.567890"), "t": 'multi\nline "q", comma',
                       "by": b"\x00\xff\n", "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
                       "tz": rows[0]["tz"], "d": dt.date(2024, 2, 29), "b": True,
                       "f4": pa.array([1.1], pa.float32()).to_pylist()[0], "tm": "23:59:59.999999",
                       "u": "550e8400-e29b-41d4-a716-446655440000"}
    assert rows[0]["tz"] == dt.datetime(2024, 3, 10, 6, 59, 59, 999999, tzinfo=dt.timezone.utc)
    assert rows[1] == {**{name: None for name in schema.names}, "id": 2}  # an unquoted empty field is NULL
    assert rows[2]["t"] == "" and rows[2]["by"] == b"" and rows[2]["b"] is False  # "" is the empty string
    assert rows[2]["f4"] != rows[2]["f4"] and rows[2]["tm"] == "24:00:00"  # NaN kept; 24:00:00 is text
    assert parse_csv(b"", schema, "public.t").num_rows == 0


@pytest.mark.parametrize("value, column", [(b"infinity", "ts"), (b"0044-03-15 00:00:00 BC", "ts"),
                                           (b"10000-01-01 00:00:00", "ts")])
def test_values_without_a_lake_twin_stop_the_read_in_one_line(value, column):
    schema = arrow_schema(meta(col("id", 20), col("n", 1700, (5 << 16 | 2) + 4), col("ts", 1114)))
    with pytest.raises(DblogError) as exc:
        parse_csv(b"1,1.00," + value + b"\n", schema, "public.t")
    message = str(exc.value)
    assert f"public.t.{column} holds '{value.decode()}'" in message and "\n" not in message
    with pytest.raises(DblogError, match="public.t.n holds 'NaN'"):
        parse_csv(b"1,NaN,2020-01-01 00:00:00\n", schema, "public.t")


def test_bytea_hex_decodes_in_bulk_with_nulls_and_slices():
    array = pa.array(["\\x00ff0A", None, "\\x", "\\x41"])
    assert hex_to_binary(array).to_pylist() == [b"\x00\xff\n", None, b"", b"A"]
    assert hex_to_binary(array.slice(1)).to_pylist() == [None, b"", b"A"]
    assert hex_to_binary(pa.array([None], pa.string())).to_pylist() == [None]
    with pytest.raises(DblogError, match="hex"):
        hex_to_binary(pa.array(["abc"]), "public.t", "by")


def test_key_bounds_are_cast_to_the_column_types_and_compared_by_postgresql():
    composite = meta(col("tenant", 25, column_type="text"), col("at", 1184, column_type="timestamp with time zone"),
                     key=("tenant", "at"))
    at = dt.datetime(2024, 1, 1, 0, 0, 1, 5, tzinfo=dt.timezone.utc)
    where, params = range_condition(composite, ("a", at), ("b%", at))
    assert where == ('("tenant", "at") >= (%s::text, %s::timestamp with time zone) AND "tenant" >= %s::text AND '
                     '("tenant", "at") < (%s::text, %s::timestamp with time zone) AND "tenant" <= %s::text')
    assert params == ["a", "2024-01-01T00:00:01.000005+00:00", "a", "b%", "2024-01-01T00:00:01.000005+00:00", "b%"]
    assert range_condition(composite, None, None) == ("TRUE", [])
    select, params = snapshot_sql(meta(col("id", 20, column_type="bigint"), col('we"ird%', 25)),
                                  ChunkRange(3, (10,), None))
    assert select == 'SELECT "id", "we""ird%%" FROM "public"."t" WHERE "id" >= %s::bigint' and params == ["10"]
    assert quote_ident('a"b') == '"a""b"'
    assert [key_text(v) for v in (True, b"\x01\xab", float("nan"), float("-inf"), 0.1, Decimal("1.50"),
                                  dt.date(2024, 2, 29))] == ["true", "\\x01ab", "NaN", "-Infinity", "0.1", "1.50",
                                                             "2024-02-29"]


def test_an_airflow_postgres_connection_is_a_postgresql_source(monkeypatch):
    """The DAGs read the source through ``DblogHook``: a ``postgres`` connection (its schema field is the
    database) opens the PostgreSQL dialect with the same params as a MySQL one."""
    import json

    monkeypatch.setenv("AIRFLOW_CONN_PG_SOURCE", json.dumps({"conn_type": "postgres", "host": "db", "login": "app",
                                                             "password": "pg-secret", "schema": "shop"}))
    monkeypatch.setenv("AIRFLOW_CONN_PG_NODB", json.dumps({"conn_type": "postgres", "host": "db", "login": "app"}))
    from airflow_provider_dblog.airflow.hooks import DblogHook

    config = DblogHook("pg_source").source_config()
    assert (config.scheme, config.port, config.database, config.password) == ("postgresql", 5432, "shop", "pg-secret")
    assert config.public_uri == "postgresql://app@db:5432/shop"
    assert type(DblogHook("pg_source").get_conn()).__name__ == "PostgresDialect"
    with pytest.raises(DblogError, match="needs its database in the schema field"):
        DblogHook("pg_nodb").source_config()
    # the connection's extra ``publication``: the owner's publication, as the CLI's --publication
    monkeypatch.setenv("AIRFLOW_CONN_PG_OWNED", json.dumps({"conn_type": "postgres", "host": "db", "login": "app",
                                                            "schema": "shop", "extra": {"publication": "owners"}}))
    assert DblogHook("pg_owned").options() == {"publication": "owners", "publication_given": True}
    dialect = DblogHook("pg_owned").get_conn()
    assert (dialect.publication, dialect.given_publication, dialect.slot) == ("owners", True, None)
    assert DblogHook("pg_source").options() == {}


def test_a_column_dropped_and_added_again_is_told_by_its_attnum_and_followed_once():
    from dataclasses import replace

    from airflow_provider_dblog.source.postgres.stream import SlotReader

    planned = TableMeta("public", "t", (Column("id", "integer", "integer", False, type_oid=23, ordinal=1),
                                        Column("v", "integer", "integer", type_oid=23, ordinal=3)), ("id",), "primary")
    assert TableMeta.from_dict(planned.to_dict()) == planned
    old = dict(planned.to_dict(), columns=[{k: v for k, v in c.items() if k != "ordinal"}
                                           for c in planned.to_dict()["columns"]])
    assert all(c.ordinal is None for c in TableMeta.from_dict(old).columns)  # a plan from before: no attnums
    assert SlotReader.recreated_columns(planned, {"id": 1, "v": 3}) == []
    assert SlotReader.recreated_columns(planned, {"id": 1}) == []  # dropped: the Relation message says so
    assert SlotReader.recreated_columns(planned, {"id": 1, "v": 5, "w": 4}) == ["v"]
    assert SlotReader.recreated_columns(TableMeta.from_dict(old), {"id": 1, "v": 5}) == []
    # the plan takes the attnums the lake now reflects, not the live columns or types
    live = TableMeta("public", "t", (Column("id", "bigint", "bigint", False, type_oid=20, ordinal=1),
                                     Column("w", "text", "text", type_oid=25, ordinal=4),
                                     Column("v", "integer", "integer", type_oid=23, ordinal=5)), ("id",), "primary")
    live = replace(live, storage="16390:16402")
    adopted = planned.with_identity_of(live)
    assert [(c.name, c.data_type, c.ordinal) for c in adopted.columns] == [("id", "integer", 1), ("v", "integer", 5)]
    assert adopted.storage == "16390:16402" and TableMeta.from_dict(adopted.to_dict()) == adopted
    assert "storage" not in planned.to_dict()  # a MySQL table's plan is as it was
    assert SlotReader.recreated_columns(adopted, {"id": 1, "v": 5, "w": 4}) == []
    assert adopted.with_identity_of(live) is adopted


def test_lake_columns_compare_by_name_whatever_their_order():
    from airflow_provider_dblog.store.lake_schema import same_column_set, same_columns

    lake = pa.schema([("id", pa.int32()), ("a", pa.string()), ("v", pa.int32())])
    moved = pa.schema([("id", pa.int32()), ("v", pa.int32()), ("a", pa.string())])
    assert same_column_set(lake, moved) and not same_columns(lake, moved)
    assert not same_column_set(lake, pa.schema([("id", pa.int32()), ("v", pa.int64()), ("a", pa.string())]))
    assert not same_column_set(lake, pa.schema([("id", pa.int32()), ("v", pa.int32())]))


def test_partitions_outside_the_wal_are_read_from_the_storage_identity():
    from airflow_provider_dblog.source.postgres.schema import outside_the_wal, storage_files

    assert outside_the_wal("16400|16401:16401,16402:16410:unlogged,16403:0:foreign|pub=1.2") == {
        16402: "UNLOGGED", 16403: "foreign"}
    assert outside_the_wal("16400|16401:16401,16402:16402|pub=1.2") == {}
    assert outside_the_wal("16400|") == {} and outside_the_wal(None) == {}
    # a partition's mark is part of its files: SET UNLOGGED / SET LOGGED read as a rewrite
    marked, plain = "16400|16401:16401,16402:16410:unlogged|pub=1.2", "16400|16401:16401,16402:16410"
    assert storage_files(marked) != storage_files(plain)


@pytest.mark.parametrize("buffer", [1, 3, 7, 64])
def test_the_csv_pieces_read_by_readinto_give_the_same_bytes_and_read_still_ends_at_rows(buffer):
    """``reader._Rows``: a caller of ``readinto`` with a small buffer gets every byte once, in order; a ``read``
    after it still returns pieces that end at a row's end (before: the rest went back before the pending bytes,
    whose quote count then said the wrong thing about where a row ends)."""
    import io

    from airflow_provider_dblog.source.postgres.reader import _Rows

    csv = b'1,"a ""quoted""\nline",x\n2,"b,c",y\n3,"\n\n",z\n' * 5
    rows = _Rows(io.BytesIO(csv))
    got, chunk = b"", bytearray(buffer)
    for _ in range(3):
        n = rows.readinto(chunk)
        got += bytes(chunk[:n])
    while True:
        piece = rows.read(16)
        if not piece:
            break
        got += piece
        assert piece.endswith(b"\n") and (got.count(b'"') % 2 == 0), piece
    assert got == b"\n" + csv
