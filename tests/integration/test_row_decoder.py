"""The compiled row-image decoder (dialects/mysql_rows.py) against the database itself: every value
the binlog carries for a row must equal what the snapshot SELECT reads for it, for every column type,
NULLs and extreme values included; and the decoder must really be the path that decoded it."""
from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal
from types import SimpleNamespace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.source.mysql import rows as mysql_rows
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.mysql.dialect import MySqlDialect
from airflow_provider_dblog.store.lake import event_rows
from tests.support.mysql_values import INT_RANGES, WIDE, decimals, sql_param, typed_table

COLUMNS = {
    "ti": "TINYINT", "tiu": "TINYINT UNSIGNED", "si": "SMALLINT", "siu": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT", "miu": "MEDIUMINT UNSIGNED", "i": "INT", "iu": "INT UNSIGNED",
    "bi": "BIGINT", "biu": "BIGINT UNSIGNED", "f": "FLOAT", "d": "DOUBLE",
    "dec1": "DECIMAL(15,2)", "dec2": "DECIMAL(65,30)", "dec3": "DECIMAL(10,0)", "dec4": "DECIMAL(38,10)",
    "dec5": "DECIMAL(5,5)", "dec6": "DECIMAL(18,6)", "da": "DATE",
    "dtm": "DATETIME", "dtm3": "DATETIME(3)", "dtm6": "DATETIME(6)",
    "ts0": "TIMESTAMP NULL", "ts3": "TIMESTAMP(3) NULL", "tm": "TIME", "tm1": "TIME(1)", "tm4": "TIME(4)",
    "tm6": "TIME(6)", "y": "YEAR", "c": "CHAR(10)", "vc": "VARCHAR(300)", "vcl": "VARCHAR(50) CHARACTER SET latin1",
    "tx": "TEXT", "mtx": "MEDIUMTEXT", "bn": "BINARY(4)", "vb": "VARBINARY(20)", "bl": "BLOB",
    "e": "ENUM('a','b','it''s')", "s": "SET('x','y','z')",
    # labels with what COLUMN_TYPE quotes (a quote doubled, a backslash doubled) or what a naive split cuts
    "e2": "ENUM('x y','back\\\\slash','com,ma','',' lead','ü','it''s')", "s2": "SET('p q','b\\\\s','r''s')",
    "bt": "BIT(12)", "b1": "BIT(1)", "js": "JSON",
}


def _time(fsp: int):
    limit = 838 * 3600 + 59 * 60 + 59

    def text(pair):
        seconds, frac = pair
        sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
        out = f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return out + (f".{frac:0{fsp}d}" if fsp else "")
    return st.tuples(st.integers(-limit, limit), st.integers(0, 10 ** fsp - 1)).map(text)


_ts = st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))
VALUES = {
    **{name: st.integers(*r) for name, r in INT_RANGES.items()},
    "f": st.floats(allow_nan=False, allow_infinity=False, width=32), "d": st.floats(allow_nan=False, allow_infinity=False),
    "dec1": decimals(15, 2), "dec2": decimals(65, 30), "dec3": decimals(10, 0), "dec4": decimals(38, 10),
    "dec5": decimals(5, 5), "dec6": decimals(18, 6), "da": st.dates(dt.date(1000, 1, 1)),
    "dtm": st.datetimes(dt.datetime(1000, 1, 1)).map(lambda v: v.replace(microsecond=0)),
    "dtm3": st.datetimes(dt.datetime(1000, 1, 1)).map(lambda v: v.replace(microsecond=v.microsecond // 1000 * 1000)),
    "dtm6": st.datetimes(dt.datetime(1000, 1, 1)),
    "ts0": _ts.map(lambda v: v.replace(microsecond=0)),
    "ts3": _ts.map(lambda v: v.replace(microsecond=v.microsecond // 1000 * 1000)),
    "tm": _time(0), "tm1": _time(1), "tm4": _time(4), "tm6": _time(6), "y": st.integers(1901, 2155),
    "c": st.text(max_size=10).map(lambda s: s.rstrip(" ")), "vc": st.text(max_size=300),
    "vcl": st.text(st.characters(codec="cp1252"), max_size=50), "tx": st.text(max_size=200),
    "mtx": st.text(max_size=400), "bn": st.binary(min_size=4, max_size=4),
    "vb": st.binary(max_size=20), "bl": st.binary(max_size=300), "e": st.sampled_from(["a", "b", "it's"]),
    "s": st.sets(st.sampled_from(["x", "y", "z"])).map(lambda v: ",".join(sorted(v))),
    "e2": st.sampled_from(["x y", "back\\slash", "com,ma", "", " lead", "ü", "it's"]),
    "s2": st.sets(st.sampled_from(["p q", "b\\s", "r's"])).map(lambda v: ",".join(sorted(v))),
    "bt": st.integers(0, 4095).map(lambda v: v.to_bytes(2, "big")), "b1": st.sampled_from([b"\0", b"\1"]),
    "js": st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3).map(json.dumps),
}
ROWS = st.lists(st.fixed_dictionaries({name: st.none() | strategy for name, strategy in VALUES.items()}),
                min_size=1, max_size=12)


@pytest.fixture(scope="module")
def typed(mariadb):
    yield from typed_table(mariadb, "decoder.t", COLUMNS)


def _insert(cur, key: int, row: dict) -> None:
    names = ["id", *COLUMNS]
    cur.execute(f"INSERT INTO t VALUES ({', '.join(['%s'] * len(names))})",
                [key, *(sql_param(row.get(n)) for n in COLUMNS)])


def _lake_values(meta: TableMeta, dialect: MySqlDialect, images: list[dict]) -> list[dict]:
    """Rows as the lake stores them (through Arrow), sorted by key."""
    schema = dialect.arrow_schema(meta)
    table = pa.Table.from_pylist(images, schema=schema)
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _snapshot(meta, dialect):
    return sorted(dialect.read_snapshot(meta, ChunkRange(0, None, None)).to_pylist(), key=lambda r: r["id"])


@settings(max_examples=25)
@given(rows=ROWS)
def test_binlog_images_equal_the_snapshot_for_every_type(typed, rows):
    mariadb, dialect, meta = typed
    compiled = []
    real_compile = mysql_rows.compile_row_decoder

    def spy(*args):
        compiled.append(real_compile(*args))
        return compiled[-1]

    mariadb.sql("DELETE FROM decoder.t")
    start = dialect.current_position()
    conn = dialect.client.connect("decoder")
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        for i, row in enumerate(rows):
            _insert(cur, i, row)
        cur.execute("COMMIT")
    inserted = _snapshot(meta, dialect)
    with conn.cursor() as cur:  # every column changes: before and after images of updates
        cur.execute("UPDATE t SET id = id + 1000, tiu = 255 - COALESCE(tiu, 0), dec2 = -dec2, tm6 = NULL, "
                    "vc = CONCAT(COALESCE(vc, ''), '✓'), bl = NULL, s = 'x,z', dtm6 = '2001-02-03 04:05:06.000007'")
    updated = _snapshot(meta, dialect)
    mariadb.sql("DELETE FROM decoder.t")
    conn.close()

    mysql_rows.compile_row_decoder = spy
    mysql_rows._DECODERS.clear()  # decoders are cached per process: compile them for this check
    try:
        items = [p for kind, _, p in dialect.stream.items(start, dialect.current_position(), [meta]) if kind == "row"]
    finally:
        mysql_rows.compile_row_decoder = real_compile
    assert compiled and all(d is not None for d in compiled), "the compiled decoder did not decode these events"
    n = len(rows)
    inserts, updates, deletes = items[:n], items[n:2 * n], items[2 * n:]
    assert all(b is None for _, b, _, _ in inserts) and all(a is None for _, _, a, _ in deletes)
    assert _lake_values(meta, dialect, [a for _, _, a, _ in inserts]) == inserted
    assert _lake_values(meta, dialect, [b for _, b, _, _ in updates]) == inserted
    assert _lake_values(meta, dialect, [a for _, _, a, _ in updates]) == updated
    assert _lake_values(meta, dialect, [b for _, b, _, _ in deletes]) == updated
    # and the stream's Arrow rows (the columnar event_rows) carry the same images
    events = list(dialect.read_changes(start, dialect.current_position(), [meta]))
    stream = event_rows(events, [0] * len(events), dialect.arrow_schema(meta)).to_pylist()
    # the UPDATE changed every key: each became a delete of the old key and an insert of the new one
    new_keys = sorted((r for r in stream if r["_op"] == "c" and r["id"] >= 1000), key=lambda r: r["id"])
    assert [{k: r[k] for k in updated[0]} for r in new_keys] == updated
    old_keys = sorted((r["_before"] for r in stream if r["_op"] == "d" and r["_before"]["id"] < 1000),
                      key=lambda r: r["id"])
    assert old_keys == inserted


def test_extreme_values_decode_exactly(typed):
    """The edges of every range, which random draws rarely hit."""
    mariadb, dialect, meta = typed
    mariadb.sql("DELETE FROM decoder.t")
    start = dialect.current_position()
    edges = [
        {**{n: lo for n, (lo, _) in INT_RANGES.items()}, "dec1": Decimal("-9999999999999.99"),
         "dec2": Decimal("-" + "9" * 35 + "." + "9" * 30), "dec3": Decimal(-9999999999), "dec5": Decimal("-0.99999"),
         "dec6": Decimal("-999999999999.999999"),
         "dec4": Decimal("-" + "9" * 28 + "." + "9" * 10), "da": dt.date(1000, 1, 1),
         "dtm6": dt.datetime(1000, 1, 1, 0, 0, 0, 1), "ts3": dt.datetime(1970, 1, 1, 0, 0, 1, 1000),
         "tm": "-838:59:59", "tm1": "-00:00:00.1", "tm4": "-00:00:01.0001", "tm6": "-838:59:58.999999",
         "y": 1901, "bt": b"\0\0", "b1": b"\0", "s": "", "e": "a", "c": "", "vc": "", "bl": b"", "bn": b"a\0\0\0"},
        {**{n: hi for n, (_, hi) in INT_RANGES.items()}, "dec1": Decimal("9999999999999.99"),
         "dec2": Decimal("9" * 35 + "." + "9" * 30), "dec3": Decimal(9999999999), "dec5": Decimal("0.99999"),
         "dec6": Decimal("999999999999.999999"),
         "dec4": Decimal("9" * 28 + "." + "9" * 10), "da": dt.date(9999, 12, 31),
         "dtm6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "ts3": dt.datetime(2038, 1, 19, 3, 14, 7, 999000),
         "tm": "838:59:59", "tm1": "00:00:00.1", "tm4": "12:00:00.9999", "tm6": "838:59:58.999999",
         "y": 2155, "bt": b"\x0f\xff", "b1": b"\1", "s": "x,y,z", "e": "it's", "f": -3.4e38, "d": 1.7976931348623157e308,
         "vc": "🦆" * 300, "vcl": "Ÿ€é\x81", "mtx": "x" * 70000, "bl": bytes(range(256)) * 200},
        {"dec1": Decimal("0.00"), "dec6": Decimal("-0.000001"),
         "dec2": Decimal("-0.000000000000000000000000000001"), "tm4": "-00:00:00.0001",
         "tm1": "-00:00:01.9", "f": 1.5, "d": -0.0},
    ]
    conn = dialect.client.connect("decoder")
    with conn.cursor() as cur:
        for i, row in enumerate(edges):
            _insert(cur, i, row)
    conn.close()
    items = [p for kind, _, p in dialect.stream.items(start, dialect.current_position(), [meta]) if kind == "row"]
    assert _lake_values(meta, dialect, [a for _, _, a, _ in items]) == _snapshot(meta, dialect)


@given(precision=st.integers(1, 65), data=st.data())
def test_decimal_binary_format_round_trips(precision, data):
    """MySQL's decimal2bin, written out independently, read back by the decoder."""
    scale = data.draw(st.integers(0, min(precision, 30)))
    digits = data.draw(st.integers(-(10 ** precision - 1), 10 ** precision - 1))
    size, read = mysql_rows._decimal_reader(precision, scale, as_text=precision > 38)
    encoded = _decimal2bin(abs(digits), digits < 0, precision, scale)
    assert len(encoded) == size
    value = read(b"\xAA" + encoded + b"\xBB", 1)
    assert Decimal(value) == Decimal(digits).scaleb(-scale, WIDE)


def _decimal2bin(magnitude: int, negative: bool, precision: int, scale: int) -> bytes:
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    integral, fraction = divmod(magnitude, 10 ** scale)
    parts = []
    for _ in range((precision - scale) // 9):
        parts.insert(0, (integral % 10 ** 9, 4))
        integral //= 10 ** 9
    if (precision - scale) % 9:
        parts.insert(0, (integral, sizes[(precision - scale) % 9]))
    for k in range(scale // 9):
        parts.append((fraction // 10 ** (scale - 9 * (k + 1)) % 10 ** 9, 4))
    if scale % 9:
        parts.append((fraction % 10 ** (scale % 9), sizes[scale % 9]))
    raw = bytearray(b"".join(v.to_bytes(n, "big") for v, n in parts))
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    raw[0] ^= 0x80
    return bytes(raw)


def test_a_table_map_unlike_the_planned_table_gets_no_decoder():
    """After DDL the binlog's layout differs from the plan: the library decodes those events."""
    meta = TableMeta("d", "t", (Column("id", "int", "int(11)"), Column("v", "varchar", "varchar(10)", charset="utf8mb4")),
                     ("id",), "primary")
    same = [SimpleNamespace(name="id", type=3, unsigned=False),
            SimpleNamespace(name="v", type=15, max_length=40, unsigned=False)]
    assert mysql_rows.compile_row_decoder(same, meta) is not None
    assert mysql_rows.compile_row_decoder(same + [SimpleNamespace(name="w", type=3, unsigned=False)], meta) is None
    odd_charset = TableMeta("d", "t", (meta.columns[0], Column("v", "varchar", "varchar(10)", charset="armscii8")),
                            ("id",), "primary")  # no exact codec (the plan refuses such a column)
    assert mysql_rows.compile_row_decoder(same, odd_charset) is None
    big_endian = TableMeta("d", "t", (meta.columns[0], Column("v", "varchar", "varchar(10)", charset="ucs2")),
                           ("id",), "primary")
    assert mysql_rows.compile_row_decoder(same, big_endian) is not None  # utf-16-be


def test_random_seed_rows_decode_like_the_library_where_the_library_is_exact(typed):
    """On ordinary values (no empty SETs, no negative fractional TIMEs) both paths agree exactly."""
    mariadb, dialect, meta = typed
    mariadb.sql("DELETE FROM decoder.t")
    start = dialect.current_position()
    rnd = random.Random(5)
    conn = dialect.client.connect("decoder")
    with conn.cursor() as cur:
        for i in range(200):
            cur.execute("INSERT INTO t (id, i, bi, dec1, da, dtm6, vc, tx, e, d) VALUES "
                        "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        (i, rnd.randint(-9, 9) * 10 ** 8, rnd.getrandbits(62), f"{rnd.randint(-10**9, 10**9) / 100:.2f}",
                         dt.date(2000, 1, 1) + dt.timedelta(rnd.randint(0, 9000)),
                         dt.datetime(2020, 5, 6, 7, 8, 9, rnd.randint(0, 999999)), "é" * rnd.randint(0, 40),
                         "x" * rnd.randint(0, 99), rnd.choice("ab"), rnd.random()))
    conn.close()
    end = dialect.current_position()
    fast = [p for kind, _, p in dialect.stream.items(start, end, [meta]) if kind == "row"]
    real_compile = mysql_rows.compile_row_decoder
    mysql_rows.compile_row_decoder = lambda columns, meta_: None
    try:
        library = [p for kind, _, p in dialect.stream.items(start, end, [meta]) if kind == "row"]
    finally:
        mysql_rows.compile_row_decoder = real_compile
    assert len(fast) == 200 and fast == library
