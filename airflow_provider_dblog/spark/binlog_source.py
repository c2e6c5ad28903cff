"""A Spark Structured Streaming source over the binlog (``spark.readStream.format("dblog_binlog")``).

Offsets are binlog positions at transaction boundaries (``{"file": ..., "pos": ...}``), so a
micro-batch ``[start, end)`` always holds whole transactions and a restarted query re-reads exactly
the same events. The first offset is the smallest chunk HW of the offset map (or the end of a recorded
catch-up check covering it, or the position the lake recorded if that is later: a tail whose checkpoint
was lost resumes from the lake); each partition runs ``readers.binlog_reader`` over the range.

The stream's rows are envelopes (``PAYLOAD_SCHEMA``), not the table's columns: a schema change in the
middle of a query changes the columns of the rows that follow, which a streaming DataFrame's fixed
schema cannot. ``_op`` "b" carries a batch of changelog rows as Arrow IPC (in the columns they were
decoded with), "s" a DDL statement naming the table, and the one "m" row per partition the range's end
(``_pos``), which tells the lake sink where the micro-batch ends (``tail_queries.LakeSink``).

The password never passes through Spark options (they appear in plans and logs): the driver resolves
it from ``$DBLOG_SOURCE_PASSWORD`` or the credentials file, and it reaches executors only inside the
serialized reader (Spark's task data), so executors need neither.
"""
from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

import json

from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.core.schema_events import SchemaChange
from airflow_provider_dblog.readers.binlog_reader import TableChangeReader
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir

SOURCE_NAME = "dblog_binlog"
END_MARKER, ROWS, DDL = "m", "b", "s"
PAYLOAD_SCHEMA = pa.schema([pa.field("_op", pa.string()), pa.field("_pos", pa.string()),
                            pa.field("_payload", pa.binary())])


def envelope(item: pa.RecordBatch | SchemaChange) -> pa.RecordBatch:
    """One stream row for a batch of changelog rows or a DDL statement."""
    if isinstance(item, SchemaChange):
        payload = json.dumps({"table": item.table, "kind": item.kind, "statement": item.statement,
                              "start": item.start.to_dict(), "pos": item.pos.to_dict()}).encode()
        return _row(DDL, item.pos.encode(), payload)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, item.schema) as writer:
        writer.write_batch(item)
    return _row(ROWS, "", sink.getvalue().to_pybytes())


def _row(op: str, pos: str, payload: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([op], pa.string()), pa.array([pos], pa.string()),
                                       pa.array([payload], pa.binary())], schema=PAYLOAD_SCHEMA)


def open_envelopes(data: pa.Table) -> tuple[list[pa.Table], list[SchemaChange], BinlogPosition | None]:
    """(row batches, DDL statements, the micro-batch's end: None without an end marker) of collected rows."""
    parts, changes, end = [], [], None
    for op, pos, payload in zip(data["_op"].to_pylist(), data["_pos"].to_pylist(), data["_payload"].to_pylist()):
        if op == ROWS:
            parts.append(pa.ipc.open_stream(payload).read_all())
        elif op == DDL:
            d = json.loads(payload)
            changes.append(SchemaChange(d["table"], d["kind"], d["statement"], BinlogPosition.from_dict(d["start"]),
                                        BinlogPosition.from_dict(d["pos"])))
        elif op == END_MARKER:
            marker = BinlogPosition.decode(pos)
            end = marker if end is None or marker > end else end
    return parts, changes, end


def spark_schema(arrow_schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema, prefer_timestamp_ntz=True)


class BinlogRange(InputPartition):
    """One decoding share ``part`` of ``parts`` over the micro-batch ``[start, end)``."""

    def __init__(self, start: dict, end: dict, part: int = 0, parts: int = 1):
        super().__init__((start, end, part, parts))
        self.start, self.end, self.part, self.parts = start, end, part, parts


class BinlogDataSource(DataSource):
    """Options: ``state`` (state directory), ``sink`` (the lake), ``table`` (DB.TABLE), ``maxEventsPerTrigger``,
    ``decodeParallelism`` (Spark tasks that share the decoding of each micro-batch)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self):
        return spark_schema(PAYLOAD_SCHEMA)

    def streamReader(self, schema) -> "BinlogStreamReader":
        state, table = StateDir(self.options["state"]), self.options["table"]
        offsets = state.offsets()[table]
        meta = state.table(table).meta
        dialect = open_dialect(state.source(), state.options())
        reader = TableChangeReader(meta, offsets, dialect)
        # a recorded catch-up check covering the min HW (no row event of the table in [min HW, to)):
        # the first offset may be ``to``, so that an idle table does not pin old binlog files
        checked = state.caught_up(table, offsets.min_hw)
        floors = [checked[0]] if checked else []
        lake = LakeTables(self.options["sink"], table, dialect.arrow_schema(meta), meta.key_columns).tail_position()
        if lake is not None:
            floors.append(lake.in_file_of(offsets.min_hw))
        return BinlogStreamReader(reader, int(self.options.get("maxEventsPerTrigger", 0)),
                                  int(self.options.get("decodeParallelism", 1)), max(floors) if floors else None)


class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, reader: TableChangeReader, max_events: int, parallelism: int = 1,
                 initial_floor: BinlogPosition | None = None):
        self.reader = reader
        self.dialect = reader.dialect
        self.max_events = max_events
        self.parallelism = max(1, parallelism)
        self.initial_floor = initial_floor
        self.target: dict | None = None

    # ---- driver side ----
    def initialOffset(self) -> dict:
        start = self.reader.offsets.min_hw
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
    def read(self, partition: BinlogRange) -> Iterator[pa.RecordBatch]:
        start, end = BinlogPosition.from_dict(partition.start), BinlogPosition.from_dict(partition.end)
        for item in self.reader.batches(start, end, share=(partition.part, partition.parts)):
            yield envelope(item)
        yield _row(END_MARKER, end.encode(), b"")
