"""A concurrent writer and a binlog-replay oracle for consistency tests (real server, real binlog)."""
from __future__ import annotations

import random
import threading
import time

import pymysql


class Writer(threading.Thread):
    """Random single- and multi-row inserts, updates (also of the primary key), deletes, multi-statement
    and rolled-back transactions on ``db.table`` with an INT ``id`` key, until ``stop()``.

    ``make_row(id, rnd)`` returns the column -> SQL literal-able value dict of a new row; ``mutate(rnd)``
    returns the SET clause values of an update.
    """

    def __init__(self, port: int, table: str, key_space: int, make_row, mutate, seed: int = 7,
                 pause: float = 0.0, user: str = "root", password: str = ""):
        super().__init__(daemon=True)
        self.port, self.table, self.key_space = port, table, key_space
        self.make_row, self.mutate = make_row, mutate
        self.rnd = random.Random(seed)
        self.pause = pause
        self.user, self.password = user, password
        self._halt = threading.Event()
        self.counts: dict[str, int] = {}
        self.error: BaseException | None = None

    def wait_started(self, statements: int = 20, timeout: float = 30) -> None:
        """Block until the writer has run ``statements`` statements: a read that must overlap it
        then cannot finish before the writer's first commit."""
        deadline = time.time() + timeout
        while sum(self.counts.values()) < statements:
            if self.error:
                raise self.error
            assert time.time() < deadline, f"the writer ran {self.counts} in {timeout} s"
            time.sleep(0.01)

    def stop(self) -> dict:
        self._halt.set()
        self.join(60)
        if self.error:
            raise self.error
        return self.counts

    def _key(self) -> int:
        return self.rnd.randint(1, self.key_space)

    def _insert(self, cur, n: int = 1) -> None:
        rows = [self.make_row(self._key(), self.rnd) for _ in range(n)]
        cols = list(rows[0])
        values = ", ".join("(" + ", ".join(["%s"] * len(cols)) + ")" for _ in rows)
        cur.execute(f"INSERT IGNORE INTO {self.table} ({', '.join(f'`{c}`' for c in cols)}) VALUES {values}",
                    [r[c] for r in rows for c in cols])

    def _update(self, cur) -> None:
        changes = self.mutate(self.rnd)
        sets = ", ".join(f"`{c}` = %s" for c in changes)
        cur.execute(f"UPDATE {self.table} SET {sets} WHERE id = %s", [*changes.values(), self._key()])

    def run(self) -> None:
        try:
            conn = pymysql.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                                   autocommit=True, charset="utf8mb4")
            with conn.cursor() as cur:
                while not self._halt.is_set():
                    op = self.rnd.choice(["insert", "insert_multi", "update", "update", "update_key", "delete",
                                          "txn", "rollback"])
                    self.counts[op] = self.counts.get(op, 0) + 1
                    try:
                        if op == "insert":
                            self._insert(cur)
                        elif op == "insert_multi":
                            self._insert(cur, 3)
                        elif op == "update":
                            self._update(cur)
                        elif op == "update_key":
                            cur.execute(f"UPDATE IGNORE {self.table} SET id = %s WHERE id = %s",
                                        (self._key(), self._key()))
                        elif op == "delete":
                            cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (self._key(),))
                        else:
                            cur.execute("BEGIN")
                            self._update(cur)
                            self._insert(cur, 2)
                            cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (self._key(),))
                            cur.execute("ROLLBACK" if op == "rollback" else "COMMIT")
                    except pymysql.err.IntegrityError:
                        cur.execute("ROLLBACK")
                    if self.pause:
                        time.sleep(self.pause)
            conn.close()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc


def replay_binlog(port: int, table: str, start_file: str, start_pos: int, checkpoints: list[tuple[str, int]],
                  user: str = "root", password: str = "") -> dict[tuple[str, int], dict]:
    """The table's rows (by id) at each checkpoint position, from replaying its binlog since ``start``.

    Written directly on python-mysql-replication, independent of the code under test.
    """
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    schema, name = table.split(".")
    wanted = sorted(checkpoints, key=lambda c: (int(c[0].rsplit(".", 1)[1]), c[1]))
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": port, "user": user, "passwd": password},
        server_id=random.randint(10**6, 10**9), resume_stream=True, blocking=False, log_file=start_file,
        log_pos=start_pos, is_mariadb=False, only_schemas=[schema], only_tables=[name],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
    state: dict = {}
    result = {}
    i = 0
    for event in stream:
        here = (int(stream.log_file.rsplit(".", 1)[1]), event.packet.log_pos)
        while i < len(wanted) and here > (int(wanted[i][0].rsplit(".", 1)[1]), wanted[i][1]):
            result[wanted[i]] = dict(state)
            i += 1
        if event.schema != schema or event.table != name:
            continue
        for row in event.rows:
            if isinstance(event, WriteRowsEvent):
                state[row["values"]["id"]] = row["values"]
            elif isinstance(event, DeleteRowsEvent):
                state.pop(row["values"]["id"], None)
            else:
                state.pop(row["before_values"]["id"], None)
                state[row["after_values"]["id"]] = row["after_values"]
    stream.close()
    for checkpoint in wanted[i:]:
        result[checkpoint] = dict(state)
    return result
