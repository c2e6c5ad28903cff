from tests.integration.test_never_silent import _tail, _verify_rows
from tests.support.cli import captured, dblog
from tests.support.local_mariadb import LocalMariaDB


def test_two_sources_one_sink(mariadb, db, tmp_path):
    other = LocalMariaDB(tmp_path / "other", server_id=9).start()
    try:
        for server in (mariadb, other):
            server.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
            server.sql(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, v INT)",
                       f"INSERT INTO {db}.u SELECT seq, seq FROM seq_1_to_60", db=db)
        other.sql(f"UPDATE {db}.u SET v = 5000 + id WHERE id > 30", f"DELETE FROM {db}.u WHERE id < 5")
        sink = str(tmp_path / "lake")
        code, out, err = dblog("run", "--source", mariadb.uri(), "--table", f"{db}.u", "--state", str(tmp_path / "s1"), "--sink", sink, "--chunk-size", "20")
        assert code == 0, err
        code, out, err = dblog("run", "--source", other.uri(), "--table", f"{db}.u", "--state", str(tmp_path / "s2"), "--sink", sink, "--chunk-size", "20")
        print("second run", code, err[-800:])
        mariadb.sql(f"UPDATE {db}.u SET v = 1000 WHERE id > 50")
        for s in ("s1", "s2"):
            code, _, err = _tail(str(tmp_path / s), sink)
            print("tail", s, code, err[-400:])
            code, result = _verify_rows(str(tmp_path / s), sink, f"{db}.u")
            print("verify", s, code, result if code else (result["equal"], result["different"], result["missing"], result["extra"]))
    finally:
        other.stop()
