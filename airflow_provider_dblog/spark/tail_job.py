"""The streaming tail (one Structured Streaming query per planned table) and the mirror.

The tail appends to ``SINK/DB.TABLE/stream`` with Spark's file sink, whose ``_spark_metadata`` log
and the checkpoint in ``STATE/checkpoints/DB.TABLE`` give an exactly-once effect across restarts:
a micro-batch interrupted by a crash is re-read from the same offsets and only one copy commits.
"""
from __future__ import annotations

import fcntl
import json
import logging
import threading
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path

from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.errors import DblogError
from airflow_provider_dblog.lake import stream_dir, table_dir
from airflow_provider_dblog.state import StateDir

log = logging.getLogger("dblog")
# Up to this much binlog, a cold catch-up decodes faster in the driver (≈40k changes/s on one core here,
# ≈200 bytes per change of a 9-column row) than Spark starts a streaming query (≈10 s); beyond it the
# streaming source decodes on every executor core.
DRIVER_CATCH_UP_BYTES = 64 * 1024 * 1024


def run_tail(state_dir: str, sink: str, available_now: bool = True, trigger_seconds: float = 1.0,
             max_events: int = 0, tables: list[str] | None = None, spark=None,
             stop_event: threading.Event | None = None, progress_seconds: float = 10.0,
             decode_parallelism: int = 0, driver_catch_up_bytes: int = DRIVER_CATCH_UP_BYTES) -> dict:
    """Run the tail until caught up (``available_now``) or until ``stop_event`` is set / the process ends.

    ``driver_catch_up_bytes``: a cold available-now catch-up of at most this much binlog is read in this
    process instead of on Spark (0: always Spark); see ``_catch_up_in_driver``."""
    state = StateDir(state_dir)
    with tail_lock(state):
        return _run_tail(state, sink, available_now, trigger_seconds, max_events, tables, spark, stop_event,
                         progress_seconds, decode_parallelism, driver_catch_up_bytes)


@contextmanager
def tail_lock(state: StateDir):
    """One tail per state directory at a time (Spark only guards a checkpoint within one JVM): a second
    tail, e.g. a scheduled catch-up beside a running one, waits, then resumes from the checkpoint."""
    state.path.mkdir(parents=True, exist_ok=True)
    with open(state.path / "tail.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another tail of %s is running; waiting for it to finish", state.path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _run_tail(state: StateDir, sink: str, available_now: bool, trigger_seconds: float, max_events: int,
              tables: list[str] | None, spark, stop_event: threading.Event | None, progress_seconds: float,
              decode_parallelism: int, driver_catch_up_bytes: int) -> dict:
    from airflow_provider_dblog.pipeline import dialect_for, load_offsets

    offsets = load_offsets(state)
    names = tables or sorted(offsets)
    unknown = [t for t in names if t not in offsets]
    if unknown:
        raise DblogError(f"{', '.join(unknown)} not in the offset map of {state.path}: plan, snapshot and report it first")
    dialect = dialect_for(state.source(), state.options())
    try:
        for name in names:  # a clear error before Spark starts, if the binlog to resume from is gone
            dialect.ensure_available(_resume_position(state, name, offsets[name].min_hw))
        skipped: dict[str, BinlogPosition] = {}
        in_driver: dict[str, int] = {}
        if available_now:  # before Spark: nothing to read, or little enough to read here
            now = dialect.current_position()
            for name in names:
                if _skip_catch_up(state, dialect, name, offsets[name].min_hw, now):
                    skipped[name] = now
                elif (rows := _catch_up_in_driver(state, sink, dialect, name, offsets[name], now,
                                                  driver_catch_up_bytes)) is not None:
                    in_driver[name] = rows
        queries = {}
        todo = [name for name in names if name not in skipped and name not in in_driver]
        if todo:
            spark = _start_queries(state, sink, todo, available_now, trigger_seconds, max_events, spark,
                                   decode_parallelism, queries)
        summary = _watch(queries, dialect, stop_event, progress_seconds, skipped,
                         {name: (now, rows) for name, rows in in_driver.items()})
    finally:
        dialect.close()
    return summary


def _catch_up_in_driver(state: StateDir, sink: str, dialect, table: str, offsets, now: BinlogPosition,
                        limit_bytes: int) -> int | None:
    """A cold available-now catch-up of at most ``limit_bytes`` of binlog, read in this process: on a
    small range the start-up of Spark and of a streaming query (JVM, Python data source workers, the
    first micro-batch: ≈6 s here) costs more than the reading itself. The same source reader (emit
    rule, chunk of each key) writes ``SINK/T/catchup/FROM.parquet``; then ``[FROM, now)`` is recorded as
    caught up, so a later streaming tail starts at ``now``. Returns the rows written, or None when the
    range belongs to Spark (too large, or a streaming checkpoint already owns the position)."""
    if limit_bytes <= 0 or _checkpoint_position(state, table)[0] != "none":
        return None
    from airflow_provider_dblog.dialects.mysql_binlog_scan import range_bytes

    start = _resume_position(state, table, offsets.min_hw)
    size = range_bytes(dialect, start, now)
    if size is None or size > limit_bytes or now <= start:
        return None
    import pyarrow as pa

    from airflow_provider_dblog.lake import catchup_file, write_atomic
    from airflow_provider_dblog.spark.binlog_source import BinlogRange, BinlogStreamReader

    started = time.time()
    reader = BinlogStreamReader(state, state.table(table), offsets, dialect, 0)
    batches = list(reader.read(BinlogRange(start.to_dict(), now.to_dict())))
    rows = sum(b.num_rows for b in batches)
    if rows:
        write_atomic(pa.Table.from_batches(batches), catchup_file(sink, table, start.encode()))
    state.write_caught_up(table, start, now)
    log.info("tail: %s caught up in the driver: %d rows from %s bytes of binlog [%s, %s) in %.1fs "
             "(a streaming tail continues from there)", table, rows, f"{size:,}", start, now, time.time() - started)
    return rows


def _start_queries(state: StateDir, sink: str, names: list[str], available_now: bool, trigger_seconds: float,
                   max_events: int, spark, decode_parallelism: int, queries: dict):
    from airflow_provider_dblog.spark.binlog_source import SOURCE_NAME, BinlogDataSource
    from airflow_provider_dblog.spark.session import session_from

    # the full JIT: a catch-up may convert and write many rows in the JVM (C1-only is not measured there)
    spark = session_from(spark, "dblog-tail", short_lived=False)
    spark.dataSource.register(BinlogDataSource)
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
    return spark


def _numbered(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def _checkpoint_position(state: StateDir, table: str) -> tuple[str, BinlogPosition | None]:
    """("none", None) before the checkpoint logged an offset; ("committed", end offset of the last
    micro-batch) when that batch committed; ("pending", its end offset) when it did not (a restarted
    query must run it again)."""
    checkpoint = state.checkpoint_dir(table)
    files = _numbered(checkpoint / "offsets")
    if not files:
        return "none", None
    last_line = files[-1].read_text().strip().splitlines()[-1]
    position = BinlogPosition.from_dict(json.loads(last_line))
    committed = (checkpoint / "commits" / files[-1].name).exists()
    return ("committed" if committed else "pending"), position


def _resume_position(state: StateDir, table: str, default: BinlogPosition) -> BinlogPosition:
    """Where the tail resumes: the checkpoint's latest offset; without one the min HW ``default``, or
    the end of a recorded catch-up check that covers it (``initialOffset`` starts there)."""
    kind, position = _checkpoint_position(state, table)
    if kind != "none":
        return position
    checked = state.caught_up(table, default)
    return checked[0] if checked else default


def _skip_catch_up(state: StateDir, dialect, table: str, min_hw: BinlogPosition, now: BinlogPosition) -> bool:
    """An available-now catch-up of ``table`` can be skipped when the binlog from the tail's position to
    ``now`` holds no row event of it; then record ``[position, now)`` as checked (state.caught_up) and
    return True.

    Without a checkpoint the record moves the query's later start (``initialOffset``) to ``now``, so an
    idle table does not pin old binlog files. With a checkpoint, only a position in the server's current
    binlog file is skipped: past a rotation the query runs, so that its checkpoint leaves files that may
    be purged. A micro-batch planned but not committed always runs.
    """
    from airflow_provider_dblog.dialects.mysql_binlog_scan import scan_table_events

    kind, position = _checkpoint_position(state, table)
    if kind == "pending":
        return False
    if kind == "none":
        position = min_hw
    elif position.file != now.file:
        log.info("tail: %s resumes at %s, before the current binlog %s: running the catch-up", table, position,
                 now.file)
        return False
    if now < position:
        return False
    checked = state.caught_up(table, position)
    scan_from = checked[0] if checked else position
    scan = scan_table_events(dialect, scan_from, now, [table]) if scan_from < now else None
    if scan is not None and not scan.clean:
        log.info("tail: %s may have changes in [%s, %s) (%s): running the catch-up", table, scan_from, now,
                 scan.reason)
        return False
    state.write_caught_up(table, position, now)
    log.info("tail: %s has no changes in [%s, %s): skipped (%d binlog events checked%s)", table, position, now,
             scan.events if scan else 0,
             "; the first tail starts at the end" if kind == "none" else "; checkpoint kept")
    return True


class LagTracker:
    """How far the tail is behind the source, in bytes and in seconds.

    The server's position is sampled while the tail runs; "seconds behind" is how long ago the server
    was where the tail is now (0 when caught up), so it needs no clock in the binlog events.
    """

    def __init__(self, dialect):
        self.dialect = dialect
        self.samples: deque[tuple[float, BinlogPosition]] = deque(maxlen=50_000)

    def sample(self) -> None:
        self.samples.append((time.time(), self.dialect.current_position()))

    def lag(self, queries: dict, fixed: dict | None = None) -> dict:
        """Per query its last end offset's lag; ``fixed``: tables whose position is known without a query."""
        if not self.samples:
            self.sample()
        now_t, now = self.samples[-1]
        out = {}
        positions = dict(fixed or {})
        for name, query in queries.items():
            progress = query.lastProgress
            end = (progress or {}).get("sources", [{}])[0].get("endOffset") if progress else None
            if isinstance(end, str):
                end = json.loads(end)
            if end:
                positions[name] = BinlogPosition.from_dict(end)
        for name, pos in sorted(positions.items()):
            later = [t for t, p in self.samples if p > pos]
            seconds = 0.0 if pos >= now else now_t - (later[0] if later else self.samples[0][0])
            out[name] = {"offset": str(pos), "seconds_behind": round(seconds, 1),
                         "bytes_behind": now.offset - pos.offset if now.seq == pos.seq else None,
                         "files_behind": now.seq - pos.seq}
        return out


def _watch(queries: dict, dialect, stop_event, progress_seconds: float,
           skipped: dict[str, BinlogPosition] | None = None,
           in_driver: dict[str, tuple[BinlogPosition, int]] | None = None) -> dict:
    """Follow the queries until they end (or ``stop_event``); ``skipped``: tables whose catch-up was
    skipped, caught up to the given position; ``in_driver``: tables caught up without Spark (position,
    rows). Returns rows per table, lag and seconds."""
    skipped = skipped or {}
    in_driver = in_driver or {}
    started = time.time()
    rows = {name: in_driver[name][1] if name in in_driver else 0 for name in sorted([*queries, *skipped, *in_driver])}
    settled = {**skipped, **{name: pos for name, (pos, _) in in_driver.items()}}
    last_log = 0.0
    seen_batches: dict[str, int] = {name: -1 for name in queries}
    tracker = LagTracker(dialect)
    try:
        while True:
            tracker.sample()
            active = [q for q in queries.values() if q.isActive]
            for name, q in queries.items():
                for progress in q.recentProgress:
                    if progress["batchId"] > seen_batches[name]:
                        seen_batches[name] = progress["batchId"]
                        rows[name] += progress["numInputRows"]
                if q.exception() is not None:
                    raise DblogError(f"tail of {name} failed: {str(q.exception()).splitlines()[0]}")
            if not active or (stop_event is not None and stop_event.is_set()):
                break
            if time.time() - last_log >= progress_seconds:
                last_log = time.time()
                log.info("tail: %s rows so far; lag %s", rows, tracker.lag(queries, settled))
            time.sleep(0.5)
    finally:
        for q in queries.values():
            if q.isActive:
                q.stop()
    for name, q in queries.items():
        if q.exception() is not None:
            raise DblogError(f"tail of {name} failed: {str(q.exception()).splitlines()[0]}")
    lag = tracker.lag(queries, settled)
    log.info("tail: %s rows in %.1fs; lag %s", rows, time.time() - started, lag)
    summary = {"rows": rows, "lag": lag, "seconds": round(time.time() - started, 1)}
    if skipped:
        summary["skipped"] = {name: str(pos) for name, pos in sorted(skipped.items())}
    if in_driver:
        summary["caught_up_in_driver"] = {name: str(pos) for name, (pos, _) in sorted(in_driver.items())}
    return summary


def changelog(spark, sink: str, table: str):
    """Every changelog row of ``table``: snapshot chunks, committed stream output and driver catch-ups."""
    frames = []
    snap = table_dir(sink, table) / "snapshot"
    if snap.exists() and any(snap.glob("chunk-*.parquet")):
        frames.append(spark.read.parquet(str(snap)))
    stream = stream_dir(sink, table)
    if (stream / "_spark_metadata").exists():
        from pyspark.errors import AnalysisException

        try:
            frames.append(spark.read.parquet(str(stream)))
        except AnalysisException as exc:  # a query started but committed no file yet: nothing to add
            if "UNABLE_TO_INFER_SCHEMA" not in str(exc):
                raise
    catchup = table_dir(sink, table) / "catchup"
    if catchup.exists() and any(catchup.glob("*.parquet")):
        frames.append(spark.read.parquet(str(catchup)))
    if not frames:
        raise DblogError(f"no changelog for {table} under {sink}: run the snapshot first")
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame, allowMissingColumns=True)
    return result


def write_mirror(state_dir: str, sink: str, table: str, out: str, spark=None) -> dict:
    """The table's current state (see ``lake``): stream rows a later chunk snapshot supersedes are
    dropped, then per key the row with the greatest ``_pos`` wins; deletes drop the key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from airflow_provider_dblog.spark.session import session_from

    state = StateDir(state_dir)
    meta = state.table(table).meta
    spark = session_from(spark, "dblog-mirror")
    hws = spark.createDataFrame([(int(c), r["hw_encoded"]) for c, r in state.reports(table).items()],
                                "_chunk int, _snapshot_hw string")
    rows = (changelog(spark, sink, table).join(F.broadcast(hws), "_chunk", "left")
            .where((F.col("_op") == "r") | F.col("_snapshot_hw").isNull() | (F.col("_pos") > F.col("_snapshot_hw"))))
    latest = Window.partitionBy(*[F.col(f"`{k}`") for k in meta.key_columns]).orderBy(F.col("_pos").desc())
    current = (rows.withColumn("_rank", F.row_number().over(latest)).where("_rank = 1")
               .where(F.col("_op") != "d"))
    columns = [F.col(f"`{c}`") for c in meta.column_names] + [F.col("_pos"), F.col("_op"), F.col("_ts_ms")]
    current.select(*columns).write.mode("overwrite").parquet(str(out))
    count = spark.read.parquet(str(out)).count()
    log.info("mirror of %s: %d rows in %s", table, count, out)
    return {"table": table, "rows": count, "out": str(Path(out))}

