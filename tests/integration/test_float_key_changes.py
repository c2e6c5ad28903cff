"""A float primary key updated between -0 and 0, tailed into the lake. The source says -0 = 0, but it stores (and
logs) the two as different values and the lake's merge matches keys by their bits, so such an update is a key
change: a delete of the old key and an insert of the new one. Taken as an update under the new key, it left
``current`` with both -0.0 and 0.0 for one source row. Each tail here goes by the per-row path (a few messages)
and the block path (a run of many messages around the key change); a NaN key's update stays an update. MariaDB's
SELECT shows a stored FLOAT -0 as 0 (its binlog keeps -0): there the lake holds what SELECT shows, 0.0."""
from __future__ import annotations

import pytest
from deltalake import DeltaTable

from tests.support.cli import dblog
from tests.support.lakecheck import assert_each_change_once
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

PASSWORD = "pg-Float-5ecret"
FILLER = 100  # keys 1..FILLER, updated around the key change: past the block decoders' thresholds
VIEWS = ("current", "changelog")
VIEW = pytest.mark.parametrize("view", VIEWS)  # current: the store groups keys by their bits too


def exact(k: float):
    """A key as the lake tells keys apart: repr keeps -0.0 apart from 0.0 and makes every NaN one key."""
    return repr(float(k))


def lake(sink: str, table: str) -> tuple[list, list]:
    """``current``'s rows and the changelog's replay (per key the greatest ``_pos``; a delete drops the key), each
    as sorted (exact key, v)."""
    current = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(columns=["k", "v"]).to_pylist()
    log = DeltaTable(f"{sink}/{table}/changelog").to_pyarrow_table(columns=["k", "v", "_pos", "_op"]).to_pylist()
    latest = {exact(r["k"]): r for r in sorted(log, key=lambda r: r["_pos"])}
    replay = [(k, r["v"]) for k, r in latest.items() if r["_op"] != "d"]
    return sorted((exact(r["k"]), r["v"]) for r in current), sorted(replay)


def follow(steps, write, source, state: str, sink: str, tables: list[str], view: str) -> None:
    """Per step: ``write`` its statements, tail, and hold each table's ``view`` (``current`` or the changelog's
    replay) to ``source(t)``."""
    for statements in steps:
        write(statements)
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
        assert code == 0, err[-2000:]
        for t in tables:
            want = source(t)
            have = lake(sink, t)[VIEWS.index(view)]
            assert have == want, (t, view, statements, sorted(set(have) ^ set(want)), len(have), len(want))
            assert_each_change_once(sink, t)


def steps(negative_zero: str, bulk: list[str]) -> list[tuple[str, ...]]:
    """0 to -0 and back, by the per-row path (one message) and then inside ``bulk`` (the block path)."""
    to_zero, to_negative = "UPDATE {t} SET k = 0 WHERE k = 0", f"UPDATE {{t}} SET k = {negative_zero} WHERE k = 0"
    return [(to_negative,), (to_zero,), (*bulk, to_negative, *bulk), (*bulk, to_zero, *bulk)]


@VIEW
@pytest.mark.parametrize("typ", ["float8", "real"])
def test_a_postgres_float_key_between_negative_zero_and_zero(postgres, pg_db, tmp_path, typ, view):
    """REPLICA IDENTITY DEFAULT (the old key comes alone: one by one) and FULL (the old row: the block decoder
    compares the keys itself); a NaN key's update in the same runs stays one update."""
    pg, db = postgres, pg_db
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    tables = {"public.f": "DEFAULT", "public.g": "FULL"}
    for t, identity in tables.items():
        pg.sql(f"CREATE TABLE {t} (k {typ} PRIMARY KEY, v int)", f"ALTER TABLE {t} REPLICA IDENTITY {identity}",
               f"INSERT INTO {t} VALUES (0, 0), ('NaN', 0)",
               f"INSERT INTO {t} SELECT g, g FROM generate_series(1, {FILLER}) g", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", pg.uri(db, password=PASSWORD), "--tables", ",".join(tables),
                         "--state", state, "--sink", sink)
    assert code == 0, err[-2000:]
    nan = "UPDATE {t} SET v = v + 1 WHERE k = 'NaN'"
    bulk = [f"UPDATE {{t}} SET v = v + 1 WHERE k BETWEEN 1 AND {FILLER}"]  # no NaN: its own update comes after

    def write(statements):
        pg.sql(*(s.format(t=t) for t in tables for s in (*statements, nan)), db=db)

    def source(t):
        return sorted((exact(k), v) for k, v in pg.sql(f"SELECT k, v FROM {t}", db=db))

    follow(steps("'-0'", bulk), write, source, state, sink, list(tables), view)
    for t in tables:
        log = DeltaTable(f"{sink}/{t}/changelog").to_pyarrow_table(columns=["k", "_op"]).to_pylist()
        assert {r["_op"] for r in log if r["k"] != r["k"]} == {"r", "u"}, t  # NaN: read, then updates only


def mariadb_rows(mariadb, t: str, columns: str = "k, v") -> list:
    """The source's rows as its SELECT shows them (the snapshot's view: a stored FLOAT -0 shows as 0), exactly."""
    return sorted(tuple(exact(x) if isinstance(x, float) else x for x in row)
                  for row in mariadb.sql(f"SELECT {columns} FROM {t}"))


@VIEW
def test_a_mariadb_float_key_between_negative_zero_and_zero(mariadb, db, source_uri, tmp_path, view):
    """MariaDB keeps -0 in a FLOAT (a product underflowing to it; a DOUBLE stores -0 as 0) and logs it as -0, but
    its SELECT (the snapshot) shows 0: the lake holds what SELECT shows, 0.0, whichever zero the row stores, by
    the per-row path and the block decoder (a run of rows events)."""
    t = f"{db}.f"
    mariadb.sql(f"CREATE TABLE {t} (k FLOAT PRIMARY KEY, v INT)", f"INSERT INTO {t} VALUES (0, 0)",
                f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_{FILLER}", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", source_uri, "--table", t, "--state", state, "--sink", sink)
    assert code == 0, err[-2000:]
    bulk = [f"UPDATE {{t}} SET v = v + 1 WHERE k = {i}" for i in range(1, 11)]  # a rows event each
    follow(steps("-1e-30 * 1e-30", bulk), lambda s: mariadb.sql(*(x.format(t=t) for x in s)),
           lambda _: mariadb_rows(mariadb, t), state, sink, [t], view)


@pytest.mark.parametrize("bulk", [0, 10], ids=["per-row", "block"])
def test_a_mariadb_float_negative_zero_stays_what_select_shows_after_an_update(mariadb, db, source_uri, tmp_path,
                                                                                bulk):
    """A row whose FLOAT key (and FLOAT column) stores -0 is snapshotted as SELECT shows it, 0.0; an UPDATE of
    another column then came from the binlog with -0.0 and the lake held two rows for it (verify reported the
    chunk). The binlog's -0 is now read as 0.0 on MariaDB: one row, equal to the source's, by either path."""
    t = f"{db}.z"
    zero = "-1e-30 * 1e-30"  # underflows to a FLOAT -0
    mariadb.sql(f"CREATE TABLE {t} (k FLOAT PRIMARY KEY, x FLOAT, v INT)", f"INSERT INTO {t} VALUES ({zero}, "
                f"{zero}, 0)", f"INSERT INTO {t} SELECT seq, seq, seq FROM seq_1_to_{FILLER}", db=db)
    assert mariadb.sql(f"SELECT ATAN2(k, -1) < 0, ATAN2(x, -1) < 0 FROM {t} WHERE k = 0") == [(1, 1)]  # -0 stored
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", source_uri, "--table", t, "--state", state, "--sink", sink)
    assert code == 0, err[-2000:]
    around = [f"UPDATE {t} SET v = v + 1 WHERE k = {i}" for i in range(1, bulk + 1)]  # a rows event each
    mariadb.sql(*around, f"UPDATE {t} SET v = v + 1 WHERE k = 0", *around)
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err[-2000:]
    want = mariadb_rows(mariadb, t, "k, x, v")
    current = DeltaTable(f"{sink}/{t}/current").to_pyarrow_table(columns=["k", "x", "v"]).to_pylist()
    assert sorted((exact(r["k"]), exact(r["x"]), r["v"]) for r in current) == want
    assert ("0.0", "0.0", 1) in want
    assert_each_change_once(sink, t)
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", t, "--rows")
    assert code == 0, (out + err)[-2000:]
