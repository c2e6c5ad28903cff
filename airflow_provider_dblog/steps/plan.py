"""Plan: check the source, split tables into chunks and batches, persist the plan."""
from __future__ import annotations

import logging
import re
import time
from typing import Sequence

from airflow_provider_dblog.core.batches import chunk_weights, pack_batches
from airflow_provider_dblog.core.chunks import chunks_from_boundaries
from airflow_provider_dblog.core.config import (
    DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, SourceConfig, match_tables, positive_int, table_names, table_patterns,
    watermark_strategy,
)
from airflow_provider_dblog.core.errors import DblogError, UnsupportedTables
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.core.status import LISTED_TABLES
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.steps.preflight import check_later_steps
from airflow_provider_dblog.store.credentials import remember
from airflow_provider_dblog.store.lake_schema import (
    KEY_WORKING_COLUMNS, LAKE_COLUMNS, WORKING_COLUMNS, case_twin_columns, clashing_columns,
)
from airflow_provider_dblog.store.state import StateDir, TablePlan

log = logging.getLogger("dblog")


def validate_plan_options(chunk_size=DEFAULT_CHUNK_SIZE, batch_size=DEFAULT_BATCH_SIZE, watermark="auto",
                          batch_rows=None, startup=None) -> tuple:
    """The plan's options, checked before anything touches the source: (chunk size, batch row budget,
    watermark strategy, startup mode). The budget defaults to ``batch_size`` full chunks."""
    chunk_size = positive_int(chunk_size, "--chunk-size (rows per chunk)")
    batch_size = positive_int(batch_size, "--batch-size (chunks per Spark application)")
    budget = (positive_int(batch_rows, "--batch-rows (estimated rows per Spark application)")
              if batch_rows not in (None, "", 0, "0") else chunk_size * batch_size)
    return chunk_size, budget, watermark_strategy(watermark), StartupMode.parse(startup)


def plan_table(source: SourceConfig, table: str, state_dir: str, chunk_size: int = DEFAULT_CHUNK_SIZE,
               batch_size: int = DEFAULT_BATCH_SIZE, chunk_key: Sequence[str] | None = None,
               watermark: str = "auto", watermark_table: str | None = None, save_password: bool = True,
               options: dict | None = None, batch_rows: int | None = None, startup: str | None = None) -> dict:
    """Check the source, split the table into chunks, persist the plan; returns the plan summary."""
    return plan_tables(source, [table], state_dir, {table: chunk_key} if chunk_key else None,
                       chunk_size=chunk_size, batch_size=batch_size, watermark=watermark,
                       watermark_table=watermark_table, save_password=save_password, options=options,
                       batch_rows=batch_rows, startup=startup)


STREAM_OPTIONS = ("slot", "publication", "publication_given")  # what a capture's state records of its stream


def plan_tables(source: SourceConfig, tables: Sequence[str], state_dir: str,
                chunk_keys: dict[str, Sequence[str]] | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                batch_size: int = DEFAULT_BATCH_SIZE, watermark: str = "auto", watermark_table: str | None = None,
                save_password: bool = True, options: dict | None = None, batch_rows: int | None = None,
                startup: str | None = None, sink: str | None = None, checkpoint: str | None = None,
                spark_submit: Sequence[str] | None = None, joining: bool = False) -> dict:
    """Plan ``tables`` on one connection (``chunk_keys``: per-table chunk key columns); returns the summary
    of the whole plan. The source is checked once and every table described before any is split: a
    table without a usable key stops the plan before anything is written, in one line naming every
    such table. The new tables' chunks are packed into batches of about ``batch_rows`` estimated rows
    (default ``batch_size`` full chunks), after the batches already planned. ``startup``: a mode that
    reads no snapshot gives each table one unread chunk and its stream start instead (core.startup).
    A table already planned keeps its plan (idempotent: `dblog run` resumes).

    ``sink``, ``checkpoint``, ``spark_submit``: what the snapshot and the tail will need, checked first
    (``steps.preflight.check_later_steps``), so a setting only they use fails now, not after the snapshot.
    ``joining``: the tail plans tables that started to match the capture (``StateDir.joining``)."""
    chunk_size, budget, watermark, mode = validate_plan_options(chunk_size, batch_size, watermark, batch_rows,
                                                                startup)
    check_later_steps(state_dir, mode, sink=sink, checkpoint=checkpoint, spark_submit=spark_submit)
    chunk_keys = chunk_keys or {}
    signal_table = (options or {}).get("signal_table")
    tables = [t for t in tables if t != signal_table]  # the signal table is read by the tail, not captured
    unknown_keys = sorted(set(chunk_keys) - set(tables))
    if unknown_keys:
        raise DblogError(f"--chunk-key names {', '.join(unknown_keys)}, which the plan does not capture: "
                         f"check the table names")
    state = StateDir(state_dir)
    planned = set(state.tables()) if state.has_plan() else set()
    for table in (t for t in tables if t in planned):
        # a re-read of the table is a forced rerun of its chunks; a different split needs a new state and sink
        log.info("%s is already planned in %s: keeping that plan (re-read chunks with `dblog snapshot "
                 "--force`; a new split needs a new --state and --sink)", table, state_dir)
    todo = [t for t in tables if t not in planned]
    options = {**(options or {}), **({"watermark_table": watermark_table} if watermark_table else {})}
    recorded = state.options() if state.has_plan() else {}  # a capture's slot and publication (PostgreSQL)
    given = options.get("publication")
    if given and recorded.get("publication") not in (None, given):
        raise DblogError(f"--publication {given}: this capture streams through publication "
                         f"{recorded['publication']} (recorded in {state_dir}); leave out --publication")
    if todo:
        dialect = open_dialect(source, {**options, **{k: recorded[k] for k in STREAM_OPTIONS if k in recorded}})
        try:
            dialect.check_startup(mode)  # before the source is touched or anything is written
            dialect.check_source()
            server = dialect.server_identity()
            metas = describe_tables(dialect, todo, chunk_keys)
            made = dialect.prepare_stream(list(metas.values())) if mode.tails else {}
            if made:  # a stream made for the tables (a PostgreSQL publication) is part of their identity now
                metas = {t: m.with_identity_of(dialect.describe_table(t, chunk_keys.get(t))) for t, m in metas.items()}
            try:
                start_at = None if mode.snapshots else dialect.startup_position(mode)
                plans = [plan_one(dialect, meta, chunk_size, watermark, mode, start_at, number, len(metas))
                         for number, meta in enumerate(metas.values(), start=1)]
                if mode.snapshots:
                    dialect.check_prepared()  # nothing prepared before the positions may commit after the chunks
            except BaseException:
                if made and not state.has_plan():  # nothing records it: do not leave it holding the source's log
                    dialect.drop_stream()
                raise
            options.update(made)
        finally:
            dialect.close()
        weights = [w for p in plans if p.startup.snapshots
                   for w in chunk_weights(p.meta.qualified, [c.id for c in p.chunks], p.rows, chunk_size)]
        batches = pack_batches(weights, budget, first_index=len(state.batches()) if state.has_plan() else 0)
        state.save_plans(source, plans, batches, options, server=server, joining=joining)
        log.info("plan: %d tables, %s rows, %d chunks to read in %d batches of at most %s estimated rows%s",
                 len(plans), f"{sum(p.rows for p in plans):,}", len(weights), len(batches), f"{budget:,}",
                 "" if mode.snapshots else f"; startup {mode}: no snapshot, the stream starts at {start_at}")
    if save_password:
        remember(source)
    return plan_summary(state)


def check_startup(source: SourceConfig, startup: str | None, options: dict | None = None) -> StartupMode:
    """The startup mode, checked against what the source supports (one line otherwise) before any work
    starts: ``dblog run`` asks before it starts a Spark or plans anything."""
    mode = StartupMode.parse(startup)
    dialect = open_dialect(source, options)
    try:
        dialect.check_startup(mode)
    finally:
        dialect.close()
    return mode


def capture_options(patterns: str | None, exclude: str | None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                    batch_size: int = DEFAULT_BATCH_SIZE, batch_rows: int | None = None,
                    watermark: str = "auto") -> dict:
    """The plan's record of a capture by patterns (``options["capture"]``): a continuous tail plans, reads
    and follows the tables that start to match them while it runs (``steps.new_tables``)."""
    if not patterns:
        return {}
    return {"capture": {"tables": patterns if isinstance(patterns, str) else ",".join(patterns),
                        "exclude": (exclude if isinstance(exclude, str) else ",".join(exclude)) if exclude else None,
                        "chunk_size": chunk_size, "batch_size": batch_size, "batch_rows": batch_rows,
                        "watermark": watermark}}


# what the lake's paths (SINK/DB.TABLE/current, read and written by delta-rs as URLs) cannot hold as written: '/'
# nests one table in another's directory (or with '..' outside the sink); delta-rs panics on '[', ']', '^', '|'
# and (on S3) '\\', decodes '%41' as 'A' and '\\' as '/' locally (another table's files), cuts an S3 path at '#' or
# '?' (every such table in one place), and refuses control characters
_PATH_UNSAFE = re.compile(r"[/\\\[\]^|#?\x00-\x1f\x7f]|%[0-9A-Fa-f]{2}")


def path_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table(s) have names the lake's paths (SINK/DB.TABLE/current) cannot hold as written "
            f"(a '/', '\\', '[', ']', '^', '|', '#', '?', control character or %XX escape): {', '.join(tables)}; "
            f"their files would land in another table's directory or none: rename them, or take them out of the "
            f"capture (--exclude)")


def names_refusal(tables: Sequence[str]) -> str:
    """``tables``: each as ``TABLE (COLUMN, ...)``, its columns ``store.lake_schema.clashing_columns``."""
    own = ", ".join(LAKE_COLUMNS + WORKING_COLUMNS)
    return (f"{len(tables)} table(s) have columns whose names the lake uses for its own ({own}; for a key column "
            f"also {', '.join(KEY_WORKING_COLUMNS)}; case aside), so it cannot store them: {'; '.join(tables)}; "
            f"rename those columns at the source, or take the tables out of the capture (--exclude)")


def column_case_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table(s) have columns whose names differ only in case: {'; '.join(tables)}; a Delta table "
            f"compares column names without case, so the lake cannot hold both: rename one of each pair at the "
            f"source, or take the tables out of the capture (--exclude)")


def column_name_refusals(table: str, columns: Sequence[str], key_columns: Sequence[str]) -> list[tuple]:
    """(refusal, ``TABLE (COLUMN, ...)``) for each kind of column name of ``table`` the lake cannot hold: named
    like the lake's own columns, or differing only in case from another. Checked by the plan and by a tail before
    it writes rows of new columns (no write of the table could succeed)."""
    found = []
    for refusal, names in ((names_refusal, clashing_columns(columns, key_columns)),
                           (column_case_refusal, case_twin_columns(columns))):
        if names:
            found.append((refusal, f"{table} ({', '.join(names)})"))
    return found


def describe_tables(dialect, tables: Sequence[str], chunk_keys: dict) -> dict:
    """Every table's metadata; one line naming every table without a usable key, or naming every table the lake
    cannot hold as it is (a '/' in its name, a column named like the lake's own, the dialect's refusals)."""
    metas, keyless, unsupported = {}, [], {}
    for table in tables:
        if _PATH_UNSAFE.search(table):
            unsupported.setdefault(path_refusal, []).append(repr(table)[1:-1] if not table.isprintable() else table)
            continue
        try:
            meta = metas[table] = dialect.describe_table(table, chunk_keys.get(table))
            for refusal, named in column_name_refusals(table, meta.column_names, meta.key_columns):
                unsupported.setdefault(refusal, []).append(named)
        except UnsupportedTables as exc:
            unsupported.setdefault(exc.describe, []).extend(exc.tables)
        except DblogError as exc:
            if "no primary key" not in str(exc):
                raise
            keyless.append(table)
    if unsupported:
        raise DblogError("; ".join(describe(names) for describe, names in unsupported.items()))
    if keyless:
        raise DblogError(f"{len(keyless)} table(s) have no primary key or NOT NULL unique key: "
                         f"{', '.join(keyless)}; exclude them (--exclude) or give each a chunk key "
                         f"(--chunk-key DB.TABLE=COL[,COL], an indexed column)")
    return metas


def plan_one(dialect, meta, chunk_size: int, watermark: str, mode: StartupMode, start_at, number: int,
             total: int) -> TablePlan:
    """One table's plan: its chunks (one unread chunk when the mode reads no snapshot), logged."""
    started = time.time()
    strategy = dialect.resolve_strategy(watermark, meta)
    planned_at, planned_gtid = dialect.current_position(), dialect.gtid_position()
    rows = dialect.estimate_rows(meta)
    chunks = dialect.split_chunks(meta, chunk_size) if mode.snapshots else chunks_from_boundaries([])
    plan = TablePlan(meta, tuple(chunks), strategy, planned_at, planned_gtid, rows, mode, start_at)
    if mode.snapshots:
        log.info("planned %s (%d/%d): %s rows in %d chunks (key %s, %s watermarks) in %.1fs", meta.qualified, number,
                 total, f"{rows:,}", len(chunks), ",".join(meta.key_columns), strategy, time.time() - started)
    else:
        log.info("planned %s (%d/%d): startup %s, no snapshot (about %s rows not read): the stream starts at %s",
                 meta.qualified, number, total, mode, f"{rows:,}", start_at)
    return plan


def resolve_tables(source: SourceConfig, tables=None, patterns=None, exclude=None, options: dict | None = None
                   ) -> list[str]:
    """The tables a capture names: ``tables`` (DB.TABLE names), or the source's tables matching
    ``patterns`` and no ``exclude`` pattern; one line when a pattern is malformed or nothing matches."""
    if not patterns:
        names = table_names(tables)
        if not names:
            raise DblogError("no table to capture: give --table DB.TABLE or --tables PATTERNS")
        return names
    include = table_patterns(patterns)
    skip = table_patterns(exclude, "--exclude") if exclude else []
    dialect = open_dialect(source, options)
    try:
        matched = match_tables(dialect.list_tables(), include, skip)
    finally:
        dialect.close()
    # a name without a glob must exist: it is planned (and reported unknown) even if nothing lists it
    named = [p for p in include if not any(c in p for c in "*?[")]
    matched = sorted(set(matched) | set(match_tables(named, named, skip)))
    if not matched:
        raise DblogError(f"no table on {source.address} matches --tables {','.join(include)}"
                         + (f" without --exclude {','.join(skip)}" if skip else "")
                         + f": check the names (DB.TABLE, case-sensitive) and that {source.user} may read them")
    listed = matched if len(matched) <= LISTED_TABLES else [*matched[:LISTED_TABLES],
                                                            f"... and {len(matched) - LISTED_TABLES} more"]
    log.info("capturing %d tables: %s", len(matched), ", ".join(listed))
    return matched


def plan_summary(state: StateDir) -> dict:
    tables = state.tables()
    return {"state": str(state.path), "source": state.load_raw()["source"],
            "tables": {name: {"chunks": len(t.chunks), "rows": t.rows, "key": list(t.meta.key_columns),
                              "watermark": t.strategy, "startup": str(t.startup),
                              **({"start_at": str(t.start_at)} if t.start_at else {})}
                       for name, t in tables.items()},
            "batches": [{"batch": b.index, "tables": list(b.tables),
                         "groups": [{"table": g.table, "chunks": list(g.chunk_ids)} for g in b.groups],
                         "rows": b.rows, "label": state.batch_label(b)} for b in state.batches()]}
