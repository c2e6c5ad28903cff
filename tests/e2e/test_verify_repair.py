"""Drift detection and repair by chunk checksums (issue 25's acceptance), while a writer and a continuous
tail keep running: no false alarm under writes; drift planted behind the binlog's back (``sql_log_bin=0``)
in three chunks is reported as exactly those chunks and repaired by ``--repair``."""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from airflow_provider_dblog.spark.executor import SparkExecutor
from tests.support.cli import DBLOG, captured, dblog, one_error_line
from tests.support.lakecheck import SEED_SQL, TYPES_DDL, assert_replay_equals_current, typed_mutation, typed_row
from tests.support.processes import stop_group
from tests.support.workload import Writer

ROWS, CHUNK = 20_000, 2_000
PLANTED = {150: 0, 7_777: 3, 15_555: 7}  # key -> its chunk


class WriterAvoiding(Writer):
    """The workload writer, never touching the planted keys (its binlogged changes would repair them)."""

    def _key(self) -> int:
        key = super()._key()
        return key + 2 if key in PLANTED or key - 1 in PLANTED else key


def _wait_caught_up(mariadb, state, table, tail, timeout: float = 180) -> None:
    from airflow_provider_dblog.core.positions import SourcePosition
    from airflow_provider_dblog.steps.health import tail_progress

    file, pos = mariadb.sql("SHOW MASTER STATUS")[0][:2]
    target = SourcePosition.at(file, int(pos))
    deadline = time.time() + timeout
    while tail_progress(state, table)[0] < target:
        assert tail.poll() is None, tail.stderr.read().decode()[-2000:]
        assert time.time() < deadline, f"the continuous tail did not reach {target} in {timeout} s"
        time.sleep(0.5)


def _verify(state, sink, table, *extra):
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table, *extra)
    return code, json.loads(out) if out.strip() else None, err


@pytest.mark.slow
def test_checksum_verify_finds_exactly_the_planted_drift_and_repairs_it(mariadb, db, tmp_path):
    table = f"{db}.v"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {table} {SEED_SQL.format(n=ROWS)}", db=db)
    state, sink = captured(mariadb.uri(), table, tmp_path, CHUNK)
    mariadb.sql("FLUSH BINARY LOGS")  # positions the lake records name no file: verify must name it right
    writer = WriterAvoiding(mariadb.port, table, ROWS + 2_000, typed_row, typed_mutation, seed=3, pause=0.002)
    tail = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--continuous", "--trigger-seconds",
                             "0.5"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    writer.start()
    try:
        writer.wait_started(200)
        time.sleep(3)
        code, result, err = _verify(state, sink, table)  # under writes, nothing planted: no false alarm
        assert code == 0, err
        assert result["chunks"] == ROWS // CHUNK and result["drifted"] == [] and result["equal"], result

        mariadb.sql("SET SESSION sql_log_bin = 0",
                    f"UPDATE {table} SET txt_v = 'drift', f_v = f_v + 1 WHERE id = 150",
                    f"DELETE FROM {table} WHERE id = 7777",
                    f"UPDATE {table} SET dec_v = dec_v + 0.000001 WHERE id = 15555")
        code, result, err = _verify(state, sink, table)
        assert code != 0 and result is not None, err
        assert sorted(result["drifted"]) == sorted(PLANTED.values()) and result["repaired"] == [], result
        line = one_error_line(err)
        assert "0, 3, 7" in line and "--repair" in line

        code, result, err = _verify(state, sink, table, "--repair")
        assert code == 0, err
        assert sorted(result["drifted"]) == sorted(result["repaired"]) == sorted(PLANTED.values()), result
        code, result, err = _verify(state, sink, table)
        if code != 0 and tail.poll() is not None:
            err += "\nthe tail exited: " + tail.stderr.read().decode(errors="replace")[-3000:]
        assert code == 0 and result["drifted"] == [], (result, err)
    finally:
        counts = writer.stop()
    assert sum(counts.values()) > 1_000, counts
    _wait_caught_up(mariadb, state, table, tail)  # the writer's last changes
    stop_group(tail)
    code, result, err = _verify(state, sink, table, "--rows")  # the row-by-row compare agrees
    assert code == 0 and result["equal"], (result, err)
    # the repair's removal (the key deleted behind the binlog's back) is in the changelog as a delete too
    assert assert_replay_equals_current(sink, table) == result["source_rows"]


@pytest.mark.slow
def test_a_reread_after_a_schema_change_followed_in_place_keeps_it(mariadb, db, spark, tmp_path):
    """Issue 25 class 3: schema changes followed in place (no re-read: an added column, a widened type),
    then a re-snapshot of some chunks: they are read with the table's live columns, not the plan's, so
    ``current`` keeps the added column and the widened type and verify finds nothing."""
    from airflow_provider_dblog.steps.resnapshot import resnapshot

    table = f"{db}.r"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
                f"INSERT INTO {table} SELECT seq, seq, 'n' FROM seq_1_to_400", db=db)
    state, sink = captured(mariadb.uri(), table, tmp_path, 100)
    mariadb.sql(f"ALTER TABLE {table} ADD COLUMN extra VARCHAR(10) NOT NULL DEFAULT 'dflt'",
                f"ALTER TABLE {table} MODIFY COLUMN v BIGINT",
                f"UPDATE {table} SET v = 3000000000, extra = 'set' WHERE id = 5")
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    resnapshot(state, sink, table, chunk_ids="0,2", executor=SparkExecutor(spark))
    code, result, err = _verify(state, sink, table)
    assert code == 0 and result["drifted"] == [], (result, err)
    code, result, err = _verify(state, sink, table, "--rows")
    assert code == 0 and result["equal"], (result, err)
