"""An executor for unit tests of the steps (``steps.executor.Executor``): every read runs in this process, one
after another, and each call is recorded, so a test sees what a step asked of its executor. Chunks go through
the chunk reader (``readers.chunk_reader.run_chunk``), the tail's query through the local path's one-pass
reader (``local.catch_up``) over the whole range: what Spark's tasks and ``foreachBatch`` would run."""
from __future__ import annotations

from airflow_provider_dblog.local.catch_up import catch_up_tables_in_driver
from airflow_provider_dblog.readers.chunk_reader import run_chunk
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.spark.executor import SparkExecutor


class InProcessTail:
    def __init__(self, rows: dict, positions: dict):
        self.rows, self.positions, self.closed = rows, positions, False

    def close(self) -> None:
        self.closed = True


class InProcessExecutor:
    def __init__(self, catch_up_rows: bool = False):
        """``catch_up_rows``: answer ``catch_up`` by reading the range (else None: the tail's query reads it)."""
        self.catch_up_rows = catch_up_rows
        self.calls: list[tuple] = []

    def warm_up(self, snapshots: bool) -> None:
        self.calls.append(("warm_up", snapshots))

    def read_chunks(self, sink, plans, groups, dialect, label=""):
        self.calls.append(("read_chunks", tuple((g.table, g.chunk_ids) for g in groups)))
        return [run_chunk(sink, plans[g.table], chunk_id, dialect) for g in groups for chunk_id in g.chunk_ids]

    snapshot_tables = SparkExecutor.snapshot_tables  # batch by batch through the step's ``read_batch``

    def catch_up(self, state, sink, dialect, tables, now, committers, gtid):
        self.calls.append(("catch_up", tuple(sorted(tables))))
        if not self.catch_up_rows:
            return None
        return catch_up_tables_in_driver(state, sink, dialect, tables, now, 1 << 40, committers, gtid)

    def start_tail(self, state, sink, tables, available_now, trigger_seconds, max_events, decode_parallelism,
                   merge_interval, committers, batch_memory_bytes):
        self.calls.append(("start_tail", tuple(tables or ())))
        dialect = open_dialect(state.source(), state.options())
        try:
            offsets = state.offsets()
            names = sorted(offsets) if tables is None else tables
            now = dialect.current_position()
            rows = catch_up_tables_in_driver(state, sink, dialect, {n: offsets[n] for n in names}, now, 1 << 40,
                                             committers)
        finally:
            dialect.close()
        return "query", InProcessTail(rows or {}, dict.fromkeys(names, now))

    def watch(self, query, should_stop, tick, restart=None):
        self.calls.append(("watch", query))
        return query
