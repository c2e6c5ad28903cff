"""The lake's two Delta tables of one captured table, written with delta-rs (no Spark jars needed).

    SINK/DB.TABLE/changelog   append-only: every snapshot row (``_op`` r) and every change (c/u/d)
    SINK/DB.TABLE/current     the live rows, partitioned by ``_chunk``: a plain read shows no deleted row

Commits are exactly-once and order-independent:

* A chunk read appends its rows to the changelog, then replaces its chunk in ``current``: the chunk's
  rows at its high watermark (HW), overlaid with every later change of its keys the changelog already
  holds; keys in the chunk that are in neither are deleted. The commit records the chunk's HW as the app
  transaction ``dblog-chunk-N``; an older HW than the recorded one changes nothing (a slow re-read).
  A chunk's first read writes one file, which both tables add (``store.shared_file``).
* A tail micro-batch ``[start, end)`` appends its changes to the changelog with the app transaction
  ``dblog-tail`` = ``end``: a replayed batch (already recorded) writes nothing, and of two tails only
  one can commit a batch (Delta refuses a concurrent transaction of the same app id). It then applies
  every changelog change after ``current``'s own ``dblog-tail`` position to ``current``: per key the
  greatest ``_pos`` wins, and a change at or before its chunk's recorded HW is already in that chunk.
* A commit that loses a race (Delta's conflict check) is retried from a fresh read of both tables.

The lake records how far the tail got (``tail_position``), so a tail whose Spark checkpoint is lost
resumes from here.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.checksums import table_checksum
from airflow_provider_dblog.core.errors import DblogError, SchemaChangedError
from airflow_provider_dblog.core.exact import exact_key, unpacked
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store import key_ranges
from airflow_provider_dblog.store.atomic import dictionary_columns
from airflow_provider_dblog.store.files import Files
from airflow_provider_dblog.store.lake import (
    changelog_schema, changelog_uri, current_schema, current_uri, position_rows,
)
from airflow_provider_dblog.store.lake_merge import distinct_versions, latest_per_key, merge_changes
from airflow_provider_dblog.store.lake_schema import (
    changed_columns, column_names, conform, delta_schema, merge_schemas, plain, row_bytes, same_column_set, same_columns,
    source_columns,
)
from airflow_provider_dblog.store.opened_tables import HeldTables, app_version, log_has
from airflow_provider_dblog.store.staged import StagedFile, add_actions, discard, read_staged, stage

log = logging.getLogger("dblog")
TAIL_APP = "dblog-tail"
SCHEMA_APP = "dblog-schema"  # ``current``'s columns follow the source's from this position on
REREAD_APP = "dblog-reread"  # every chunk was read again after the schema change at this position
RESTART_APP = "dblog-restart"  # ``current`` started anew at this position (a new plan: new chunks, a new key order)
MAX_ATTEMPTS = 30
MEMORY_BYTES = 256 * 1024 * 1024  # changes applied to ``current`` in one MERGE; more go chunk by chunk
SCAN_BATCH_ROWS = 65_536
REWRITE_THREADS = 2  # files of ``current`` rewritten at once by an update
# rewrites queued at most while the next chunk's are found (each holds its file and its chunk's small files)
REWRITES_IN_FLIGHT = 2 * REWRITE_THREADS
CAPTURE_MARK = "dblog capture "  # a lake table's description: the capture (``StateDir.capture``) that writes it
WHOLE_READ_ROWS = 16_384  # a file of ``current`` this small is read whole once by an update, not key columns first
# a log checkpoint every 10 commits (delta-rs writes it after the commit): opening, updating and committing to a
# table replays the log entries since the last checkpoint, 0.25 ms each here, so at Delta's default of 100 a
# tail's commits cost up to 25 ms more the longer it runs (docs/benchmarks.md, "Commit cost over a tail's life")
CHECKPOINT_INTERVAL = 10
TABLE_PROPERTIES = {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)}


def chunk_app(chunk_id: int) -> str:
    return f"dblog-chunk-{chunk_id}"


def touch_app(chunk_id: int) -> str:
    """The app transaction every commit that changes a chunk of ``current`` carries: a tail update, for each chunk
    its changes fall in (also one that changes no row there: a delete of a key ``current`` lacks yet moves the tail
    past it), and each write of the chunk's read. Delta refuses two concurrent commits of one app id, so a read and
    a tail update of the same chunk never both commit from the same version, whatever files each touched; other
    chunks' commits pass. Its version means nothing (the position of the commit)."""
    return f"dblog-touch-{chunk_id}"


def touched(chunk_ids, at: SourcePosition) -> list:
    from deltalake import Transaction

    return [Transaction(touch_app(int(c)), at.boundary().to_version()) for c in sorted(set(chunk_ids)) if c is not None]


def quote(name: str) -> str:
    """An identifier in delta-rs's SQL (DataFusion): double quotes keep case and odd characters."""
    return '"' + name.replace('"', '""') + '"'


def key_match(key_columns: Sequence[str], schema: pa.Schema) -> str:
    """The MERGE condition of a key: same chunk partition, same key columns, bit for bit. delta-rs's ``t.k = s.k``
    matches -0.0 with 0.0 (NaN payloads it keeps apart), so a float key also needs the same sign of zero:
    ``atan2(k, -1)`` is pi for 0.0, -pi for -0.0."""
    floats = [k for k in key_columns if k in schema.names and pa.types.is_floating(schema.field(k).type)]
    return " AND ".join(["s._chunk = t._chunk", *(f"t.{quote(k)} = s.{quote(k)}" for k in key_columns),
                         *(f"atan2(t.{quote(k)}, -1) = atan2(s.{quote(k)}, -1)" for k in floats)])


def writer_properties(schema: pa.Schema):
    """Snappy, and dictionary pages only where values repeat (text, binary, dates): as the Parquet
    writer measured best (``store.atomic.dictionary_columns``): a 375k-row chunk 0.20 s -> 0.13 s."""
    from deltalake import ColumnProperties, WriterProperties

    dictionary = set(dictionary_columns(schema))
    return WriterProperties(compression="SNAPPY", column_properties={
        f.name: ColumnProperties(dictionary_enabled=f.name in dictionary) for f in schema
        if not pa.types.is_struct(f.type)})


def _retrying(what: str, attempt_fn):
    """Run ``attempt_fn`` until it commits: a commit that lost a race to another writer is retried
    from a fresh read (Delta's optimistic concurrency)."""
    from deltalake.exceptions import CommitFailedError, SchemaMismatchError

    for attempt in range(1, MAX_ATTEMPTS + 1):
        started = time.monotonic()
        try:
            return attempt_fn()
        except (CommitFailedError, SchemaMismatchError) as exc:  # the latter: another writer changed the columns
            log.debug("lake: %s: attempt %d (%.2fs) lost a commit race: %s", what, attempt, time.monotonic() - started,
                      str(exc).splitlines()[0])
            if attempt == MAX_ATTEMPTS:
                raise DblogError(f"{what}: gave up after {attempt} commit conflicts ({str(exc).splitlines()[0]})") from None
            time.sleep(min(0.05 * attempt, 1.0))


def capture_of(table) -> str | None:
    """The capture that created a lake table (its description), None for one created before captures had ids."""
    text = table.metadata().description or ""
    return text[len(CAPTURE_MARK):] if text.startswith(CAPTURE_MARK) else None


class LakeTables:
    """``changelog`` and ``current`` of one captured table."""

    memory_bytes = MEMORY_BYTES  # more changes than this are applied to ``current`` chunk by chunk
    file_rows = key_ranges.FILE_ROWS  # rows of one key-range file of ``current``
    apply_mode = "files"  # "merge": every update of ``current`` as one delta-rs MERGE (the old path, a baseline)
    rewritten = (0, 0)  # files rewritten and rows written by the last key-range update (benchmarks, tests)

    def __init__(self, sink: str, table: str, source: pa.Schema, key_columns: Sequence[str],
                 storage_options: dict | None = None, capture: str | None = None):
        """``capture``: the id of the capture writing (``StateDir.capture``): the tables it creates carry it, and a
        table another capture created is refused (None: neither; a state planned before captures had ids)."""
        self.table, self.keys, self.capture = table, tuple(key_columns), capture
        self.changelog_uri, self.current_uri = changelog_uri(sink, table), current_uri(sink, table)
        self.options = storage_options
        self._appended = None  # (changelog position before, after, its version, rows) of the last tail append
        self._held = HeldTables(self)
        self._use_source(source)

    @property
    def key_match(self) -> str:
        return key_match(self.keys, self.current_schema)

    def _use_source(self, source: pa.Schema) -> None:
        self.source = source
        self.changelog_schema, self.current_schema = changelog_schema(source), current_schema(source)
        self.changelog_writer = writer_properties(self.changelog_schema)
        self.current_writer = writer_properties(self.current_schema)

    # ---- opening ----
    def _open(self, uri: str, schema: pa.Schema, partition_by: list[str] | None):
        """The table at its latest version: opened once in this process, then brought up to date by reading
        only the log entries added since (``store.opened_tables``)."""
        return self._held.get(uri, self.options, lambda: self._open_or_create(uri, schema, partition_by))

    def _open_or_create(self, uri: str, schema: pa.Schema, partition_by: list[str] | None):
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        for _ in range(3):
            try:
                return self._owned(uri, DeltaTable(uri, storage_options=self.options))
            except TableNotFoundError:
                try:
                    return DeltaTable.create(uri, schema, mode="ignore", partition_by=partition_by,
                                             storage_options=self.options, configuration=TABLE_PROPERTIES,
                                             description=None if self.capture is None else CAPTURE_MARK + self.capture)
                except Exception:  # noqa: BLE001 - another writer created it at the same moment: open it
                    continue
        return self._owned(uri, DeltaTable(uri, storage_options=self.options))

    def _owned(self, uri: str, table):
        """``table``, unless another capture created it: two captures (two states, e.g. two servers with the same
        database and table names) writing one lake table would mix their rows, and neither could tell."""
        owner = capture_of(table)
        if self.capture is None or owner is None or owner == self.capture:
            return table
        raise DblogError(f"{unquote(uri)} belongs to another capture ({owner}, not this state's {self.capture}): two "
                         f"captures would mix their rows in it; give this one another --sink, or delete the table's "
                         f"current and changelog to capture it anew")

    def changelog(self):
        return self._open(self.changelog_uri, self.changelog_schema, None)

    def current(self):
        table = self._open(self.current_uri, self.current_schema, ["_chunk"])
        # the lake's columns are what it holds (a schema change may have been followed by another writer a
        # moment ago); what a caller read is compared with them (``commit_chunk``)
        source = source_columns(delta_schema(table))
        if not same_columns(source, self.source):
            self._use_source(source)
        return table

    # ---- schema changes ----
    def schema_position(self) -> SourcePosition | None:
        """Where ``current``'s columns last followed the source (None: still the planned columns)."""
        return _version_position(app_version(self.current(), SCHEMA_APP))

    def reread_position(self) -> SourcePosition | None:
        """The last schema change after which every chunk was read again."""
        return _version_position(app_version(self.current(), REREAD_APP))

    def evolve(self, source: pa.Schema, at: SourcePosition, renamed: dict[str, str] | None = None,
               defaults: dict[str, pa.Scalar] | None = None, log_rows: bool = True) -> bool:
        """Give ``current`` the source's columns in force from ``at`` (dropped ones removed, changed types
        cast, ``renamed`` new name -> old name carried over, added ones null or, for rows from before
        ``at``, their ``defaults``) and widen the changelog where a type changed (it keeps every column it
        ever had: its history stays readable). False if the lake already followed a change at or after ``at``.
        ``log_rows=False`` when every chunk is read again next: the re-read logs each row as the source has it
        (and a removal for each row gone), so ``current``'s rows as they were (before a TRUNCATE, or with values
        a rewrite changed) are not logged as the table after the change."""
        done = self.schema_position()
        if done is not None and done >= at.boundary():
            return False
        _retrying(f"changing the columns of {self.table}'s changelog", lambda: self._widen_changelog(source))
        _retrying(f"changing the columns of {self.table}'s current state",
                  lambda: self._evolve_current(source, at, renamed or {}, defaults or {}, log_rows))
        self.current()  # its columns now
        log.info("lake: %s follows the source's columns from %s: %s", self.table, at, ", ".join(source.names))
        return True

    def _evolve_current(self, source: pa.Schema, at: SourcePosition, renamed: dict, defaults: dict,
                        log_rows: bool = True) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        current = self.current()
        done = _version_position(app_version(current, SCHEMA_APP))
        if done is not None and done >= at.boundary():
            return  # another writer followed a later change meanwhile: its columns stay
        data = changed_columns(current.to_pyarrow_dataset().to_table(), source, at, renamed, defaults)
        if log_rows:
            self._log_followed_rows(data, at)
        target = data.schema
        write_deltalake(current, data, mode="overwrite", schema_mode="overwrite", partition_by=["_chunk"],
                        storage_options=self.options, writer_properties=writer_properties(target),
                        commit_properties=CommitProperties(app_transactions=[
                            Transaction(SCHEMA_APP, at.boundary().to_version())]))

    def _log_followed_rows(self, data: pa.Table, at: SourcePosition) -> None:
        """A schema change followed in place gives the rows already there new values (an added column's
        DEFAULT, a renamed or retyped column) without a binlog event: each such row goes to the changelog
        as a snapshot row at the statement's position, so replaying the changelog gives ``current``. Once per
        statement (the changelog records it as ``dblog-schema``). The rows sit at ``CLOSED_ROW`` of it: after
        every change up to the statement, before the rows of a chunk read at that very position (``SNAPSHOT_ROW``),
        so no key has two images at one ``_pos``; a row read at it already has its image after the statement."""
        from deltalake import CommitProperties, Transaction

        done = _version_position(app_version(self.changelog(), SCHEMA_APP))
        if done is not None and done >= at.boundary():
            return
        here = at.as_closed().encode()
        rows = data.filter(pc.less(data["_pos"], here))
        logged = position_rows(rows, source_columns(rows.schema), "r", here, rows["_chunk"])
        self._append(logged, CommitProperties(app_transactions=[Transaction(SCHEMA_APP, at.boundary().to_version())]))
        log.info("lake: %s: %d rows as they are after the schema change at %s logged to the changelog", self.table,
                 rows.num_rows, at)

    def _widen_changelog(self, source: pa.Schema) -> bool:
        """Rewrite the changelog with the wider of its and ``source``'s types; False if none is wider."""
        from deltalake import write_deltalake

        changelog = self.changelog()
        have = delta_schema(changelog)
        merged = merge_schemas(have, changelog_schema(source))
        if all(merged.field(f.name).type == f.type for f in have):
            return False  # only added columns: the next append adds them (schema_mode merge)
        data = conform(changelog.to_pyarrow_dataset().to_table(), merged)
        write_deltalake(changelog, data, mode="overwrite", schema_mode="overwrite", storage_options=self.options,
                        writer_properties=writer_properties(merged))
        return True

    def follow_in_place(self, steps: Sequence[tuple], end: SourcePosition) -> None:
        """Follow schema changes whose effect on every row is known, in one rewrite of ``current``: for each
        step ``(start, at, source, renamed, defaults)`` the changes up to ``start`` with the columns before
        it, then its columns (``changed_columns``); then the changes up to ``end``. Records the tail position,
        the schema change and that it was followed, in the same commit."""
        last = steps[-1][1]
        _retrying(f"following schema changes of {self.table}", lambda: self._follow_in_place(steps, end, last))
        self.current()
        log.info("lake: %s follows the source's columns from %s: %s", self.table, last, ", ".join(self.source.names))

    def _follow_in_place(self, steps: Sequence[tuple], end: SourcePosition, last: SourcePosition) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        current = self.current()
        done = _version_position(app_version(current, REREAD_APP))
        if done is not None and done >= last.boundary():
            return
        applied = _version_position(app_version(current, TAIL_APP))
        data = current.to_pyarrow_dataset().to_table()
        data = conform(data, plain(data.schema))
        for start, at, source, renamed, defaults in steps:
            data = self._apply_here(current, data, applied, start)
            applied = start if applied is None or start > applied else applied
            data = changed_columns(data, source, at, renamed, defaults)
            self._log_followed_rows(data, at)
        data = self._apply_here(current, data, applied, end)
        versions = [Transaction(app, pos.boundary().to_version()) for app, pos in
                    ((TAIL_APP, max(end, applied) if applied else end), (SCHEMA_APP, last), (REREAD_APP, last))]
        write_deltalake(current, data, mode="overwrite", schema_mode="overwrite", partition_by=["_chunk"],
                        storage_options=self.options, writer_properties=writer_properties(data.schema),
                        commit_properties=CommitProperties(app_transactions=versions))

    def _apply_here(self, current, data: pa.Table, applied: SourcePosition | None, upto: SourcePosition) -> pa.Table:
        """``_apply_changes`` on rows in memory: the changelog's changes in ``(applied, upto]``, per key the
        greatest position, a key not in ``data`` inserted only after its chunk's HW."""
        if applied is not None and applied >= upto:
            return data
        window = [pc.field("_pos") <= upto.as_snapshot().encode()]
        if applied is not None:
            window.append(pc.field("_pos") > applied.as_snapshot().encode())
        changes = latest_per_key(self._changes(*window, schema=data.schema), self.keys)
        if changes.num_rows == 0:
            return data
        hws = {c: _version_position(app_version(current, chunk_app(c)))
               for c in pc.unique(changes["_chunk"]).to_pylist()}
        return merge_changes(data, changes, self.keys, hws).sort_by([(k, "ascending") for k in self.keys])

    def restart_current(self, source: pa.Schema, key_columns: Sequence[str], at: SourcePosition,
                        planned_at: SourcePosition | None = None) -> None:
        """An empty ``current`` with the source's columns and a new key (the table was planned again at
        ``planned_at``, after the change at ``at``): its chunks are read again next. The changelog keeps its
        history, closed at ``planned_at``: every key it holds live (by the new key) gets a delete row there
        (``as_closed``), so that replaying it gives ``current`` once the new chunks' rows follow, and a change
        the stream never wrote (after its last micro-batch, before the new chunks' reads) leaves nothing
        behind. Rows before it name the old plan's chunks: ``_removals`` of a new chunk reads from it."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        keys, closing = tuple(key_columns), max(at, planned_at or at)
        closed = self._live_keys_closed(keys, closing)
        if closed is not None:  # a rerun after a kill here writes them again at the same position: harmless
            self._append_once(f"closing {self.table}'s changelog history at {closing}", closed)

        def attempt():
            write_deltalake(self.current(), current_schema(source).empty_table(), mode="overwrite",
                            schema_mode="overwrite", partition_by=["_chunk"], storage_options=self.options,
                            commit_properties=CommitProperties(app_transactions=[
                                Transaction(SCHEMA_APP, at.boundary().to_version()),
                                Transaction(RESTART_APP, closing.boundary().to_version())]))
        _retrying(f"starting the current state of {self.table} again", attempt)
        self.keys = keys
        self.current()

    def _live_keys_closed(self, keys: tuple[str, ...], closing: SourcePosition) -> pa.Table | None:
        """A delete row at ``closing.as_closed()`` for each row that replaying the changelog before it leaves
        live, by the key the history was written under (``self.keys``) or by the new ``keys``: a consumer
        replaying by either ends with nothing of the old plan. None when no row is live. A new key column
        that no history row has (added by the statement that made it the key) closes by the old key only."""
        changelog = self.changelog()
        names = delta_schema(changelog).names
        have = [n for n in self.source.names if n in names]
        by = [k for k in dict.fromkeys((self.keys, keys)) if all(c in have for c in k)]
        if not by:
            return None
        history = changelog.to_pyarrow_dataset().to_table(
            columns=[*have, "_pos", "_op"], filter=pc.field("_pos") < closing.as_closed().encode())
        live = [latest.filter(pc.not_equal(latest["_op"], "d"))
                for latest in (latest_per_key(history, k) for k in by)]
        live = live[0] if len(live) == 1 else distinct_versions(pa.concat_tables(live), {c for k in by for c in k})
        if not live.num_rows:
            return None
        log.info("lake: %s planned again at %s: %d rows get a delete row in the changelog before its new chunks",
                 self.table, closing, live.num_rows)
        return position_rows(conform(live.select(have), self.source), self.source, "d", closing.as_closed().encode(),
                             pa.nulls(live.num_rows, pa.int32()), before=True)

    def truncated(self, at: SourcePosition) -> None:
        """A TRUNCATE at ``at`` followed without a read (the source no longer has the table: nothing to read
        again): every row ``current`` holds before it gets a delete row in the changelog at the statement
        (``as_closed``), which the next ``update_current`` applies; the changes after it stay on top."""
        rows = self.current().to_pyarrow_dataset().to_table(
            columns=[*self.source.names, "_chunk"], filter=pc.field("_pos") < at.as_closed().encode())
        if not rows.num_rows:
            return
        log.info("lake: %s: the TRUNCATE at %s removes its %d rows (the source no longer has the table)",
                 self.table, at, rows.num_rows)
        # a rerun after a kill here writes them again at the same position: harmless
        self._append_once(f"removing the rows of {self.table} the TRUNCATE at {at} removed", position_rows(
            rows.select(self.source.names), self.source, "d", at.as_closed().encode(), rows["_chunk"], before=True))

    def mark_current(self, end: SourcePosition) -> None:
        """Record that ``current`` holds every change up to ``end`` (its chunks were read after it)."""
        self._record(TAIL_APP, end, f"recording the position of {self.table}'s current state")

    def record_reread(self, at: SourcePosition) -> None:
        """Every chunk has been read again after the schema change at ``at``."""
        self._record(REREAD_APP, at, f"recording the re-read of {self.table}")

    def _record(self, app: str, position: SourcePosition, what: str) -> None:
        _retrying(what, lambda: self._empty_commit(self.current(), app, position))

    def _empty_commit(self, current, app: str, position: SourcePosition) -> None:
        """A commit to ``current`` of no rows that records ``position`` as the app transaction ``app``."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        write_deltalake(current, self.current_schema.empty_table(), mode="append", storage_options=self.options,
                        commit_properties=CommitProperties(app_transactions=[
                            Transaction(app, position.boundary().to_version())]))

    # ---- positions the lake records ----
    def tail_position(self) -> SourcePosition | None:
        """How far the tail's changes are in the changelog (None before its first batch)."""
        return _version_position(app_version(self.changelog(), TAIL_APP))

    def current_behind(self) -> tuple[SourcePosition | None, SourcePosition] | None:
        """(``current``'s tail position, the changelog's) when the changelog holds changes ``current`` does
        not reflect yet; None when it is up to date."""
        logged = self.tail_position()
        if logged is None:
            return None
        applied = _version_position(app_version(self.current(), TAIL_APP))
        return None if applied is not None and applied >= logged else (applied, logged)

    def previous_images(self, wanted: dict[tuple, tuple[str, int]]) -> dict[tuple, dict]:
        """Per key of ``wanted`` (its ``exact_key`` -> (``_pos``, chunk)) its latest image before that position, as
        a dict of the source's columns, under the same exact key (a NaN key finds itself, -0.0 is not 0.0); a key
        whose latest image there is a delete, or that has none, is left out.
        ``current``'s row when it is older than the position, overlaid with the changelog's changes ``current``
        does not reflect yet (a merge interval); for a key whose row in ``current`` is newer than the position (a
        chunk read again at a later position) or missing, the changelog's latest row before it."""
        found, older = {}, {}
        for key, row in self._rows_of_keys(self.current(), wanted, partitions=True):
            found[key] = older[key] = row
        behind = self.current_behind()
        if behind is not None:  # changes after ``current``'s position: only the changelog's newest files
            since = None if behind[0] is None else behind[0].as_snapshot().encode()
            self._overlay(found, {k: v for k, v in wanted.items() if k in older}, since)
        rest = {k: v for k, v in wanted.items() if k not in older}
        if rest:
            self._overlay(found, rest, None)
        return found

    def _overlay(self, found: dict[tuple, dict], wanted: dict[tuple, tuple[str, int]], since: str | None) -> None:
        """``found`` with the changelog's rows of ``wanted``'s keys after ``since`` and before each key's position
        applied in position order (a delete removes the key)."""
        if not wanted:
            return
        for key, row in sorted(self._rows_of_keys(self.changelog(), wanted, partitions=False, since=since),
                               key=lambda kr: kr[1]["_pos"]):
            if row["_op"] == "d":
                found.pop(key, None)
            else:
                found[key] = row

    def _rows_of_keys(self, table, wanted: dict[tuple, tuple[str, int]], partitions: bool, since: str | None = None
                      ) -> list[tuple[tuple, dict]]:
        """(exact key, row) of a Delta table's rows of ``wanted``'s keys below each one's position (and above
        ``since``), read through the files' statistics (and ``_chunk`` partitions): a superset, kept by exact key.
        The statistics leave NaN out, so a NaN key is asked by ``is_nan``, never by its value alone."""
        schema = delta_schema(table)
        floats = [pa.types.is_floating(schema.field(k).type) for k in self.keys]
        expression = pc.field("_pos") < max(p for p, _ in wanted.values())
        if since is not None:
            expression = expression & (pc.field("_pos") > since)
        for i, k in enumerate(self.keys):
            values = unpacked({key[i] for key in wanted}, floats[i])  # -0.0 and 0.0 both, when both are asked
            matches = pc.field(k).isin(pa.array(sorted(v for v in values if v is not None and v == v),
                                                schema.field(k).type))
            if any(v is not None and v != v for v in values):
                matches = matches | pc.field(k).is_nan()
            if None in values:  # a null part is in no isin (nor in the statistics' bounds)
                matches = matches | pc.field(k).is_null()
            expression = expression & matches
        if partitions:
            expression = expression & pc.field("_chunk").isin(pa.array(sorted({c for _, c in wanted.values()}),
                                                                       pa.int32()))
        names = [n for n in schema.names if n != "_before"]
        rows = table.to_pyarrow_dataset().to_table(columns=names, filter=expression).to_pylist()
        keyed = ((exact_key(row[k] for k in self.keys), row) for row in rows)
        return [(key, row) for key, row in keyed if key in wanted and row["_pos"] < wanted[key][0]]

    # ---- snapshot chunks ----
    def commit_chunk(self, chunk_id: int, hw: SourcePosition, rows: pa.Table, keep_columns: bool = False,
                     planned_at: SourcePosition | None = None) -> bool:
        """Append the chunk's rows (changelog schema) and replace its chunk in ``current``; False when a
        later read of the chunk is already in ``current`` (this one changes nothing there). ``keep_columns``
        (``--schema-changes freeze``): rows read with other columns take the lake's (new ones left out, dropped
        ones null) instead of changing them. ``planned_at``: the plan whose chunk was read; a read of a plan that
        ``current`` started anew after (``restart_current``: a new key, other chunk ranges) is refused."""
        self._check_plan(self.current(), chunk_id, planned_at)  # and adopt the lake's columns if they changed
        source = source_columns(rows.schema)
        if keep_columns and not same_column_set(source, self.source):
            rows = conform(rows, pa.schema([*self.source, *(f for f in rows.schema if f.name not in source.names)]),
                           kept_by=self.table)
        elif not keep_columns:
            self._evolved_for(chunk_id, hw, source)
        once = self._first_read_once(chunk_id, hw, rows, planned_at)
        if once:
            return True
        if once is None and self._read_again_at_its_hw(chunk_id, hw, rows):
            return False
        deletes = self._removals(chunk_id, hw, rows)
        if once is None:
            self._append_once(f"appending chunk {chunk_id} to {self.changelog_uri}",
                              rows if deletes is None else pa.concat_tables([conform(rows, deletes.schema), deletes]))
        elif deletes is not None:  # the changelog took the read's rows already (a first read that lost the race)
            self._append_once(f"appending chunk {chunk_id}'s removals to {self.changelog_uri}", deletes)
        later = _ChunkChanges(self, chunk_id, hw)  # read once, then only what the tail appends while this retries
        return _retrying(f"replacing chunk {chunk_id} of {self.table}",
                         lambda: self._replace_chunk(chunk_id, hw, rows, later, planned_at, keep_columns))

    def _evolved_for(self, chunk_id: int, hw: SourcePosition, source: pa.Schema) -> bool:
        """Bring the lake's columns and those of a chunk read at ``hw`` (``source``) together: True when the lake took
        the read's columns (a read after a schema change the lake has not followed yet), False when the rows can be
        written as they are (the same columns, or the lake's columns are among the read's with their types: it only
        dropped some since). A read before a schema change the lake already follows that changed or added a column
        raises ``SchemaChangedError`` (the chunk is read again): the lake's columns would null or cast what the source
        changed in place (an added column's DEFAULT, a renamed column's values) for rows the statement's own rewrite
        of ``current`` never held. Checked again at each commit attempt: the tail may follow a statement meanwhile."""
        if same_column_set(source, self.source):
            return False
        if self._last_read_at(chunk_id, hw):  # before the lake takes the columns of a read it refuses
            raise self._refused_at_its_hw(chunk_id, hw)
        if self.evolve(source, hw):
            return True
        types = dict(zip(source.names, source.types))
        if all(types.get(f.name) == f.type for f in self.source):
            return False
        raise SchemaChangedError(f"chunk {chunk_id} of {self.table} was read at {hw}, before the schema change at "
                                 f"{self.schema_position()} that the lake already follows: reading the chunk again "
                                 f"with the columns in force now")

    def _check_plan(self, current, chunk_id: int, planned_at: SourcePosition | None) -> None:
        """Refuse a read of chunk ``chunk_id`` of the plan made at ``planned_at`` when ``current`` (at the version a
        commit is made from) started anew for a later plan: that plan's chunk of this number holds other keys.
        Checked again at each attempt: a restart committed since conflicts with the attempt's commit."""
        restarted = _version_position(app_version(current, RESTART_APP))
        if planned_at is not None and restarted is not None and restarted > planned_at.boundary():
            raise DblogError(f"chunk {chunk_id} of {self.table} was read under its plan of {planned_at}, which the "
                             f"table's new plan at {restarted} replaced (a new key: other chunk ranges): nothing of "
                             f"this read was written to current; the new plan's chunks are read by the tail, or "
                             f"read them with dblog resnapshot")

    def _first_read_once(self, chunk_id: int, hw: SourcePosition, rows: pa.Table,
                         planned_at: SourcePosition | None = None) -> bool | None:
        """A chunk's first read (nothing of it in ``current``, no tail batch yet) whose columns are the
        lake's: delta-rs writes it to the changelog once, and the same file is added to ``current``
        (``store.shared_file``) by a commit recording the chunk's HW. Returns None when it does not apply
        (the caller writes each table), True when both tables took the file, False when the changelog took
        it but ``current`` did not (another read of the chunk committed first: the caller's replace merges)."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError

        from airflow_provider_dblog.store import shared_file

        # the commit to ``current`` is made from the version checked here: a read of the chunk committed
        # since then conflicts on its app transaction (Delta's check), instead of going unseen
        current, changelog, columns = self.current(), self.changelog(), self.current_schema
        self._check_plan(current, chunk_id, planned_at)
        if (not rows.num_rows or not shared_file.shareable(self.current_uri)
                or not self._takes_first_read(current, chunk_id, columns)
                or not same_columns(delta_schema(changelog), self.changelog_schema)
                or not same_columns(rows.schema, self.changelog_schema)):
            return None

        adds = self._append_once(f"appending chunk {chunk_id} to {self.changelog_uri}", rows)
        if not adds:
            return False
        actions = shared_file.copy_into(adds, self.changelog_uri, self.current_uri, {"_chunk": str(int(chunk_id))},
                                        ("_kind", "_before", "_chunk"))
        commit = CommitProperties(app_transactions=[Transaction(chunk_app(chunk_id), hw.boundary().to_version()),
                                                    *touched([chunk_id], hw)])
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                shared_file.commit_added(current, actions, ["_chunk"], commit)
                return True
            except CommitFailedError:
                # another commit came first: a read of this chunk or a tail batch (both carry the chunk's touch:
                # the caller's replace merges), or one that leaves the first read standing (another chunk's
                # commit, a second writer creating the table at the same moment: a metadata change): commit again
                current = self.current()
                self._check_plan(current, chunk_id, planned_at)
                if not self._takes_first_read(current, chunk_id, columns):
                    return False
                time.sleep(min(0.05 * attempt, 1.0))
        return False

    def _read_again_at_its_hw(self, chunk_id: int, hw: SourcePosition, rows: pa.Table) -> bool:
        """True when ``current`` records a read of the chunk at this very HW and the changelog holds the same rows
        there: nothing was binlogged between the two reads (an idle server), so this read adds nothing (its rows
        again at the same ``_pos``). Rows that differ there changed without a binlog event (``sql_log_bin=0``, a
        restored backup): this read cannot replace them, as its rows would tie with the last read's at one ``_pos``
        (a replay could take either, and ``current`` keeps the older), so it stops in one line instead.

        One difference is no such change: the read equals the last read's own rows, and the replay holds more keys.
        A tail behind that read wrote changes below its HW since (``current`` skips them), among them rows that a
        TRUNCATE or a partition detached before the HW removed with no row event: only a read's delete rows end
        them. This read, at the same HW, writes those (the TRUNCATE's own re-read on an idle server)."""
        if not self._last_read_at(chunk_id, hw):
            return False
        names = list(self.source.names)
        read = table_checksum(conform(rows.select([n for n in names if n in rows.schema.names]), self.source), names)
        held = self._replayed(chunk_id, hw)
        if held is not None and read.matches(table_checksum(held, names)):
            return True
        last = self._rows_read_at(chunk_id, hw)
        if held is None or last is None or not read.matches(table_checksum(last, names)):
            raise self._refused_at_its_hw(chunk_id, hw)
        deletes = self._removals(chunk_id, hw, rows)
        if deletes is not None:
            self._append_once(f"appending chunk {chunk_id}'s removals to {self.changelog_uri}", deletes)
        return True

    def _rows_read_at(self, chunk_id: int, hw: SourcePosition) -> pa.Table | None:
        """The rows (the source's columns) that the chunk's reads at ``hw`` wrote to the changelog (once per key: a
        read that lost a race wrote them too); None when the changelog lacks a column of the source's."""
        changelog = self.changelog()
        names = list(self.source.names)
        if any(n not in delta_schema(changelog).names for n in names):
            return None
        at = ((pc.field("_chunk") == chunk_id) & (pc.field("_pos") == hw.as_snapshot().encode())
              & (pc.field("_op") == "r"))
        read = changelog.to_pyarrow_dataset().to_table(columns=[*names, "_pos"], filter=at)
        return conform(latest_per_key(read, self.keys).select(names), self.source)  # one row per key: two reads

    def _last_read_at(self, chunk_id: int, hw: SourcePosition) -> bool:
        """Whether ``current`` records the chunk's last read at this very HW (nothing logged since)."""
        recorded = _version_position(app_version(self.current(), chunk_app(chunk_id)))
        return recorded is not None and recorded == hw.boundary()

    def _refused_at_its_hw(self, chunk_id: int, hw: SourcePosition) -> DblogError:
        return DblogError(f"chunk {chunk_id} of {self.table} differs from its last read at {hw}, and nothing was "
                          f"logged since (a change without a binlog event, e.g. sql_log_bin=0, or the lake's columns "
                          f"changed between the two reads): a read at that same position cannot replace it; read it "
                          f"again (or run the tail again) once the source logged any write (on MySQL/MariaDB, FLUSH BINARY LOGS "
                          f"moves the position without one)")

    def _replayed(self, chunk_id: int, hw: SourcePosition) -> pa.Table | None:
        """The chunk's live rows (the source's columns) that replaying the changelog up to ``hw`` gives; None when
        nothing of it can be in the lake yet (a first read)."""
        current = self.current()
        if app_version(current, chunk_app(chunk_id)) is None and app_version(current, TAIL_APP) is None:
            return None  # nothing of the chunk can be in the lake yet (a first read)
        changelog = self.changelog()
        have = [n for n in self.source.names if n in delta_schema(changelog).names]
        window = (pc.field("_chunk") == chunk_id) & (pc.field("_pos") <= hw.as_snapshot().encode())
        restarted = _version_position(app_version(current, RESTART_APP))
        if restarted is not None:  # a chunk of the same number in an earlier plan held other keys
            window &= pc.field("_pos") >= restarted.as_snapshot().encode()
        history = changelog.to_pyarrow_dataset().to_table(columns=[*have, "_pos", "_op"], filter=window)
        latest = latest_per_key(history, self.keys)
        return conform(latest.filter(pc.not_equal(latest["_op"], "d")).select(have), self.source)

    def _removals(self, chunk_id: int, hw: SourcePosition, rows: pa.Table) -> pa.Table | None:
        """A delete row (changelog schema) at a re-read's HW for every key that replaying the changelog up to
        that HW leaves live in the chunk but the read does not hold (a TRUNCATE, rows removed behind the
        binlog's back, a delete the tail never had to write because a chunk read covered it), so that
        replaying the changelog gives what ``current`` holds; None when there is none. A key a later change
        brings back keeps that later change (its ``_pos`` is greater)."""
        held = self._replayed(chunk_id, hw)
        if held is None or not held.num_rows:
            return None
        gone = held.join(conform(rows.select(list(self.keys)), pa.schema([self.source.field(k) for k in self.keys])),
                         list(self.keys), join_type="left anti")
        if not gone.num_rows:
            return None
        log.info("lake: chunk %d of %s: %d keys the read at %s no longer holds get a delete row in the changelog",
                 chunk_id, self.table, gone.num_rows, hw)
        return position_rows(gone, self.source, "d", hw.as_snapshot().encode(),
                             pa.array([chunk_id] * gone.num_rows, pa.int32()), before=True)

    @staticmethod
    def _takes_first_read(current, chunk_id: int, columns: pa.Schema) -> bool:
        """Whether ``current`` (at the version read) can take a chunk's first read as a plain add: nothing
        of the chunk and no tail batch in it yet, and its columns ``columns``."""
        return (app_version(current, chunk_app(chunk_id)) is None
                and app_version(current, TAIL_APP) is None
                and same_columns(delta_schema(current), columns))

    def _append_once(self, what: str, rows: pa.Table) -> list[dict] | None:
        """Append a chunk's rows to the changelog exactly once, although a commit can land and still raise
        (an S3 PUT retried after its answer was lost finds its own log entry there): the commit carries a
        mark, and a retry first looks for it in the log entries written since the first attempt. Returns
        the commit's add actions."""
        from deltalake import CommitProperties

        from airflow_provider_dblog.store import shared_file

        mark = uuid.uuid4().hex
        commit = CommitProperties(custom_metadata={shared_file.MARK: mark})
        since = None  # the first version an attempt can have made (None: no attempt yet)

        def attempt():
            nonlocal since
            changelog = self.changelog()
            if since is None:
                since = changelog.version() + 1
            elif (landed := shared_file.marked_adds(self.changelog_uri, mark, since, changelog.version())) is not None:
                return landed
            made = self._append(rows, commit, checked=changelog).version()
            return shared_file.marked_adds(self.changelog_uri, mark, since, made)

        return _retrying(what, attempt)

    def _append(self, rows: pa.Table, commit=None, checked=None, small: bool = False):
        """Append to the changelog; columns it does not have yet are added (it keeps dropped ones).
        ``checked``: the changelog at the version the caller read (its recorded position, its version), so
        a commit made since conflicts (Delta's check) instead of going unseen; by default the latest version.
        Returns the changelog's DeltaTable, at the version this append made; ``small``: a micro-batch's changes
        (``_append_file``), and the DeltaTable is returned at the version before the append."""
        from deltalake import write_deltalake
        from deltalake.exceptions import CommitFailedError

        changelog = checked if checked is not None else self.changelog()
        if self._widen_for(rows, changelog):
            if checked is not None:  # what the caller checked is older than the rewrite: check again
                raise CommitFailedError("the changelog's columns were widened: check its position again")
            changelog = self.changelog()
        have = delta_schema(changelog)
        added = [f for f in rows.schema if f.name not in have.names]
        rows = conform(rows, pa.schema([*have, *added]))  # columns it keeps but these rows lack: null
        if small and rows.num_rows and not added:
            return self._append_file(changelog, rows, commit)
        write_deltalake(changelog, rows, mode="append", storage_options=self.options,
                        writer_properties=writer_properties(rows.schema), commit_properties=commit,
                        schema_mode="merge" if added else None)
        return changelog

    def _append_file(self, changelog, rows: pa.Table, commit):
        """``_append`` of rows in the changelog's columns: one staged file added by one commit (half the CPU
        of delta-rs's writer for a micro-batch's few rows, the per-table cost of a whole-database tail).
        Its statistics cover the metadata and key columns (what the lake's own reads filter on; a compaction
        by ``maintain`` writes them for every column). Not for a chunk's rows: ``current`` shares their file,
        and readers of it filter on any column. Returns the changelog at the version before this commit (the
        next ``changelog()`` reads the log entries since)."""
        from deltalake.exceptions import CommitFailedError

        file = stage(self.changelog_uri, rows, stats_columns=key_ranges.bounded_columns(rows.schema, self.keys))
        try:
            changelog.create_write_transaction(add_actions([file]), "append", changelog.schema(),
                                               commit_properties=commit)
        except CommitFailedError:  # refused (a conflict): no version names the file. Any other failure may
            discard(self.changelog_uri, [file])  # have committed it (a lost answer): vacuum removes it if not
            raise
        return changelog

    def _widen_for(self, rows: pa.Table, changelog) -> bool:
        """Widen the changelog where ``rows`` have a wider type than it (True if it was rewritten)."""
        have = delta_schema(changelog)
        if not any(f.name in have.names and have.field(f.name).type != f.type for f in rows.schema):
            return False
        return self._widen_changelog(source_columns(rows.schema))

    def _replace_chunk(self, chunk_id: int, hw: SourcePosition, rows: pa.Table, later: "_ChunkChanges",
                       planned_at: SourcePosition | None = None, keep_columns: bool = False) -> bool:
        current = self.current()
        self._check_plan(current, chunk_id, planned_at)
        while True:
            recorded = _version_position(app_version(current, chunk_app(chunk_id)))
            if recorded is not None and recorded >= hw.boundary():
                return False
            if keep_columns or not self._evolved_for(chunk_id, hw, source_columns(rows.schema)):
                break
            current = self.current()  # the version with the read's columns (the write's conflict check starts there)
        if recorded is None and app_version(current, TAIL_APP) is None:
            # the first read of the chunk before any tail batch: nothing of it can be in ``current`` yet (a tail
            # batch committed meanwhile conflicts with the overwrite of the partition: this is retried)
            self._write_chunk(current, chunk_id, conform(rows, self.current_schema), hw)
        else:
            self._write_read(current, chunk_id, rows, later, hw)
        return True

    def _write_read(self, current, chunk_id: int, rows: pa.Table, later: "_ChunkChanges", hw: SourcePosition) -> None:
        """The chunk's rows after a read (any columns of the changelog's): the read, overlaid with the later changes
        of its keys (``current`` may hold them already); keys in neither are gone."""
        changes = later.read()
        state = latest_per_key(pa.concat_tables([conform(rows, changes.schema), changes]), self.keys)
        live = state.filter(pc.not_equal(state["_op"], "d")).select(self.current_schema.names)
        self._write_chunk(current, chunk_id, live, hw)

    def _write_chunk(self, current, chunk_id: int, live: pa.Table, hw: SourcePosition) -> None:
        """The chunk's rows written over its partition of ``current`` in one commit recording its HW (delta-rs's
        overwrite with a predicate on the partition: it removes the partition's files). Its conflict check covers
        every commit since the version read that touched the chunk (a tail batch's rewrite of its files, a MERGE's
        inserts into it, another read of it) and no other chunk's: a lost race costs this short attempt only. A
        MERGE of the chunk took longer than a fast tail's trigger interval and lost every race to it, and a commit of
        files (``create_write_transaction``) conflicts with any removal and with no insert. Both commits carry the
        chunk's ``touch_app``: a tail update that changed no row of the chunk but moved past a change of it (a delete
        of a key ``current`` lacks yet) conflicts too."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        write_deltalake(current, live.sort_by([(k, "ascending") for k in self.keys]), mode="overwrite",
                        predicate=f"_chunk = {int(chunk_id)}", partition_by=["_chunk"], storage_options=self.options,
                        commit_properties=CommitProperties(app_transactions=[
                            Transaction(chunk_app(chunk_id), hw.boundary().to_version()), *touched([chunk_id], hw)]),
                        writer_properties=self.current_writer)

    # ---- tail micro-batches ----
    def commit_stream(self, rows: pa.Table, end: SourcePosition, update_current: bool = True,
                      staged: Sequence[StagedFile] = ()) -> str:
        """Commit a micro-batch ending at ``end`` (changes in changelog schema, and ``staged`` files of more
        of them, ``store.staged``: all in one commit). Only changes after the position the changelog records
        are appended, so a replayed batch, or one another tail committed first, adds nothing twice. Returns
        "committed", or "replayed" when the lake already had it all. ``update_current`` False leaves
        ``current`` to a later ``update_current()`` (a merge interval)."""
        staged = list(staged)
        if staged and rows.num_rows:  # the rows in memory join the staged ones: one commit adds them all
            staged.append(stage(self.changelog_uri, rows))
            rows = rows.slice(0, 0)
        outcome = _retrying(f"appending changes to {self.changelog_uri}",
                            lambda: self._append_changes(rows, end, staged))
        if update_current:
            self.update_current(end)
        return outcome

    def takes_staged(self, schemas: Sequence[pa.Schema]) -> bool:
        """Whether files of these columns can be added to the changelog as they are: each column is one the
        changelog has, of its type (a column it has and a file lacks reads as null)."""
        have = delta_schema(self.changelog())
        return all(f.name in have.names and plain(pa.schema([f])).field(0).type == have.field(f.name).type
                   for schema in schemas for f in schema)

    def update_current(self, end: SourcePosition | None = None) -> None:
        """Apply the changelog's changes up to ``end`` (default: as far as the changelog goes) to ``current``."""
        end = end or self.tail_position()
        if end is not None:
            _retrying(f"updating the current state of {self.table}", lambda: self._apply_changes(end))

    def _append_changes(self, rows: pa.Table, end: SourcePosition, staged: list[StagedFile]) -> str:
        from deltalake import CommitProperties, Transaction

        changelog = self.changelog()
        recorded = _version_position(app_version(changelog, TAIL_APP))
        if recorded is not None and recorded >= end.boundary():
            discard(self.changelog_uri, staged)
            return "replayed"
        commit = CommitProperties(app_transactions=[Transaction(TAIL_APP, end.boundary().to_version())])
        if staged and recorded is not None and recorded.as_snapshot().encode() >= min(_lowest_pos(f) for f in staged):
            # another tail committed part of this range meanwhile (rare): the staged rows are filtered in memory
            rows = pa.concat_tables([conform(t, self.changelog_schema) for t in read_staged(self.changelog_uri, staged)])
            discard(self.changelog_uri, staged)
            staged.clear()
        if staged:
            # added from the version whose position was read: a batch another tail committed since then
            # conflicts on ``dblog-tail`` (Delta's check of app transactions) and this one is retried
            changelog.create_write_transaction(add_actions(staged), "append", changelog.schema(),
                                               commit_properties=commit)
            return "committed"
        if recorded is not None:
            rows = rows.filter(pc.greater(rows["_pos"], recorded.as_snapshot().encode()))
        # appended from the version whose position was read: a batch another tail committed since then
        # conflicts on ``dblog-tail`` and this one is retried from a fresh read
        before = changelog.version()
        self._append(rows, commit, checked=changelog, small=True)
        # the version this append made if no other commit came before it or right after it: ``current``'s
        # update checks that the changelog is at that version, else it reads the changes
        self._appended = (recorded, end.boundary(), before + 1, rows)
        return "committed"

    def _apply_changes(self, end: SourcePosition) -> None:
        """Bring ``current`` from its recorded tail position to ``end`` with the changelog's changes: the
        files of ``current`` whose key range holds a changed key are rewritten (``_apply_to_files``), in one
        commit with the tail position; past ``memory_bytes`` of changes, chunk by chunk from a spill."""
        current = self.current()
        applied = _version_position(app_version(current, TAIL_APP))
        if applied is not None and applied >= end:
            return
        window = [pc.field("_pos") <= end.as_snapshot().encode()]
        if applied is not None:
            window.append(pc.field("_pos") > applied.as_snapshot().encode())
        appended = self._just_appended(applied, end)
        if appended is not None:  # the window is what this process just appended: no read of the changelog
            changes = latest_per_key(conform(appended, self.current_schema), self.keys)
        else:
            if self.apply_mode != "merge" and self._window_bytes(window) > self.memory_bytes:
                self._apply_by_chunk(current, window, end)
                return
            changes = latest_per_key(self._changes(*window), self.keys)
        if changes.num_rows == 0:  # nothing to change: record the position alone
            self._empty_commit(current, TAIL_APP, end)
            return
        hws = {c: _version_position(app_version(current, chunk_app(c)))
               for c in pc.unique(changes["_chunk"]).to_pylist()}
        if self.apply_mode == "merge" or any(hw is None for hw in hws.values()):
            # a chunk never read (no HW to merge the changes against): delta-rs's MERGE
            self._merge_changes(current, changes, hws, end)
            return
        self._apply_to_files(current, changes, hws, end)

    def _merge_changes(self, current, changes: pa.Table, hws: dict, end: SourcePosition) -> None:
        """The changes applied by one delta-rs MERGE (copy-on-write: it rewrites every file of the chunks
        the changes fall in; the layout before key-range files, kept for never-read chunks)."""
        from deltalake import CommitProperties, Transaction

        commit = CommitProperties(app_transactions=[Transaction(TAIL_APP, end.boundary().to_version()),
                                                    *touched(hws, end)])
        chunk_hw = pa.array([(hws[c].as_snapshot().encode() if hws[c] else "") for c in changes["_chunk"].to_pylist()],
                            pa.string())
        source = changes.select(self.current_schema.names).append_column("_chunk_hw", chunk_hw)
        columns = {quote(n): f"s.{quote(n)}" for n in self.current_schema.names}
        (current.merge(source, self.key_match, source_alias="s", target_alias="t", commit_properties=commit,
                       writer_properties=self.current_writer)
         .when_matched_delete("s._op = 'd' AND s._pos > t._pos")
         .when_matched_update(columns, "s._op <> 'd' AND s._pos > t._pos")
         .when_not_matched_insert(columns, "s._op <> 'd' AND s._pos > s._chunk_hw")
         .execute())

    def _apply_to_files(self, current, changes: pa.Table, hws: dict, end: SourcePosition) -> None:
        """The changes (one per key) applied to the files of ``current`` they touch (``_rewrite_chunk``): one
        commit removes those files and adds their rewrites, records ``end`` as ``dblog-tail`` and carries
        each touched chunk's ``touch_app``, so a chunk read committed meanwhile conflicts with it (Delta's check
        of app transactions) and this is retried from a fresh read; a compaction or another update that
        removed one of the files meanwhile conflicts too (Delta's check of removed files)."""
        from deltalake import Transaction

        started = time.monotonic()
        files = key_ranges.range_files(current, self._bounded())
        removes, adds = [], []
        versions = [Transaction(TAIL_APP, end.boundary().to_version())]
        with ThreadPoolExecutor(REWRITE_THREADS) as pool:
            running: list = []  # the rewrites of every chunk on one pool: a chunk of one touched file waits for none
            for chunk_id in sorted(hws):
                removed, rewrites = self._rewrite_chunk(current, chunk_id,
                                                        changes.filter(pc.equal(changes["_chunk"], chunk_id)),
                                                        hws[chunk_id], [f for f in files if f.chunk == chunk_id])
                removes += removed
                running += [pool.submit(rewrite) for rewrite in rewrites]
                del rewrites  # the futures hold the chunk's rewrites (and its cache of files) until they ran
                adds += _finished(running, REWRITES_IN_FLIGHT)
            adds += _finished(running, 0)
        self._commit_files(current, removes, adds, [*versions, *touched(hws, end)])
        self.rewritten = (len(removes), sum(f.rows for f in adds))
        log.debug("lake: %s: current brought to %s, %d of %d files rewritten (%d rows) in %.2fs", self.table, end,
                  len(removes), len(files), self.rewritten[1], time.monotonic() - started)

    def _bounded(self) -> list[str]:
        return key_ranges.bounded_columns(self.current_schema, self.keys)

    def _commit_files(self, current, removes: list, adds: list, versions: list) -> None:
        from deltalake import CommitProperties

        current.create_write_transaction([*add_actions(adds), *removes], "append", current.schema(),
                                         partition_by=["_chunk"],
                                         commit_properties=CommitProperties(app_transactions=versions))

    def _rewrite_chunk(self, current, chunk_id: int, changes: pa.Table, hw: SourcePosition | None,
                       files: list) -> tuple[list, list[Callable[[], list[StagedFile]]]]:
        """The files of one chunk that ``changes`` (one per key, of this chunk) touch, to rewrite: the remove
        actions of the old files and the rewrites to run (each stages its new files; they read, sort and encode
        Parquet, which release the GIL, so the caller runs them on a few threads). Files whose range cannot hold
        a changed key are not read; of those that can, only the key columns are read to find where each key
        lives; a file is rewritten when a key lives in it or a new key goes to it (``key_ranges``). New keys a
        change may not insert (deletes, changes at or before the chunk's HW: ``merge_changes``) go nowhere."""
        from deltalake.transaction import RemoveAction

        bounded = self._bounded()
        read = _file_reader(self.current_uri, self.current_schema, chunk_id)
        keys = changes.select(list(self.keys))
        owner = np.full(changes.num_rows, -1, np.int64)  # the file each change's key lives in or goes to
        held_by = [key_ranges.holds(f, keys, bounded) for f in files]
        whole: dict[int, pa.Table] = {}  # small files are read whole once, for their keys and their rewrite

        def rows_of(i: int, columns: list[str] | None = None) -> pa.Table:
            if files[i].rows > WHOLE_READ_ROWS:
                return read(files[i].path, columns)
            if i not in whole:
                whole[i] = read(files[i].path)
            return whole[i] if columns is None else whole[i].select(columns)

        for i, (f, mask) in enumerate(zip(files, held_by)):
            if not pc.any(mask).as_py():
                continue
            have = _key_table(rows_of(i, list(self.keys)), keys.schema)
            probe = keys.filter(mask).append_column("_i", pc.indices_nonzero(mask).cast(pa.int64()))
            owner[probe.join(have, list(self.keys), join_type="left semi")["_i"].to_numpy()] = i
        new = np.flatnonzero(owner < 0)
        if new.size:
            hw_pos = hw.as_snapshot().encode() if hw else ""
            inserts = pc.and_(pc.not_equal(changes["_op"], "d"), pc.greater(changes["_pos"], hw_pos))
            new = new[inserts.to_numpy(zero_copy_only=False)[new]]
        if new.size and files:  # in the first file whose range can hold the key, else the nearest below it
            inside = np.column_stack([mask.to_numpy(zero_copy_only=False)[new] for mask in held_by])
            below = key_ranges.nearest_below(files, keys.take(new), bounded)
            owner[new] = np.where(inside.any(axis=1), inside.argmax(axis=1), below)
        now = int(time.time() * 1000)
        partition = {"_chunk": str(chunk_id)}
        owners = pa.array(owner)

        def rewrite(i: int) -> list[StagedFile]:
            data = conform(rows_of(i), self.current_schema)
            merged = merge_changes(data, changes.filter(pc.equal(owners, i)), self.keys, {chunk_id: hw})
            return self._stage_sorted(merged, partition)

        touched = np.unique(owner[owner >= 0]).tolist()
        rewrites = [functools.partial(rewrite, i) for i in touched]
        removes = [RemoveAction(files[i].path, True, now, files[i].size, partition) for i in touched]
        if not files and new.size:
            first = changes.take(new)
            rewrites.append(lambda: self._stage_sorted(first.filter(pc.not_equal(first["_op"], "d")), partition))
        return removes, rewrites

    def _stage_sorted(self, rows: pa.Table, partition: dict) -> list[StagedFile]:
        """``rows`` of one chunk sorted by key, as key-range files with the key in their statistics."""
        if not rows.num_rows:
            return []
        rows = rows.select(self.current_schema.names).sort_by([(k, "ascending") for k in self.keys])
        return [stage(self.current_uri, piece, partition, self._bounded())
                for piece in key_ranges.pieces(rows, self.file_rows)]

    def _just_appended(self, applied: SourcePosition | None, end: SourcePosition) -> pa.Table | None:
        """The changes of ``(applied, end]`` when they are exactly the rows this object's last append wrote (that
        append started at ``applied`` and ended at ``end``, and the changelog has no version after it: no chunk
        read, schema change or other tail wrote since), in memory and small enough; else None (read them)."""
        appended, self._appended = self._appended, None
        if appended is None:
            return None
        since, until, version, rows = appended
        if since != applied or until != end.boundary() or rows.nbytes > self.memory_bytes:
            return None
        if log_has(self.changelog_uri, version + 1):  # another commit came right after it (or before it)
            return None
        changes = pc.not_equal(rows["_op"], "r")  # most batches have no re-read rows: nothing to filter
        return rows if pc.all(changes, skip_nulls=False).as_py() else rows.filter(changes)

    def _window_bytes(self, window: list) -> int:
        """About how much memory the changes in ``window`` take in ``current``'s columns (a count of rows,
        which reads only ``_op`` and ``_pos``)."""
        expression = pc.field("_op") != "r"
        for f in window:
            expression = expression & f
        return self.changelog().to_pyarrow_dataset().count_rows(filter=expression) * row_bytes(self.current_schema)

    def _apply_by_chunk(self, current, window: list, end: SourcePosition) -> None:
        """``_apply_changes`` for more changes than ``memory_bytes``: the changes are sorted into a file per
        chunk on local disk in one pass over the changelog, then in each touched chunk of ``current`` the
        files its changes touch are rewritten (``_rewrite_chunk``), and one commit removes the old files and
        adds the new ones, so a reader sees all the changes or none. Memory holds one chunk's changes and
        a file per rewriting thread (``REWRITE_THREADS``) at a time. The commit carries each touched chunk's ``touch_app``: a chunk
        read committed meanwhile conflicts with it (Delta's check of app transactions) and this is retried."""
        import tempfile

        from deltalake import Transaction

        expression = pc.field("_op") != "r"
        for f in window:
            expression = expression & f
        changelog = self.changelog()
        have = column_names(changelog)
        names = [n for n in self.current_schema.names if n in have]
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="dblog-apply-") as spill:
            writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
            try:
                # one file at a time, small batches: the scan's read-ahead would otherwise hold several
                # whole row groups of a huge transaction's files
                for batch in changelog.to_pyarrow_dataset().to_batches(columns=names, filter=expression,
                                                                        batch_size=SCAN_BATCH_ROWS, batch_readahead=1,
                                                                        fragment_readahead=1):
                    part = conform(pa.Table.from_batches([batch]), self.current_schema)
                    for chunk_id in pc.unique(part["_chunk"]).to_pylist():
                        if chunk_id not in writers:
                            writers[chunk_id] = pa.ipc.new_file(f"{spill}/{chunk_id}.arrow", self.current_schema)
                        writers[chunk_id].write_table(part.filter(pc.equal(part["_chunk"], chunk_id)))
            finally:
                for writer in writers.values():
                    writer.close()
            files = key_ranges.range_files(current, self._bounded())
            removes, adds, versions = [], [], [Transaction(TAIL_APP, end.boundary().to_version())]
            with ThreadPoolExecutor(REWRITE_THREADS) as pool:
                running: list = []
                for chunk_id in sorted(writers):
                    with pa.memory_map(f"{spill}/{chunk_id}.arrow") as source:
                        changes = latest_per_key(pa.ipc.open_file(source).read_all(), self.keys)
                    hw = _version_position(app_version(current, chunk_app(chunk_id)))
                    removed, rewrites = self._rewrite_chunk(current, chunk_id, changes, hw,
                                                            [f for f in files if f.chunk == chunk_id])
                    removes += removed
                    running += [pool.submit(rewrite) for rewrite in rewrites]
                    del rewrites
                    adds += _finished(running, 0)  # memory holds one chunk's changes at a time
        self._commit_files(current, removes, adds, [*versions, *touched(writers, end)])
        log.info("lake: %s: current brought to %s chunk by chunk (%d chunks, %d files rewritten in %.1fs)", self.table,
                 end, len(writers), len(removes), time.monotonic() - started)

    def _changes(self, *filters, schema: pa.Schema | None = None, changelog=None) -> pa.Table:
        """Changelog rows that are changes (not snapshot rows), in current-state columns (or ``schema``),
        matching ``filters``; of ``changelog`` (a version already opened) or the latest one."""
        schema = schema or self.current_schema
        expression = pc.field("_op") != "r"
        for f in filters:
            expression = expression & f
        changelog = self.changelog() if changelog is None else changelog
        have = column_names(changelog)
        data = changelog.to_pyarrow_dataset().to_table(columns=[n for n in schema.names if n in have],
                                                       filter=expression)
        return conform(data, schema)

    # ---- maintenance ----
    def maintain(self, retention_hours: float) -> dict:
        """Compact small files, write a log checkpoint, and delete files no version newer than
        ``retention_hours`` needs, on both tables (a compaction that races a tail commit is retried); a table
        made before ``CHECKPOINT_INTERVAL`` was set at creation gets it.
        ``current``'s compaction keeps its files key ranges (``_compact_current``)."""
        out = {}
        for name, open_table in (("current", self.current), ("changelog", self.changelog)):
            compact = self._compact_current if name == "current" else lambda: self.changelog().optimize.compact()
            metrics = _retrying(f"compacting {name} of {self.table}", compact)
            table = open_table()
            if (table.metadata().configuration or {}).get("delta.checkpointInterval") is None:
                # a table made before the interval was set at creation: its log is checkpointed as often now
                _retrying(f"setting the checkpoint interval of {name} of {self.table}",
                          lambda: open_table().alter.set_table_properties(TABLE_PROPERTIES))
                table = open_table()
            table.create_checkpoint()
            # full: also the files no log entry names (a write whose commit failed, or a retried write),
            # like Spark's VACUUM; files younger than the retention (whole hours, rounded up) are kept,
            # so a write in flight is safe
            removed = table.vacuum(retention_hours=math.ceil(retention_hours), enforce_retention_duration=False,
                                   dry_run=False, full=True)
            out[name] = {"version": table.version(), "files_added": metrics.get("numFilesAdded"),
                         "files_removed": metrics.get("numFilesRemoved"), "vacuumed": len(removed)}
        return out

    def _compact_current(self) -> dict:
        """Merge neighbouring small files of ``current`` into key ranges of about ``file_rows`` (delta-rs's
        compaction would bin-pack a chunk's files into one, and the next update would rewrite it all);
        one commit, no data change. A tail update that removed one of the files meanwhile conflicts with it
        (Delta's check of removed files) and the compaction is retried."""
        from deltalake.transaction import RemoveAction

        bounded = self._bounded()
        current = self.current()
        if not bounded:  # nothing bounds a file's keys: every update reads the whole chunk anyway
            return current.optimize.compact()
        groups = key_ranges.compaction_groups(key_ranges.range_files(current, bounded), self.file_rows)
        removes, adds = [], []
        now = int(time.time() * 1000)
        for group in groups:
            chunk_id = group[0].chunk
            read = _file_reader(self.current_uri, self.current_schema, chunk_id)
            partition = {"_chunk": str(chunk_id)}
            rows = pa.concat_tables([read(f.path) for f in group])
            adds += self._stage_sorted(rows, partition)
            removes += [RemoveAction(f.path, False, now, f.size, partition) for f in group]
        if removes:
            # dataChange false: readers of the table's changes (streaming, CDF) see no change
            current.create_write_transaction([*add_actions(adds, data_change=False), *removes], "append",
                                             current.schema(), partition_by=["_chunk"])
        return {"numFilesAdded": len(adds), "numFilesRemoved": len(removes)}

    # ---- reading ----
    def read_current(self, columns: Sequence[str] | None = None) -> pa.Table:
        return self.current().to_pyarrow_dataset().to_table(columns=list(columns) if columns else None)


class _ChunkChanges:
    """The changelog's changes of one chunk after a read's HW, in ``current``'s columns: read in full once, then from
    the changelog's files added since only (the tail's appends while a chunk's commit is retried after losing a race
    to it): a retry costs milliseconds, not a scan of the changelog (≈0.7 s on a loaded machine, longer than the
    interval between a fast tail's commits, so every retry lost again)."""

    def __init__(self, lake: LakeTables, chunk_id: int, hw: SourcePosition):
        self.lake = lake
        self.filters = (pc.field("_chunk") == chunk_id, pc.field("_pos") > hw.as_snapshot().encode())
        self.window = (pc.field("_op") != "r") & self.filters[0] & self.filters[1]  # as ``LakeTables._changes``
        self.seen: set[str] = set()
        self.rows: pa.Table | None = None

    def read(self) -> pa.Table:
        """Every such change the changelog holds now (a file another writer rewrote, e.g. a compaction, is read
        again: its rows are the same changes, and ``latest_per_key`` takes each once)."""
        changelog = self.lake.changelog()  # one version: its files are the ones listed and read
        schema = self.lake.current_schema
        paths = set(pa.table(changelog.get_add_actions(flatten=True))["path"].to_pylist())
        if self.rows is None:
            self.rows = self.lake._changes(*self.filters, changelog=changelog)
        else:
            new = sorted(paths - self.seen)
            self.rows = pa.concat_tables([conform(self.rows, schema), *(self._file(p, schema) for p in new)])
        self.seen = paths  # ``current``'s columns may have changed since the last read, files or not
        return self.rows

    def _file(self, path: str, schema: pa.Schema) -> pa.Table:
        import pyarrow.parquet as pq

        store = Files(self.lake.changelog_uri, "--sink")
        parquet = pq.ParquetFile(store.path_of(unquote(path)), filesystem=store.fs)
        have = set(parquet.schema_arrow.names)
        rows = parquet.read(columns=[n for n in schema.names if n in have])
        return conform(rows.filter(self.window), schema)


class PinnedCurrent:
    """``current`` at one version, with the positions it records: what a verify compares stays one
    consistent state while tails and chunk reads keep committing newer versions."""

    def __init__(self, sink: str, table: str, storage_options: dict | None = None):
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            self.table = DeltaTable(current_uri(sink, table), storage_options=storage_options)
        except TableNotFoundError:
            raise DblogError(f"the lake has no {current_uri(sink, table)}: snapshot {table} first") from None
        self.version = self.table.version()
        self.columns = source_columns(delta_schema(self.table)).names

    def tail_position(self) -> SourcePosition | None:
        """Every change up to here is in this version (None: no tail batch yet)."""
        return _version_position(app_version(self.table, TAIL_APP))

    def chunk_position(self, chunk_id: int) -> SourcePosition | None:
        """The HW of the chunk's read in this version (None: never read)."""
        return _version_position(app_version(self.table, chunk_app(chunk_id)))

    def chunk_rows(self, chunk_id: int, columns: Sequence[str]) -> pa.Table:
        return self.table.to_pyarrow_dataset().to_table(columns=list(columns), filter=pc.field("_chunk") == chunk_id)


def changelog_changes(sink: str, table: str, columns: Sequence[str], after: SourcePosition | None,
                      upto: SourcePosition, storage_options: dict | None = None) -> pa.Table:
    """The changelog's changes (not snapshot rows) after ``after`` (None: from the start) up to ``upto`` (every row at
    a position's boundary: a PostgreSQL transaction's rows share its commit LSN), in ``_pos`` order: ``columns`` (a
    column the changelog lacks is null), ``_op`` and ``_pos``. What ``current`` lacks while its update lags the
    changelog's commit (a merge interval, a tail killed between the two): ``steps.verify`` brings it forward with
    them, as the tail's next update will."""
    from deltalake import DeltaTable

    changelog = DeltaTable(changelog_uri(sink, table), storage_options=storage_options)
    have = column_names(changelog)
    window = (pc.field("_op") != "r") & (pc.field("_pos") <= upto.as_snapshot().encode())
    if after is not None:
        window &= pc.field("_pos") > after.as_snapshot().encode()
    rows = changelog.to_pyarrow_dataset().to_table(columns=[c for c in columns if c in have] + ["_op", "_pos"],
                                                   filter=window)
    for name in columns:
        if name not in have:
            rows = rows.append_column(name, pa.nulls(rows.num_rows))
    return rows.select([*columns, "_op", "_pos"]).sort_by("_pos")


def chunk_commits(sink: str, table: str, chunk_ids: Sequence[int],
                  storage_options: dict | None = None) -> dict[int, SourcePosition | None]:
    """Per chunk the HW its latest commit to ``current`` recorded (the ``dblog-chunk-N`` app transaction;
    None: never committed), read without creating anything: what the driver checks after a snapshot job."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        current = DeltaTable(current_uri(sink, table), storage_options=storage_options)
    except TableNotFoundError:
        return dict.fromkeys(chunk_ids)
    return {c: _version_position(app_version(current, chunk_app(c))) for c in chunk_ids}


def _finished(running: list, keep: int) -> list[StagedFile]:
    """The staged files of the oldest rewrites (futures) in ``running``, waited for until at most ``keep`` remain."""
    out: list[StagedFile] = []
    try:
        while len(running) > keep:
            out += running.pop(0).result()
    except BaseException:  # one failed: the queued ones are not started (the update commits nothing anyway)
        for future in running:
            future.cancel()
        raise
    return out


def _lowest_pos(file: StagedFile) -> str:
    return json.loads(file.stats).get("minValues", {}).get("_pos", "")


def _file_reader(table_uri: str, schema: pa.Schema, chunk_id: int):
    """A reader of one file of a chunk of ``current`` by its path in the log: its rows in ``schema``
    (``columns``: all by default), the chunk's partition value filled in, a column the file lacks null (as
    Delta readers read a file written before a column was added); a value that does not fit its column's
    type fails the read. Read straight from the file: a pyarrow dataset of the table costs ≈1.3 ms of CPU to
    build per update, more than reading a small file."""
    import pyarrow.parquet as pq

    store = Files(table_uri, "--sink")

    def read(path: str, columns: Sequence[str] | None = None) -> pa.Table:
        names = list(columns) if columns is not None else schema.names
        parquet = pq.ParquetFile(store.path_of(unquote(path)), filesystem=store.fs)
        have = set(parquet.schema_arrow.names)
        rows = parquet.read(columns=[n for n in names if n in have and n != "_chunk"])
        n = rows.num_rows
        out = []
        for name in names:
            field = schema.field(name)
            if name == "_chunk":
                out.append(pa.repeat(pa.scalar(chunk_id, field.type), n))
            elif name not in have:
                out.append(pa.nulls(n, field.type))
            else:
                out.append(rows[name].cast(field.type))
        return pa.Table.from_arrays(out, schema=pa.schema([schema.field(n) for n in names]))
    return read


def _key_table(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([rows[f.name].cast(f.type) for f in schema], schema=schema)


def _version_position(version: int | None) -> SourcePosition | None:
    return None if version is None else SourcePosition.from_version(version)
