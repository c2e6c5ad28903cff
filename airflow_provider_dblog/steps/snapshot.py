"""Snapshot: read a batch's chunks (of one or several tables) on the executor (Spark), each in its watermark
window."""
from __future__ import annotations

import logging
from typing import Sequence

from airflow_provider_dblog.core.batches import BatchGroup
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.readers.chunk_reader import persist_reports
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.steps.executor import Executor
from airflow_provider_dblog.store.object_store import check_sink
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


def snapshot_batch(state_dir: str, batch_index: int, sink: str, force: bool = False,
                   chunk_ids: Sequence[int] | None = None, *, executor: Executor, table: str | None = None,
                   only: Sequence[BatchGroup] | None = None) -> list[dict]:
    """Read a batch's unreported chunks (all selected with ``force``) on ``executor``; this driver checks that each
    chunk's commit is in the lake and persists its report. Returns the reports. Selection: ``table`` (one
    table of the batch), ``chunk_ids`` (of that table, or of the batch's only table), and ``only`` (these
    chunks of the batch, e.g. the ones a local driver did not read itself)."""
    state = StateDir(state_dir)
    groups = state.pending_chunks(batch_index, force, chunk_ids, table)
    if only is not None:
        wanted = {(g.table, c) for g in only for c in g.chunk_ids}
        groups = [BatchGroup(g.table, ids) for g in groups
                  if (ids := tuple(c for c in g.chunk_ids if (g.table, c) in wanted))]
    label = f"batch {batch_index} ({state.batch_label(state.batch(batch_index))})"
    if not groups:
        log.info("%s: every chunk already reported; nothing to read (--force re-reads)", label)
        return []
    check_sink(sink)  # before Spark starts: a wrong bucket or credentials is one line, nothing written
    dialect = open_dialect(state.source(), state.options())
    dialect.check_source()  # fail fast, before Spark starts, on a bad password, settings or privileges
    dialect.close()
    plans = {g.table: state.table(g.table) for g in groups}
    log.info("%s: reading %d chunks of %d tables: %s", label, sum(len(g.chunk_ids) for g in groups), len(groups),
             ", ".join(f"{g.table} {len(g.chunk_ids)}/{len(plans[g.table].chunks)}" for g in groups[:20])
             + (", ..." if len(groups) > 20 else ""))
    saved = persist_groups(state, sink, plans, groups, executor.read_chunks(sink, plans, groups, dialect, label=label))
    if force:  # a re-snapshot: a table read again whole no longer needs the changes before it
        for group in groups:
            state.record_resnapshot(plans[group.table])
    return saved


def persist_groups(state: StateDir, sink: str, plans: dict, groups: Sequence[BatchGroup], reports: list[dict]
                   ) -> list[dict]:
    """``persist_reports`` per table of the batch: every table's good reports are saved before one line
    names what failed."""
    saved, problems = [], []
    for group in groups:
        mine = [r for r in reports if r.get("table") == group.table]
        try:
            saved.extend(persist_reports(state, sink, plans[group.table], group.chunk_ids, mine))
        except DblogError as exc:
            problems.append(str(exc))
    if problems:
        raise DblogError("; ".join(problems[:3]) + (f"; and {len(problems) - 3} more tables" if len(problems) > 3 else ""))
    return saved
