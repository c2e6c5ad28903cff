"""`dblog status` against a real MariaDB (issue 28): during a snapshot, while streaming, behind the source and
after a purge, the right phase and figures (``--json``), and one line per table in the text table. No Spark:
chunks are read in this process (as `dblog run` does) and the tails are the CLI's in-driver catch-ups."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from deltalake import DeltaTable

from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.local.chunk_readers import snapshot_batches
from airflow_provider_dblog.store.lake import changelog_uri
from airflow_provider_dblog.store.state import StateDir
from tests.support.cli import dblog
from tests.support.local_mariadb import LocalMariaDB

PASSWORD = "s3cret-Pa55"


def status(state: str, sink: str, *more: str) -> dict:
    code, out, err = dblog("status", "--state", state, "--sink", sink, "--json", *more)
    assert code == 0, err
    assert PASSWORD not in out + err
    return json.loads(out)


def text_lines(state: str, sink: str, tables) -> dict[str, str]:
    """The text table's line of each table (exactly one each), from `dblog status` without --json."""
    code, out, err = dblog("status", "--state", state, "--sink", sink)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("TABLE ") and " PHASE " in lines[0]
    found = {}
    for table in tables:
        mine = [line for line in lines if line.split(" ", 1)[0] == table]
        assert len(mine) == 1, out
        found[table] = mine[0]
    assert f"{len(tables)} tables: " in out
    return found


def test_status_while_snapshotting_streaming_and_behind(mariadb, db, source_uri, tmp_path):
    orders, items = f"{db}.orders", f"{db}.items"
    mariadb.sql(f"CREATE TABLE {orders} (id INT PRIMARY KEY, v INT)", f"CREATE TABLE {items} (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO {orders} SELECT seq, seq FROM seq_1_to_200", f"INSERT INTO {items} SELECT seq, seq FROM "
                f"seq_1_to_30", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("plan", "--source", source_uri, "--tables", f"{db}.*", "--state", state, "--chunk-size", "50",
                         "--batch-size", "1")
    assert code == 0, err
    batches = StateDir(state).batches()
    chunks = len(StateDir(state).table(orders).chunks)
    assert chunks >= 4 and len([b for b in batches if orders in b.tables]) >= 2

    planned = status(state, sink)
    assert planned["summary"]["phases"]["planned"] == 2 and planned["summary"]["tables"] == 2
    first = planned["tables"][orders]
    assert (first["phase"], first["chunks_done"], first["chunks_total"]) == ("planned", 0, chunks)
    assert first["rows_current"] is None and first["lag_bytes"] is None and first["last_commit_at"] is None
    lines = text_lines(state, sink, [orders, items])
    assert " planned " in lines[orders] and f" 0/{chunks} " in lines[orders]

    # one batch of the orders' chunks (what `dblog snapshot --batch I --table` reads, here in this process)
    batch = next(b for b in batches if orders in b.tables)
    snapshot_batches(state, sink, [batch], [orders], read_on_spark=None, driver_threads=1)
    read = len(batch.chunk_ids(orders))
    during = status(state, sink)["tables"][orders]
    assert (during["phase"], during["chunks_done"], during["chunks_total"]) == ("snapshotting", read, chunks)
    assert 0 < during["rows_current"] < 200 and during["chunk_hw_min"] and during["lake_position"] is None
    assert f" {read}/{chunks} " in text_lines(state, sink, [orders, items])[orders]

    snapshot_batches(state, sink, batches, [orders, items], read_on_spark=None, driver_threads=1)
    code, _, err = dblog("report", "--state", state)
    assert code == 0, err
    mariadb.sql(f"UPDATE {orders} SET v = -v WHERE id <= 20", f"DELETE FROM {orders} WHERE id > 190",
                f"INSERT INTO {items} VALUES (31, 31)")
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err

    streaming = status(state, sink)
    source_at = mariadb.sql("SHOW MASTER STATUS")[0]
    assert streaming["summary"]["phases"]["streaming"] == 2 and streaming["summary"]["max_lag_bytes"] == 0
    for table, rows in ((orders, 190), (items, 31)):
        entry = streaming["tables"][table]
        assert entry["phase"] == "streaming" and entry["chunks_done"] == entry["chunks_total"] > 0
        recorded = DeltaTable(changelog_uri(sink, table)).transaction_version("dblog-tail")
        lake = SourcePosition.from_version(recorded).in_file_of(SourcePosition.at(source_at[0], source_at[1]))
        assert entry["lake_position"] == str(lake) == f"{source_at[0]}:{source_at[1]}"
        assert entry["current_position"] == entry["lake_position"] == entry["tail_position"]
        assert entry["rows_current"] == rows == mariadb.sql(f"SELECT COUNT(*) FROM {table}")[0][0]
        assert entry["behind"] is False and entry["lag_seconds"] == 0.0 and entry["lag_bytes"] == 0
        assert entry["binlog_needed"] == source_at[0] and entry["binlog_purged"] is False
        committed = datetime.strptime(entry["last_commit_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        assert time.time() - 120 < committed.timestamp() <= time.time()  # the tail's progress, just now
    assert streaming["summary"]["source_position"] == f"{source_at[0]}:{source_at[1]}"
    lines = text_lines(state, sink, [orders, items])
    assert " streaming " in lines[orders] and f" {chunks}/{chunks} " in lines[orders]
    assert lines[orders].rstrip().endswith(" 190")

    mariadb.sql(f"UPDATE {orders} SET v = 0 WHERE id <= 100")  # the source moves; no tail runs
    behind = status(state, sink)
    for entry in behind["tables"].values():
        assert entry["phase"] == "streaming" and entry["behind"] is True and entry["lag_bytes"] > 0
    assert behind["summary"]["max_lag_bytes"] == behind["tables"][orders]["lag_bytes"]
    stopped = status(state, sink, "--max-stall-seconds", "0", "--table", orders)
    assert list(stopped["tables"]) == [orders] and stopped["tables"][orders]["phase"] == "stopped"
    assert stopped["tables"][orders]["stalled"].startswith(f"tail stalled: {orders}: source at ")


def test_status_of_a_table_whose_binlog_was_purged(tmp_path):
    """A private server (the session's binlogs are never purged): p.t still needs the first binlog file,
    p.u's tail moved past it; the file is purged."""
    with LocalMariaDB(tmp_path / "db", server_id=5) as server:
        server.sql("CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY, v INT)",
                   "CREATE TABLE p.u (id INT PRIMARY KEY, v INT)")
        server.sql("INSERT INTO p.t SELECT seq, seq FROM seq_1_to_100", "INSERT INTO p.u SELECT seq, seq FROM seq_1_to_50",
                   db="p")
        state, sink = str(tmp_path / "state"), str(tmp_path / "sink")
        code, _, err = dblog("run", "--source", server.uri(), "--tables", "p.*", "--state", state, "--sink", sink,
                             "--chunk-size", "40")
        assert code == 0, err
        server.sql("UPDATE p.t SET v = v + 1", "UPDATE p.u SET v = -v")
        first = server.sql("SHOW BINARY LOGS")[0][0]
        server.sql("FLUSH BINARY LOGS")
        kept = server.sql("SHOW MASTER STATUS")[0][0]
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", "--table", "p.u")
        assert code == 0, err  # p.u's floor moves into the new file
        before = status(state, sink)["tables"]["p.t"]
        assert before["phase"] == "streaming" and before["binlog_needed"] == first
        deadline = time.time() + 60  # MariaDB keeps a file until InnoDB's binlog checkpoint passes it
        while server.sql("SHOW BINARY LOGS")[0][0] == first and time.time() < deadline:
            server.sql(f"PURGE BINARY LOGS TO '{kept}'")
            time.sleep(0.5)
        assert server.sql("SHOW BINARY LOGS")[0][0] == kept

        report = status(state, sink)
        purged, fine = report["tables"]["p.t"], report["tables"]["p.u"]
        assert purged["phase"] == "needs re-snapshot" and purged["binlog_purged"] is True
        assert purged["binlog_needed"] == first and purged["binlog_oldest"] == kept and purged["lag_bytes"] is None
        assert "which the server already purged" in purged["purge_warning"]
        assert fine["phase"] == "streaming" and fine["binlog_needed"] == kept and fine["binlog_purged"] is False
        assert report["summary"]["phases"]["needs re-snapshot"] == 1 and report["summary"]["phases"]["streaming"] == 1

        code, out, err = dblog("status", "--state", state, "--sink", sink)
        assert code == 0, err
        line = next(line for line in out.splitlines() if line.startswith("p.t "))
        assert "needs re-snapshot" in line and " purged " in line + " "
        assert any(note.startswith("! p.t needs binlog ") for note in out.splitlines())
