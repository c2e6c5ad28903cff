"""Row-by-row, column-by-column comparison of a mirror with the live source, read independently of
the snapshot path (pymysql text protocol, not connectorx)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow.parquet as pq
import pymysql

# the e2e table: every type whose meaning DESIGN.md says the lake must keep
TYPES_DDL = """(
  id INT PRIMARY KEY,
  dec_v DECIMAL(20,6),
  dt_v DATETIME(6),
  ts_v TIMESTAMP(3) NULL DEFAULT NULL,
  d_v DATE,
  ub_v BIGINT UNSIGNED,
  txt_v VARCHAR(100) CHARACTER SET utf8mb4,
  j_v JSON,
  b_v BLOB,
  e_v ENUM('red','green','blue'),
  f_v DOUBLE,
  n_v INT NULL
)"""


def typed_row(key, rnd):
    null = rnd.random() < 0.1
    return {
        "id": key,
        "dec_v": Decimal(rnd.randint(-10**19, 10**19)) / 10**6,
        "dt_v": dt.datetime(2020, 1, 1) + dt.timedelta(microseconds=rnd.randint(0, 10**14)),
        "ts_v": None if null else dt.datetime(2021, 1, 1) + dt.timedelta(milliseconds=rnd.randint(0, 10**10)),
        "d_v": dt.date(2000, 1, 1) + dt.timedelta(days=rnd.randint(0, 9000)),
        "ub_v": rnd.choice([0, 2**64 - 1, rnd.randint(0, 2**64 - 1)]),
        "txt_v": rnd.choice(["plain", "émoji 😀", "tab\tquote'\"", "", "ünïcødé ✓"]) + str(rnd.randint(0, 99)),
        "j_v": None if null else '{"k": [1, 2.5, "x"], "n": null, "s": "😀"}',
        "b_v": bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 40))),
        "e_v": None if null else rnd.choice(["red", "green", "blue"]),
        "f_v": rnd.random() * 1e6,
        "n_v": None if null else rnd.randint(-1000, 1000),
    }


def typed_mutation(rnd):
    row = typed_row(0, rnd)
    return {c: row[c] for c in rnd.sample(sorted(set(row) - {"id"}), 4)}


SEED_SQL = ("SELECT seq, seq / 7, '2024-01-01' + INTERVAL seq SECOND, '2024-02-01' + INTERVAL seq SECOND, "
            "'2024-01-01' + INTERVAL seq % 300 DAY, 18446744073709551615 - seq, CONCAT('row ', seq, ' 😀'), "
            "JSON_OBJECT('n', seq), UNHEX(HEX(seq)), ELT(1 + seq % 3, 'red', 'green', 'blue'), seq * 1.5, "
            "IF(seq % 10 = 0, NULL, seq) FROM seq_1_to_{n}")


def _row_key(row: dict, key: tuple[str, ...]):
    return row[key[0]] if len(key) == 1 else tuple(row[c] for c in key)


def source_rows(port: int, table: str, user: str = "root", password: str = "", key: tuple[str, ...] = ("id",)) -> dict:
    """``SELECT *`` by ``key`` (the row identity: a primary key, or a chunk key unique in practice; a
    duplicate fails here). Keys are the stored values, compared exactly (not by the column's collation)."""
    conn = pymysql.connect(host="127.0.0.1", port=port, user=user, password=password, charset="utf8mb4",
                           init_command="SET time_zone = '+00:00'")
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM {table}")
        fetched = cur.fetchall()
    conn.close()
    rows = {_row_key(r, key): r for r in fetched}
    assert len(rows) == len(fetched), f"{table}: {key} is not unique at the source"
    return rows


def _same(want, have) -> bool:
    if want is None or have is None:
        return want is None and have is None
    if isinstance(have, dt.datetime) and have.tzinfo is not None:
        have = have.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(want, (bytes, bytearray)):
        return bytes(want) == bytes(have)
    if isinstance(want, float):
        return abs(want - have) <= 1e-9 * max(1.0, abs(want))
    return want == have  # int vs Decimal(20,0), Decimal vs Decimal, str, date, datetime


def compare_mirror(mirror_dir: str, port: int, table: str) -> list[str]:
    """Every difference between the mirror and ``SELECT *`` (empty: equal)."""
    return compare_rows(pq.read_table(mirror_dir), port, table)


def duckdb_current(sink: str, table: str, extensions: str):
    """``SINK/DB.TABLE/current`` read by DuckDB 1.5.5 with the Delta extension from its PyPI wheel, as a
    user would query the lake (no dblog code involved)."""
    import duckdb
    from duckdb_extensions import import_extension

    con = duckdb.connect(config={"extension_directory": extensions})
    import_extension("delta", con=con)
    con.sql("LOAD delta")
    return con.sql(f"SELECT * FROM delta_scan('{sink}/{table}/current')").arrow()


def compare_rows(lake, port: int, table: str, key: tuple[str, ...] = ("id",)) -> list[str]:
    """Every difference between the lake's rows (an Arrow table) and ``SELECT *`` (empty: equal), rows
    matched by ``key``, column by column."""
    return compare_with(lake, source_rows(port, table, key=key), key)


def compare_with(lake, want: dict, key: tuple[str, ...] = ("id",)) -> list[str]:
    """Every difference between the lake's rows (an Arrow table) and ``want`` (rows by key, as ``source_rows``
    returns them, e.g. recorded before the source's table was dropped); empty: equal."""
    key = tuple(key)
    mirror = lake.read_all() if hasattr(lake, "read_all") else lake
    extra_cols = [c for c in mirror.column_names if c not in next(iter(want.values()), {}) and not c.startswith("_")]
    problems = [f"unexpected column {c}" for c in extra_cols]
    have = {_row_key(r, key): r for r in mirror.to_pylist()}
    if len(have) != mirror.num_rows:
        problems.append(f"{mirror.num_rows - len(have)} duplicate key(s) in the lake")
    problems += [f"missing id {k}" for k in want.keys() - have.keys()]
    problems += [f"extra id {k}" for k in have.keys() - want.keys()]
    for key in want.keys() & have.keys():
        for col, value in want[key].items():
            if not _same(value, have[key].get(col)):
                problems.append(f"id {key} column {col}: source {value!r} != lake {have[key].get(col)!r}")
    return problems


def lake_changes(sink: str, table: str):
    """The changelog's binlog change rows of ``table`` (not what chunk reads wrote: their ``r`` rows and the
    ``d`` rows of keys a re-read no longer holds, which carry the read's HW, a position ending in the
    snapshot row index; nor the ``d`` rows that close its history when it is planned again, ending in the
    closed row index), read with deltalake as any user would."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from airflow_provider_dblog.core.positions import CLOSED_ROW, SNAPSHOT_ROW

    log = DeltaTable(f"{sink}/{table}/changelog").to_pyarrow_table()
    read = pc.or_(pc.or_(pc.equal(log["_op"], "r"), pc.ends_with(log["_pos"], f".{SNAPSHOT_ROW:08d}")),
                  pc.ends_with(log["_pos"], f".{CLOSED_ROW:08d}"))
    return log.filter(pc.invert(read))


def assert_each_change_once(sink: str, table: str) -> int:
    """Every change is in the changelog exactly once (positions are unique per change); returns how many."""
    changes = lake_changes(sink, table)
    positions = changes["_pos"].to_pylist()
    assert len(positions) == len(set(positions)), "a change was written twice"
    return len(positions)


def assert_replay_equals_current(sink: str, table: str, key: tuple[str, ...] = ("id",)) -> int:
    """Replaying the changelog (per key the row of the greatest ``_pos``; a delete drops the key) gives
    exactly ``current``'s rows, on ``current``'s columns: the changelog is a complete change stream.
    Returns the number of live rows."""
    from deltalake import DeltaTable

    current = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table()
    columns = [c for c in current.column_names if not c.startswith("_")]
    changelog = DeltaTable(f"{sink}/{table}/changelog").to_pyarrow_table(columns=[*columns, "_pos", "_op"])

    def same_nan(value):  # NaN is one value here (a float column may hold it)
        return "NaN" if isinstance(value, float) and value != value else value

    def image(row: dict) -> dict:  # what a replay keeps of the row: of a delete, only that the key is gone
        return {"_op": "d"} if row["_op"] == "d" else {c: same_nan(v) for c, v in row.items()}

    latest: dict = {}
    tied: set = set()  # keys with two different images at their greatest ``_pos``: a replay could take either
    for row in changelog.to_pylist():
        k = _row_key(row, key)
        if k not in latest or row["_pos"] > latest[k]["_pos"]:
            latest[k] = row
            tied.discard(k)
        elif row["_pos"] == latest[k]["_pos"] and image(row) != image(latest[k]):
            tied.add(k)
    assert not tied, (f"{len(tied)} keys have two different images at their greatest _pos (a replay by greatest "
                      f"_pos may take either), e.g. {sorted(tied)[:3]}")

    replayed = {k: {c: same_nan(r[c]) for c in columns} for k, r in latest.items() if r["_op"] != "d"}
    held = {_row_key(r, key): {c: same_nan(r[c]) for c in columns} for r in current.to_pylist()}
    assert replayed.keys() == held.keys(), (f"replay has {len(replayed.keys() - held.keys())} keys current lacks, "
                                            f"current {len(held.keys() - replayed.keys())} the replay lacks: "
                                            f"{sorted(replayed.keys() ^ held.keys())[:5]}")
    different = [k for k in held if held[k] != replayed[k]]
    assert not different, f"{len(different)} rows differ between the replay and current, e.g. {different[:3]}"
    return len(held)
