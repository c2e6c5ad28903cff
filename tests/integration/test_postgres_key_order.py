"""PostgreSQL keys of every type, placed among their chunks as PostgreSQL orders them, and float values that a
sum cannot hold.

Text keys under the ``C`` collation compare the database encoding's bytes: Python's order of the decoded text is
that order only in UTF8 and LATIN1 databases (code points in byte order). In WIN1251, '№' (0xB9) sorts before 'я'
(0xFF), while Python puts U+2116 after U+044F."""
from __future__ import annotations

import json
import random

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.source import open_dialect
from tests.integration.test_postgres_changes_outside_the_wal import run, tail, verify_equal
from tests.support.cli import dblog
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

WORDS = ["№1", "я", "Ё", "а", "Я", "z", "A", "ё", "€", "щука", "№", "Ж", "ж", "«", "»", "—", " ", "0"]


@pytest.mark.parametrize("encoding,collate", [("WIN1251", "C"), ("UTF8", "C"), ("WIN1251", "default"),
                                              ("KOI8R", "C")])
def test_text_keys_under_c_are_ordered_as_the_database_compares_them(postgres, encoding, collate):
    db = f"keys_{encoding.lower()}_{collate.lower()}"
    postgres.sql(f"DROP DATABASE IF EXISTS {db}")
    postgres.sql(f"CREATE DATABASE {db} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    words = [w for w in WORDS if encoding == "UTF8" or w != "€"] if encoding != "KOI8R" else \
        [w for w in WORDS if w not in ("€", "№1", "№", "«", "»", "—")]
    clause = ' COLLATE "C"' if collate == "C" else ""
    postgres.sql(f"CREATE TABLE public.k (k text{clause} PRIMARY KEY)",
                 *[f"INSERT INTO public.k VALUES ('{w}{i}')" for w in words for i in range(3)], db=db)
    dialect = open_dialect(SourceConfig.parse(postgres.uri(db)))
    try:
        meta = dialect.describe_table("public.k")
        ordered = [r[0] for r in postgres.sql("SELECT k FROM public.k ORDER BY k", db=db)]
        shuffled = random.Random(5).sample(ordered, len(ordered))
        sort_keys = dialect.sort_keys(meta, [(v,) for v in shuffled])
        assert [v for _, v in sorted(zip(sort_keys, shuffled))] == ordered
    finally:
        dialect.close()
        postgres.sql(f"DROP DATABASE {db}")


KEYS = {"time": ("time(3)", "make_time(g % 24, g % 60, (g % 60) + 0.5)"), "timetz": ("timetz", "make_time(g % 24, g % 60, 0)::timetz"),
        "numeric": ("numeric", "(g * 7919 % 1000) / 7.0 - 50"), "num50": ("numeric(50,10)", "g * 123456789012345678901234567890.123 - 5"),
        "interval": ("interval", "make_interval(days => g % 37, secs => g)"), "date": ("date", "DATE '2020-01-01' + g"),
        "ts": ("timestamp(3)", "TIMESTAMP '2020-01-01' + g * INTERVAL '1.5 second'"), "tstz": ("timestamptz", "TIMESTAMPTZ '2020-01-01 00:00+05' + g * INTERVAL '1 hour'"),
        "uuid": ("uuid", "md5(g::text)::uuid"), "bytea": ("bytea", "decode(md5(g::text), 'hex')"), "inet": ("inet", "('10.0.' || (g % 256) || '.' || (g / 256))::inet"),
        "bpchar": ("char(6)", "g::text"), "float8": ("float8", "CASE WHEN g = 5 THEN 'NaN'::float8 ELSE g / 3.0 - 40 END"), "bool": ("bool", "g % 2 = 0"),
        "money": ("money", "g * 1.25"), "text_c": ("text COLLATE \"C\"", "md5(g::text)"), "text_en": ("text COLLATE \"en-US-x-icu\"", "md5(g::text) || 'É'"),
        "oid": ("oid", "g"), "enum": ("mood", "(ARRAY['zz','aa','mm'])[1 + g % 3]::mood"), "int2": ("smallint", "g - 150"), "macaddr": ("macaddr", "('08:00:2b:01:02:' || lpad(to_hex(g % 256), 2, '0'))::macaddr"),
        "varchar_arr": ("text[]", "ARRAY[md5(g::text), 'x']"), "jsonb": ("jsonb", "jsonb_build_object('a', g)"), "cidr": ("cidr", "('10.' || (g % 256) || '.0.0/16')::cidr"),
        "bit": ("bit(12)", "g::bit(12)"), "citext_like_name": ("name", "md5(g::text)")}



@pytest.mark.parametrize("kind", list(KEYS))
def test_a_key_of_every_type_is_placed_among_its_chunks(postgres, pg_db, tmp_path, kind):
    """A table keyed by each type, in three chunks: the tail places each change among the chunks (boundaries from
    a SELECT, keys from the stream) and verify finds the lake equal."""
    typ, expr = KEYS[kind]
    composite = kind in ("enum", "bool")
    key = "k, id" if composite else "k"
    state, sink = run(postgres, pg_db, tmp_path, "public.x",
                      "CREATE TYPE mood AS ENUM ('zz', 'aa', 'mm')",
                      f"CREATE TABLE public.x (id int, k {typ}, v int, PRIMARY KEY ({key}))",
                      f"INSERT INTO public.x SELECT g, {expr}, g FROM generate_series(1, 300) g ON CONFLICT DO NOTHING")
    postgres.sql("UPDATE public.x SET v = -v WHERE id % 3 = 0", "DELETE FROM public.x WHERE id % 7 = 0",
                 f"INSERT INTO public.x SELECT g, {expr}, g FROM generate_series(301, 330) g ON CONFLICT DO NOTHING", db=pg_db)
    code, _, err = tail(state, sink)
    assert code == 0, err[-1500:]
    verify_equal(state, sink)


def test_nan_and_infinities_are_checked_in_the_rows_text(postgres, pg_db, tmp_path):
    """A chunk's float sums were NaN as soon as one value was NaN (or both infinities were in it): verify called
    every such chunk different, for ever. NaN and the infinities are now in the row's text, the sums finite."""
    state, sink = run(postgres, pg_db, tmp_path, "public.f",
                      "CREATE TABLE public.f (id int PRIMARY KEY, a float8, b real, c float8[])",
                      "INSERT INTO public.f SELECT g, CASE g % 4 WHEN 0 THEN 'NaN' WHEN 1 THEN 'Infinity' WHEN 2 THEN '-Infinity' ELSE g / 3.0 END, "
                      "CASE g % 3 WHEN 0 THEN 'NaN'::real ELSE g END, ARRAY['NaN'::float8, g] FROM generate_series(1, 300) g")
    postgres.sql("UPDATE public.f SET a = 'NaN', b = '-Infinity' WHERE id % 5 = 0", db=pg_db)
    code, _, err = tail(state, sink)
    assert code == 0, err[-1500:]
    verify_equal(state, sink)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "public.*", "--rows")
    assert code == 0 and json.loads(out)["equal"], (out + err)[-1500:]
