"""Maintain: compact, checkpoint and vacuum the lake's Delta tables (the tail DAG runs it after each tail).

MERGE and small micro-batch appends leave many small files; compaction rewrites them into few large
ones, a log checkpoint keeps opening a table fast, and vacuum deletes files no version within the
retention needs (readers of older versions, time travel: keep it longer than your longest query)."""
from __future__ import annotations

import logging
from typing import Sequence

from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.object_store import check_sink
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
DEFAULT_RETENTION_HOURS = 168.0


def maintain(state_dir: str, sink: str, tables: Sequence[str] | None = None,
             retention_hours: float = DEFAULT_RETENTION_HOURS) -> dict:
    check_sink(sink)
    state = StateDir(state_dir)
    plans = state.tables()
    names = list(tables or sorted(plans))
    dialect = open_dialect(state.source(), state.options())
    out = {}
    for name in names:
        meta = state.table(name).meta
        out[name] = LakeTables(sink, name, dialect.arrow_schema(meta), meta.key_columns).maintain(retention_hours)
        log.info("maintain %s: %s", name, out[name])
    return {"tables": out}
