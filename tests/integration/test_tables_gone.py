"""Captured tables the source no longer has when the tail follows their last statements (dropped, or renamed out
of the capture): the lake keeps the rows each had at that moment (docs/schema-changes.md), those a TRUNCATE
before it removed included."""
from __future__ import annotations

from deltalake import DeltaTable

from tests.support.cli import dblog
from tests.support.lakecheck import assert_replay_equals_current


def test_a_truncate_followed_after_the_table_is_gone_removes_its_rows(mariadb, db, tmp_path):
    mariadb.sql(f"CREATE DATABASE {db}_out")
    for name in ("dropped", "renamed"):
        mariadb.sql(f"CREATE TABLE {db}.{name} (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO {db}.{name} SELECT seq, seq FROM {db}.seq_1_to_200")
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", mariadb.uri(), "--tables", f"{db}.*", "--state", state, "--sink", sink,
                         "--chunk-size", "50")
    assert code == 0, err
    for name in ("dropped", "renamed"):  # the TRUNCATE is in the binlog, its re-read cannot happen any more
        mariadb.sql(f"UPDATE {db}.{name} SET v = -v WHERE id > 190", f"TRUNCATE TABLE {db}.{name}",
                    f"INSERT INTO {db}.{name} VALUES (7, 70), (300, 3000)", f"UPDATE {db}.{name} SET v = 71 WHERE id = 7")
    mariadb.sql(f"DROP TABLE {db}.dropped", f"RENAME TABLE {db}.renamed TO {db}_out.renamed")
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err
    for name in ("dropped", "renamed"):
        rows = DeltaTable(f"{sink}/{db}.{name}/current").to_pyarrow_table(columns=["id", "v"]).sort_by("id")
        assert rows.to_pylist() == [{"id": 7, "v": 71}, {"id": 300, "v": 3000}], name  # before: 198 more rows
        assert_replay_equals_current(sink, f"{db}.{name}")
