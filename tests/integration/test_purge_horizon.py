"""The binlog purge horizon against a real MariaDB (issue 25): `dblog health` warns, without failing, for a
table whose tail still needs an old binlog file while ``binlog_expire_logs_seconds`` is about to delete it,
and stays quiet for a table that is caught up. The expiry is set at run time, as a DBA would, and restored:
the server is shared by the session (an hour is longer than any of its files has lived, and nothing
rotates the binlog meanwhile, so nothing is purged)."""
from __future__ import annotations

import json
import re
import time

from tests.support.cli import dblog

EXPIRE = 3600


def test_health_warns_for_a_table_whose_binlog_is_close_to_expiry(mariadb, db, source_uri, tmp_path):
    for name in ("lagging", "current"):
        mariadb.sql(f"CREATE TABLE {db}.{name} (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO {db}.{name} SELECT seq, seq FROM seq_1_to_100", db=db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", source_uri, "--tables", f"{db}.lagging,{db}.current", "--state", state,
                         "--sink", sink, "--chunk-size", "50")
    assert code == 0, err
    old_file = mariadb.sql("SHOW MASTER STATUS")[0][0]
    mariadb.sql("FLUSH BINARY LOGS")  # both tails' floors are now in a closed file
    closed_at = time.time()
    new_file = mariadb.sql("SHOW MASTER STATUS")[0][0]
    mariadb.sql(f"UPDATE {db}.current SET v = -v WHERE id <= 10", f"UPDATE {db}.lagging SET v = -v WHERE id <= 10")
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", "--table", f"{db}.current")
    assert code == 0, err  # only `current` catches up: `lagging` still needs old_file
    time.sleep(max(0.0, closed_at + 3 - time.time()))  # old_file closed at least 3 s ago

    previous = mariadb.sql("SELECT @@GLOBAL.binlog_expire_logs_seconds")[0][0]
    mariadb.sql(f"SET GLOBAL binlog_expire_logs_seconds = {EXPIRE}")
    try:
        # a margin of all but 2 s of the hour: a file closed 3 s ago is inside it, the file being written is not
        code, out, err = dblog("health", "--state", state, "--purge-warning-seconds", str(EXPIRE - 2))
        default_code, default_out, default_err = dblog("health", "--state", state)  # 20% of the hour
    finally:
        mariadb.sql(f"SET GLOBAL binlog_expire_logs_seconds = {previous}")
    assert code == 0, err
    assert "s3cret-Pa55" not in out + err + default_out + default_err
    warnings = [line for line in err.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, err
    assert f"binlog purge horizon: {db}.lagging needs binlog {old_file}" in warnings[0]
    assert re.search(r"purgeable in \d+ min: ", warnings[0]), warnings[0]

    report = json.loads(out)
    assert report["purge_warnings"] == 1 and report["binlog_purged"] == 0
    lagging, current = report["tables"][f"{db}.lagging"], report["tables"][f"{db}.current"]
    assert lagging["binlog_needed"] == old_file and lagging["binlog_purged"] is False
    assert EXPIRE - 60 < lagging["purge_in_seconds"] <= EXPIRE - 3
    assert lagging["purge_warning"] == warnings[0].split("binlog purge horizon: ", 1)[1]
    assert current["binlog_needed"] == new_file and current["purge_in_seconds"] == EXPIRE
    assert current["purge_warning"] is None and current["purge_in_bytes"] is None  # no size limit on 10.11

    assert default_code == 0, default_err
    assert " WARNING " not in default_err and json.loads(default_out)["purge_warnings"] == 0
    assert json.loads(default_out)["tables"][f"{db}.lagging"]["binlog_needed"] == old_file
