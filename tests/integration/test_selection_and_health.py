"""The Airflow layer's pieces that need no Airflow process: re-snapshot selection (filter validation,
key ranges decided in the database's order), the tail health check, provider metadata."""
from __future__ import annotations

import json
import time

import pytest

from airflow_provider_dblog.core.config import parse_chunk_ids
from airflow_provider_dblog.source.mysql.types import quote_ident
from airflow_provider_dblog.steps import resnapshot as selection
from airflow_provider_dblog.steps.health import check_tail_health, tail_progress
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.store.state import StateDir

COLUMNS = ("id", "status", "amount", "Note")


# ---- filter validation -----------------------------------------------------------------------
@pytest.mark.parametrize("text, reason", [
    ("1=1; DROP TABLE x", "';' (a second statement) is not allowed"),
    ("id = 1 -- comment", "'--' (a comment)"),
    ("id = 1 # comment", "'#' (a comment)"),
    ("id = 1 /* x */", "'/*' (a comment)"),
    ("status = 'a\\' OR 1=1", "a backslash"),
    ("id IN (SELECT id FROM mysql.user)", "'SELECT' is not a column"),
    ("SLEEP(10) = 0", "function calls (SLEEP(...)) are not allowed"),
    ("id = 1 UNION SELECT 1", "'UNION' is not a column"),
    ("status = 'late", "unexpected"),
    ("(id = 1", "unbalanced '('"),
    ("id = 1)", "unbalanced ')'"),
    ("", "it is empty"),
    ("`id`` = 1 OR ``id` = 2", "is not a column"),
])
def test_filter_rejects_injection_with_a_clear_message(text, reason):
    with pytest.raises(DblogError) as err:
        selection.filter_sql(text, COLUMNS, quote_ident)
    message = str(err.value)
    assert message.startswith("filter rejected"), message
    assert reason in message, message


def test_the_drop_table_filter_message_says_what_a_filter_is():
    with pytest.raises(DblogError, match=r"filter rejected: ';' \(a second statement\) is not allowed in a filter; "
                                         r"a filter is one boolean condition on the table's columns"):
        selection.filter_sql("1=1; DROP TABLE x", COLUMNS, quote_ident)


def test_filter_is_rebuilt_with_quoted_identifiers():
    sql = selection.filter_sql("status = 'it''s late' and (AMOUNT >= -1.5e2 or note is not null) "
                               "AND id NOT IN (1, 2) and `status` like 'l%' AND id between 3 and 9", COLUMNS, quote_ident)
    assert sql == ("`status` = 'it''s late' AND ( `amount` >= -1.5e2 OR `Note` IS NOT NULL ) AND `id` NOT IN "
                   "( 1 , 2 ) AND `status` LIKE 'l%' AND `id` BETWEEN 3 AND 9")


def test_filter_names_a_column_as_written_before_its_case_and_points_double_quotes_to_backticks():
    """PostgreSQL keeps "ORDER" and "order" apart: a filter on `ORDER` is that column, not the other (before: the
    last of the two by lower case, whichever was written). A "double-quoted" name gets a line that says how."""
    columns = ["id", "order", "ORDER", "Key Id"]
    pg_quote = lambda name: '"' + name.replace('"', '""') + '"'  # noqa: E731
    assert selection.filter_sql("`ORDER` = 1 AND `order` = 2 AND `Key Id` > 3", columns, pg_quote) == (
        '"ORDER" = 1 AND "order" = 2 AND "Key Id" > 3')
    with pytest.raises(DblogError, match=r'a "double-quoted" name is written `Name` here'):
        selection.filter_sql('"Key Id" = 1', columns, pg_quote)


def test_filter_param_pattern_blocks_the_obvious():
    import re

    pattern = re.compile(selection.FILTER_PARAM_PATTERN)
    assert pattern.match("status = 'late' AND id > 3")
    for bad in ("1=1; DROP TABLE x", "a -- b", "a /* b", "a # b", "a \\ b"):
        assert not pattern.match(bad), bad


def test_chunk_id_lists():
    assert parse_chunk_ids("3, 5-7") == [3, 5, 6, 7]
    assert parse_chunk_ids([2, 1]) == [1, 2]
    assert parse_chunk_ids(None) is None
    with pytest.raises(DblogError, match="bad chunk id"):
        parse_chunk_ids("1;2")


# ---- key ranges against a real plan ----------------------------------------------------------
@pytest.fixture
def planned(mariadb, source_uri, db, tmp_path):
    from airflow_provider_dblog.core.config import SourceConfig
    from airflow_provider_dblog.source import open_dialect
    from airflow_provider_dblog.steps.plan import plan_table
    from airflow_provider_dblog.store.state import StateDir

    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, status VARCHAR(10), amount INT)",
                f"INSERT INTO {db}.t SELECT seq, IF(seq % 100 = 0, 'late', 'ok'), seq FROM seq_1_to_1000", db=db)
    mariadb.sql(f"CREATE TABLE {db}.s (code VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, n INT)",
                f"INSERT INTO {db}.s SELECT CONCAT(IF(seq % 2, 'a', 'B'), LPAD(seq, 4, '0')), seq FROM seq_1_to_400", db=db)
    state = str(tmp_path / "state")
    source = SourceConfig.parse(source_uri)
    plan_table(source, f"{db}.t", state, chunk_size=250, batch_size=2, save_password=False)
    plan_table(source, f"{db}.s", state, chunk_size=100, batch_size=2, save_password=False)
    st = StateDir(state)
    dialect = open_dialect(source)
    yield st, dialect
    dialect.close()


def test_key_range_selects_every_overlapping_chunk(planned, db):
    state, dialect = planned
    plan = state.table(f"{db}.t")
    assert [(c.lo, c.hi) for c in plan.chunks] == [(None, (251,)), ((251,), (501,)), ((501,), (751,)), ((751,), None)]
    meta = plan.meta

    def pick(lo, hi):
        return selection.chunks_in_range(dialect, meta, plan.chunks, selection.parse_key(lo, meta),
                                         selection.parse_key(hi, meta))

    assert pick(300, 400) == [1]
    assert pick(250, 251) == [0, 1]          # both ends inclusive
    assert pick("501", "[750]") == [2]       # strings and JSON lists are converted to the key's type
    assert pick(None, 260) == [0, 1]
    assert pick(760, None) == [3]
    assert pick(-5, 5000) == [0, 1, 2, 3]
    with pytest.raises(DblogError, match="empty key range"):
        pick(400, 300)
    with pytest.raises(DblogError, match="bad key bound"):
        pick("abc", None)


def test_key_range_uses_the_collation_order(planned, db):
    state, dialect = planned
    plan = state.table(f"{db}.s")
    meta = plan.meta
    # case-insensitive collation: 'b0100' sorts with 'B0100'; Python's order would put it after every 'a'
    ids = selection.chunks_in_range(dialect, meta, plan.chunks, ("b0100",), ("b0100",))
    assert len(ids) == 1
    expected = int(dialect.client.scalar(
        f"SELECT COUNT(*) FROM {db}.s WHERE code < 'b0100'")) // 100  # chunk holding that key
    assert ids == [expected]


def test_filter_narrows_to_chunks_holding_matching_rows(planned, db):
    state, dialect = planned
    plan = state.table(f"{db}.t")
    meta = plan.meta
    condition = selection.filter_sql("status = 'late' AND amount >= 500", meta.column_names, quote_ident)
    ids = dialect.chunks_matching(meta, plan.chunks, condition, None, None)
    assert ids == [1, 2, 3]   # 500 is in chunk 1, 600/700 in chunk 2, 800.. in chunk 3
    ids = dialect.chunks_matching(meta, plan.chunks, condition, (501,), (760,))
    assert ids == [2]         # 600, 700 (800 is past the range, 500 before it)
    with pytest.raises(DblogError, match="filter rejected by the database"):
        dialect.chunks_matching(meta, plan.chunks[:1], "`status` = = 1", None, None)


# ---- tail health -----------------------------------------------------------------------------
def _fake_state(tmp_path, table="d.t", committed: dict | None = None, committed_at: float | None = None):
    state = tmp_path / "state"
    (state / "checkpoints" / table).mkdir(parents=True)
    hw = {"file": "mysql-bin.000001", "pos": 1000, "encoded": "x"}
    (state / "offsets.json").write_text(json.dumps({"tables": {table: {
        "table": table, "boundaries": [], "high_watermarks": [hw], "min_hw": hw, "max_hw": hw}},
        "built_at": time.time() - 7200}))
    if committed is not None:  # what the tail records after a micro-batch
        (state / "tail_positions.json").write_text(json.dumps({"tables": {table: {
            "pos": committed, "at": committed_at or time.time()}}}))
    return str(state)


def test_health_passes_when_caught_up_or_recently_progressed(tmp_path):
    state = _fake_state(tmp_path, committed={"file": "mysql-bin.000001", "pos": 5000}, committed_at=time.time() - 3600)
    pos, _, origin = tail_progress(state, "d.t")
    assert pos == SourcePosition.at("mysql-bin.000001", 5000) and origin == "tail batch"
    # caught up: however old the last batch, nothing to do
    report = check_tail_health(state, SourcePosition.at("mysql-bin.000001", 5000), max_stall_seconds=60)
    assert report["d.t"]["behind"] is False
    # behind but within the allowed stall
    report = check_tail_health(state, SourcePosition.at("mysql-bin.000002", 4), max_stall_seconds=7200)
    assert report["d.t"]["behind"] is True


def test_health_fails_when_the_source_moved_and_the_tail_did_not(tmp_path):
    state = _fake_state(tmp_path, committed={"file": "mysql-bin.000001", "pos": 5000}, committed_at=time.time() - 3600)
    with pytest.raises(DblogError, match=r"tail stalled: d.t: source at mysql-bin.000002:4, tail at "
                                         r"mysql-bin.000001:5000 \(tail batch\), no progress for 36\d\ds"):
        check_tail_health(state, SourcePosition.at("mysql-bin.000002", 4), max_stall_seconds=600)


def test_health_before_the_first_tail_batch_uses_the_offset_map(tmp_path):
    state = _fake_state(tmp_path)
    with pytest.raises(DblogError, match=r"offset map \(no tail batch yet\)"):
        check_tail_health(state, SourcePosition.at("mysql-bin.000001", 2000), max_stall_seconds=600)


def test_health_counts_a_catch_up_check_only_if_it_covers_the_tail_position(tmp_path):
    state = _fake_state(tmp_path)  # no tail batch yet: the min HW mysql-bin.000001:1000
    at = lambda pos: SourcePosition.at("mysql-bin.000001", pos)  # noqa: E731
    StateDir(state).write_caught_up("d.t", at(1500), at(3000))  # does not cover 1000: ignored
    assert tail_progress(state, "d.t")[0] == at(1000)
    StateDir(state).write_caught_up("d.t", at(1000), at(3000))
    pos, checked_at, origin = tail_progress(state, "d.t")
    assert pos == at(3000) and time.time() - checked_at < 60 and origin.startswith("catch-up check")
    assert check_tail_health(state, at(3000), max_stall_seconds=60)["d.t"]["behind"] is False


# ---- provider metadata -----------------------------------------------------------------------
def test_provider_info_names_hooks_operators_sensors_and_connection_type():
    import importlib

    from airflow_provider_dblog.get_provider_info import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-dblog"
    for kind in ("hooks", "operators", "sensors"):
        for module in info[kind][0]["python-modules"]:
            assert importlib.util.find_spec(module) is not None, module
    assert info["connection-types"][0]["connection-type"] == "mysql"
    assert info["connection-types"][0]["hook-class-name"] == "airflow_provider_dblog.airflow.hooks.DblogHook"
