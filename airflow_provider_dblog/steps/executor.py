"""Where a step's reads run: the one interface steps use, so that no step names Spark or the local path.

The ``dblog`` command (run by hand, or by spark-submit for every Airflow task) or a test chooses the executor
and hands it to the step: ``spark.executor.SparkExecutor`` reads chunks as Spark jobs and tails through one
Structured Streaming query (the stock session under spark-submit, or a given one); ``local.executor.LocalExecutor`` is the same on a
local Spark that starts only when needed, plus what a single machine does better in this process: chunks
read while Spark starts, and a small cold catch-up read without Spark. The steps decide what is read and
commit it (``steps.change_committer``); the executor only decides where and how the reading runs."""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

from airflow_provider_dblog.core.batches import Batch, BatchGroup
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.store.state import StateDir

# (dialect, table) -> the table's committer: how a reader's changes of one table reach the lake
Committers = Callable[[DataSourceDialect, str], object]
ReadBatch = Callable[[int, list[BatchGroup]], list[dict]]


class TailSink(Protocol):
    """What a running tail has committed: rows per table and the position each table reached."""
    rows: dict[str, int]
    positions: dict[str, SourcePosition]

    def close(self) -> None: ...


class Executor(Protocol):
    def warm_up(self, snapshots: bool) -> None:
        """The step is about to plan: start in the background what its reads will need (``snapshots``: it
        reads chunks)."""

    def read_chunks(self, sink: str, plans: dict, groups: Sequence[BatchGroup], dialect: DataSourceDialect,
                    label: str = "") -> list[dict]:
        """Read these chunks (each in its watermark window, committed to the lake); their reports."""

    def snapshot_tables(self, state_dir: str, sink: str, batches: Sequence[Batch], tables: Sequence[str],
                        read_batch: ReadBatch) -> list[dict]:
        """Every unreported chunk of ``tables`` in ``batches``: those this executor does not read itself go
        through ``read_batch(batch, groups)``; returns the reports ``read_batch`` gave."""

    def catch_up(self, state: StateDir, sink: str, dialect: DataSourceDialect, tables: dict[str, TableOffsets],
                 now: SourcePosition, committers: Committers, gtid: Callable[[], str | None]
                 ) -> dict[str, int] | None:
        """An available-now catch-up of ``tables`` up to ``now`` read before any query starts, if this
        executor does that for a range this small; rows per table, or None (the query reads it)."""

    def start_tail(self, state: StateDir, sink: str, tables: list[str] | None, available_now: bool,
                   trigger_seconds: float, max_events: int, decode_parallelism: int, merge_interval: float,
                   committers: Committers, batch_memory_bytes: int) -> tuple[object, TailSink]:
        """Start the tail's one query over ``tables`` (None: every table of the offset map, joining ones
        included); the query and its sink."""

    def watch(self, query, should_stop: Callable[[], bool], tick: Callable[[], None],
              restart: Callable[[], object] | None = None):
        """Follow the query until it ends or ``should_stop()``; returns the last query (a restart replaces
        it); its failure as one line."""
