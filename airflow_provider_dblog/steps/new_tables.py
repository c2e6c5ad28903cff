"""Tables that start to match a capture's patterns while it runs (a CREATE TABLE, a RENAME onto a matching
name): planned, snapshotted and reported beside the running tail, whose query then reads them from their
snapshot on (``steps.tail``). Flink CDC's newly-added tables, Debezium's ad-hoc snapshot of a new table."""
from __future__ import annotations

import logging

from airflow_provider_dblog.core.errors import DblogError, TryAgainLater, UnknownTable
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.steps.plan import plan_tables, resolve_tables
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.executor import Executor
from airflow_provider_dblog.steps.snapshot import snapshot_batch
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


def capture_new_tables(state: StateDir, sink: str, executor: Executor, refused: set | None = None) -> list[str]:
    """Plan, read and report the tables matching the plan's recorded patterns that are not planned yet;
    returns them (none without recorded patterns). Tables that cannot be planned (no usable key) are
    logged once and added to ``refused``: the running capture goes on without them."""
    refused = set() if refused is None else refused
    capture = state.options().get("capture")
    if not capture:
        return []
    source, options = state.source(), state.options()
    try:
        matching = resolve_tables(source, patterns=capture["tables"], exclude=capture.get("exclude"),
                                  options=options)
    except DblogError:
        return []  # nothing matches right now (every table dropped): nothing new
    resumed = finish_interrupted(state, sink, executor, set(matching))
    new = sorted(set(matching) - set(state.tables()) - refused)
    planned = _plan_and_read(state, sink, executor, new, refused, source, options) if new else []
    if resumed or planned:
        build_offsets(str(state.path))
    return resumed + planned


def _plan_and_read(state: StateDir, sink: str, executor: Executor, new: list[str], refused: set, source,
                   options: dict) -> list[str]:
    """Plan ``new`` one by one (a table without a usable key does not keep the others out) and read the batches
    their plans added; returns those planned."""
    capture = options["capture"]
    log.info("capture: %s started to match %s: planning and reading them", ", ".join(new), capture["tables"])
    before = {b.index for b in state.batches()}
    planned = []
    for table in new:
        try:
            plan_tables(source, [table], str(state.path), chunk_size=capture.get("chunk_size") or 100_000,
                        batch_size=capture.get("batch_size") or 8, batch_rows=capture.get("batch_rows"),
                        watermark=capture.get("watermark") or "auto",
                        watermark_table=options.get("watermark_table"), save_password=False, options=options,
                        joining=True)
            planned.append(table)
        except TryAgainLater as exc:
            log.warning("capture: %s not captured yet: %s; trying again at the next look for new tables", table, exc)
        except DblogError as exc:
            log.warning("capture: %s not captured: %s", table, exc)
            refused.add(table)
    if planned:
        restart_earlier_lives(StateDir(state.path), sink, planned)
        for batch in StateDir(state.path).batches():
            if batch.index not in before:
                snapshot_batch(str(state.path), batch.index, sink, executor=executor)
    return planned


def finish_interrupted(state: StateDir, sink: str, executor: Executor, matching: set[str]) -> list[str]:
    """Joining tables (``StateDir.joining``) planned by a tail that stopped before their report: their unread
    chunks are read now (before, the next tail took them for planned and never read or reported them: they
    stayed out of the offset map, their changes never streamed). One whose plan no longer applies (gone from
    the source, or keyed otherwise now) is forgotten and planned anew once it matches. Returns those read."""
    offsets = state.offsets() if state.has_offsets() else {}
    plans = state.tables()
    unfinished = [t for t in state.joining() if t in plans and t not in offsets]
    if not unfinished:
        return []
    dialect = open_dialect(state.source(), state.options())
    resumable = []
    try:
        for table in unfinished:
            meta = plans[table].meta
            try:
                live = dialect.describe_table(table, meta.chunk_key) if table in matching else None
            except UnknownTable:
                live = None
            if live is not None and meta.keeps_key_order(live):
                resumable.append(table)
            else:
                log.info("capture: %s was planned by a tail that stopped before reading it, and its plan no longer "
                         "applies: planned anew when it matches", table)
                state.forget_table(table)
    finally:
        dialect.close()
    restart_earlier_lives(state, sink, resumable)
    for batch in state.batches():
        for table in sorted(set(batch.tables) & set(resumable)):
            log.info("capture: %s was planned by a tail that stopped before reading it: reading its chunks", table)
            snapshot_batch(str(state.path), batch.index, sink, executor=executor, table=table)
    return resumable


def restart_earlier_lives(state: StateDir, sink: str, tables: list[str]) -> None:
    """Before the first read of joining ``tables``: one whose earlier plan was read in part and forgotten
    (``finish_interrupted``) still has that life's rows in its lake, under the old plan's chunk ids, which the new
    chunks' reads would not all replace. Its ``current`` starts again with the new plan's columns and key, and
    the changelog's history is closed at the new plan by the old key (``LakeTables.restart_current``)."""
    forgotten = {t: key for t in tables if (key := state.forgotten_key(t)) is not None}
    if not forgotten:
        return
    plans = state.tables()
    dialect = open_dialect(state.source(), state.options())
    try:
        for table, old_key in forgotten.items():
            plan = plans[table]
            schema = dialect.arrow_schema(plan.meta)
            log.info("capture: %s: the rows its forgotten plan read are closed in the lake before its new plan is "
                     "read", table)
            lake = LakeTables(sink, table, schema, old_key, capture=plan.capture)
            lake.current()  # the columns it holds: the old key is among them, whatever the new table has
            lake.restart_current(schema, plan.meta.key_columns, plan.planned_at)
            state.closed_forgotten(table)
    finally:
        dialect.close()
