"""``dblog verify`` neither passes a lake that differs from the source nor fails one that equals it (found by an
adversarial review): decimals of a scale past six, rows in no planned chunk, a key held twice also when the
source changed it since the lake's position, and ``--rows`` on a key held twice. The lake is edited by hand
(a writer other than dblog), its app transactions kept."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.support.cli import captured, dblog, one_error_line
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

PASSWORD = "pg-Verify-5ecret"
DECIMALS = "(1, 0), (2, 12.5), (3, 0.0000001), (4, -0.00000001), (5, NULL), (6, 1234567890.12345678)"


def _verify(state: str, sink: str, table: str, *options: str) -> tuple[int, dict | None, str]:
    code, out, err = dblog("verify", "--state", state, "--sink", sink, "--table", table, *options)
    return code, (json.loads(out) if out.strip() else None), err


def test_decimals_of_a_scale_past_six_verify_equal_on_mariadb(mariadb, db, tmp_path):
    table = f"{db}.amounts"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, amount DECIMAL(18,8))",
                f"INSERT INTO {table} VALUES {DECIMALS}")
    state, sink = captured(mariadb.uri(), table, tmp_path, 2)
    code, result, err = _verify(state, sink, table)
    assert code == 0 and result["equal"], f"0 and 1e-7 at scale 8 counted as drift: {result} {err[-500:]}"


def test_decimals_of_a_scale_past_six_verify_equal_on_postgres(postgres, pg_db, tmp_path):
    pg = postgres
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    pg.sql("CREATE TABLE public.amounts (id int PRIMARY KEY, amount numeric(18,8))",
           f"INSERT INTO public.amounts VALUES {DECIMALS}", db=pg_db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", pg.uri(pg_db, password=PASSWORD), "--table", "public.amounts",
                           "--state", state, "--sink", sink, "--chunk-size", "2")
    assert code == 0, err
    code, result, err = _verify(state, sink, "public.amounts")
    assert code == 0 and result["equal"], f"0 and 1e-7 at scale 8 counted as drift: {result} {err[-500:]}"


@pytest.fixture
def lake(mariadb, db, tmp_path):
    table = f"{db}.a"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, t VARCHAR(20), n INT)",
                f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, 'v{i}', {i})" for i in range(1, 41)))
    state, sink = captured(mariadb.uri(), table, tmp_path, 10)
    code, result, err = _verify(state, sink, table)
    assert code == 0, err
    return mariadb, table, state, sink


def _edit(sink: str, table: str, change) -> None:
    """``current`` rewritten with ``change(rows)`` (an overwrite keeps the log's app transactions)."""
    uri = f"{sink}/{table}/current"
    before = DeltaTable(uri)
    write_deltalake(uri, change(before.to_pyarrow_table()), mode="overwrite",
                    partition_by=before.metadata().partition_columns)


def _copy_of(rows: pa.Table, key: int, chunk) -> pa.Table:
    extra = rows.filter(pc.equal(rows["id"], key))
    extra = extra.set_column(rows.schema.get_field_index("id"), "id", pa.array([99_999], rows.schema.field("id").type))
    return extra.set_column(rows.schema.get_field_index("_chunk"), "_chunk",
                            pa.array([chunk], rows.schema.field("_chunk").type))


@pytest.mark.parametrize("chunk", [99, None], ids=["another-id", "null"])
def test_rows_in_no_planned_chunk_stop_verify_in_one_line(lake, chunk):
    mariadb, table, state, sink = lake
    _edit(sink, table, lambda rows: pa.concat_tables([rows, _copy_of(rows, 7, chunk)]))
    code, result, err = _verify(state, sink, table)
    line = one_error_line(err)
    assert code != 0 and "1 rows in no planned chunk" in line, f"verify passed a row it never compared: {err[-800:]}"
    code, result, err = _verify(state, sink, table, "--rows")
    assert code != 0 and "1 extra" in one_error_line(err), err[-800:]


@pytest.mark.parametrize("source_change", ["", "UPDATE {t} SET n = 777 WHERE id = 7", "DELETE FROM {t} WHERE id = 7"],
                         ids=["none", "updated", "deleted"])
def test_a_key_held_twice_is_drift_also_when_the_source_changed_it_since(lake, source_change):
    """The lake holds key 7 twice; a change of key 7 after the lake's position (no tail yet) used to replace both
    copies in verify's view of the chunk, which then matched."""
    mariadb, table, state, sink = lake
    _edit(sink, table, lambda rows: pa.concat_tables([rows, rows.filter(pc.equal(rows["id"], 7))]))
    if source_change:
        mariadb.sql(source_change.format(t=table))
    code, result, err = _verify(state, sink, table)
    assert code != 0 and result["drifted"] == [0], f"a key held twice passed: {result} {err[-800:]}"
    assert "holds 1 keys more than once" in err, err[-800:]
    if not source_change:
        code, result, err = _verify(state, sink, table, "--rows")
        assert code != 0 and "1 rows of keys it holds twice" in one_error_line(err), err[-800:]


def test_float_keys_are_matched_as_stored_by_verify_and_rows_on_postgres(postgres, pg_db, tmp_path):
    """A NaN key equals no value in Python: verify's view of a chunk kept the lake's row of a NaN key beside its
    change's image (a false drift), and ``--rows`` found the key missing and extra at once."""
    pg = postgres
    pg.sql(f"ALTER USER {pg.user} PASSWORD '{PASSWORD}'")
    pg.sql("CREATE TABLE public.f (k float8 PRIMARY KEY, n int)",
           "INSERT INTO public.f VALUES ('NaN', 1), ('-0', 2), (1.5, 3), ('Infinity', 4)", db=pg_db)
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, out, err = dblog("run", "--source", pg.uri(pg_db, password=PASSWORD), "--table", "public.f",
                           "--state", state, "--sink", sink, "--chunk-size", "2")
    assert code == 0, err
    pg.sql("UPDATE public.f SET n = 10 WHERE k = 'NaN'", "UPDATE public.f SET n = 20 WHERE k = '-0'", db=pg_db)
    code, result, err = _verify(state, sink, "public.f")  # the changes after the lake's position brought forward
    assert code == 0 and result["equal"], f"a NaN key's change counted as drift: {result} {err[-800:]}"
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    assert code == 0, err[-2000:]
    code, result, err = _verify(state, sink, "public.f", "--rows")
    assert code == 0 and result["equal"], f"--rows: {result} {err[-800:]}"


def test_a_frozen_lake_keeps_a_renamed_column_and_verify_and_repair_keep_to_it_on_mariadb(lake):
    """``--schema-changes freeze`` ignores RENAME COLUMN for good, so the lake keeps a column the source no longer
    has. verify stopped in one line on every run ("let the tail follow it", which a frozen tail never does); now it
    compares the columns both have and names the others. A repair of one chunk re-read it with the source's columns
    and changed the whole lake's from that one read (the other chunks' renamed column null, for good, and verify
    equal): now a frozen table's re-reads keep the lake's columns (``TablePlan.keep_columns``, in the state)."""
    mariadb, table, state, sink = lake
    mariadb.sql(f"ALTER TABLE {table} RENAME COLUMN t TO u", f"UPDATE {table} SET u = 'z' WHERE id = 2")
    code, out, err = dblog("tail", "--state", state, "--sink", sink, "--available-now", "--schema-changes", "freeze")
    assert code == 0, err[-3000:]
    mariadb.sql(f"UPDATE {table} SET n = -3 WHERE id = 3", f"UPDATE {table} SET u = 'q' WHERE id = 4")
    code, result, err = _verify(state, sink, table)
    assert code == 0 and result["equal"], f"{result} {err[-2000:]}"
    assert result["tables"][table]["lake_only_columns"] == ["t"] and result["tables"][table]["source_only_columns"] == ["u"]

    _edit(sink, table, lambda rows: rows.set_column(rows.schema.get_field_index("n"), "n", pc.if_else(
        pc.equal(rows["id"], 25), pa.scalar(-1, rows.schema.field("n").type), rows["n"])))
    code, result, err = _verify(state, sink, table)
    assert code != 0 and result["drifted"] == [2], f"{result} {err[-2000:]}"
    code, result, err = _verify(state, sink, table, "--repair")
    assert code == 0 and result["repaired"] == [2], f"{result} {err[-2000:]}"
    rows = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table()
    assert [n for n in rows.column_names if not n.startswith("_")] == ["id", "t", "n"], rows.schema
    assert rows.filter(pc.equal(rows["id"], 25))["t"].to_pylist() == [None]  # the re-read chunk: dropped, null
    assert rows.filter(pc.equal(rows["id"], 10))["t"].to_pylist() == ["v10"]  # the others: as the lake kept them
    code, result, err = _verify(state, sink, table)
    assert code == 0 and result["equal"], f"{result} {err[-2000:]}"


def _resnapshot_here(state: str, sink: str, table: str, chunks: str) -> None:
    from tests.integration.test_repair_races import resnapshot

    read = resnapshot(state, sink, table, chunks)
    _, err = read.communicate(timeout=300)
    assert read.returncode == 0, err[-2000:]


def _plan_keeps_columns(state: str, table: str) -> bool:
    from airflow_provider_dblog.store.state import StateDir

    return StateDir(state).table(table).keep_columns


def test_freeze_keeps_the_lakes_columns_only_while_they_differ_and_evolve_then_reads_every_chunk(lake):
    """``keep_columns`` is set only when freeze leaves the lake other columns than the source's (a TRUNCATE under
    freeze leaves them the same): else a repair after a switch to evolve dropped a column added meanwhile from the
    chunk it read, and the ADD followed in place gave that chunk's rows the DEFAULT over the UPDATEs before the
    read (found by review). A lake frozen with other columns, once the tail runs under evolve again, follows the
    next change by reading every chunk (its columns are not the ones the statement starts from): lake = source."""
    from tests.support.lakecheck import assert_replay_equals_current, compare_rows

    mariadb, table, state, sink = lake
    tail = ("tail", "--state", state, "--sink", sink, "--available-now")
    mariadb.sql(f"TRUNCATE TABLE {table}",
                f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, 'w{i}', {i})" for i in range(1, 41)))
    code, out, err = dblog(*tail, "--schema-changes", "freeze")
    assert code == 0, err[-3000:]
    assert not _plan_keeps_columns(state, table), "freeze kept columns equal to the source's"
    mariadb.sql(f"ALTER TABLE {table} ADD COLUMN c INT DEFAULT 0", f"UPDATE {table} SET c = 5 WHERE id = 25")
    _resnapshot_here(state, sink, table, "2")  # before the tail follows the ADD
    code, out, err = dblog(*tail)
    assert code == 0, err[-3000:]
    current = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table()
    assert compare_rows(current, mariadb.port, table) == []
    assert_replay_equals_current(sink, table)

    mariadb.sql(f"ALTER TABLE {table} RENAME COLUMN t TO u", f"UPDATE {table} SET u = 'z' WHERE id = 2")
    code, out, err = dblog(*tail, "--schema-changes", "freeze")
    assert code == 0, err[-3000:]
    assert _plan_keeps_columns(state, table)
    mariadb.sql(f"ALTER TABLE {table} ADD COLUMN e INT DEFAULT 7", f"UPDATE {table} SET e = 8 WHERE id = 12")
    _resnapshot_here(state, sink, table, "1")
    # a write after the repair: the tail's re-read of every chunk is then at another position than the repair's
    # (at the same one, a chunk that differs from its last read stops in one line: test_repair_races)
    mariadb.sql(f"UPDATE {table} SET n = n + 1 WHERE id = 40")
    code, out, err = dblog(*tail)
    assert code == 0, err[-3000:]
    current = DeltaTable(f"{sink}/{table}/current").to_pyarrow_table()
    assert compare_rows(current, mariadb.port, table) == []
    assert not _plan_keeps_columns(state, table)
    assert_replay_equals_current(sink, table)
    code, result, err = _verify(state, sink, table)
    assert code == 0 and result["equal"] and result["tables"][table]["lake_only_columns"] == [], err[-2000:]
