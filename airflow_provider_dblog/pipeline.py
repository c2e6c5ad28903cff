"""The pipeline's steps, shared by the CLI and the Airflow operators: plan, snapshot a batch,
report, tail, mirror, verify. Each step reads and writes only the state directory and the sink."""
from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.credentials import remember
from airflow_provider_dblog.dialects.base import STRATEGIES, SourceConfig
from airflow_provider_dblog.dialects.mysql import MySqlDialect
from airflow_provider_dblog.errors import DblogError
from airflow_provider_dblog.state import StateDir, TablePlan, read_json, write_json

log = logging.getLogger("dblog")

DEFAULT_CHUNK_SIZE = 100_000
DEFAULT_BATCH_SIZE = 8
DRIVER_THREADS = 2  # `dblog run`'s reader threads in its own process


def dialect_for(config: SourceConfig, options: dict | None = None) -> MySqlDialect:
    options = options or {}
    extra = {"server_id_range": tuple(options["server_id_range"])} if options.get("server_id_range") else {}
    return MySqlDialect(config, watermark_table=options.get("watermark_table"), **extra)


def plan_table(source: SourceConfig, table: str, state_dir: str, chunk_size: int = DEFAULT_CHUNK_SIZE,
               batch_size: int = DEFAULT_BATCH_SIZE, chunk_key: Sequence[str] | None = None,
               watermark: str = "auto", watermark_table: str | None = None, save_password: bool = True,
               options: dict | None = None) -> dict:
    """Check the source, split the table into chunks, persist the plan; returns the batches."""
    if watermark not in STRATEGIES:
        raise DblogError(f"unknown --watermark {watermark!r}: use one of {', '.join(STRATEGIES)}")
    if batch_size <= 0:
        raise DblogError("--batch-size must be a positive number of chunks")
    if chunk_size <= 0:
        raise DblogError("--chunk-size must be a positive number of rows")
    state = StateDir(state_dir)
    if state.has_plan() and table in state.tables():
        # Idempotent: a second plan (or `dblog run`) resumes the first one. Re-reading the table is a
        # forced rerun of its chunks; a different split needs a new state and sink.
        log.info("%s is already planned in %s: keeping that plan (re-read chunks with `dblog snapshot "
                 "--force`; a new split needs a new --state and --sink)", table, state_dir)
        if save_password:
            remember(source)
        return plan_summary(state)
    options = {**(options or {}), **({"watermark_table": watermark_table} if watermark_table else {})}
    dialect = dialect_for(source, options)
    try:
        dialect.check_source()
        meta = dialect.describe_table(table, chunk_key)
        strategy = dialect.resolve_strategy(watermark, meta)
        started = time.time()
        planned_at, planned_gtid = dialect.current_position(), dialect.gtid_position()
        chunks = dialect.split_chunks(meta, chunk_size)
    finally:
        dialect.close()
    if save_password:
        remember(source)
    batches = state.save_plan(source, TablePlan(meta, tuple(chunks), strategy, planned_at, planned_gtid), batch_size, options)
    log.info("planned %s: %d chunks in %d batches (key %s, %s watermarks) in %.1fs", meta.qualified, len(chunks),
             sum(b.table == meta.qualified for b in batches), ",".join(meta.key_columns), strategy,
             time.time() - started)
    return plan_summary(state)


def plan_summary(state: StateDir) -> dict:
    tables = state.tables()
    return {"state": str(state.path), "source": state.load_raw()["source"],
            "tables": {name: {"chunks": len(t.chunks), "key": list(t.meta.key_columns), "watermark": t.strategy}
                       for name, t in tables.items()},
            "batches": [{"batch": b.index, "table": b.table, "chunks": list(b.chunk_ids),
                         "label": b.label(tables[b.table])} for b in state.batches()]}


def pending_chunks(state: StateDir, batch_index: int, force: bool = False,
                   chunk_ids: Sequence[int] | None = None) -> tuple[str, list[int]]:
    batch = state.batch(batch_index)
    wanted = list(batch.chunk_ids if chunk_ids is None else [c for c in chunk_ids if c in batch.chunk_ids])
    done = state.reports(batch.table)
    return batch.table, [c for c in wanted if force or c not in done]


def unreported_chunks(state: StateDir, table: str) -> list[int]:
    """The table's chunks without a report, in batch order: one read of its reports (a per-batch
    ``pending_chunks`` reads them all once per batch, thousands of times over for a big table)."""
    done = state.reports(table)
    return [c for b in state.batches() if b.table == table for c in b.chunk_ids if c not in done]


def snapshot_batch(state_dir: str, batch_index: int, sink: str, force: bool = False, spark=None,
                   chunk_ids: Sequence[int] | None = None) -> list[dict]:
    """Read a batch's chunks in parallel on Spark executors; each writes its own Parquet and report."""
    from airflow_provider_dblog.spark.snapshot_job import run_chunks

    state = StateDir(state_dir)
    table, todo = pending_chunks(state, batch_index, force, chunk_ids)
    if not todo:
        log.info("batch %d (%s): every chunk already reported; nothing to read (--force re-reads)", batch_index, table)
        return []
    dialect = dialect_for(state.source(), state.options())
    dialect.check_source()  # fail fast, before Spark starts, on a bad password, settings or privileges
    dialect.close()
    log.info("batch %d (%s): reading %d chunks", batch_index, table, len(todo))
    return run_chunks(state_dir, sink, table, todo, dialect, spark)


class DriverChunkReader:
    """Reads chunks in the driver, last first, on ``threads`` connections until stopped: while a local
    Spark starts (its JVM and first job take seconds), or instead of a local Spark that would run no
    more tasks at once than these threads. Each chunk is claimed before it is read, so after ``stop()``
    Spark reads exactly the unclaimed ones; a chunk that failed here has no report and is read again
    by the caller's next pass."""

    def __init__(self, state_dir: str, sink: str, table: str, chunk_ids: Sequence[int], threads: int = DRIVER_THREADS):
        self.state_dir, self.sink, self.table = state_dir, sink, table
        self._order = list(reversed(chunk_ids))
        self._lock = threading.Lock()
        self._stopped = False
        self.claimed: list[int] = []
        self._threads = [threading.Thread(target=self._read, name="dblog-driver-chunks", daemon=True)
                         for _ in range(min(threads, len(self._order)))]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def join(self, timeout: float | None = None) -> None:
        for thread in self._threads:
            thread.join(timeout)

    def _next(self) -> int | None:
        with self._lock:
            if self._stopped or len(self.claimed) == len(self._order):
                return None
            self.claimed.append(self._order[len(self.claimed)])
            return self.claimed[-1]

    def _read(self) -> None:
        from airflow_provider_dblog.snapshot import run_chunk

        state = StateDir(self.state_dir)
        dialect = dialect_for(state.source(), state.options())
        try:
            while (chunk_id := self._next()) is not None:
                run_chunk(state, self.sink, self.table, chunk_id, dialect)
        except Exception as exc:  # noqa: BLE001 - the chunk stays unreported; Spark's pass reads it
            log.warning("reading a chunk of %s in the driver failed (Spark reads it instead): %s", self.table, exc)
        finally:
            dialect.close()

    def stop(self) -> set[int]:
        """No new chunk from now on; returns every chunk this reader started (some may still be in flight)."""
        with self._lock:
            self._stopped = True
            return set(self.claimed)


def driver_reading_needs_spark(driver_threads: int, master: str) -> bool:
    """Whether `dblog run` should start a local Spark for its snapshot: only if Spark runs more tasks at
    once than the driver's reader threads. Under local[2] the driver's two threads use the same two
    cores, and the JVM's start-up took ≈3 s of their CPU on lineitem (SF1) for no extra capacity."""
    from airflow_provider_dblog.spark.session import task_slots

    slots = task_slots(master)
    return driver_threads == 0 or slots is None or slots > driver_threads


def snapshot_table(state_dir: str, sink: str, table: str, spark=None, driver_threads: int = DRIVER_THREADS
                   ) -> list[dict]:
    """Read every unreported chunk of ``table``. With ``driver_threads``, the driver reads chunks
    itself, last first: all of them if ``spark`` is None, else while ``spark`` (a ``BackgroundSession``)
    starts; a table the driver finishes first never waits for Spark. Spark reads the rest batch by
    batch, and any chunk the driver failed. Returns the reports of the chunks Spark read."""
    from airflow_provider_dblog.spark.session import BackgroundSession

    state = StateDir(state_dir)
    batches = [b for b in state.batches() if b.table == table]
    reader, in_driver = None, set()
    starting = isinstance(spark, BackgroundSession) and not spark.ready()
    if driver_threads > 0 and (spark is None or starting):
        reader = DriverChunkReader(state_dir, sink, table, unreported_chunks(state, table), threads=driver_threads)
        reader.start()
        while reader.alive() and not (starting and spark.ready()):
            reader.join(0.05)
        in_driver = reader.stop()
        log.info("%s: %d chunks read in the driver%s", table, len(in_driver), " while Spark started" if starting else "")
    reports = []
    for i, batch in enumerate(batches, start=1):
        chunk_ids = [c for c in batch.chunk_ids if c not in in_driver]
        if chunk_ids:
            log.info("run: batch %d/%d of %s on Spark", i, len(batches), table)
            reports += snapshot_batch(state_dir, batch.index, sink, spark=spark, chunk_ids=chunk_ids)
    if reader:
        reader.join()
        failed = set(unreported_chunks(state, table))  # chunks the driver failed to read
        for batch in batches:
            if chunk_ids := [c for c in batch.chunk_ids if c in failed]:
                reports += snapshot_batch(state_dir, batch.index, sink, spark=spark, chunk_ids=chunk_ids)
    return reports


def build_offsets(state_dir: str) -> dict:
    """Check every planned chunk reported its exact range with LW <= HW; persist the offset map."""
    state = StateDir(state_dir)
    tables = state.tables()
    problems, offsets, summary = [], {}, {"tables": {}}
    for name, plan in tables.items():
        reports = state.reports(name)
        missing = [c.id for c in plan.chunks if c.id not in reports]
        if missing:
            batches = sorted({b.index for b in state.batches() if b.table == name and set(b.chunk_ids) & set(missing)})
            problems.append(f"{name} chunks {compress(missing)} have no report (rerun batches "
                            f"{', '.join(map(str, batches))})")
            continue
        hws = {}
        for chunk in plan.chunks:
            rep = reports[chunk.id]
            expected = chunk.to_dict()
            if rep["lo"] != expected["lo"] or rep["hi"] != expected["hi"]:
                problems.append(f"{name} chunk {chunk.id} reported range {rep['lo']}..{rep['hi']}, the plan says "
                                f"{expected['lo']}..{expected['hi']} (re-plan or --force rerun its batch)")
            lw, hw = BinlogPosition.from_dict(rep["lw"]), BinlogPosition.from_dict(rep["hw"])
            if lw > hw:
                problems.append(f"{name} chunk {chunk.id} has LW {lw} after HW {hw}")
            hws[chunk.id] = hw
        table_offsets = TableOffsets.from_chunks(name, plan.chunks, hws)
        offsets[name] = table_offsets.to_dict()
        summary["tables"][name] = {"chunks": len(plan.chunks), "rows": sum(r["rows"] for r in reports.values()),
                                   "min_hw": str(table_offsets.min_hw), "max_hw": str(table_offsets.max_hw)}
    if problems:
        raise DblogError("report failed: " + "; ".join(problems))
    write_json(state.offsets_file, {"tables": offsets, "built_at": time.time()})
    summary["chunks"] = sum(t["chunks"] for t in summary["tables"].values())
    summary["rows"] = sum(t["rows"] for t in summary["tables"].values())
    log.info("report: %d chunks, %d rows; offset map in %s", summary["chunks"], summary["rows"], state.offsets_file)
    return summary


def load_offsets(state: StateDir) -> dict[str, TableOffsets]:
    if not state.offsets_file.exists():
        raise DblogError(f"no offset map in {state.path}: run `dblog report --state {state.path}` first")
    return {name: TableOffsets.from_dict(d) for name, d in read_json(state.offsets_file)["tables"].items()}


def compress(ids: Sequence[int]) -> str:
    """[1,2,3,7] -> '1-3,7'"""
    out, ids = [], sorted(ids)
    start = prev = ids[0]
    for i in ids[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if i is not None:
            start = prev = i
    return ",".join(out)


def verify_mirror(state_dir: str, mirror_dir: str, table: str, examples: int = 5) -> dict:
    """Compare the mirror with a fresh read of the live source: missing, extra and different rows."""
    import pyarrow.parquet as pq

    from airflow_provider_dblog.core.chunks import ChunkRange

    state = StateDir(state_dir)
    meta = state.table(table).meta
    dialect = dialect_for(state.source(), state.options())
    try:
        source = dialect.read_snapshot(meta, ChunkRange(0, None, None))
    finally:
        dialect.close()
    mirror = pq.read_table(mirror_dir, columns=list(meta.column_names)).cast(source.schema)
    keys = list(meta.key_columns)

    def by_key(t):
        return {tuple(r[k] for k in keys): r for r in t.to_pylist()}

    want, have = by_key(source), by_key(mirror)
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    different = [k for k in want if k in have and want[k] != have[k]]
    result = {"table": table, "source_rows": len(want), "mirror_rows": len(have), "missing": len(missing),
              "extra": len(extra), "different": len(different), "equal": not (missing or extra or different),
              "examples": {"missing": missing[:examples], "extra": extra[:examples], "different": [
                  {"key": k, "columns": [c for c in want[k] if want[k][c] != have[k][c]]} for k in different[:examples]]}}
    log.info("verify %s: source %d rows, mirror %d rows, %d missing, %d extra, %d different", table, len(want),
             len(have), len(missing), len(extra), len(different))
    return result
