"""A Spark Structured Streaming source over the source's change log (a MySQL binlog, a PostgreSQL slot; "binlog"
below; ``spark.readStream.format("dblog_binlog")``, the name kept so existing checkpoints resume): one query,
one read of the binlog per micro-batch, for every table of the capture.

Offsets are binlog positions at transaction boundaries (``{"file": ..., "pos": ...}``), so a
micro-batch ends after a whole transaction. Each table's read starts at its own floor, not at the
batch's start: the position up to which the lake holds every change of the table (the tail's recorded
progress, a catch-up check, or the smallest chunk HW before the first batch; the lake's own record when
the source no longer has the log from the state's). So a table that joins the running query
(``tables="*"``: every table in the offset map, read again each batch) is read from its floor, a
backfill inside the next batch (Flink CDC's newly-added tables); a table another run already took
further is read again only from what the state recorded, its rows kept only past the lake's position;
and a lost checkpoint costs nothing but a restart. Each partition runs ``readers.change_reader.ChangeReader`` over the range.

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

from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

import json

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.schema_events import SchemaChange
from airflow_provider_dblog.readers.change_reader import ChangeReader, TableStream, release_log, table_floor
from airflow_provider_dblog.readers.staging import INLINE_BYTES, ChangeStager
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.staged import StagedFile
from airflow_provider_dblog.store.state import StateDir

SOURCE_NAME = "dblog_binlog"
ALL_TABLES = "*"
END_MARKER, ROWS, DDL, STAGED = "m", "b", "s", "f"
PAYLOAD_SCHEMA = pa.schema([pa.field("_op", pa.string()), pa.field("_table", pa.string()),
                            pa.field("_pos", pa.string()), pa.field("_payload", pa.binary())])


def envelope(table: str, item: pa.RecordBatch | SchemaChange | StagedFile) -> pa.RecordBatch:
    """One stream row for a batch of a table's changelog rows, a staged file of more of them, or a DDL
    statement naming it."""
    if isinstance(item, StagedFile):
        return _row(STAGED, table, "", json.dumps(item.to_dict()).encode())
    if isinstance(item, SchemaChange):
        payload = json.dumps({"table": item.table, "kind": item.kind, "statement": item.statement,
                              "start": item.start.to_dict(), "pos": item.pos.to_dict()}).encode()
        return _row(DDL, table, item.pos.encode(), payload)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, item.schema) as writer:
        writer.write_batch(item)
    return _row(ROWS, table, "", sink.getvalue().to_pybytes())


def _row(op: str, table: str, pos: str, payload: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([op], pa.string()), pa.array([table], pa.string()),
                                       pa.array([pos], pa.string()), pa.array([payload], pa.binary())],
                                      schema=PAYLOAD_SCHEMA)


@dataclass
class MicroBatch:
    """What a micro-batch brought: per table its row batches, staged files and DDL statements, the tables
    read up to its end (every table whose floor was before it, changes or not), and its end (None without
    an end marker: nothing was read)."""

    parts: dict[str, list[pa.Table]] = field(default_factory=dict)
    staged: dict[str, list[StagedFile]] = field(default_factory=dict)
    changes: dict[str, list[SchemaChange]] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)
    end: SourcePosition | None = None
    start: SourcePosition | None = None  # where the read began (the smallest floor)
    gtids: dict[str, str] = field(default_factory=dict)  # per GTID domain the last GTID read (MariaDB)
    pieces: int = 0  # the range's pieces read apart (``BinlogRange.begin``; interleaved shares count as one)


def open_envelopes(data: pa.Table) -> MicroBatch:
    batch = MicroBatch()
    for op, table, pos, payload in zip(data["_op"].to_pylist(), data["_table"].to_pylist(),
                                       data["_pos"].to_pylist(), data["_payload"].to_pylist()):
        if op == ROWS:
            batch.parts.setdefault(table, []).append(pa.ipc.open_stream(payload).read_all())
        elif op == STAGED:
            batch.staged.setdefault(table, []).append(StagedFile.from_dict(json.loads(payload)))
        elif op == DDL:
            d = json.loads(payload)
            batch.changes.setdefault(table, []).append(
                SchemaChange(d["table"], d["kind"], d["statement"], SourcePosition.from_dict(d["start"]),
                             SourcePosition.from_dict(d["pos"])))
        elif op == END_MARKER:
            d = json.loads(payload)
            marker = SourcePosition.from_dict(d["end"])
            batch.pieces = max(batch.pieces, 1) + (1 if d.get("begin") else 0)
            batch.end = marker if batch.end is None or marker > batch.end else batch.end
            batch.read.update(d["read"])
            if d.get("start"):
                batch.start = SourcePosition.from_dict(d["start"])
            for domain, gtid in (d.get("gtids") or {}).items():  # pieces of a range: the latest per domain
                if domain not in batch.gtids or _gtid_number(gtid) > _gtid_number(batch.gtids[domain]):
                    batch.gtids[domain] = gtid
    return batch


def _gtid_number(gtid: str) -> int:
    """The sequence number of a MariaDB GTID ``domain-server-sequence`` (it grows within a domain)."""
    return int(gtid.rsplit("-", 1)[-1])


def spark_schema(arrow_schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema, prefer_timestamp_ntz=True)


class BinlogRange(InputPartition):
    """One decoding share ``part`` of ``parts`` of the micro-batch's range up to ``end``, over ``tables`` (each
    read from its own floor); ``begin``: the piece starts at this transaction boundary (a range cut into pieces
    read apart: ``DataSourceDialect.split_range``), not at the smallest floor."""

    def __init__(self, end: dict, tables: dict[str, TableStream], part: int = 0, parts: int = 1,
                 begin: dict | None = None):
        super().__init__((end, part, parts, begin))
        self.end, self.tables, self.part, self.parts, self.begin = end, tables, part, parts, begin


class ChangeDataSource(DataSource):
    """Options: ``state`` (state directory), ``sink`` (the lake), ``tables`` (comma-separated DB.TABLE
    names, or ``*``: every table of the offset map, joining ones included), ``maxEventsPerTrigger``,
    ``decodeParallelism`` (Spark tasks that share the decoding of each micro-batch), ``inlineBytes``
    (changes a task hands to the driver in memory; more are staged as files: ``readers.staging``)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self):
        return spark_schema(PAYLOAD_SCHEMA)

    def streamReader(self, schema) -> "BinlogStreamReader":
        state = StateDir(self.options["state"])
        return BinlogStreamReader(state, self.options["sink"], self.options["tables"],
                                  int(self.options.get("maxEventsPerTrigger", 0)),
                                  int(self.options.get("decodeParallelism", 1)),
                                  int(self.options.get("inlineBytes", INLINE_BYTES)))


class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, state: StateDir, sink: str, tables: str, max_events: int, parallelism: int = 1,
                 inline_bytes: int = INLINE_BYTES):
        self.state, self.sink, self.spec = state, sink, tables
        self.dialect = open_dialect(state.source(), state.options())
        self.max_events = max_events
        self.parallelism = max(1, parallelism)
        self.inline_bytes = inline_bytes
        self.target: dict | None = None
        self._first_floors: dict[str, SourcePosition] = {}
        self._lake_floors = False  # the first floors were taken from the lake (the state's were too far back)

    # ---- driver side ----
    def streams(self) -> dict[str, TableStream]:
        """The tables served now, each with its offset map and floor. A table's first floor (the state's
        records) is worked out once; later ones follow the tail's recorded progress and a new plan of the
        table (three small reads of the state per micro-batch, whatever the tables)."""
        offsets = self.state.offsets()
        names = sorted(offsets) if self.spec == ALL_TABLES else [t for t in self.spec.split(",") if t]
        recorded = self.state.tail_positions()
        plans = self.state.tables()  # read once: on object storage each read of the plan is a request
        resnapshots = self.state.resnapshots()
        out = {}
        for name in names:
            meta, min_hw = (plans.get(name) or self.state.table(name)).meta, offsets[name].min_hw
            if name not in self._first_floors:
                self._first_floors[name] = self.state.resume_position(name, min_hw, recorded, plans)
            # a new plan of the table moves its first floor on (``first_floor``: from its plan's position)
            floors = [self.state.first_floor(name, min_hw, plans), self._first_floors[name]] + (
                [recorded[name][0]] if name in recorded else [])
            out[name] = TableStream(meta, offsets[name], max(floors), resnapshots.get(name))
        return out

    def _available_from(self) -> tuple[SourcePosition | None, dict[str, TableStream]]:
        """The smallest floor, once the source is known to still have its log, and the streams it is the
        floor of. Floors come from the state's records, not from each table's lake (opening a Delta table per
        table is most of a whole database's start-up); the lake may be further (a crash between its commit and
        the record: that range is read again and its rows dropped at the commit, which keeps only changes past
        the lake's position). When the log from there is gone, the lake's own positions are taken
        (``table_floor``) and checked again."""
        streams = self.streams()
        if not streams:
            return None, streams
        start = min(t.floor for t in streams.values())
        try:
            self.dialect.ensure_available(start)
        except DblogError:
            if self._lake_floors:
                raise
            self._lake_floors = True
            offsets, recorded = self.state.offsets(), self.state.tail_positions()
            for name in list(self._first_floors):
                self._first_floors[name] = table_floor(self.state, self.sink, self.dialect, name,
                                                       offsets[name].min_hw, recorded)
            return self._available_from()
        return start, streams

    def initialOffset(self) -> dict:
        start = self._available_from()[0]
        return (start or self.dialect.current_position()).to_dict()

    def _now(self) -> dict:
        return self.dialect.current_position().to_dict()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._now()

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_events) if self.max_events > 0 else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        start_pos = SourcePosition.from_dict(start)
        latest = SourcePosition.from_dict(self.target or self._now())
        if isinstance(limit, ReadMaxRows) and latest > start_pos:
            capped = self.dialect.commit_after(start_pos, limit.max_rows)
            if capped is not None and capped < latest:
                latest = capped
        return (latest if latest > start_pos else start_pos).to_dict()

    def reportLatestOffset(self):
        return self._now()

    def partitions(self, start: dict, end: dict):
        """One piece of the range per task when the source can cut it at transaction boundaries (each task reads
        and decodes only its piece), else interleaved shares of the decoding (each task reads the whole range)."""
        streams = self._available_from()[1]  # the state read once per micro-batch (a request each on S3)
        stop = SourcePosition.from_dict(end)
        floors = [t.floor for t in streams.values() if t.floor < stop]
        cuts = self.dialect.split_range(min(floors), stop, self.parallelism) if floors and self.parallelism > 1 else []
        if not cuts:
            return [BinlogRange(end, streams, k, self.parallelism) for k in range(self.parallelism)]
        bounds = [None, *(c.to_dict() for c in cuts)]
        ends = [*(c.to_dict() for c in cuts), end]
        return [BinlogRange(e, streams, begin=b) for b, e in zip(bounds, ends)]

    def commit(self, end: dict) -> None:
        """The micro-batch up to ``end`` is in the lake: the source may recycle the log before what it still needs."""
        release_log(self.state, self.dialect)
        self.dialect.close()

    def stop(self) -> None:
        self.dialect.close()

    # ---- executor side ----
    def read(self, partition: BinlogRange) -> Iterator[pa.RecordBatch]:
        end = SourcePosition.from_dict(partition.end)
        begin = SourcePosition.from_dict(partition.begin) if partition.begin else None
        read = ChangeReader(partition.tables, self.dialect).batches(end, (partition.part, partition.parts), begin)
        for table, item in ChangeStager(self.sink, self.inline_bytes).items(read):
            yield envelope(table, item)
        read = sorted(name for name, t in partition.tables.items() if t.floor < end)
        start = min((t.floor for t in partition.tables.values() if t.floor < end), default=None)
        yield _row(END_MARKER, "", end.encode(), json.dumps({
            "end": partition.end, "begin": partition.begin, "read": read, "start": start.to_dict() if start else None,
            "gtids": {str(k): v for k, v in self.dialect.gtids_read().items()}}).encode())
