"""Keys whose order is not the order of their Python values: the chunks, the windows and the tail's location of
a change among the chunks must all follow the server's order, or a change is skipped (a window or a later
chunk's high watermark hides it) and the lake silently differs.

* ENUM orders by a label's index in the declared list, while ``k > 'alpha'`` compares text: the chunk
  planner's boundaries and its range conditions disagreed, so chunks overlapped and missed rows;
* SET orders by its bits;
* BIT compared with a binary string matches neither: the planner looped forever on a BIT key;
* MariaDB's UUID orders time-based UUIDs by their segments last to first, INET6 and INET4 by their bytes: not
  their text's order;
* ``utf8mb4_bin`` and ``latin1_bin`` are PAD SPACE ('a' sorts after 'a\\t') and latin1 is cp1252 (byte 0x80,
  '€', sorts before 'é'), which Python's str order does not know.
"""
from __future__ import annotations

import ipaddress
import random
import threading
import time
import uuid

import pymysql
import pytest

from tests.integration.test_never_silent import _both_verifies_equal, _tail
from tests.support.cli import captured


def _enum_rows():
    return [(label, i) for label in ("zeta", "alpha", "mid", "Beta") for i in range(1, 101)]


def _set_rows():
    return [(members, i) for members in ("", "zeta", "alpha", "zeta,alpha", "mid", "alpha,mid", "zeta,mid")
            for i in range(1, 58)]


def _random_uuids(n: int) -> list[tuple]:
    """Time-based (version 1) and random (version 4) RFC UUIDs, version 7 ones and other variants: MariaDB
    orders the first two kinds by their segments last to first, the others by their bytes."""
    rnd = random.Random(8)
    out = set()
    while len(out) < n:
        b = bytearray(rnd.getrandbits(128).to_bytes(16, "big"))
        b[6] = (b[6] & 0x0F) | (rnd.choice([1, 4, 7, 0]) << 4)
        b[8] = (b[8] & 0x3F) | rnd.choice([0x80, 0x80, 0x00, 0xC0])
        if rnd.random() < 0.2:
            b[:4] = bytes(4)
        out.add((str(uuid.UUID(bytes=bytes(b))),))
    return sorted(out)


def _random_addresses(n: int, width: int) -> list[tuple]:
    rnd = random.Random(width)
    out = set()
    while len(out) < n:
        b = bytearray(rnd.getrandbits(8 * width).to_bytes(width, "big"))
        if width == 16 and rnd.random() < 0.5:  # zero runs, IPv4-mapped and -compatible forms
            start, length = rnd.randrange(16), rnd.randrange(2, 14)
            b[start:start + length] = bytes(len(b[start:start + length]))
        out.add((str(ipaddress.ip_address(bytes(b))),))
    return sorted(out)


CASES = {
    "enum": ("k ENUM('zeta','alpha','mid','Beta') NOT NULL, id INT NOT NULL, v INT, PRIMARY KEY (k, id)",
             _enum_rows),
    "set": ("k SET('zeta','alpha','mid') NOT NULL, id INT NOT NULL, v INT, PRIMARY KEY (k, id)", _set_rows),
    "bit": ("k BIT(12) NOT NULL PRIMARY KEY, v INT", lambda: [(n,) for n in range(0, 4000, 10)]),
    "utf8mb4_bin": ("k VARCHAR(12) COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, v INT",
                    lambda: [(f"k{i:03d}{tail}",) for i in range(134) for tail in ("", "\t", "\n")]),
    "latin1_bin": ("k VARCHAR(12) CHARACTER SET latin1 COLLATE latin1_bin NOT NULL PRIMARY KEY, v INT",
                   lambda: [(f"k{i:03d}{tail}",) for i in range(80) for tail in ("", "€", "é", "Ÿ", "\t")]),
    "time": ("k TIME(3) NOT NULL PRIMARY KEY, v INT",
             lambda: sorted({(f"{sign}{h}:{m:02d}:{s:02d}.{ms:03d}",) for sign in ("", "-") for h in (0, 7, 10, 99, 838)
                             for m in (0, 59) for s in (0, 1, 30, 58) for ms in (0, 500)
                             if sign == "" or (h, m, s, ms) != (0, 0, 0, 0)})),
    "decimal50": ("k DECIMAL(50,10) NOT NULL PRIMARY KEY, v INT",  # wider than Arrow's 38 digits: text in the lake
                  lambda: [(f"{sign}{n * 7919 % 10 ** (n % 40 + 1)}.{n:010d}",) for n in range(1, 201) for sign in "-+"]),
    "uuid": ("k UUID NOT NULL PRIMARY KEY, v INT", lambda: _random_uuids(400)),
    "inet6": ("k INET6 NOT NULL PRIMARY KEY, v INT", lambda: _random_addresses(400, 16)),
    "inet4": ("k INET4 NOT NULL PRIMARY KEY, v INT", lambda: _random_addresses(400, 4)),
}


def _keyed_table(mariadb, db, ddl: str, keys: list[tuple]) -> tuple[str, str]:
    """``db.k`` made with ``ddl`` and a row per key (v = 0): (its name, the WHERE clause of one key)."""
    table = f"{db}.k"
    mariadb.sql(f"CREATE TABLE {table} ({ddl})")
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(keys[0]))}, 0)", keys)
    conn.close()
    return table, "k = %s AND id = %s" if len(keys[0]) == 2 else "k = %s"


class _Updater(threading.Thread):
    """Updates random rows (and deletes and puts back some) of ``table`` until stopped."""

    def __init__(self, port: int, table: str, keys: list[tuple], key_sql: str):
        super().__init__(daemon=True)
        self.conn = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
        self.table, self.keys, self.key_sql = table, keys, key_sql
        self.halt, self.done, self.error = threading.Event(), 0, None

    def run(self):
        rnd = random.Random(11)
        try:
            with self.conn.cursor() as cur:
                while not self.halt.is_set():
                    key = rnd.choice(self.keys)
                    if rnd.random() < 0.1:
                        cur.execute(f"DELETE FROM {self.table} WHERE {self.key_sql}", key)
                        cur.execute(f"INSERT INTO {self.table} VALUES ({', '.join(['%s'] * len(key))}, -1)", key)
                    else:
                        cur.execute(f"UPDATE {self.table} SET v = v + 1 WHERE {self.key_sql}", key)
                    self.done += 1
                    time.sleep(0.002)  # a steady writer, not one that outruns the capture on two cores
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> int:
        self.halt.set()
        self.join(60)
        self.conn.close()
        if self.error:
            raise self.error
        return self.done


@pytest.mark.parametrize("kind", list(CASES))
def test_keys_ordered_otherwise_than_their_values_are_read_and_followed_in_the_servers_order(mariadb, db, tmp_path,
                                                                                             kind):
    ddl, rows = CASES[kind]
    keys = rows()
    table, key_sql = _keyed_table(mariadb, db, ddl, keys)
    updater = _Updater(mariadb.port, table, keys, key_sql)
    updater.start()
    try:
        state, sink = captured(mariadb.uri(), table, tmp_path, 20)  # 20 chunks read while the rows change
    finally:
        assert updater.stop() > 100
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    _both_verifies_equal(state, sink, table)


@pytest.mark.parametrize("kind", list(CASES))
def test_the_dialect_orders_and_splits_keys_as_the_server_does(mariadb, db, kind):
    """``sort_keys`` orders keys as ``ORDER BY`` does, and the planned chunks' range conditions cover each row
    exactly once (before: ENUM chunks overlapped and missed rows, a BIT key's plan never ended)."""
    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.source.mysql.dialect import MySqlDialect
    from airflow_provider_dblog.source.mysql.sql import range_condition, table_sql

    ddl, rows = CASES[kind]
    keys = rows()
    _keyed_table(mariadb, db, ddl, keys)
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    meta = dialect.describe_table(f"{db}.k")
    names = ", ".join(f"`{c}`" for c in meta.key_columns)
    ordered = [tuple(r) for r in dialect.client.query(f"SELECT {names} FROM {table_sql(meta)} ORDER BY {names}")]
    assert len(ordered) == len(keys)
    shuffled = random.Random(3).sample(ordered, len(ordered))
    assert [k for _, k in sorted(zip(dialect.sort_keys(meta, shuffled), shuffled))] == ordered
    chunks = dialect.split_chunks(meta, 23)
    assert len(chunks) >= len(keys) // 23
    seen: dict[tuple, int] = {}
    for chunk in chunks:
        for row in dialect.client.query(f"SELECT {names} FROM {table_sql(meta)} "
                                        f"WHERE {range_condition(meta, chunk.lo, chunk.hi)}"):
            seen[tuple(row)] = seen.get(tuple(row), 0) + 1
    assert sorted(seen) == sorted(ordered) and set(seen.values()) == {1}, (len(seen), len(ordered))


def test_an_enum_key_whose_list_is_reordered_is_planned_again(mariadb, db, tmp_path):
    """``MODIFY k ENUM(...)`` in another order keeps every label but reorders the keys: the plan's chunk
    boundaries no longer split them, so the table is planned again, as for a new collation."""
    table = f"{db}.k"
    mariadb.sql(f"CREATE TABLE {table} ({CASES['enum'][0]})",
                f"INSERT INTO {table} SELECT ELT(1 + seq % 4, 'zeta', 'alpha', 'mid', 'Beta'), seq, 0 "
                f"FROM seq_1_to_400", db=db)
    state, sink = captured(mariadb.uri(), table, tmp_path, 20)
    mariadb.sql(f"ALTER TABLE {table} MODIFY k ENUM('mid', 'Beta', 'alpha', 'zeta') NOT NULL",
                f"UPDATE {table} SET v = v + 1 WHERE id % 3 = 0",
                f"DELETE FROM {table} WHERE id % 11 = 0")
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    assert "planned again" in err or "planning" in err, err[-3000:]
    _both_verifies_equal(state, sink, table)


MORE_KEYS = {
    "tinyint": ("k TINYINT NOT NULL PRIMARY KEY, v INT", lambda: [(n,) for n in range(-128, 128)]),
    "bigint_unsigned": ("k BIGINT UNSIGNED NOT NULL PRIMARY KEY, v INT",
                        lambda: [(n * 61_489_146_912_365_172 % 2 ** 64,) for n in range(300)]),
    "decimal": ("k DECIMAL(10,2) NOT NULL PRIMARY KEY, v INT", lambda: [(f"{n * 37 % 1000 - 500}.{n % 100:02d}",)
                                                                          for n in range(300)]),
    "float": ("k FLOAT NOT NULL PRIMARY KEY, v INT", lambda: [(n / 7 - 20,) for n in range(300)]),
    "double": ("k DOUBLE NOT NULL PRIMARY KEY, v INT", lambda: [(n / 3 - 50 + n * 1e-9,) for n in range(300)]),
    "date": ("k DATE NOT NULL PRIMARY KEY, v INT", lambda: [(f"{1000 + n * 29}-{n % 12 + 1:02d}-{n % 28 + 1:02d}",)
                                                            for n in range(300)]),
    "datetime6": ("k DATETIME(6) NOT NULL PRIMARY KEY, v INT",
                  lambda: [(f"2020-01-01 00:00:{n % 60:02d}.{n:06d}",) for n in range(300)]),
    "timestamp3": ("k TIMESTAMP(3) NOT NULL PRIMARY KEY, v INT",
                   lambda: [(f"2001-02-03 04:{n // 60:02d}:{n % 60:02d}.{n % 1000:03d}",) for n in range(300)]),
    "year": ("k YEAR NOT NULL PRIMARY KEY, v INT", lambda: [(1901 + n,) for n in range(255)]),
    "char_ci": ("k CHAR(10) NOT NULL PRIMARY KEY, v INT", lambda: [(f"{'aBc'[n % 3]}{n:03d}é",) for n in range(300)]),
    "binary": ("k BINARY(8) NOT NULL PRIMARY KEY, v INT", lambda: [(bytes([n % 256, n // 256, 0, 1]),)
                                                                   for n in range(300)]),
    "composite": ("k VARCHAR(10) NOT NULL, id INT NOT NULL, v INT, PRIMARY KEY (k, id)",
                  lambda: [(f"key{n % 4}", n) for n in range(300)]),
}


@pytest.mark.parametrize("kind", list(MORE_KEYS) + list(CASES))
def test_a_key_of_every_type_is_followed_in_its_chunks(mariadb, db, tmp_path, kind):
    """A table keyed by each type, in chunks of 100: the tail places each change among the chunks (boundaries
    from a SELECT, keys from the binlog: a TIME boundary was a timedelta and its key text, a TypeError) and both
    verifies find the lake equal."""
    ddl, rows = {**MORE_KEYS, **CASES}[kind]
    keys = rows()
    table, key_sql = _keyed_table(mariadb, db, ddl, keys)
    state, sink = captured(mariadb.uri(), table, tmp_path, 100)
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.executemany(f"UPDATE {table} SET v = v + 1 WHERE {key_sql}", keys[::3])
        cur.executemany(f"DELETE FROM {table} WHERE {key_sql}", keys[1::7])
    conn.close()
    code, _, err = _tail(state, sink)
    assert code == 0, err[-3000:]
    _both_verifies_equal(state, sink, table)
