"""Text values holding the characters Python's ``str.splitlines`` breaks on besides ``\\n`` (U+2028, U+2029, NEL,
VT, FF, the file/group/record separators, CR). JSON leaves U+2028, U+2029 and NEL unescaped, so a Delta log entry
whose column statistics hold such a value is one JSON line with those characters inside it: a reader that split
the log with ``splitlines`` cut the line inside a string and every run of the capture failed on the log it wrote.
Snapshotted from both sources through ``dblog run``; the lake must equal the source."""
from __future__ import annotations

import psycopg2
import pymysql
from deltalake import DeltaTable

from airflow_provider_dblog.source.postgres.values import libpq_options
from tests.support.cli import captured
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

PASSWORD = "pg-Lines-5ecret"
BREAKS = ["\u2028", "\u2029", "\u0085", "\v", "\f\x1c\x1d\x1e\r"]
COLUMNS = [f"t{i}" for i in range(len(BREAKS))]
# one column per break, so each is the minimum and maximum of its column's statistics; a second, plain row
ROWS = [(1, *(f"line{b}two" for b in BREAKS)), (2, *(["plain"] * len(BREAKS)))]
CREATE = f"CREATE TABLE {{table}} (id int PRIMARY KEY, {', '.join(f'{c} text' for c in COLUMNS)})"
INSERT = f"INSERT INTO {{table}} VALUES ({', '.join(['%s'] * (len(COLUMNS) + 1))})"


def lake_rows(sink: str, table: str) -> list[tuple]:
    rows = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(columns=["id", *COLUMNS]).to_pylist()
    return sorted(tuple(r[c] for c in ["id", *COLUMNS]) for r in rows)


def test_postgresql_values_with_line_breaks_are_snapshotted_whole(postgres, pg_db, tmp_path):
    pg, db = postgres, pg_db
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    conn = psycopg2.connect(pg.dsn(db), options=libpq_options())
    conn.autocommit = True
    with conn, conn.cursor() as cur:
        cur.execute(CREATE.format(table="public.breaks"))
        cur.executemany(INSERT.format(table="public.breaks"), ROWS)
    conn.close()
    state, sink = captured(pg.uri(db, password=PASSWORD), "public.breaks", tmp_path, 100)
    assert lake_rows(sink, "public.breaks") == ROWS


def test_mysql_values_with_line_breaks_are_snapshotted_whole(mariadb, source_uri, db, tmp_path):
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", database=db, autocommit=True,
                           charset="utf8mb4")
    with conn.cursor() as cur:
        cur.execute(CREATE.format(table="breaks").replace(" text", " text CHARACTER SET utf8mb4"))
        cur.executemany(INSERT.format(table="breaks"), ROWS)
    conn.close()
    state, sink = captured(source_uri, f"{db}.breaks", tmp_path, 100)
    assert lake_rows(sink, f"{db}.breaks") == ROWS
