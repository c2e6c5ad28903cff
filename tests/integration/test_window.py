"""Watermark window reads under concurrent writes: each chunk's output is its range's exact state
at its high watermark, where the oracle replays the binlog (independent of the chunk path)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.source.mysql.dialect import MySqlDialect
from airflow_provider_dblog.readers.chunk_reader import read_chunk
from tests.support.workload import Writer, replay_binlog

ROWS = 50_000


def make_row(key, rnd):
    return {"id": key, "v": f"w{rnd.random():.6f}", "d": Decimal(rnd.randint(-10**9, 10**9)) / 1000,
            "t": dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rnd.randint(0, 10**13))}


def mutate(rnd):
    return {"v": f"u{rnd.random():.6f}", "d": Decimal(rnd.randint(-10**9, 10**9)) / 1000}


@pytest.mark.parametrize("strategy", ["position", "watermark_table", "consistent_snapshot"])
def test_each_chunk_equals_its_range_at_high_watermark(mariadb, db, strategy):
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    start = dialect.current_position()
    mariadb.sql(f"CREATE TABLE {db}.w (id INT PRIMARY KEY, v VARCHAR(40), d DECIMAL(12,3), t DATETIME(6))")
    mariadb.sql(f"INSERT INTO {db}.w SELECT seq, CONCAT('v', seq), seq / 7, '2024-01-01' + INTERVAL seq SECOND "
                f"FROM seq_1_to_{ROWS}", db=db)
    meta = dialect.describe_table(f"{db}.w")
    assert dialect.resolve_strategy(strategy, meta) == strategy
    chunks = dialect.split_chunks(meta, 5_000)
    writer = Writer(mariadb.port, f"{db}.w", int(ROWS * 1.2), make_row, mutate, seed=len(strategy))
    writer.start()
    try:
        writer.wait_started(100)  # the reads are quick: let the writer get going first
        reads = [(chunk, read_chunk(dialect, meta, chunk, strategy)) for chunk in chunks]
    finally:
        counts = writer.stop()
    assert sum(counts.values()) > 100, counts
    assert sum(r.window_events for _, r in reads) > 0, "the writer never hit a window: nothing was merged"
    oracle = replay_binlog(mariadb.port, f"{db}.w", start.file, start.offset,
                           [(r.hw.file, r.hw.offset) for _, r in reads])
    for chunk, read in reads:
        assert read.lw <= read.hw
        expected = {k: v for k, v in oracle[(read.hw.file, read.hw.offset)].items()
                    if (chunk.lo is None or k >= chunk.lo[0]) and (chunk.hi is None or k < chunk.hi[0])}
        actual = {row["id"]: row for row in read.rows.to_pylist()}
        assert actual.keys() == expected.keys(), (chunk, sorted(actual.keys() ^ expected.keys())[:10])
        different = [k for k in expected if expected[k] != actual[k]]
        assert not different, (chunk, [(expected[k], actual[k]) for k in different[:3]])


def test_window_spanning_a_binlog_rotation(mariadb, db):
    """Events on both sides of a FLUSH BINARY LOGS inside the window are merged in order."""
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    mariadb.sql(f"CREATE TABLE {db}.r (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {db}.r VALUES (1, 1), (2, 2), (3, 3)")
    meta = dialect.describe_table(f"{db}.r")
    from airflow_provider_dblog.core.chunks import ChunkRange

    mark = dialect.watermark("position", meta)
    mark.low()
    selected = dialect.read_snapshot(meta, ChunkRange(0, None, None))
    mariadb.sql(f"UPDATE {db}.r SET v = 10 WHERE id = 1", "FLUSH BINARY LOGS",
                f"DELETE FROM {db}.r WHERE id = 2", f"UPDATE {db}.r SET id = 30 WHERE id = 3")
    mark.high()
    lw, hw, events = mark.window()
    assert hw.seq == lw.seq + 1
    from airflow_provider_dblog.core.window import merge_window

    rows = merge_window(selected, meta.key_columns, ChunkRange(0, None, None), events,
                        lambda keys: dialect.sort_keys(meta, keys)).to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == [(1, 10), (30, 3)]
    assert [e.op for e in events] == ["u", "d", "d", "c"]
    assert all(isinstance(e.pos, SourcePosition) for e in events)


def test_connections_share_one_tls_context_and_the_low_watermark_reuses_the_open_connection(mariadb, db):
    """pymysql builds a TLS context per connection unless given one (≈19 ms of CPU loading the CA
    store); the dialect's connections share one, and ``low()`` of consistent_snapshot opens none and
    leaves its connection outside any transaction."""
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    mariadb.sql(f"CREATE TABLE {db}.c (id INT PRIMARY KEY)", f"INSERT INTO {db}.c VALUES (1)")
    meta = dialect.describe_table(f"{db}.c")
    control, other = dialect.client.conn, dialect.client.connect()
    assert control.ctx is other.ctx
    other.close()
    mark = dialect.watermark("consistent_snapshot", meta)
    mark.low()
    assert dialect.client.conn is control and dialect.client.scalar("SELECT @@in_transaction") == 0
    mariadb.sql(f"UPDATE {db}.c SET id = 2")
    mark.high()
    lw, hw, events = mark.window()
    assert lw < hw and [(e.op, e.key) for e in events] == [("d", (1,)), ("c", (2,))]
