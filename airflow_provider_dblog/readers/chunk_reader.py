"""Reading one chunk: watermark window -> SELECT -> merge, then its lake commit; its report goes back
to the driver, which checks the commit landed and persists the report (``persist_reports``).

Engine-neutral I/O orchestration over a ``DataSourceDialect`` and the store: ``run_chunk`` runs in a
Spark task, in the local driver's reader threads, and in tests; an executor writes only to the lake
(through Delta commits), never to the state, so nothing it writes needs to sit on a shared disk.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from airflow_provider_dblog.core import metrics
from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.config import compress_ids
from airflow_provider_dblog.core.errors import DblogError, ReadChunkAgain, SchemaChangedError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.core.window import merge_window
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.store.lake import current_uri, snapshot_rows
from airflow_provider_dblog.store.lake_tables import LakeTables, chunk_commits
from airflow_provider_dblog.store.state import StateDir, TablePlan

log = logging.getLogger(__name__)


READ_ATTEMPTS = 3   # a failed SELECT: again with the columns the source has then
AGAIN_ATTEMPTS = 10  # a window that cannot place what happened in it (``ReadChunkAgain``)
AGAIN_FIX = ("Windows rarely hold such events; when each one does (DDL, XA commits or a parent's cascading DELETEs "
             "without pause), read the chunk again at a quieter moment (dblog resnapshot --table TABLE --chunks N), "
             "or plan smaller chunks (--chunk-size): a shorter window")


@dataclass(frozen=True)
class ChunkRead:
    rows: pa.Table          # the chunk's rows at HW, source columns only
    lw: SourcePosition
    hw: SourcePosition
    window_events: int
    selected: int
    meta: TableMeta         # the columns it was read with


def read_chunk(dialect: DataSourceDialect, meta: TableMeta, chunk: ChunkRange, strategy: str) -> ChunkRead:
    """The chunk's exact rows at its high watermark (DBLog's watermark window + normalize), read with the
    table's columns in force: the source's columns now, not the plan's (a re-read after a schema change
    the lake followed must not undo it); if they change while it reads (a failed SELECT, a DDL statement
    inside the window), the chunk is read again with the columns the source has then; so it is when its window
    cannot place what happened in it (``ReadChunkAgain``: an XA transaction prepared before it committed in it)."""
    meta = live_columns(dialect, meta)
    attempt = 0
    while True:
        attempt += 1
        try:
            return _read_once(dialect, meta, chunk, strategy)
        except DblogError as exc:
            again = isinstance(exc, ReadChunkAgain)
            if attempt >= (AGAIN_ATTEMPTS if again else READ_ATTEMPTS):
                if again:
                    raise DblogError(f"chunk {meta.qualified}/{chunk.id} was read {attempt} times and each window "
                                     f"said to read it again; the last: {exc}. {AGAIN_FIX}") from None
                raise
            live = live_columns(dialect, meta)  # a new key order meanwhile: the planned chunks no longer apply
            if live == meta and not again:
                raise
            log.info("chunk %s/%d: %s; reading it with columns %s", meta.qualified, chunk.id, exc,
                     ", ".join(live.column_names))
            meta = live
            time.sleep(min(1.0, 0.05 * attempt))  # let what was in flight at the window settle


def live_columns(dialect: DataSourceDialect, meta: TableMeta) -> TableMeta:
    """The table as the source has it now, keyed as ``meta`` (``DblogError`` if its key changed: the plan's
    chunks no longer apply, and the tail plans the table again when it sees the statement)."""
    live = dialect.describe_table(meta.qualified, meta.chunk_key)
    if not meta.keeps_key_order(live):
        raise DblogError(f"the key of {meta.qualified} changed ({meta.key_text} -> {live.key_text}): its planned "
                         f"chunks no longer apply; run the tail, which plans the table again and reads its new chunks")
    return live if live != meta else meta


def _read_once(dialect: DataSourceDialect, meta: TableMeta, chunk: ChunkRange, strategy: str) -> ChunkRead:
    mark = dialect.watermark(strategy, meta)
    mark.low()
    selected = dialect.read_snapshot(meta, chunk)
    mark.high()
    lw, hw, events = mark.window()
    if live_columns(dialect, meta) != meta:
        # a DDL statement between the description and LW is in no window, yet the SELECT ran after it with the
        # columns described before (an added column left out; the lake, past it, would lose it or null it)
        raise SchemaChangedError(f"the columns of {meta.qualified} changed while chunk {chunk.id} was read "
                                 f"(before its window): reading the chunk again")
    rows = merge_window(selected, meta.key_columns, chunk, events, lambda keys: dialect.sort_keys(meta, keys))
    return ChunkRead(rows, lw, hw, len(events), selected.num_rows, meta)


def run_chunk(sink: str, plan: TablePlan, chunk_id: int, dialect: DataSourceDialect) -> dict:
    """Read one chunk and commit it to the lake (changelog rows + its range in ``current``); returns its
    report, for the driver to persist (``persist_reports``) once the commit is there."""
    table = plan.meta.qualified
    chunk = plan.chunk(chunk_id)
    started = time.time()
    for attempt in range(1, AGAIN_ATTEMPTS + 1):
        read = read_chunk(dialect, plan.meta, chunk, plan.strategy)
        schema = dialect.arrow_schema(read.meta)
        hw_encoded = read.hw.as_snapshot().encode()
        lake = LakeTables(sink, table, schema, plan.meta.key_columns, capture=plan.capture)
        try:
            applied = lake.commit_chunk(chunk_id, read.hw, snapshot_rows(read.rows, hw_encoded, chunk_id,
                                                                          int(time.time() * 1000), schema),
                                        keep_columns=plan.keep_columns, planned_at=plan.planned_at)
            break
        except SchemaChangedError as exc:  # the lake followed a schema change after this read's HW
            if attempt == AGAIN_ATTEMPTS:
                raise DblogError(f"chunk {table}/{chunk_id} was read {attempt} times and the lake had each time "
                                 f"followed a later schema change; the last: {exc}. {AGAIN_FIX}") from None
            log.info("chunk %s/%d: %s", table, chunk_id, exc)
    bounds = chunk.to_dict()
    report = {"table": table, "chunk": chunk_id, "lo": bounds["lo"], "hi": bounds["hi"],
              "lw": read.lw.to_dict(), "hw": read.hw.to_dict(), "hw_encoded": hw_encoded,
              "rows": read.rows.num_rows, "selected": read.selected, "window_events": read.window_events,
              "strategy": plan.strategy, "applied": applied, "seconds": round(time.time() - started, 3),
              "finished_at": time.time()}
    log.info("chunk %s/%d %s: %d rows, window %s..%s with %d events, %.2fs", table, chunk_id, chunk.describe(),
             report["rows"], read.lw, read.hw, read.window_events, report["seconds"])
    return report


def failed_chunk(chunk_id: int, exc: BaseException) -> dict:
    """What a task returns instead of a report when a chunk fails: its root cause on one line (dblog's own line
    whole: its fix comes last; before, a line past 300 characters lost it)."""
    if isinstance(exc, DblogError):
        return {"chunk": chunk_id, "error": (str(exc).strip().splitlines() or [""])[0]}
    message = f"{type(exc).__name__}: {exc}"
    return {"chunk": chunk_id, "error": (message.strip().splitlines() or [""])[0][:300]}


def persist_reports(state: StateDir, sink: str, plan: TablePlan, chunk_ids: Sequence[int],
                    reports: Sequence[dict]) -> list[dict]:
    """Driver side: persist the reports of ``chunk_ids`` whose commit the lake holds (its ``dblog-chunk-N``
    transaction at or after the reported HW). Raises one line naming the chunks that failed, returned
    nothing, or whose commit is not in the lake (an executor that wrote to its own disk); the others are
    persisted first, so a rerun reads only those. Returns the persisted reports."""
    table = plan.meta.qualified
    done = {r["chunk"]: r for r in reports if "error" not in r}
    errors = {r["chunk"]: r["error"] for r in reports if "error" in r}
    commits = chunk_commits(sink, table, sorted(done))
    landed = [c for c in chunk_ids if c in done and commits[c] is not None
              and commits[c] >= SourcePosition.from_dict(done[c]["hw"]).boundary()]
    for chunk_id in landed:
        state.write_report(table, chunk_id, done[chunk_id])
    if landed:
        _chunk_metrics(state, plan, [done[c] for c in landed])
    problems = [f"chunk {c} failed: {errors[c]}" for c in chunk_ids if c in errors][:3]
    unseen = [c for c in chunk_ids if c in done and c not in landed]
    if unseen:
        problems.append(f"chunks {compress_ids(unseen)} reported a commit that {current_uri(sink, table)} does not "
                        f"hold (does every executor reach --sink {sink}? a local path must be on a disk all "
                        f"nodes share)")
    unread = [c for c in chunk_ids if c not in done and c not in errors]
    if unread:
        problems.append(f"chunks {compress_ids(unread)} were not read")
    if problems:
        raise DblogError(f"snapshot of {table}: " + "; ".join(problems) + " (a rerun reads only the chunks "
                         f"without a report)")
    return [done[c] for c in landed]


def _chunk_metrics(state: StateDir, plan: TablePlan, saved: Sequence[dict]) -> None:
    """``rows_snapshotted`` (the rows these chunks read) and ``chunks_done`` / ``chunks_total`` of the plan."""
    if not metrics.enabled():
        return
    table = plan.meta.qualified
    metrics.incr(metrics.ROWS_SNAPSHOTTED, sum(int(r.get("rows") or 0) for r in saved), table=table)
    planned = {c.id for c in plan.chunks}
    metrics.gauge(metrics.CHUNKS_DONE, len(planned & state.reported_chunks(table)), table=table)
    metrics.gauge(metrics.CHUNKS_TOTAL, len(planned), table=table)
