"""The chunk planner against the real database: every row in exactly one chunk, counted by the DB."""
from __future__ import annotations

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.source.mysql.dialect import MySqlDialect
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.source.mysql.sql import range_condition, table_sql


def count_rows(dialect, meta, chunk) -> int:
    return int(dialect.client.scalar(f"SELECT COUNT(*) FROM {table_sql(meta)} "
                                     f"WHERE {range_condition(meta, chunk.lo, chunk.hi)}"))

CASES = {
    "empty": ("id INT PRIMARY KEY", []),
    "one_row": ("id INT PRIMARY KEY", ["(7)"]),
    "dense": ("id INT PRIMARY KEY, v INT", ["SELECT seq, seq FROM seq_1_to_2000"]),
    "sparse": ("id BIGINT PRIMARY KEY", ["SELECT seq * seq * 1000 FROM seq_1_to_1500", "(1)", "(2)"]),
    "signed_unsigned_extremes": ("id BIGINT PRIMARY KEY",
                                 ["(-9223372036854775808)", "(9223372036854775807)", "(-100000)",
                                  "SELECT CAST(seq AS SIGNED) - 500 FROM seq_1_to_1000"]),
    "unsigned_max": ("id BIGINT UNSIGNED PRIMARY KEY",
                     ["(18446744073709551615)", "(18446744073709551614)", "(0)",
                      "SELECT seq * 1000000007 FROM seq_1_to_1000"]),
    "varchar_ci": ("k VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY",
                   ["SELECT CONCAT(IF(seq % 2, 'a', 'A'), LPAD(seq, 5, '0'), IF(seq % 3, 'x', 'Ä')) FROM seq_1_to_1500",
                    "('b')", "('Z')", "('ß')", "('é')", "('😀')", "(' space')"]),
    "composite": ("k VARCHAR(20) COLLATE utf8mb4_general_ci, n INT, PRIMARY KEY (k, n)",
                  ["SELECT CONCAT(CHAR(65 + seq % 26), IF(seq % 2, 'b', 'B')), seq FROM seq_1_to_1800"]),
    "composite_int_lead": ("o BIGINT, l INT, PRIMARY KEY (o, l)",  # lineitem's shape: sparse orders, 1-4 lines
                           ["SELECT CAST(a.seq AS SIGNED) * 7 - 1000, b.seq FROM seq_1_to_600 a, seq_1_to_4 b WHERE b.seq <= 1 + a.seq % 4",
                            "(-9223372036854775808, 1)", "(9223372036854775807, 2)"]),
    "datetime": ("t DATETIME(6) PRIMARY KEY",
                 ["SELECT '2020-01-01' + INTERVAL seq * 7919 SECOND + INTERVAL seq MICROSECOND FROM seq_1_to_1500"]),
}


def _load(mariadb, db, name, ddl, rows):
    mariadb.sql(f"CREATE TABLE {db}.{name} ({ddl})")
    for row in rows:
        stmt = f"INSERT INTO {db}.{name} {row}" if row.startswith("SELECT") else f"INSERT INTO {db}.{name} VALUES {row}"
        mariadb.sql(stmt, db=db)


def _assert_exact_cover(dialect, meta, chunks):
    """Each row satisfies exactly one chunk's condition; the DB evaluates every condition."""
    table = table_sql(meta)
    total = dialect.client.scalar(f"SELECT COUNT(*) FROM {table}")
    conds = " + ".join(f"({range_condition(meta, c.lo, c.hi)})" for c in chunks)
    assert dialect.client.scalar(f"SELECT COUNT(*) FROM {table} WHERE ({conds}) <> 1") == 0
    assert sum(count_rows(dialect, meta, c) for c in chunks) == total
    assert chunks[0].lo is None and chunks[-1].hi is None
    assert [c.id for c in chunks] == list(range(len(chunks)))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("chunk_size", [13, 97, 1000])
def test_chunks_cover_every_row_once(mariadb, db, case, chunk_size):
    ddl, rows = CASES[case]
    _load(mariadb, db, case, ddl, rows)
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    meta = dialect.describe_table(f"{db}.{case}")
    chunks = dialect.split_chunks(meta, chunk_size)
    _assert_exact_cover(dialect, meta, chunks)
    total = dialect.client.scalar(f"SELECT COUNT(*) FROM {db}.{case}")
    if total == 0:
        assert len(chunks) == 1
    if case in ("sparse", "varchar_ci", "composite", "datetime") and total > chunk_size:
        # boundaries queried from the DB: chunks hold exactly chunk_size rows but the last
        assert all(count_rows(dialect, meta, c) == chunk_size for c in chunks[:-1])


def test_composite_key_with_an_integer_lead_is_split_evenly_by_value(mariadb, db):
    """Boundaries come from index seeks at evenly spaced leading values (no scan of the whole index):
    each is a whole key, chunks hold about chunk_size rows."""
    ddl = "o INT UNSIGNED, l TINYINT, PRIMARY KEY (o, l)"
    _load(mariadb, db, "lines", ddl, ["SELECT a.seq * 3, b.seq FROM seq_1_to_4000 a, seq_1_to_3 b"])
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    meta = dialect.describe_table(f"{db}.lines")
    chunks = dialect.split_chunks(meta, 1000)
    _assert_exact_cover(dialect, meta, chunks)
    sizes = [count_rows(dialect, meta, c) for c in chunks]
    assert len(chunks) in (12, 13) and all(900 <= n <= 1100 for n in sizes[:-1]), sizes
    assert all(c.lo is None or c.lo[1] == 1 for c in chunks)  # first line of the first order at or after a step


def test_case_insensitive_boundaries_follow_the_collation(mariadb, db):
    _load(mariadb, db, "ci", "k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY",
          ["('a')", "('B')", "('c')", "('D')", "('e')", "('F')"])
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    meta = dialect.describe_table(f"{db}.ci")
    chunks = dialect.split_chunks(meta, 2)
    assert [c.hi for c in chunks[:-1]] == [("c",), ("e",)]  # Python's sort would put 'B','D','F' first
    keys = [("a",), ("B",), ("c",), ("D",), ("e",), ("F",)]
    boundaries = dialect.sort_keys(meta, [c.hi for c in chunks[:-1]])
    from airflow_provider_dblog.core.chunks import locate

    assert [locate(sk, boundaries) for sk in dialect.sort_keys(meta, keys)] == [0, 0, 1, 1, 2, 2]


def test_table_without_primary_key_needs_a_chunk_key(mariadb, db):
    _load(mariadb, db, "nopk", "a INT NOT NULL, b VARCHAR(10) NOT NULL, KEY (a)", ["SELECT seq % 50, seq FROM seq_1_to_1000"])
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    with pytest.raises(DblogError, match="no primary key.*--chunk-key"):
        dialect.describe_table(f"{db}.nopk")
    meta = dialect.describe_table(f"{db}.nopk", ["a"])
    assert meta.key_source == "chunk_key"
    with pytest.raises(DblogError, match=f"--chunk-key a of {db}.nopk does not identify rows: 20 rows have"):
        dialect.split_chunks(meta, 100)  # the lake keeps one row per key: 20 rows would be one
    meta = dialect.describe_table(f"{db}.nopk", ["a", "b"])
    chunks = dialect.split_chunks(meta, 100)
    _assert_exact_cover(dialect, meta, chunks)
    assert len(chunks) > 3
    with pytest.raises(DblogError, match="--chunk-key nope is not a column"):
        dialect.describe_table(f"{db}.nopk", ["nope"])


def test_unknown_table_is_a_clear_error(mariadb, db):
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    with pytest.raises(DblogError, match=f"unknown table {db}.missing"):
        dialect.describe_table(f"{db}.missing")


def test_planning_a_large_sparse_table_is_fast(mariadb, db):
    """300k sparse keys: the boundary queries walk the index once (a few seconds at most)."""
    import time

    _load(mariadb, db, "big", "id BIGINT PRIMARY KEY", ["SELECT seq * seq FROM seq_1_to_300000"])
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    meta = dialect.describe_table(f"{db}.big")
    started = time.time()
    chunks = dialect.split_chunks(meta, 20_000)
    elapsed = time.time() - started
    assert len(chunks) == 15
    print(f"planned 300k sparse rows into {len(chunks)} chunks in {elapsed:.2f}s")


def test_planning_again_keeps_the_first_plan(mariadb, db, tmp_path):
    """A second `dblog plan` / `dblog run` on the same state resumes: same chunks, reports kept."""
    from airflow_provider_dblog.steps.plan import plan_table
    from airflow_provider_dblog.store.state import StateDir

    _load(mariadb, db, "again", "id INT PRIMARY KEY", ["SELECT seq FROM seq_1_to_1000"])
    source = SourceConfig.parse(mariadb.uri())
    first = plan_table(source, f"{db}.again", str(tmp_path), chunk_size=100, batch_size=4)
    StateDir(tmp_path).write_report(f"{db}.again", 0, {"chunk": 0})
    _load(mariadb, db, "other", "id INT PRIMARY KEY", ["SELECT seq FROM seq_1_to_10"])
    mariadb.sql(f"INSERT INTO {db}.again SELECT seq + 1000 FROM seq_1_to_5000", db=db)
    second = plan_table(source, f"{db}.again", str(tmp_path), chunk_size=10, batch_size=1)
    assert second == first
    assert StateDir(tmp_path).reports(f"{db}.again") == {0: {"chunk": 0}}
    both = plan_table(source, f"{db}.other", str(tmp_path), chunk_size=5, batch_size=1)
    assert [b["tables"] for b in both["batches"]] == [[f"{db}.again"]] * 3 + [[f"{db}.other"]] * 2


def test_plan_records_position_and_gtid(mariadb, db, tmp_path):
    from airflow_provider_dblog.steps.plan import plan_table
    from airflow_provider_dblog.store.state import StateDir

    _load(mariadb, db, "g", "id INT PRIMARY KEY", ["(1)"])
    plan_table(SourceConfig.parse(mariadb.uri()), f"{db}.g", str(tmp_path))
    plan = StateDir(tmp_path).table(f"{db}.g")
    assert plan.planned_at.file.startswith("mysql-bin.")
    assert plan.planned_gtid and plan.planned_gtid.startswith("0-1-")  # MariaDB domain-server-seq
