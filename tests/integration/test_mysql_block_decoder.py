"""MySQL rows events decoded column by column (``source/mysql/block_decoder.py``) against the per-row path, on a real
MariaDB binlog: the same range read with and without blocks must give the same changelog rows, value for value and
in the same order, for every type the blocks read, NULLs, zero dates, multi-row events of different lengths, key
changes (which leave the block path) and a layout change in the middle of the range."""
from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.schema_events import SchemaVersion
from airflow_provider_dblog.source.mysql import block_decoder
from airflow_provider_dblog.store.lake import block_rows, event_rows
from tests.support.mysql_values import INT_RANGES, decimals, sql_param, typed_table

COLUMNS = {
    "ti": "TINYINT", "tiu": "TINYINT UNSIGNED", "si": "SMALLINT", "siu": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT", "miu": "MEDIUMINT UNSIGNED", "i": "INT", "iu": "INT UNSIGNED",
    "bi": "BIGINT", "biu": "BIGINT UNSIGNED", "f": "FLOAT", "d": "DOUBLE",
    "dec1": "DECIMAL(15,2)", "dec3": "DECIMAL(10,0)", "dec5": "DECIMAL(5,5)", "dec6": "DECIMAL(18,6)",
    "dec7": "DECIMAL(18,0)", "dec8": "DECIMAL(1,0)", "dec9": "DECIMAL(12,9)", "dec2": "DECIMAL(20,6)",
    "dec4": "DECIMAL(38,10)", "dec10": "DECIMAL(30,30)",
    "da": "DATE", "dtm": "DATETIME", "dtm1": "DATETIME(1)", "dtm3": "DATETIME(3)", "dtm5": "DATETIME(5)",
    "dtm6": "DATETIME(6)", "ts0": "TIMESTAMP NULL", "ts3": "TIMESTAMP(3) NULL", "ts6": "TIMESTAMP(6) NULL",
    "y": "YEAR", "c": "CHAR(10)", "c100": "CHAR(100)", "vc": "VARCHAR(300)", "va": "VARCHAR(20) CHARACTER SET ascii",
    "vcl": "VARCHAR(50) CHARACTER SET latin1",
    "tx": "TEXT", "mtx": "MEDIUMTEXT", "vb": "VARBINARY(20)", "bl": "BLOB", "tb": "TINYBLOB",
    "e": "ENUM('a','b','it''s')", "bt": "BIT(12)", "b1": "BIT(1)",
}

_ts = st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))


def _fsp(fsp: int):
    return lambda v: v.replace(microsecond=v.microsecond // 10 ** (6 - fsp) * 10 ** (6 - fsp))


VALUES = {
    **{name: st.integers(*r) for name, r in INT_RANGES.items()},
    "f": st.floats(allow_nan=False, allow_infinity=False, width=32), "d": st.floats(allow_nan=False, allow_infinity=False),
    "dec1": decimals(15, 2), "dec3": decimals(10, 0), "dec5": decimals(5, 5), "dec6": decimals(18, 6),
    "dec7": decimals(18, 0), "dec8": decimals(1, 0), "dec9": decimals(12, 9), "dec2": decimals(20, 6),
    "dec4": decimals(38, 10), "dec10": decimals(30, 30),
    # zero and partly zero dates (allowed by an empty sql_mode) are NULL in the lake on both paths
    "da": st.dates(dt.date(1000, 1, 1)) | st.sampled_from(["0000-00-00", "2001-00-10", "2001-02-00"]),
    "dtm": st.datetimes(dt.datetime(1000, 1, 1)).map(_fsp(0)) | st.just("0000-00-00 00:00:00"),
    "dtm1": st.datetimes(dt.datetime(1000, 1, 1)).map(_fsp(1)),
    "dtm3": st.datetimes(dt.datetime(1000, 1, 1)).map(_fsp(3)),
    "dtm5": st.datetimes(dt.datetime(1000, 1, 1)).map(_fsp(5)),
    "dtm6": st.datetimes(dt.datetime(1000, 1, 1)) | st.just("2001-02-00 10:11:12.5"),
    "ts0": _ts.map(_fsp(0)), "ts3": _ts.map(_fsp(3)), "ts6": _ts,
    "y": st.integers(1901, 2155) | st.just(0),
    "c": st.text(max_size=10).map(lambda s: s.rstrip(" ")), "c100": st.text(max_size=100).map(lambda s: s.rstrip(" ")),
    "vc": st.text(max_size=300), "vcl": st.text(st.characters(codec="cp1252"), max_size=50) | st.just("Ÿ€é\x81"),
    "va": st.text(st.characters(max_codepoint=127), max_size=20),
    "tx": st.text(max_size=200), "mtx": st.text(max_size=400), "vb": st.binary(max_size=20),
    "bl": st.binary(max_size=300), "tb": st.binary(max_size=50), "e": st.sampled_from(["a", "b", "it's"]),
    "bt": st.integers(0, 4095).map(lambda v: v.to_bytes(2, "big")), "b1": st.sampled_from([b"\0", b"\1"]),
}
ROW = st.fixed_dictionaries({name: st.none() | strategy for name, strategy in VALUES.items()})
# a statement: insert k rows, update some rows (keeping or changing their key), or delete some rows
STATEMENTS = st.lists(st.tuples(st.sampled_from(["insert", "insert", "update", "update_key", "delete"]),
                                st.integers(1, 6), ROW), min_size=10, max_size=30)


@pytest.fixture(scope="module")
def typed(mariadb):
    yield from typed_table(mariadb, "blocks.t", COLUMNS)


def _write(dialect, statements, seed: int) -> None:
    """Run the statements in a few transactions; keys are drawn from the rows that exist."""
    rng = random.Random(seed)
    names = ["id", *COLUMNS]
    conn = dialect.client.connect("blocks")
    keys: list[int] = []
    next_key = 0
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("BEGIN")
        for n, (kind, count, row) in enumerate(statements):
            if kind == "insert" or not keys:
                batch = list(range(next_key, next_key + count))
                next_key += count
                cur.executemany(f"INSERT INTO t VALUES ({', '.join(['%s'] * len(names))})",
                                [[k, *(sql_param(row.get(c)) for c in COLUMNS)] for k in batch])
                keys.extend(batch)
            else:
                chosen = rng.sample(keys, min(count, len(keys)))
                where = f"id IN ({', '.join(map(str, chosen))})"
                if kind == "delete":
                    cur.execute(f"DELETE FROM t WHERE {where}")
                    keys = [k for k in keys if k not in chosen]
                elif kind == "update_key":
                    cur.execute(f"UPDATE t SET id = id + 100000, vc = CONCAT(COALESCE(vc, ''), 'k') WHERE {where}")
                    keys = [k + 100000 if k in chosen else k for k in keys]
                else:
                    sets = ", ".join(f"`{c}` = %s" for c in ("i", "dec1", "vc", "bl", "dtm6", "da"))
                    cur.execute(f"UPDATE t SET {sets} WHERE {where}",
                                [sql_param(row.get(c)) for c in ("i", "dec1", "vc", "bl", "dtm6", "da")])
            if n % 7 == 6:
                cur.execute("COMMIT")
                cur.execute("BEGIN")
        cur.execute("COMMIT")
    conn.close()


def _rows(items, schema) -> tuple[list[dict], int]:
    """Changelog rows of a read (events and blocks in the order they came), and how many rows blocks gave."""
    out, in_blocks, events = [], 0, []

    def flush():
        if events:
            out.extend(event_rows(events, [0] * len(events), schema).to_pylist())
            events.clear()
    for item in items:
        if isinstance(item, ChangeEvent):
            events.append(item)
        elif isinstance(item, ChangeBlock):
            flush()
            out.extend(block_rows(item, [0] * len(item), schema).to_pylist())
            in_blocks += len(item)
        else:
            assert isinstance(item, SchemaVersion), item
    flush()
    return out, in_blocks


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(statements=STATEMENTS, seed=st.integers(0, 1000))
def test_blocks_are_the_per_row_paths_rows(typed, statements, seed):
    mariadb, dialect, meta = typed
    mariadb.sql("DELETE FROM blocks.t")
    start = dialect.current_position()
    _write(dialect, statements, seed)
    end = dialect.current_position()
    schema = dialect.arrow_schema(meta)
    one_by_one, none = _rows(dialect.read_changes(start, end, [meta]), schema)
    assert none == 0
    blocks, in_blocks = _rows(dialect.read_changes(start, end, [meta], blocks_after={meta.qualified: start}), schema)
    assert len(blocks) == len(one_by_one)
    for i, (a, b) in enumerate(zip(blocks, one_by_one)):
        assert a == b, f"row {i} differs: block path {a} / per-row path {b}"
    plain = sum(1 for kind, _, _ in statements if kind != "update_key")
    if plain >= 2 * block_decoder.MIN_EVENTS:
        assert in_blocks > 0, "no block was decoded"


def test_blocks_follow_a_layout_change_and_start_after_blocks_after(typed):
    """A column added in the middle of the range starts a new run with the new columns; the rows before
    ``blocks_after`` come one by one; every row once, in order, as the per-row path gives them."""
    mariadb, dialect, _ = typed
    mariadb.sql("CREATE TABLE IF NOT EXISTS blocks.v (id INT PRIMARY KEY, a VARCHAR(20), n DECIMAL(9,2))")
    mariadb.sql("DELETE FROM blocks.v")
    meta = dialect.describe_table("blocks.v")
    start = dialect.current_position()
    for k in range(40):
        mariadb.sql(f"INSERT INTO blocks.v VALUES ({k}, 'r{k}', {k}.5)")
    middle = dialect.current_position()
    for k in range(40):
        mariadb.sql(f"UPDATE blocks.v SET n = n + 1 WHERE id = {k}")
    mariadb.sql("ALTER TABLE blocks.v ADD COLUMN b INT DEFAULT 7")
    for k in range(40, 80):
        mariadb.sql(f"INSERT INTO blocks.v VALUES ({k}, 'r{k}', {k}.25, {k})")
    end = dialect.current_position()
    reference = list(dialect.read_changes(start, end, [meta]))
    items = list(dialect.read_changes(start, end, [meta], blocks_after={meta.qualified: middle}))
    blocks = [i for i in items if isinstance(i, ChangeBlock)]
    assert blocks and all(b.first > middle for b in blocks)
    assert {len(b.images.type) for b in blocks} == {3, 4}  # both layouts read as blocks

    def flat(seq):
        out = []
        for item in seq:
            if isinstance(item, ChangeEvent):
                out.append((item.pos.encode(), item.op, dict(item.after or item.before)))
            elif isinstance(item, ChangeBlock):
                images = item.images.to_pylist()
                out.extend(zip(item.positions.to_pylist(), item.ops.to_pylist(), images))
        return out
    assert flat(items) == flat(reference)
    assert [i.meta.column_names for i in items if isinstance(i, SchemaVersion)] == \
        [i.meta.column_names for i in reference if isinstance(i, SchemaVersion)]


def test_a_layout_the_blocks_do_not_read_is_decoded_one_by_one(typed):
    """TIME, SET, JSON: no block, the same rows."""
    mariadb, dialect, _ = typed
    mariadb.sql("CREATE TABLE IF NOT EXISTS blocks.w (id INT PRIMARY KEY, t TIME, s SET('x','y'), j JSON, "
                "l VARCHAR(10) CHARACTER SET latin1)")
    meta = dialect.describe_table("blocks.w")
    start = dialect.current_position()
    for k in range(20):
        mariadb.sql(f"INSERT INTO blocks.w VALUES ({k}, '10:00:0{k % 10}', 'x', '[{k}]', 'é{k}')")
    end = dialect.current_position()
    items = list(dialect.read_changes(start, end, [meta], blocks_after={meta.qualified: start}))
    assert not any(isinstance(i, ChangeBlock) for i in items)
    assert [i.after for i in items] == [e.after for e in dialect.read_changes(start, end, [meta])]
    assert pa.array([i.after["l"] for i in items]).to_pylist()[:2] == ["é0", "é1"]


def test_a_range_cut_at_transaction_boundaries_reads_as_one(typed):
    """``split_points`` cuts a real binlog range at transaction ends into pieces of about equal bytes; the pieces,
    each read alone from its cut (blocks included), give the rows of one read of the range, each once."""
    from airflow_provider_dblog.core.chunks import ChunkRange
    from airflow_provider_dblog.core.offsets import TableOffsets
    from airflow_provider_dblog.readers.change_reader import ChangeReader, TableStream
    from airflow_provider_dblog.source.mysql import binlog

    mariadb, dialect, _ = typed
    mariadb.sql("CREATE TABLE IF NOT EXISTS blocks.s (id INT PRIMARY KEY, a VARCHAR(50), n INT) DEFAULT CHARSET=utf8mb4")
    mariadb.sql("DELETE FROM blocks.s")
    meta = dialect.describe_table("blocks.s")
    start = dialect.current_position()
    conn = dialect.client.connect("blocks")
    with conn.cursor() as cur:
        for t in range(120):
            cur.execute("BEGIN")
            cur.executemany("INSERT INTO s VALUES (%s, %s, %s)", [(t * 20 + i, f"r{t}-{i}", i) for i in range(20)])
            cur.execute("UPDATE s SET n = n + 1 WHERE id %% 3 = %s", (t % 3,))
            cur.execute("COMMIT")
    conn.close()
    end = dialect.current_position()
    cuts = binlog.split_points(dialect.client, start, end, 3, min_bytes=0)
    assert len(cuts) == 2 and start < cuts[0] < cuts[1] < end
    commits = {e.end_pos for e in binlog.listed_events(dialect.client, start, [start.file]) if e.is_commit}
    assert all(c.offset in commits for c in cuts)
    sizes = [b.offset - a.offset for a, b in zip([start, *cuts], [*cuts, end])]
    assert all(s > sum(sizes) / 6 for s in sizes), sizes  # about a third each
    whole_table = TableOffsets.from_chunks(meta.qualified, [ChunkRange(0, None, None)], {0: start})
    stream = {meta.qualified: TableStream(meta, whole_table, start)}

    def rows(begin, stop):
        return [r for _, b in ChangeReader(stream, dialect).batches(stop, begin=begin) for r in b.to_pylist()]
    whole = sorted(rows(None, end), key=lambda r: r["_pos"])
    pieces = sorted(rows(None, cuts[0]) + rows(cuts[0], cuts[1]) + rows(cuts[1], end), key=lambda r: r["_pos"])
    assert pieces == whole and len({r["_pos"] for r in whole}) == len(whole) > 2400
