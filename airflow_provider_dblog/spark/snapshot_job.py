"""The snapshot batch as a Spark job: one RDD over the batch's (table, chunk) items, up to four tasks
per core, each running the watermark window read of its chunks one after another and committing each
chunk to the lake with delta-rs (columnar end to end: connectorx -> Arrow -> delta-rs, no Python row
objects and no Arrow->JVM row conversion). A batch may hold chunks of many small tables: one application
for all. Tasks return their chunk reports (or a chunk's error, on one line) to the driver; they never
touch the state."""
from __future__ import annotations

import logging
import time
from typing import Sequence

from airflow_provider_dblog.core.batches import BatchGroup, spread
from airflow_provider_dblog.readers.progress import logged_progress
from airflow_provider_dblog.spark.session import spark_context
from airflow_provider_dblog.store.object_store import settings, use_settings

log = logging.getLogger("dblog")
TASKS_PER_CORE = 4


def _read_chunks(sink: str, plans: dict, dialect):
    """The task: the plans of the batch's tables travel with it (read once in the driver, never
    re-parsed per chunk); each item opens the plan of its table. So do the driver's object-store
    settings (like the password inside ``dialect``: task data, never Spark conf). A failed chunk ends
    the task with its root cause instead of a Py4J trace, and the chunks read before it keep their
    reports."""
    store = settings()

    def task(parts):
        from airflow_provider_dblog.readers.chunk_reader import failed_chunk, run_chunk

        use_settings(store)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            for items in parts:
                for table, chunk_id in items:
                    try:
                        report = run_chunk(sink, plans[table], chunk_id, dialect)
                    except Exception as exc:  # noqa: BLE001 - returned to the driver, which raises it as one line
                        yield {**failed_chunk(chunk_id, exc), "table": table}
                        return
                    yield report
        finally:
            dialect.close()

    return task


def run_chunks(sink: str, plans: dict, groups: Sequence[BatchGroup], dialect, spark=None, label: str = "") -> list[dict]:
    """Read the chunks of ``groups`` (``plans``: their tables' plans by name) on Spark's executors in one
    job; returns their reports and errors, for the driver to check and persist
    (``readers.chunk_reader.persist_reports``). Progress is logged per table as chunks land in the lake."""
    items = [(g.table, c) for g in groups for c in g.chunk_ids]
    # a chunk's estimated rows: tasks get about equal shares when the batch mixes big and small tables
    weights = [max(1, plans[t].rows // max(1, len(plans[t].chunks))) for t, _ in items]
    sc = spark_context("dblog-snapshot", spark)
    sc.setJobDescription(f"dblog snapshot {label or ', '.join(g.table for g in groups)}: {len(items)} chunks"[:250])
    started = time.time()
    # several chunks per task: a task costs ≈0.1 s beyond its rows (60 lineitem chunks on local[2]: 17-22 s
    # as 60 tasks, 15 s as 8); 4 tasks per core still balance the cores when chunks differ in size
    tasks = min(len(items), max(1, sc.defaultParallelism * TASKS_PER_CORE))
    parts = [[items[i] for i in share] for share in spread(weights, tasks)]
    rdd = sc.parallelize(parts, len(parts))
    # collect(), not toLocalIterator(): every executor works at once; the driver follows the lake's commits
    with logged_progress(sink, groups, "snapshot"):
        reports = rdd.mapPartitions(_read_chunks(sink, plans, dialect)).collect()
    rows = sum(r.get("rows", 0) for r in reports)
    elapsed = max(time.time() - started, 1e-6)
    log.info("snapshot %s: %d/%d chunks of %d tables, %d rows in %.1fs (%.0f rows/s)", label or "batch",
             len(reports), len(items), len(groups), rows, elapsed, rows / elapsed)
    return reports
