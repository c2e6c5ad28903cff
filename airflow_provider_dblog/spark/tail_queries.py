"""The tail's Structured Streaming queries: one per table, the binlog source into the lake's stream
directory with Spark's file sink (its ``_spark_metadata`` log and the checkpoint give an exactly-once
effect across restarts: an interrupted micro-batch is re-read from the same offsets)."""
from __future__ import annotations

import json
import time
from typing import Callable

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.spark.session import spark_session
from airflow_provider_dblog.store.lake import stream_dir
from airflow_provider_dblog.store.state import StateDir


def start_queries(state: StateDir, sink: str, names: list[str], available_now: bool, trigger_seconds: float,
                  max_events: int, decode_parallelism: int = 0, spark=None) -> dict:
    """Start one query per table; returns them by table name."""
    from airflow_provider_dblog.spark.binlog_source import SOURCE_NAME, BinlogDataSource

    spark = spark_session("dblog-tail", spark)
    spark.dataSource.register(BinlogDataSource)
    queries = {}
    for name in names:
        reader = (spark.readStream.format(SOURCE_NAME).option("state", str(state.path)).option("table", name)
                  .option("decodeParallelism", str(decode_parallelism or spark.sparkContext.defaultParallelism)))
        if max_events:
            reader = reader.option("maxEventsPerTrigger", str(max_events))
        writer = (reader.load().writeStream.format("parquet").queryName(f"dblog_tail_{name}")
                  .option("path", str(stream_dir(sink, name)))
                  .option("checkpointLocation", str(state.checkpoint_dir(name))))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
            processingTime=f"{trigger_seconds} seconds")
        queries[name] = writer.start()
    return queries


def end_offsets(queries: dict) -> dict[str, BinlogPosition]:
    """Each query's last micro-batch end offset (tables whose query made no progress yet are absent)."""
    out = {}
    for name, query in queries.items():
        progress = query.lastProgress
        end = (progress or {}).get("sources", [{}])[0].get("endOffset") if progress else None
        if isinstance(end, str):
            end = json.loads(end)
        if end:
            out[name] = BinlogPosition.from_dict(end)
    return out


def _raise_failure(name: str, query) -> None:
    if query.exception() is not None:
        raise DblogError(f"tail of {name} failed: {str(query.exception()).splitlines()[0]}")


def watch(queries: dict, should_stop: Callable[[], bool], tick: Callable[[dict], None]) -> dict[str, int]:
    """Follow the queries until all end or ``should_stop()``; ``tick(rows)`` every half second. Stops
    them; returns the input rows per table; raises the first query failure as one line."""
    rows = {name: 0 for name in queries}
    seen = {name: -1 for name in queries}
    try:
        while True:
            for name, query in queries.items():
                for progress in query.recentProgress:
                    if progress["batchId"] > seen[name]:
                        seen[name] = progress["batchId"]
                        rows[name] += progress["numInputRows"]
                _raise_failure(name, query)
            if not any(q.isActive for q in queries.values()) or should_stop():
                break
            tick(rows)
            time.sleep(0.5)
    finally:
        for query in queries.values():
            if query.isActive:
                query.stop()
    for name, query in queries.items():
        _raise_failure(name, query)
    return rows
