"""Tables that start to match a capture's patterns while it runs (a CREATE TABLE, a RENAME onto a matching
name): planned, snapshotted and reported beside the running tail, whose query then reads them from their
snapshot on (``steps.tail``). Flink CDC's newly-added tables, Debezium's ad-hoc snapshot of a new table."""
from __future__ import annotations

import logging

from airflow_provider_dblog.core.errors import DblogError, TryAgainLater
from airflow_provider_dblog.steps.plan import plan_tables, resolve_tables
from airflow_provider_dblog.steps.report import build_offsets
from airflow_provider_dblog.steps.executor import Executor
from airflow_provider_dblog.steps.snapshot import snapshot_batch
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
    new = sorted(set(matching) - set(state.tables()) - refused)
    if not new:
        return []
    log.info("capture: %s started to match %s: planning and reading them", ", ".join(new), capture["tables"])
    before = {b.index for b in state.batches()}
    planned = []
    for table in new:  # one by one: a table without a usable key does not keep the others out
        try:
            plan_tables(source, [table], str(state.path), chunk_size=capture.get("chunk_size") or 100_000,
                        batch_size=capture.get("batch_size") or 8, batch_rows=capture.get("batch_rows"),
                        watermark=capture.get("watermark") or "auto",
                        watermark_table=options.get("watermark_table"), save_password=False, options=options)
            planned.append(table)
        except TryAgainLater as exc:
            log.warning("capture: %s not captured yet: %s; trying again at the next look for new tables", table, exc)
        except DblogError as exc:
            log.warning("capture: %s not captured: %s", table, exc)
            refused.add(table)
    if not planned:
        return []
    for batch in StateDir(state.path).batches():
        if batch.index not in before:
            snapshot_batch(str(state.path), batch.index, sink, executor=executor)
    build_offsets(str(state.path))
    return planned
