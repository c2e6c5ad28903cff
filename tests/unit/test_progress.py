"""core.progress: long loops (a verify's source checksums, a whole database's per-table work) log how far they are
every few seconds, never for their last step."""
from __future__ import annotations

import logging

from airflow_provider_dblog.core.parallel import for_each_table
from airflow_provider_dblog.core.progress import ProgressLog


def test_progress_lines_come_every_interval_and_never_for_the_last_step(caplog):
    caplog.set_level(logging.INFO, "dblog")
    progress = ProgressLog("verify shop.orders: source checksums", 3, every=0.0)
    for _ in range(3):
        progress.step()
    assert [r.getMessage() for r in caplog.records] == ["verify shop.orders: source checksums: 1/3 chunks",
                                                        "verify shop.orders: source checksums: 2/3 chunks"]
    caplog.clear()
    quiet = ProgressLog("x", 1000, every=3600.0)
    for _ in range(999):
        quiet.step()
    assert caplog.records == []


def test_for_each_table_counts_tables_and_does_every_one(caplog, monkeypatch):
    import airflow_provider_dblog.core.progress as progress

    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    caplog.set_level(logging.INFO, "dblog")
    seen = []
    for_each_table(seen.append, [f"t{i}" for i in range(5)], what="tail: committing")
    assert sorted(seen) == [f"t{i}" for i in range(5)]
    assert all(r.getMessage().startswith("tail: committing: ") and r.getMessage().endswith("/5 tables")
               for r in caplog.records) and caplog.records
