"""Committing a binlog range of one table to the lake, schema changes included.

A range's rows may have been decoded with several versions of the table's columns, and DDL statements
naming the table may sit between them. What happens to them is the capture's behaviour:

* ``evolve`` (default): the changelog gains the new columns (it keeps dropped ones: history stays
  readable) and ``current`` takes the source's columns. ALTER TABLE statements whose effect on the rows
  is known from the statement (ADD COLUMN with a literal DEFAULT or none, DROP, RENAME or CHANGE of a
  name, MODIFY to a wider type, index and option changes) are applied in place: rows from before the
  statement get the DEFAULT, as MySQL and MariaDB show them. Anything else (a DEFAULT that is an
  expression, a narrowing type change, TRUNCATE, a table swapped in by RENAME TABLE, CREATE after DROP)
  reads every chunk of the table again at a new high watermark.
  The lake records the change it followed (``dblog-reread``), so a range replayed after a crash
  finishes what the crash interrupted and a later replay does nothing.
* ``fail``: the range is committed up to the first DDL statement, then the capture stops with one line
  naming the table, the statement and its position; a restart under ``evolve`` continues from there.
* ``freeze``: the lake keeps its columns (new ones are left out, dropped ones are null); a TRUNCATE,
  RENAME, DROP or CREATE of the table still reads its chunks again. Each ignored change is logged.

It is a step, not a reader: following a change writes (the lake, the table's plan and offsets) and may read
chunks again, on the executor the tail was given (``table_committers``). The executors' tail loops (the
Spark query's ``foreachBatch``, the local catch-up) receive their committers from the tail step.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core import metrics
from airflow_provider_dblog.core.batches import BatchGroup
from airflow_provider_dblog.core.errors import REPLANNED, DblogError, UnknownTable
from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.schema_events import CATALOG_KINDS, SchemaChange
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.readers.chunk_reader import persist_reports, run_chunk
from airflow_provider_dblog.readers.unchanged_values import fill_unchanged, has_unchanged
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.steps.plan import column_name_refusals
from airflow_provider_dblog.store.lake import UNCHANGED
from airflow_provider_dblog.store.lake_schema import (
    conform, same_column_set, same_columns, source_columns, widens,
)
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.staged import StagedFile, discard, read_staged
from airflow_provider_dblog.store.state import StateDir, TablePlan

log = logging.getLogger("dblog")
# one schema change followed at a time in a process: a re-read or a new plan of one table reads chunks on
# the executor and rewrites the plan, while other tables of the micro-batch commit on other threads
_FOLLOWING = threading.Lock()
Reread = Callable[[TablePlan], None]  # reads every chunk of the plan again (in this process or on the executor)


def reread_here(state: StateDir, sink: str, dialect: DataSourceDialect) -> Reread:
    """Read the chunks again one after another in this process (small tables, the local catch-up)."""
    def reread(plan: TablePlan) -> None:
        for chunk in plan.chunks:
            persist_reports(state, sink, plan, [chunk.id], [run_chunk(sink, plan, chunk.id, dialect)])
    return reread


class ChangeCommitter:
    """Commits ranges of one table's changes (``readers.change_reader`` output) under a behaviour."""

    def __init__(self, state: StateDir, lake: LakeTables, dialect: DataSourceDialect, behaviour: str = "evolve",
                 reread: Reread | None = None, sink: str | None = None, plan: TablePlan | None = None):
        """``plan``: the table's plan when the caller has it (else read from the state: a request on S3)."""
        self.state, self.lake, self.dialect, self.behaviour = state, lake, dialect, behaviour
        self.plan = plan or state.table(lake.table)
        self.reread = reread or reread_here(state, sink, dialect)
        self._ignored: set[tuple] = set()
        self.replanned = False  # the table was planned again (a new key): its stream must start again
        self._before, self._groups = self.plan.meta, []  # the columns in force and the statements being followed

    def check_plan(self) -> None:
        """Before a micro-batch: a stream reading with the plan the table had before it was planned again
        stops here, committing nothing (``REPLANNED``), so that it starts again with the new plan."""
        if self.replanned:
            raise DblogError(f"{self.lake.table}: {REPLANNED}")

    def commit(self, parts: Sequence[pa.Table | pa.RecordBatch], changes: Sequence[SchemaChange],
               end: SourcePosition, update_current: bool = True, staged: Sequence[StagedFile] = ()) -> str:
        """Commit the changelog rows ``parts`` (and the ``staged`` files of more of them: ``readers.staging``)
        and schema ``changes`` of ``[start, end)``; returns what ``LakeTables.commit_stream`` says
        ("committed" or "replayed"). Counts the rows committed in the ``changes_committed`` metric."""
        outcome = self._commit(parts, changes, end, update_current, staged)
        if outcome == "committed":
            metrics.incr(metrics.CHANGES_COMMITTED, sum(p.num_rows for p in parts) + sum(f.rows for f in staged),
                         table=self.lake.table)
        return outcome

    def _commit(self, parts: Sequence[pa.Table | pa.RecordBatch], changes: Sequence[SchemaChange],
                end: SourcePosition, update_current: bool, staged: Sequence[StagedFile]) -> str:
        if changes:  # before a row is built or written: a column added under one of the lake's names
            try:
                with _FOLLOWING:  # the tables' committers share the dialect's connection
                    self._described(changes[-1])
            except UnknownTable:
                pass  # dropped: followed as such
        for schema in {p.schema for p in parts if p.num_rows} | {f.schema for f in staged}:
            columns = source_columns(schema)  # rows of new columns (a Relation message, a table map): before any write
            if not same_column_set(columns, self.lake.source):
                refused = column_name_refusals(self.lake.table, columns.names, self.lake.keys)
                if refused:
                    refusal, named = refused[0]
                    raise DblogError(f"rows of new columns: {refusal([named])}")
        if staged and any(UNCHANGED in f.schema.names for f in staged):
            parts = [*parts, *read_staged(self.lake.changelog_uri, staged)]  # filled from memory: rare beside a
            discard(self.lake.changelog_uri, staged)                          # transaction too large for it
            staged = ()
        if has_unchanged(parts):
            parts = fill_unchanged(self.lake.table, parts, self.lake.keys, self.lake.previous_images)
        if staged and not self._adds_staged(parts, changes, staged, end):
            log.warning("%s: %d staged files of changes come with a schema change: their rows are committed from "
                        "memory", self.lake.table, len(staged))
            parts = [*parts, *read_staged(self.lake.changelog_uri, staged)]
            discard(self.lake.changelog_uri, staged)
            staged = ()
        if staged:
            return self.lake.commit_stream(_rows(parts, self.lake.changelog_schema), end, update_current, staged)
        rows = _rows(parts, self.lake.changelog_schema)
        if self.behaviour == "evolve" and all(c.kind in CATALOG_KINDS for c in changes):  # none from the log
            changes = [*self._unannounced(parts, end), *changes]
        for change in changes:  # first: a crash after the changelog commit still finds them (``pending``)
            self.state.record_schema_change(change)
        todo = self.pending(end)
        if todo and self.behaviour == "fail":
            self._stop_at(rows, todo[0])
        if self.behaviour == "freeze":
            if not self.plan.keep_columns and not same_column_set(source_columns(rows.schema), self.lake.source):
                with _FOLLOWING:  # the plan's file is rewritten by the committers of several tables at once
                    self._keep_columns(True)  # rows of other columns than the lake's: it keeps its own from now on
            rows = conform(rows, self.lake.changelog_schema, kept_by=self.lake.table)
        outcome = self.lake.commit_stream(rows, end, update_current=update_current and not todo)
        if todo:
            with _FOLLOWING:
                self.follow(todo, [p for p in parts if p.num_rows], end)
            if self.replanned:  # its chunks were read after ``end``: the rows before it are all there
                self.lake.mark_current(end)
            else:
                self.lake.update_current(end)
        return outcome

    def _adds_staged(self, parts, changes: Sequence[SchemaChange], staged: Sequence[StagedFile],
                     end: SourcePosition) -> bool:
        """Whether the staged files can be added as they are: no schema change to follow in the range, and
        every row in the changelog's columns (a schema change rewrites rows in memory: rare beside a
        transaction too large for it)."""
        schemas = [p.schema for p in parts if p.num_rows] + [f.schema for f in staged]
        return (self.behaviour == "evolve" and not changes and not self.pending(end)
                and all(same_columns(source_columns(s), self.lake.source) for s in schemas)
                and self.lake.takes_staged(schemas))

    def _unannounced(self, parts: Sequence[pa.Table | pa.RecordBatch], end: SourcePosition) -> list[SchemaChange]:
        """Rows decoded with other columns than the lake's, newer than its last schema change, and no DDL
        statement seen (one the parser did not attribute to the table): followed like a statement that
        needs a re-read, from the first such row."""
        newer = [SourcePosition.decode(pc.min(p["_pos"]).as_py()).in_file_of(end) for p in parts
                 if p.num_rows and not same_column_set(source_columns(p.schema), self.lake.source)]
        if not newer:
            return []
        since = self.lake.schema_position()
        newer = [p for p in newer if since is None or p > since]
        if not newer:
            return []
        first = min(newer)
        at = SourcePosition(first.seq, max(first.offset - 1, 0), 0, first.file)
        return [SchemaChange(self.lake.table, "alter", "(columns changed in the change stream: a table map or "
                                                       "Relation message; no DDL statement seen)", at, at)]

    def pending(self, end: SourcePosition) -> list[SchemaChange]:
        """Recorded schema changes before ``end`` the lake has not followed yet."""
        return unfollowed_schema_changes(self.state, self.lake, end)

    def _stop_at(self, rows: pa.Table, change: SchemaChange) -> None:
        cut = change.start
        before = rows.filter(pc.less_equal(rows["_pos"], cut.as_snapshot().encode()))
        self.lake.commit_stream(before, cut)
        raise DblogError(f"schema change (--schema-changes fail): {change.describe()}: the lake holds every "
                         f"change before it; restart with --schema-changes evolve to follow it, or freeze to "
                         f"keep the lake's columns")

    def follow(self, changes: Sequence[SchemaChange], parts: Sequence[pa.Table] = (),
               end: SourcePosition | None = None) -> None:
        """Follow the table's schema ``changes`` in binlog order: ``current`` takes every change before a
        statement in the columns before it, then the statement's columns (in place, or by reading every
        chunk again, which also covers the statements after it); each followed statement is recorded.
        When every statement can be followed in place, ``current`` is rewritten once, up to ``end``."""
        for change in changes:
            log.info("schema change: %s (%s)", change.describe(), self.behaviour)
        groups = statement_groups(changes, parts)
        self._before, self._groups = self.state.meta_in_force(self.lake.table), groups  # for ``_kept``
        # a lake kept by freeze follows by reading every chunk again: its columns are not the ones the statements
        # start from, and a chunk re-read in them since (a repair) may miss changes an in-place change would assume
        in_place = (self._in_place_steps(groups) if self.behaviour == "evolve" and end is not None
                    and not self.plan.keep_columns else None)
        if in_place is not None:
            steps, live = in_place
            self.lake.follow_in_place(steps, end)
            self.state.record_schema_version(live, changes[-1].pos)
            self._adopt_identity(live)
            self._keep_columns(False)
            return
        for group, columns in groups:
            self.lake.update_current(group[0].start)  # the rows before it keep the columns they had
            if self._follow_group(group, columns):
                break  # every chunk was read again: later statements are in what it read
        self.lake.record_reread(changes[-1].pos)
        self._keep_columns(self.behaviour == "freeze" and self._columns_kept(changes[-1]))

    def _columns_kept(self, change: SchemaChange) -> bool:
        """Whether the lake's columns now differ from the source's (freeze ignored a change of them), so that its
        re-reads must keep them; a TRUNCATE or an index change under freeze leaves them the source's."""
        live = self._live_meta(change)
        return live is not None and not same_column_set(self.lake.source, self.dialect.arrow_schema(live))

    def _keep_columns(self, keep: bool) -> None:
        """Record whether the lake keeps its columns against the source's (``freeze``): a repair or resnapshot
        of some chunks must then not change the whole lake's columns from their read (the other chunks would hold
        nulls for a renamed or added column, and no frozen tail would ever fill them)."""
        if self.plan.keep_columns != keep:
            self.state.set_keep_columns(self.lake.table, keep)
            self.plan = replace(self.plan, keep_columns=keep)

    def _in_place_steps(self, groups) -> tuple[list[tuple], TableMeta] | None:
        """Each group's (start, position, columns after it, renamed, defaults) and the table now, if every
        group's effect on the rows is known from its statements; None otherwise."""
        live = self._live_meta(groups[-1][0][-1])
        if live is None or not self.plan.meta.keeps_key_order(live):  # a new key order: planned again
            return None
        before, steps = self.lake.source, []
        for group, columns in groups:
            after = columns or self.dialect.arrow_schema(live)
            known = in_place_changes(before, after, group, self.dialect.column_actions, self._kept(live))
            if known is None:
                return None
            steps.append((group[0].start, group[-1].pos, after, *known))
            before = after
        return steps, live

    def _follow_group(self, group: Sequence[SchemaChange], columns: pa.Schema | None) -> bool:
        """Follow one group of statements; True if that read every chunk again."""
        last = group[-1]
        if self.behaviour == "freeze" and all(c.kind == "alter" for c in group):
            live = self._live_meta(last)  # a new key, or a new order of it, stops here: the chunks no longer apply
            self._log_ignored(group)
            if live is not None:  # the lake keeps its columns; the source's, seen, are not a change again
                self._adopt_identity(live)
            return False
        fresh = live = self._live_meta(last)
        if live is None:
            truncates = [c for c in group if c.kind == "truncate"]
            if truncates:  # gone since: its rows up to the drop or rename are the changes after the TRUNCATE
                self.lake.truncated(truncates[-1].pos)
            if last.kind == "drop" and self.plan.meta.storage:  # gone from the catalog: the stream says so once
                self._adopt_identity(replace(self.plan.meta, storage=""))
            return False
        if last.kind == "create":  # a new table under the name: the source streams it from now on
            self.dialect.prepare_stream([live])
            fresh = live = self._live_meta(last) or live  # with the stream's part of its identity (a publication)
        if not self.plan.meta.keeps_key_order(live):  # a new key, or a new order of it (collation)
            self._replan(live, last)
            return True
        if self.behaviour == "freeze":
            live = self.plan.meta
        else:
            source = self.dialect.arrow_schema(live)
            in_place = in_place_changes(self.lake.source, columns or source, group, self.dialect.column_actions,
                                        self._kept(live))
            if in_place is not None:
                self.lake.evolve(columns or source, last.pos, *in_place)
                self.state.record_schema_version(live, last.pos)
                self.lake.record_reread(last.pos)
                self._adopt_identity(live)
                return False
            self.lake.evolve(source, last.pos, log_rows=False)  # the re-read below logs every row
            self.state.record_schema_version(live, last.pos)
        log.info("schema change: reading the %d chunks of %s again with columns %s", len(self.plan.chunks),
                 live.qualified, ", ".join(self.lake.source.names if self.behaviour == "freeze" else live.column_names))
        self.reread(replace(self.plan, meta=live, keep_columns=self.behaviour == "freeze"))
        self._adopt_identity(fresh)
        return True

    def _kept(self, live: TableMeta) -> Callable[[str, str], bool]:
        """``in_place_changes``'s ``kept``: a column's type in force before the changes being followed
        (``_before``) against its type now (``live``), by the dialect's rule; a column modified by more than one
        of the statements is read again (what it held in between is not known)."""
        times: dict[str, int] = {}
        for group, _ in self._groups:
            for change in group:
                for action in (self.dialect.column_actions(change) if change.kind == "alter" else []):
                    if action.kind == "modify":
                        times[action.name.lower()] = times.get(action.name.lower(), 0) + 1
        before = {c.name.lower(): c for c in self._before.columns}
        now = {c.name.lower(): c for c in live.columns}

        def kept(old: str, new: str) -> bool:
            if times.get(new.lower(), 0) + (times.get(old.lower(), 0) if old.lower() != new.lower() else 0) > 1:
                return False
            was, is_now = before.get(old.lower()), now.get(new.lower())
            return was is not None and is_now is not None and self.dialect.keeps_values(was, is_now)
        return kept

    def _adopt_identity(self, live: TableMeta) -> None:
        """The plan takes ``live``'s column ordinals and storage once the lake holds the rows as ``live`` has
        them: the stream compares the catalog with them (``recreate``, ``rewrite``), so a change followed is not
        found again."""
        meta = self.plan.meta.with_identity_of(live)
        if meta is not self.plan.meta:
            self.state.replace_table_meta(meta)
            self.plan = replace(self.plan, meta=meta)

    def _described(self, change: SchemaChange) -> TableMeta:
        """The table as the source has it now, refused in one line when ``change`` gave it a column name the lake
        cannot hold (``plan.column_name_refusals``; checked at plan for the columns it had then)."""
        plan = self.plan.meta
        live = self.dialect.describe_table(plan.qualified, plan.chunk_key)
        refused = column_name_refusals(plan.qualified, live.column_names, live.key_columns)
        if refused:
            refusal, named = refused[0]
            raise DblogError(f"{change.describe()}: {refusal([named])}")
        return live

    def _live_meta(self, change: SchemaChange) -> TableMeta | None:
        """The table as the source has it now (None: dropped; its lake tables stay as they are)."""
        plan = self.plan.meta
        try:
            live = self._described(change)
        except UnknownTable as exc:  # any other refusal (no key left, a nullable --chunk-key) stops the tail
            log.warning("schema change: %s: %s; the lake keeps its rows and stops following it until it "
                        "exists again", change.describe(), exc)
            return None
        if not plan.keeps_key_order(live) and self.behaviour != "evolve":
            raise DblogError(f"the key of {plan.qualified} changed ({plan.key_text} -> "
                             f"{live.key_text}) with {change.describe()}: its chunks no "
                             f"longer apply; follow it with --schema-changes evolve (the table is planned and "
                             f"read again)")
        return live

    def _replan(self, live: TableMeta, change: SchemaChange) -> None:
        """A new key: the plan's chunks no longer apply. Plan the table again with it, start ``current``
        anew, read every new chunk, and give the table new offsets; the stream of the table must then start
        again with them (``replanned``: its sink refuses the micro-batches after this one)."""
        old = self.plan
        rows = self.dialect.estimate_rows(live)
        chunk_size = max(100, (old.rows or rows) // max(1, len(old.chunks)))
        chunks = tuple(self.dialect.split_chunks(live, chunk_size))
        plan = replace(old, meta=live, chunks=chunks, planned_at=self.dialect.current_position(), rows=rows,
                       keep_columns=False)  # a new ``current`` with the source's columns
        log.info("schema change: the key of %s is now %s: planned again (%d chunks); reading them",
                 live.qualified, live.key_text, len(chunks))
        # ``current`` first, so that a saved new plan always comes with a restarted ``current`` and a closed
        # history: killed between the two, the next tail finds the old plan and plans the table again
        self.lake.restart_current(self.dialect.arrow_schema(live), live.key_columns, change.pos, plan.planned_at)
        self.state.replace_table_plan(plan)
        self.state.record_schema_version(live, change.pos)
        self.reread(plan)
        reports = self.state.reports(live.qualified)
        self.state.replace_table_offsets(live.qualified, TableOffsets.from_chunks(
            live.qualified, plan.chunks, {c.id: SourcePosition.from_dict(reports[c.id]["hw"]) for c in plan.chunks}))
        self.plan, self.replanned = plan, True

    def _log_ignored(self, changes: Sequence[SchemaChange]) -> None:
        for change in changes:
            if (change.table, change.pos) not in self._ignored:
                self._ignored.add((change.table, change.pos))
                log.warning("schema change ignored (--schema-changes freeze): %s", change.describe())


def unfollowed_schema_changes(state: StateDir, lake: LakeTables, end: SourcePosition) -> list[SchemaChange]:
    """The table's recorded schema changes up to ``end`` that its lake has not followed yet."""
    changes = state.schema_changes(lake.table)
    if not changes:
        return []
    done = lake.reread_position()
    return [c for c in changes if (done is None or c.pos > done) and c.pos <= end]


def statement_groups(changes: Sequence[SchemaChange], parts: Sequence[pa.Table | pa.RecordBatch]
                     ) -> list[tuple[list[SchemaChange], pa.Schema | None]]:
    """The statements in groups, each with the source columns of the rows decoded after it (None: no row
    between it and the next statement, or after the last: the source's columns now decide)."""
    spans = [(pc.min(p["_pos"]).as_py(), pc.max(p["_pos"]).as_py(), source_columns(p.schema)) for p in parts]
    groups, pending = [], []
    for i, change in enumerate(changes):
        pending.append(change)
        after = change.pos.as_snapshot().encode()
        until = changes[i + 1].start.encode() if i + 1 < len(changes) else None
        columns = next((c for lo, hi, c in spans if lo > after and (until is None or hi <= until)), None)
        if columns is not None or until is None:
            groups.append((pending, columns))
            pending = []
    return groups


def in_place_changes(before: pa.Schema, after: pa.Schema, changes: Sequence[SchemaChange],
                     column_actions: Callable[[SchemaChange], list],
                     kept: Callable[[str, str], bool] = lambda old, new: False
                     ) -> tuple[dict[str, str], dict[str, pa.Scalar]] | None:
    """(renamed: new name -> old name, defaults of added columns) when ALTER TABLE ``changes`` turn the lake's
    columns ``before`` into the source's ``after`` in a way the statements fully explain (``column_actions``:
    the dialect's reading of a statement; ``kept(lake column, source column)``: whether a column a statement
    modified kept every value, as the source's declared types say); None when the rows must be read again."""
    origin = {f.name.lower(): f.name for f in before}  # column now (lower case) -> the lake's column, or None
    defaults: dict[str, object] = {}
    modified: set[str] = set()  # the lake's columns a MODIFY / CHANGE changed the type of
    for change in changes:
        if change.kind != "alter":
            return None
        for action in column_actions(change):
            name, new = action.name.lower(), action.new.lower()
            if action.kind == "keep":
                continue
            if action.kind == "add" and action.default is not ... and name not in origin:
                origin[name], defaults[name] = None, action.default
            elif action.kind == "drop" and name in origin:
                del origin[name]
                defaults.pop(name, None)
            elif action.kind == "rename" and name in origin and new not in origin:
                origin[new] = origin.pop(name)
                if name in defaults:
                    defaults[new] = defaults.pop(name)
            elif action.kind != "modify" or name not in origin:
                return None
            elif origin[name] is not None:
                modified.add(origin[name])
    if sorted(origin) != sorted(f.name.lower() for f in after):
        return None
    renamed, values = {}, {}
    for field in after:
        old = origin[field.name.lower()]
        if old is None:
            value = defaults[field.name.lower()]
            if value is not None:
                try:
                    values[field.name] = pa.array([value]).cast(field.type)[0]
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    return None
            continue
        old_type = before.field(old).type
        if old_type != field.type and not (widens(old_type, field.type) and not (
                pa.types.is_string(field.type) and not pa.types.is_string(old_type))):
            return None
        if old in modified and not kept(old, field.name):  # e.g. VARCHAR(40) to VARCHAR(5): one lake type
            return None
        if old != field.name:
            renamed[field.name] = old
    return renamed, values


def _rows(parts: Sequence[pa.Table | pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """One table of the parts' rows, in the union of their columns (a later version's types win)."""
    tables = [p if isinstance(p, pa.Table) else pa.Table.from_batches([p]) for p in parts if p.num_rows]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables, promote_options="permissive")


def table_committers(state: StateDir, sink: str, schema_changes: str, memory_bytes: int,
                     executor=None) -> Callable:
    """``(dialect, table) -> ChangeCommitter``: how the tail commits a table's changes under ``schema_changes``,
    ``current`` updated with at most ``memory_bytes`` of changes at once; chunks read again after a schema
    change are read by ``executor`` (None: one after another in this process, ``reread_here``). The plans are
    read once, at the first committer made (on object storage each read of the plan is a request): make a
    factory per query start, so that a table planned again since is seen with its new plan."""
    plans: list[dict] = []

    def make(dialect, name: str) -> ChangeCommitter:
        if not plans:
            plans.append(state.tables())
        plan = state.table_of(plans[0], name)  # a table planned after the first read: read again
        lake = LakeTables(sink, name, dialect.arrow_schema(plan.meta), plan.meta.key_columns, capture=plan.capture)
        lake.memory_bytes = memory_bytes
        reread = None if executor is None else reread_by(executor, state, sink, dialect)
        return ChangeCommitter(state, lake, dialect, schema_changes, reread, sink=sink, plan=plan)
    return make


def reread_by(executor, state: StateDir, sink: str, dialect) -> Callable:
    """Read every chunk of a table's plan again as one read of ``executor`` (``steps.executor``), after a
    schema change."""
    def reread(plan) -> None:
        group = BatchGroup(plan.meta.qualified, tuple(c.id for c in plan.chunks))
        reports = executor.read_chunks(sink, {group.table: plan}, [group], dialect,
                                       f"re-read of {group.table} after a schema change")
        persist_reports(state, sink, plan, group.chunk_ids, reports)
    return reread
