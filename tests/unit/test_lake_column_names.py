"""The names a plan refuses for a source's columns (``store.lake_schema.clashing_columns``) are every name the lake's
schemas add, whatever their case; a ``_``-prefixed name of the source's own is not refused (the plan's one line and
its place before any slot are tested in tests/integration/test_lake_column_names.py)."""
from __future__ import annotations

import pyarrow as pa

from airflow_provider_dblog.store.lake import UNCHANGED, changelog_schema, current_schema
from airflow_provider_dblog.store.lake_schema import clashing_columns


def test_every_name_the_lake_adds_is_refused_and_no_other():
    added = [*changelog_schema(pa.schema([])).names, *current_schema(pa.schema([])).names, UNCHANGED]
    shouted = [n.upper() for n in added]
    assert clashing_columns([*shouted, "_body", "_i", "op"], ["_body"]) == shouted
    assert clashing_columns(["_i", "_j", "_held", "_body"], ["_i", "_j", "_held", "_body"]) == ["_i", "_j", "_held"]
