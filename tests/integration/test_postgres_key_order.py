"""PostgreSQL text keys under the ``C`` collation compare the database encoding's bytes: Python's order of the
decoded text is that order only in UTF8 and LATIN1 databases (code points in byte order). In WIN1251, '№' (0xB9)
sorts before 'я' (0xFF), while Python puts U+2116 after U+044F."""
from __future__ import annotations

import random

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.source import open_dialect
from tests.support.postgres_fixtures import postgres  # noqa: F401  (fixtures)

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
