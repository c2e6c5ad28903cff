"""The snapshot batch as a Spark job: one task per chunk; each task runs the watermark window read
and writes its chunk's Parquet with pyarrow (columnar end to end: connectorx -> Arrow -> Parquet,
no Python row objects and no Arrow->JVM row conversion)."""
from __future__ import annotations

import logging
import time
from typing import Sequence

log = logging.getLogger("dblog")


def _read_chunks(state_dir: str, sink: str, table: str, dialect):
    def task(chunk_ids):
        from airflow_provider_dblog.snapshot import run_chunk
        from airflow_provider_dblog.state import StateDir

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        state = StateDir(state_dir)
        try:
            for chunk_id in chunk_ids:
                yield run_chunk(state, sink, table, chunk_id, dialect)
        finally:
            dialect.close()

    return task


def run_chunks(state_dir: str, sink: str, table: str, chunk_ids: Sequence[int], dialect, spark=None) -> list[dict]:
    from airflow_provider_dblog.spark.session import local_session

    spark = spark or local_session("dblog-snapshot")
    sc = spark.sparkContext
    sc.setJobDescription(f"dblog snapshot {table}: {len(chunk_ids)} chunks")
    started = time.time()
    rdd = sc.parallelize(list(chunk_ids), len(chunk_ids))
    # collect(), not toLocalIterator(): every executor works at once; each task logs its chunk as it ends
    reports = rdd.mapPartitions(_read_chunks(state_dir, sink, table, dialect)).collect()
    rows = sum(r["rows"] for r in reports)
    elapsed = max(time.time() - started, 1e-6)
    log.info("snapshot %s: %d/%d chunks, %d rows in %.1fs (%.0f rows/s)", table, len(reports), len(chunk_ids), rows,
             elapsed, rows / elapsed)
    return reports
