"""A Spark Structured Streaming source over the binlog (``spark.readStream.format("dblog_binlog")``).

Offsets are binlog positions at transaction boundaries (``{"file": ..., "pos": ...}``), so a
micro-batch ``[start, end)`` always holds whole transactions and a restarted query re-reads
exactly the same events. The first offset is the smallest chunk HW of the offset map; an event is
emitted only if it is after its chunk's HW (Flink CDC's binlog split rule), and past the largest
HW everything is emitted. Keys are located among chunk boundaries in the database's own order
(``DataSourceDialect.sort_keys``), so case-insensitive and composite keys land in the right chunk.

The password never passes through Spark options (they appear in plans and logs): the driver resolves
it from ``$DBLOG_SOURCE_PASSWORD`` or the credentials file, and it reaches executors only inside the
serialized reader (Spark's task data), so executors need neither.
"""
from __future__ import annotations

import logging
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from airflow_provider_dblog.core.chunks import locate
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.lake import changelog_schema, event_rows

log = logging.getLogger("dblog")
SOURCE_NAME = "dblog_binlog"
LOOKUP_BATCH = 2000


def spark_schema(arrow_schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema, prefer_timestamp_ntz=True)


class BinlogRange(InputPartition):
    """One decoding share ``part`` of ``parts`` over the micro-batch ``[start, end)``."""

    def __init__(self, start: dict, end: dict, part: int = 0, parts: int = 1):
        super().__init__((start, end, part, parts))
        self.start, self.end, self.part, self.parts = start, end, part, parts


class BinlogDataSource(DataSource):
    """Options: ``state`` (state directory), ``table`` (DB.TABLE), ``maxEventsPerTrigger``,
    ``decodeParallelism`` (Spark tasks that share the decoding of each micro-batch)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _context(self):
        from airflow_provider_dblog.pipeline import dialect_for, load_offsets
        from airflow_provider_dblog.state import StateDir

        state = StateDir(self.options["state"])
        table = self.options["table"]
        plan = state.table(table)
        return state, plan, load_offsets(state)[table], dialect_for(state.source(), state.options())

    def schema(self):
        from airflow_provider_dblog.pipeline import dialect_for
        from airflow_provider_dblog.state import StateDir

        state = StateDir(self.options["state"])
        meta = state.table(self.options["table"]).meta
        return spark_schema(changelog_schema(dialect_for(state.source()).arrow_schema(meta)))

    def streamReader(self, schema) -> "BinlogStreamReader":
        context = self._context()
        reader = BinlogStreamReader(*context, int(self.options.get("maxEventsPerTrigger", 0)),
                                    int(self.options.get("decodeParallelism", 1)))
        # a recorded catch-up check covering the min HW (no row event of the table in [min HW, to)):
        # the first offset may be ``to``, so that an idle table does not pin old binlog files
        checked = context[0].caught_up(self.options["table"], context[2].min_hw)
        reader.initial_floor = checked[0] if checked else None
        return reader


class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, state, plan, offsets, dialect, max_events: int, parallelism: int = 1):
        self.meta = plan.meta
        self.parallelism = max(1, parallelism)
        self.offsets = offsets
        self.dialect = dialect
        self.max_events = max_events
        self.target: dict | None = None
        self._boundary_sort_keys = None

    initial_floor: BinlogPosition | None = None  # set by BinlogDataSource.streamReader

    # ---- driver side ----
    def initialOffset(self) -> dict:
        start = self.offsets.min_hw
        if self.initial_floor is not None and self.initial_floor > start:
            start = self.initial_floor
        self.dialect.ensure_available(start)
        return start.to_dict()

    def _now(self) -> dict:
        return self.dialect.current_position().to_dict()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._now()

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_events) if self.max_events > 0 else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        start_pos = BinlogPosition.from_dict(start)
        self.dialect.ensure_available(start_pos)
        latest = BinlogPosition.from_dict(self.target or self._now())
        if isinstance(limit, ReadMaxRows) and latest > start_pos:
            capped = self.dialect.commit_after(start_pos, limit.max_rows)
            if capped is not None and capped < latest:
                latest = capped
        return (latest if latest > start_pos else start_pos).to_dict()

    def reportLatestOffset(self):
        return self._now()

    def partitions(self, start: dict, end: dict):
        return [BinlogRange(start, end, k, self.parallelism) for k in range(self.parallelism)]

    def commit(self, end: dict) -> None:
        self.dialect.close()

    def stop(self) -> None:
        self.dialect.close()

    # ---- executor side ----
    def _chunk_of(self, keys: list[tuple]) -> list[int]:
        if self._boundary_sort_keys is None:
            self._boundary_sort_keys = self.dialect.sort_keys(self.meta, list(self.offsets.boundaries))
        return [locate(sk, self._boundary_sort_keys) for sk in self.dialect.sort_keys(self.meta, keys)]

    def _emit(self, events: list) -> tuple[list, list[int]]:
        """The events to write and each one's chunk (every stream row carries its key's chunk, so that
        a later rerun of that chunk supersedes it in the mirror)."""
        chunks = self._chunk_of([e.key for e in events])
        kept = [(e, c) for e, c in zip(events, chunks) if self.offsets.should_emit(e.pos, c)]
        return [e for e, _ in kept], [c for _, c in kept]

    def read(self, partition: BinlogRange) -> Iterator[pa.RecordBatch]:
        start, end = BinlogPosition.from_dict(partition.start), BinlogPosition.from_dict(partition.end)
        schema = self.dialect.arrow_schema(self.meta)
        pending: list = []
        try:
            for event in self.dialect.read_changes(start, end, [self.meta], share=(partition.part, partition.parts)):
                pending.append(event)
                if len(pending) >= LOOKUP_BATCH:
                    yield from event_rows(*self._emit(pending), schema).to_batches()
                    pending = []
            if pending:
                yield from event_rows(*self._emit(pending), schema).to_batches()
        finally:
            self.dialect.close()
