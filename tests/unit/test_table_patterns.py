"""Whole databases: table patterns, exclusions, per-table chunk keys and the plan's one-line errors
(pure rules, and the plan step against the in-memory dialect; tests/integration/test_errors.py runs
the CLI against a real MariaDB)."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from airflow_provider_dblog.core.config import SourceConfig, chunk_keys, match_tables, table_patterns
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.steps.plan import plan_tables, resolve_tables
from tests.support.fake_dialect import InMemoryServer

_servers = itertools.count()
TABLES = ["shop.orders", "shop.order_lines", "shop.tmp_x", "crm.customers", "crm.notes"]


def test_patterns_match_names_and_globs_minus_exclusions():
    assert match_tables(TABLES, table_patterns("shop.*,crm.customers"), table_patterns("shop.tmp_*")) == [
        "crm.customers", "shop.order_lines", "shop.orders"]
    assert match_tables(TABLES, table_patterns("shop.order?"), []) == ["shop.orders"]
    assert match_tables(TABLES, table_patterns("SHOP.*"), []) == []  # names are case-sensitive, as on Linux


@pytest.mark.parametrize("bad", ["shop", "shop.", ".orders", "shop.[ab", "shop.*,", "shop. x"])
def test_a_malformed_pattern_is_one_line_naming_it(bad):
    with pytest.raises(DblogError, match=r"bad --tables pattern .*: use comma-separated DB.TABLE names or globs"):
        table_patterns(bad)


def test_names_with_spaces_are_patterns_too():
    """A PostgreSQL schema "Mixed Case" or a MySQL table `order items`: before, every pattern with a space was
    refused, so such a table could only be named by a glob (``Mixed?Case.*``)."""
    tables = ["Mixed Case.Order Items", "Mixed Case.a.b", "shop.order items", "shop.orders"]
    assert match_tables(tables, table_patterns("Mixed Case.*, shop.order items"), []) == [
        "Mixed Case.Order Items", "Mixed Case.a.b", "shop.order items"]


def test_chunk_keys_per_table_or_for_the_only_table():
    assert chunk_keys(["shop.log=ts,id", "crm.notes=n"], ["shop.log", "crm.notes"]) == {
        "shop.log": ["ts", "id"], "crm.notes": ["n"]}
    assert chunk_keys("a,b", ["shop.log"]) == {"shop.log": ["a", "b"]}
    with pytest.raises(DblogError, match="names no table"):
        chunk_keys("a", ["shop.log", "crm.notes"])
    with pytest.raises(DblogError, match="bad --chunk-key"):
        chunk_keys("shop.log=", ["shop.log"])


def _server() -> InMemoryServer:
    server = InMemoryServer(f"p{next(_servers)}")
    for table in TABLES:
        server.create(table, [("id", "bigint"), ("v", "varchar")], ["id"])
        for i in range(7):
            server.transaction((table, "insert", {"id": i, "v": "x"}))
    return server


def test_a_pattern_plans_every_matching_table_and_nothing_else(tmp_path):
    server = _server()
    source = SourceConfig.parse(server.uri)
    tables = resolve_tables(source, patterns="shop.*", exclude="shop.tmp_*")
    summary = plan_tables(source, tables, str(tmp_path / "state"), chunk_size=3, batch_size=2)
    assert sorted(summary["tables"]) == ["shop.order_lines", "shop.orders"]
    assert {t: info["chunks"] for t, info in summary["tables"].items()} == {"shop.order_lines": 3, "shop.orders": 3}
    assert {t for b in summary["batches"] for t in b["tables"]} == {"shop.order_lines", "shop.orders"}


def test_an_empty_match_and_an_unknown_name_are_one_line_each(tmp_path):
    source = SourceConfig.parse(_server().uri)
    with pytest.raises(DblogError, match=r"no table on .* matches --tables nope\.\* without --exclude x\.y"):
        resolve_tables(source, patterns="nope.*", exclude="x.y")
    tables = resolve_tables(source, patterns="shop.orders,shop.missing")
    with pytest.raises(DblogError, match="unknown table shop.missing"):
        plan_tables(source, tables, str(tmp_path / "state"))
    assert not Path(tmp_path / "state").exists()


def test_tables_without_a_key_fail_the_plan_naming_all_and_both_fixes(tmp_path):
    server = _server()
    for table in ("shop.log", "crm.audit"):
        server.create(table, [("ts", "bigint"), ("msg", "varchar")], [])
    source = SourceConfig.parse(server.uri)
    tables = resolve_tables(source, patterns="shop.*,crm.*")
    with pytest.raises(DblogError) as err:
        plan_tables(source, tables, str(tmp_path / "state"))
    message = str(err.value)
    assert "2 table(s) have no primary key" in message and "crm.audit, shop.log" in message
    assert "--exclude" in message and "--chunk-key DB.TABLE=COL[,COL]" in message and "\n" not in message
    assert not (tmp_path / "state").exists()  # nothing written
    with pytest.raises(DblogError, match="which the plan does not capture"):
        plan_tables(source, tables, str(tmp_path / "state"), {"shop.nope": ["ts"]})
    keys = chunk_keys(["shop.log=ts", "crm.audit=ts,msg"], tables)
    summary = plan_tables(source, tables, str(tmp_path / "state"), keys, chunk_size=5)
    assert summary["tables"]["crm.audit"]["key"] == ["ts", "msg"] and len(summary["tables"]) == len(TABLES) + 2
