"""The single-machine executor of CLI runs (``steps.executor.Executor``): the Spark executor on a tuned local
Spark that starts only when a step needs it, or in the background while the step plans (``start_spark``),
plus what one machine does better in this process: chunks read by ``driver_threads`` threads while Spark
starts, or instead of a local Spark that would add no task slots (``chunk_readers``), and an available-now
catch-up of at most ``catch_up_bytes`` of binlog read without Spark (``catch_up``)."""
from __future__ import annotations

from typing import Callable, Sequence

from airflow_provider_dblog.core.batches import Batch, BatchGroup
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.local.catch_up import catch_up_tables_in_driver
from airflow_provider_dblog.local.chunk_readers import DRIVER_THREADS, driver_reading_needs_spark, snapshot_batches
from airflow_provider_dblog.local.session import BackgroundSession, lazy_local_session
from airflow_provider_dblog.spark.executor import SparkExecutor
from airflow_provider_dblog.spark.session import local_master


class LocalExecutor(SparkExecutor):
    def __init__(self, app_name: str, catch_up_bytes: int = 0, driver_threads: int = DRIVER_THREADS,
                 short_lived: bool = True, spark=None):
        """``spark``: a session to use instead of the local one (tests)."""
        if driver_threads < 0:
            raise DblogError("--driver-threads must be 0 (Spark reads every chunk) or a positive number of threads")
        super().__init__(spark if spark is not None else lazy_local_session(app_name, short_lived))
        self.app_name, self.short_lived, self.own_spark = app_name, short_lived, spark is None
        self.catch_up_bytes, self.driver_threads = catch_up_bytes, driver_threads
        self.background: BackgroundSession | None = None

    def start_spark(self) -> None:
        """Start the local Spark now, in the background (its JVM's start overlaps the step's own checks)."""
        if self.own_spark and self.background is None:
            self.background = BackgroundSession(self.app_name, short_lived=self.short_lived)
            self.spark = self.background

    def warm_up(self, snapshots: bool) -> None:
        """A Spark with more task slots than the driver's threads starts while the tables are planned and
        the first chunks are read; otherwise none starts unless a later read needs one."""
        if snapshots and driver_reading_needs_spark(self.driver_threads, local_master()):
            self.start_spark()

    def snapshot_tables(self, state_dir: str, sink: str, batches: Sequence[Batch], tables: Sequence[str],
                        read_batch: Callable[[int, list[BatchGroup]], list[dict]]) -> list[dict]:
        return snapshot_batches(state_dir, sink, batches, tables, read_batch, self.background, self.driver_threads)

    def catch_up(self, state, sink, dialect, tables, now, committers, gtid) -> dict[str, int] | None:
        return catch_up_tables_in_driver(state, sink, dialect, tables, now, self.catch_up_bytes, committers, gtid)
