"""Ad-hoc snapshots from SQL (issue 28, Debezium's signal table): an ``execute-snapshot`` row written to the
capture's signal table while a writer and a continuous tail run makes the tail read exactly the chunks holding
a row that matches its filter again, recorded in the state; the lake still converges to the source row by row.
A signal naming a table the capture does not have is refused in one line and recorded, and the tail goes on."""
from __future__ import annotations

import json
import subprocess
import time

import pytest
from deltalake import DeltaTable

from tests.support.cli import DBLOG, dblog
from tests.support.lakecheck import (SEED_SQL, TYPES_DDL, assert_replay_equals_current, compare_rows, typed_mutation,
                                     typed_row)
from tests.support.processes import stop_group
from tests.support.workload import Writer

ROWS, CHUNK = 3_000, 500


def _wait(predicate, timeout: float, tail, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert tail.poll() is None, tail.stderr.read().decode()[-3000:]
        assert time.time() < deadline, what
        time.sleep(0.5)


@pytest.mark.slow
def test_a_signal_row_rereads_the_chunks_it_names_while_the_tail_runs(mariadb, db, tmp_path):
    from airflow_provider_dblog.store.state import StateDir

    table, signals = f"{db}.s", f"{db}.dblog_signal"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL}",
                f"CREATE TABLE {signals} (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT)")
    mariadb.sql(f"INSERT INTO {table} {SEED_SQL.format(n=ROWS)}", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", state, "--sink", sink,
                           "--chunk-size", str(CHUNK), "--signal-table", signals)
    assert code == 0, err
    assert set(StateDir(state).tables()) == {table}, "the signal table is not captured"
    before = {c: r["hw"] for c, r in StateDir(state).reports(table).items()}

    writer = Writer(mariadb.port, table, ROWS + 500, typed_row, typed_mutation, seed=5, pause=0.005)
    tail = subprocess.Popen([DBLOG, "tail", "--state", state, "--sink", sink, "--continuous", "--trigger-seconds",
                             "0.5", "--signal-seconds", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    writer.start()
    try:
        writer.wait_started(100)
        mariadb.sql(f"INSERT INTO {signals} VALUES ('bad-1', 'execute-snapshot', "
                    f"'{{\"data-collections\": [\"{db}.nope\"]}}'), ('log-1', 'log', '{{\"message\": \"hi\"}}')")
        mariadb.sql(f"INSERT INTO {signals} VALUES ('resync-1', 'execute-snapshot', '" + json.dumps({
            "data-collections": [table], "additional-conditions": [{"data-collection": table,
                                                                    "filter": "id >= 600 AND id < 1400"}]}) + "')")
        _wait(lambda: "resync-1" in StateDir(state).signals(), 300, tail, "the tail did not act on the signal")
    finally:
        counts = writer.stop()
    assert sum(counts.values()) > 200, counts
    done = StateDir(state).signals()
    assert done["resync-1"]["status"] == "done" and done["resync-1"]["tables"][table]["chunks"] == [1, 2], done
    assert done["bad-1"]["status"] == "refused" and f"{db}.nope not captured" in done["bad-1"]["error"], done
    assert done["log-1"]["status"] == "ignored", done
    after = {c: r["hw"] for c, r in StateDir(state).reports(table).items()}
    assert [c for c in after if after[c] != before[c]] == [1, 2], (before, after)

    file, pos = mariadb.sql("SHOW MASTER STATUS")[0][:2]
    from airflow_provider_dblog.core.positions import SourcePosition
    from airflow_provider_dblog.steps.health import tail_progress

    target = SourcePosition.at(file, int(pos))
    _wait(lambda: tail_progress(state, table)[0] >= target, 180, tail, "the tail did not catch up")
    stop_group(tail)
    assert compare_rows(DeltaTable(f"{sink}/{table}/current").to_pyarrow_table(), mariadb.port, table) == []
    assert_replay_equals_current(sink, table)
