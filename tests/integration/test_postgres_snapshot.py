"""PostgreSQL snapshot-only captures against a private PostgreSQL (issue 26, first milestone): ``dblog run
--startup snapshot-only`` through the CLI into the lake, compared with the source row by row and column by
column (exact decimals, microseconds, bytes); a composite key and a text key under a non-C collation split
into many chunks by PostgreSQL's own order; one-line refusals (streaming startup modes before anything is
written, a table without a key, a value the lake cannot hold); the password never in output or state.
``dblog plan`` / ``snapshot`` / ``report`` as separate commands (the snapshot on Spark) land the same lake."""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import struct
from decimal import Decimal
from pathlib import Path

import psycopg2
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SNAPSHOT_ROW, SourcePosition, position_lsn
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.source.postgres.dialect import NO_STREAM
from airflow_provider_dblog.source.postgres.pgoutput import parse_lsn
from airflow_provider_dblog.source.postgres.values import libpq_options
from tests.support.cli import dblog, one_error_line
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

UTC = dt.timezone.utc
PASSWORD = "pg-S3cret-Pa55"
CHUNK_SIZE = 150
COLLATION = "en-x-icu"

ALL_TYPES = {
    "id": "bigint PRIMARY KEY", "n": "numeric(20,6)", "n_unb": "numeric", "dom": "price", "f4": "real",
    "f8": "double precision", "b": "boolean", "i2": "smallint", "i4": "integer", "i8": "bigint", "t": "text",
    "vc": "varchar(20)", "ch": "char(5)", "by": "bytea", "d": "date", "ts": "timestamp", "tstz": "timestamptz",
    "tm": "time", "u": "uuid", "j": "json", "jb": "jsonb", "ip": "inet", "iv": "interval", "arr": "integer[]",
    "tarr": "text[]", "e": "mood",
}
NAMES = list(ALL_TYPES)
UNICODE = 'héllo wörld 🎉 "quoted", comma\nnew line\ttab \\ back'
ROW_1 = dict(
    id=1, n=Decimal("-12345678901234.567890"), n_unb="3.14159265358979323846264338327950288419716939937510",
    dom=Decimal("12.30"), f4=1.1, f8=0.1, b=True, i2=-32768, i4=2147483647, i8=-9223372036854775808, t=UNICODE,
    vc="varchar ü", ch="ab", by=bytes(range(256)), d=dt.date(2024, 2, 29), ts=dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
    tstz=dt.datetime(2024, 3, 10, 1, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    tm=dt.time(23, 59, 59, 999999), u="550e8400-e29b-41d4-a716-446655440000", j='{"b": 2,  "a": [1, 2]}',
    jb='{"b": 2, "a": [1, 2]}', ip="192.168.0.1/24", iv="1 year 2 months 3 days 04:05:06.789", arr="{1,2,NULL}",
    tarr='{a,"b c",NULL}', e="happy",
)
# what the lake must hold for ROW_1, written out (not read back through psycopg2)
EXPECTED_1 = dict(
    ROW_1, n_unb=ROW_1["n_unb"], ch="ab   ", tstz=dt.datetime(2024, 3, 10, 6, 59, 59, 999999, tzinfo=UTC),
    tm="23:59:59.999999", jb='{"a": [1, 2], "b": 2}', iv="P1Y2M3DT4H5M6.789S",
    f4=pa.array([1.1], pa.float32()).to_pylist()[0],  # a real holds 1.1 in single precision
)
ROW_2 = dict({name: None for name in NAMES}, id=2)  # NULL in every column
ROW_3 = dict(
    id=3, n=Decimal("99999999999999.999999"), n_unb="NaN", dom=Decimal("-0.01"), f4=float("inf"), f8=float("nan"),
    b=False, i2=32767, i4=-2147483648, i8=9223372036854775807, t="", vc="", ch="", by=b"", d=dt.date(1, 1, 1),
    ts=dt.datetime(9999, 12, 31, 23, 59, 59, 999999), tstz=dt.datetime(1970, 1, 1, tzinfo=UTC), tm=dt.time(0, 0),
    u="00000000-0000-0000-0000-000000000000", j="[]", jb="{}", ip="::1", iv="-1 days -00:00:00.000001", arr="{}",
    tarr="{}", e="sad",
)
CASTS = {"u": "::uuid", "j": "::json", "jb": "::jsonb", "ip": "::inet", "iv": "::interval", "arr": "::integer[]",
         "tarr": "::text[]", "e": "::mood", "n_unb": "::numeric"}
INSERT = "INSERT INTO public.all_types ({cols}) VALUES ({values})".format(
    cols=", ".join(NAMES), values=", ".join(f"%({n})s{CASTS.get(n, '')}" for n in NAMES))
# generated rows: every column varies, and each column is NULL on its own rows
GENERATED = """
INSERT INTO public.all_types
SELECT g,
  CASE WHEN g % 17 <> 0 THEN (g * 1234.567891 - 500000)::numeric(20,6) END,
  CASE WHEN g % 19 <> 0 THEN (g::numeric / 7) END,
  CASE WHEN g % 23 <> 0 THEN (g % 1000 / 100.0)::numeric(10,2) END,
  CASE WHEN g % 29 <> 0 THEN (g / 3.0)::real END,
  CASE WHEN g % 31 <> 0 THEN g / 7.0::double precision END,
  CASE WHEN g % 37 <> 0 THEN g % 2 = 0 END,
  CASE WHEN g % 41 <> 0 THEN (g % 30000)::smallint END,
  CASE WHEN g % 43 <> 0 THEN g * 1000 END,
  CASE WHEN g % 47 <> 0 THEN g::bigint * 1000000007 END,
  CASE WHEN g % 53 <> 0 THEN 'row ' || g || ' ünïcödé ✓' || repeat('x', g % 40) END,
  CASE WHEN g % 59 <> 0 THEN 'v' || g END,
  CASE WHEN g % 61 <> 0 THEN left('c' || g, 5) END,
  CASE WHEN g % 67 <> 0 THEN decode(md5(g::text), 'hex') || '\\x00'::bytea END,
  CASE WHEN g % 71 <> 0 THEN date '2000-01-01' + g END,
  CASE WHEN g % 73 <> 0 THEN timestamp '2020-01-01' + g * interval '1 hour 0.000123 second' END,
  CASE WHEN g % 79 <> 0 THEN timestamptz '2020-06-01 12:00:00+02' + g * interval '37 minutes 0.5 second' END,
  CASE WHEN g % 83 <> 0 THEN time '00:00:00.000001' + g * interval '61 seconds' END,
  CASE WHEN g % 89 <> 0 THEN md5(g::text)::uuid END,
  CASE WHEN g % 97 <> 0 THEN json_build_object('g', g, 's', 'x y') END,
  CASE WHEN g % 101 <> 0 THEN jsonb_build_object('g', g, 'list', jsonb_build_array(g, 'a')) END,
  CASE WHEN g % 103 <> 0 THEN ('10.0.' || (g % 256) || '.' || (g % 200) || '/32')::inet END,
  CASE WHEN g % 107 <> 0 THEN g * interval '1 day 1.5 second' END,
  CASE WHEN g % 109 <> 0 THEN ARRAY[g, g + 1] END,
  CASE WHEN g % 113 <> 0 THEN ARRAY['t' || g, 'with space'] END,
  CASE WHEN g % 127 <> 0 THEN (ARRAY['sad', 'ok', 'happy'])[g % 3 + 1]::mood END
FROM generate_series(10, 1209) g
"""
# text keys whose ICU order is not their code point order (case, accents)
WORDS = ["apple", "Apple", "APPLE", "äpfel", "banana", "Banana", "éclair", "eclair", "Zebra", "zebra", "ångström",
         "oeuf", "Œuf", "straße", "strasse", "naïve", "naive", "résumé", "resume", "Ärger", "arg", "Z", "a"]


def names() -> list[str]:
    return [f"{w}{i:03d}" if i % 2 else f"{w} {i}" for i in range(40) for w in WORDS]


def create_source(pg, db) -> None:
    collations = {r[0] for r in pg.sql("SELECT collname FROM pg_collation", db=db)}
    if COLLATION not in collations:
        pytest.skip(f"PostgreSQL without the ICU collation {COLLATION}")
    pg.sql(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
        "CREATE DOMAIN price AS numeric(10,2)",
        f"CREATE TABLE public.all_types ({', '.join(f'{n} {t}' for n, t in ALL_TYPES.items())})",
        GENERATED,
        # a composite key, dense integer lead (boundaries: the first key at evenly spaced leading values)
        "CREATE TABLE public.order_lines (order_id int, line smallint, sku text NOT NULL, qty numeric(12,3), "
        "PRIMARY KEY (order_id, line))",
        "INSERT INTO public.order_lines SELECT o, l, 'sku-' || (o * l % 97), o * l / 8.0 "
        "FROM generate_series(1, 300) o, generate_series(1, (SELECT 1 + o % 4)) l",
        # a composite key led by text: boundaries by a walk, compared as rows
        'CREATE TABLE public.events (tenant text COLLATE "C", at timestamptz, payload jsonb, PRIMARY KEY (tenant, at))',
        "INSERT INTO public.events SELECT 'tenant-' || (g % 7), timestamptz '2024-01-01 00:00:00+00' + g * "
        "interval '1.000001 second', jsonb_build_object('g', g) FROM generate_series(1, 900) g",
        # a text key under a non-C collation: PostgreSQL's ICU order, not Python's
        f'CREATE TABLE public.names (name text COLLATE "{COLLATION}" PRIMARY KEY, n int NOT NULL)',
        "CREATE SCHEMA shop",
        "CREATE TABLE shop.other (id int PRIMARY KEY)",  # not in 'public.*'
        "CREATE SCHEMA misc",
        "CREATE TABLE misc.no_key (a int, b text)",
        "INSERT INTO misc.no_key VALUES (1, 'x')",
        "CREATE TABLE misc.shared_key (a int NOT NULL, b text)",
        "INSERT INTO misc.shared_key VALUES (1, 'x'), (1, 'y'), (2, NULL)",
        "CREATE TABLE misc.forever (id int PRIMARY KEY, at timestamptz)",
        "INSERT INTO misc.forever VALUES (1, now()), (2, 'infinity')",
        db=db,
    )
    conn = psycopg2.connect(pg.dsn(db), options=libpq_options())
    try:
        with conn, conn.cursor() as cur:
            for row in (ROW_1, ROW_2, ROW_3):
                cur.execute(INSERT, row)
            cur.executemany("INSERT INTO public.names VALUES (%s, %s)", [(w, i) for i, w in enumerate(names())])
    finally:
        conn.close()
    pg.sql("ANALYZE", db=db)


@pytest.fixture(scope="module")
def source(postgres):  # noqa: F811 - the fixture
    """One database with the tables every test here reads (none writes to it)."""
    db = f"snap{os.getpid()}"
    postgres.sql(f"CREATE DATABASE {db}")
    create_source(postgres, db)
    return postgres, db


def uri(pg, db, password: str = PASSWORD) -> str:
    return pg.uri(db, password=password)


# ---- reading both sides ----------------------------------------------------------------------------
def lake_rows(sink: str, table: str, kind: str = "current") -> pa.Table:
    return DeltaTable(f"{sink}/{table}/{kind}").to_pyarrow_table()


def source_rows(pg, db, table: str, schema: pa.Schema, key: list[str]) -> list[dict]:
    """The source's rows through psycopg2, typed as the lake types them: typed where the lake has a type, the
    output function's text where it holds text (``format('%s', c)``, what COPY prints, char(n) padded)."""
    items = []
    for field in schema:
        quoted = '"' + field.name + '"'
        text = pa.types.is_string(field.type) or pa.types.is_large_string(field.type) \
            or pa.types.is_string_view(field.type)
        items.append(f"CASE WHEN {quoted} IS NOT NULL THEN format('%s', {quoted}) END" if text else quoted)
    conn = psycopg2.connect(pg.dsn(db), options=libpq_options())
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(items)} FROM {table} ORDER BY {', '.join(key)}")
            return [dict(zip(schema.names, row)) for row in cur.fetchall()]
    finally:
        conn.close()


def comparable(value, field: pa.Field):
    """One value as both sides must agree on it: single-precision floats as their bits, NaN as a token,
    bytea as bytes."""
    if value is None:
        return None
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if pa.types.is_float32(field.type):
            return struct.pack("!f", value)
    return value


def assert_equal_tables(lake: pa.Table, source: list[dict], schema: pa.Schema, key: list[str], table: str) -> None:
    lake_list = sorted(lake.select(schema.names).to_pylist(), key=lambda r: tuple(r[k] for k in key))
    src = {tuple(r[k] for k in key): r for r in source}
    assert len(lake_list) == len(source), f"{table}: {len(lake_list)} rows in the lake, {len(source)} in the source"
    for row in lake_list:
        want = src.get(tuple(row[k] for k in key))
        assert want is not None, f"{table}: the lake has {row} that the source does not"
        for field in schema:
            got, expected = comparable(row[field.name], field), comparable(want[field.name], field)
            assert got == expected, f"{table} key {[row[k] for k in key]} column {field.name}: {got!r} != {expected!r}"
            if isinstance(expected, (dt.datetime, Decimal, bytes, int)):
                assert type(got) is type(expected) or isinstance(got, type(expected)), (table, field.name)


def state_files(state: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in Path(state).rglob("*") if p.is_file())


# ---- the tests -------------------------------------------------------------------------------------
def test_run_snapshot_only_lands_every_public_table_exactly(source, tmp_path):
    pg, db = source
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", uri(pg, db), "--tables", "public.*", "--state", state, "--sink", sink,
                           "--startup", "snapshot-only", "--chunk-size", str(CHUNK_SIZE))
    assert code == 0, err
    assert PASSWORD not in out + err and PASSWORD not in state_files(state)
    summary = json.loads(out)
    assert summary["snapshot"]["in_driver"] == summary["snapshot"]["chunks_read"] > 4  # Spark-free: read in the driver
    assert "skipped" in summary["tail"]

    plan = json.loads((Path(state) / "plan.json").read_text())
    assert plan["source"] == f"postgresql://postgres@127.0.0.1:{pg.port}/{db}"
    assert set(plan["tables"]) == {"public.all_types", "public.order_lines", "public.events", "public.names"}
    assert set(plan["server"]) == {"system_identifier", "timeline"}
    assert not (Path(sink) / "shop.other").exists()
    dialect = open_dialect(SourceConfig.parse(uri(pg, db)))
    now = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", db=db)[0][0])
    try:
        for table, info in plan["tables"].items():
            chunks = len(info["chunks"])
            assert chunks > 1, f"{table} was not split ({chunks} chunk)"
            meta = dialect.describe_table(table)
            schema = dialect.arrow_schema(meta)
            current = lake_rows(sink, table)
            assert_equal_tables(current, source_rows(pg, db, table, schema, list(meta.key_columns)), schema,
                                list(meta.key_columns), table)
            # one changelog row per snapshot row, each at its chunk's HW: a WAL location, in WAL order
            changelog = lake_rows(sink, table, "changelog")
            assert changelog.num_rows == current.num_rows and set(changelog.column("_op").to_pylist()) == {"r"}
            assert sorted(set(current.column("_chunk").to_pylist())) == list(range(chunks))
            for pos in set(current.column("_pos").to_pylist()):
                position = SourcePosition.decode(pos, "lsn")
                assert position.row == SNAPSHOT_ROW and 0 < position_lsn(position) <= now
                assert position.file.startswith("lsn.")
    finally:
        dialect.close()

    # the types keep their meaning, written out rather than read back (exact decimal, UTC microseconds, bytes)
    lake = {r["id"]: r for r in lake_rows(sink, "public.all_types").to_pylist()}
    for name in NAMES:
        assert lake[1][name] == EXPECTED_1[name], name
        assert lake[2][name] is None or name == "id", name
    assert lake[3]["n"] == Decimal("99999999999999.999999") and lake[3]["n_unb"] == "NaN"
    assert math.isnan(lake[3]["f8"]) and lake[3]["f4"] == float("inf") and lake[3]["by"] == b""
    assert lake[3]["ts"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999) and lake[3]["ch"] == "     "
    assert lake[3]["iv"] == "P-1DT-0.000001S" and lake[3]["t"] == "" and lake[3]["tm"] == "00:00:00"
    types = lake_rows(sink, "public.all_types").schema
    assert pa.types.is_decimal(types.field("n").type) and (types.field("n").type.precision,
                                                           types.field("n").type.scale) == (20, 6)
    assert pa.types.is_decimal(types.field("dom").type)  # a domain: its base type's
    assert pa.types.is_timestamp(types.field("tstz").type) and types.field("tstz").type.tz in ("UTC", "+00:00")
    assert pa.types.is_timestamp(types.field("ts").type) and types.field("ts").type.tz is None

    # the product's own row-by-row check agrees; a tail is refused in one line and changes nothing
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "public.*", "--rows")
    assert code == 0, err
    versions = {t: DeltaTable(f"{sink}/{t}/current").version() for t in plan["tables"]}
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code != 0 and one_error_line(err) == f"dblog: error: dblog tail: {NO_STREAM}"
    assert versions == {t: DeltaTable(f"{sink}/{t}/current").version() for t in plan["tables"]}

    # a non-C collation: every full chunk holds exactly --chunk-size rows of PostgreSQL's order
    per_chunk = {}
    for c in lake_rows(sink, "public.names").column("_chunk").to_pylist():
        per_chunk[c] = per_chunk.get(c, 0) + 1
    assert [per_chunk[c] for c in sorted(per_chunk)][:-1] == [CHUNK_SIZE] * (len(per_chunk) - 1)


def test_keys_order_as_postgresql_orders_them(source):
    pg, db = source
    dialect = open_dialect(SourceConfig.parse(uri(pg, db)))
    try:
        meta = dialect.describe_table("public.names")
        ordered = [r[0] for r in pg.sql("SELECT name FROM public.names ORDER BY name", db=db)]
        assert ordered != sorted(ordered), "the collation orders like Python: the test proves nothing"
        shuffled = sorted(ordered, key=lambda v: (hash(v) % 97, v))
        first = dialect.sort_keys(meta, [(v,) for v in shuffled[:300]])  # labels given in two calls stay comparable
        rest = dialect.sort_keys(meta, [(v,) for v in shuffled[300:]])
        by_key = dict(zip(shuffled, first + rest))
        assert sorted(shuffled, key=by_key.__getitem__) == ordered
        assert dialect.sort_keys(meta, [(ordered[5],)])[0] == by_key[ordered[5]]
        # chunk boundaries are PostgreSQL's: each chunk's rows are one contiguous run of its order
        chunks = dialect.split_chunks(meta, 100)
        bounds = [c.hi[0] for c in chunks[:-1]]
        assert bounds == [ordered[100 * (i + 1)] for i in range(len(bounds))]
        # composite keys: typed boundaries (text, timestamptz in UTC) that PostgreSQL compares as rows
        events = dialect.describe_table("public.events")
        assert events.key_columns == ("tenant", "at")
        boundaries = [c.hi for c in dialect.split_chunks(events, 200)[:-1]]
        assert all(isinstance(b[1], dt.datetime) and b[1].tzinfo is not None for b in boundaries)
        keys = dialect.sort_keys(events, boundaries)
        assert keys == sorted(keys)
    finally:
        dialect.close()


def test_startup_modes_postgresql_lacks_are_refused_in_one_line_before_anything_is_written(source, tmp_path):
    pg, db = source
    state, sink = tmp_path / "state", tmp_path / "lake"
    for command, startup in (("run", "timestamp:1767225600000"), ("plan", "position:lsn.000000:4")):
        args = [command, "--source", uri(pg, db), "--tables", "public.*", "--state", str(state), "--startup", startup]
        code, out, err = dblog(*args, *(["--sink", str(sink)] if command == "run" else []))
        assert code != 0
        assert one_error_line(err).endswith("use initial, latest or snapshot-only"), err
        assert PASSWORD not in out + err
        assert not state.exists() and not sink.exists()
    assert not pg.sql("SELECT slot_name FROM pg_replication_slots", db=db)


def test_bad_tables_are_refused_in_one_line(source, tmp_path):
    pg, db = source
    state = tmp_path / "state"
    code, out, err = dblog("plan", "--source", uri(pg, db), "--table", "misc.no_key", "--state", str(state),
                           "--startup", "snapshot-only")
    assert code != 0 and "misc.no_key" in one_error_line(err) and "no primary key" in one_error_line(err)
    assert not state.exists()
    code, out, err = dblog("plan", "--source", uri(pg, db), "--table", "misc.missing", "--state", str(state),
                           "--startup", "snapshot-only")
    assert code != 0 and "unknown table misc.missing" in one_error_line(err)
    # an UNLOGGED table: its changes are not in the WAL (before, the plan offered a CREATE PUBLICATION that fails)
    pg.sql("CREATE UNLOGGED TABLE IF NOT EXISTS misc.scratch (id int PRIMARY KEY)", db=db)
    try:
        code, out, err = dblog("plan", "--source", uri(pg, db), "--tables", "misc.scratch,misc.shared_key",
                               "--state", str(state))
        line = one_error_line(err)
        assert code != 0 and "1 table(s) are UNLOGGED" in line and "misc.scratch" in line and "SET LOGGED" in line, line
    finally:
        pg.sql("DROP TABLE misc.scratch", db=db)
    for key, said in (("a", "--chunk-key a of misc.shared_key does not identify rows: 2 rows have (1)"),
                      ("b", "--chunk-key b of misc.shared_key may be NULL")):
        code, out, err = dblog("plan", "--source", uri(pg, db), "--table", "misc.shared_key", "--chunk-key",
                               f"misc.shared_key={key}", "--state", str(state), "--startup", "snapshot-only")
        assert code != 0 and said in one_error_line(err), err[-2000:]
    assert not state.exists()
    assert PASSWORD not in out + err
    # a value the lake has no twin for: the chunk's read stops in one line naming it (in-process: through the CLI
    # the driver's failed chunk is read again on Spark, which fails the same way, for 10 s more)
    dialect = open_dialect(SourceConfig.parse(uri(pg, db)))
    try:
        meta = dialect.describe_table("misc.forever")
        window = dialect.watermark(dialect.resolve_strategy("auto", meta), meta)
        window.low()
        with pytest.raises(DblogError) as exc:
            dialect.read_snapshot(meta, ChunkRange(0, None, None))
        assert str(exc.value) == ("misc.forever.at holds 'infinity', which has no timestamp[us, tz=UTC] value in the "
                                  "lake (infinity, BC dates, years after 9999 and NaN in a bounded numeric have none): "
                                  "change the value or exclude the table")
        assert dialect.read_snapshot(meta, ChunkRange(0, None, (2,))).num_rows == 1  # the connection recovers
    finally:
        dialect.close()


@pytest.mark.slow
def test_plan_snapshot_report_as_separate_commands_on_spark(source, tmp_path):
    pg, db = source
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("plan", "--source", uri(pg, db), "--table", "public.order_lines", "--state", state,
                           "--startup", "snapshot-only", "--chunk-size", "200", "--batch-size", "100")
    assert code == 0, err
    batches = json.loads(out)["batches"]
    assert len(batches) == 1 and len(batches[0]["groups"][0]["chunks"]) > 1
    code, out, err = dblog("snapshot", "--state", state, "--batch", "0", "--sink", sink)
    assert code == 0, err
    code, out, err = dblog("report", "--state", state)
    assert code == 0, err
    assert json.loads(out)["rows"] == 750
    assert PASSWORD not in out + err + state_files(state)
    dialect = open_dialect(SourceConfig.parse(uri(pg, db)))
    try:
        meta = dialect.describe_table("public.order_lines")
        schema = dialect.arrow_schema(meta)
    finally:
        dialect.close()
    assert_equal_tables(lake_rows(sink, "public.order_lines"),
                        source_rows(pg, db, "public.order_lines", schema, ["order_id", "line"]), schema,
                        ["order_id", "line"], "public.order_lines")


def test_the_checksums_float_text_is_the_lakes_to_the_last_bit(postgres, pg_db):
    """The checksum's text of a real and a double precision computed by PostgreSQL (``checksum.float_sql``) is the
    lake's (``core.checksums.float_text``) on 2,000 random bit patterns, the edges (subnormals, the largest double,
    powers of two, both zeros), NaN, the infinities and NULL: a float drifted by its last bit is a drifted chunk,
    and an exact lake is no false alarm. Before, floats were only summed per chunk within 1e-6 of their
    magnitudes. The server's ``extra_float_digits=0`` (the fixture's) plays no part: no float is printed."""
    import numpy as np

    from airflow_provider_dblog.source.postgres.checksum import float_sql
    from tests.support.float_bits import assert_float_text_is_the_lakes, random_floats

    values = random_floats(2000, 11) + [float("nan"), float("inf"), float("-inf"), 0.0]
    with np.errstate(over="ignore"):
        singles = [float(np.float32(v)) for v in values]  # beyond a real's range: its infinities
    conn = psycopg2.connect(postgres.dsn(pg_db))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE public.bits (id int PRIMARY KEY, d double precision, f real)")
            assert_float_text_is_the_lakes(cur, "public.bits", float_sql, values, singles)
    finally:
        conn.close()
