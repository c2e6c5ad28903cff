"""The lake's two Delta tables of one captured table, written with delta-rs (no Spark jars needed).

    SINK/DB.TABLE/changelog   append-only: every snapshot row (``_op`` r) and every change (c/u/d)
    SINK/DB.TABLE/current     the live rows, partitioned by ``_chunk``: a plain read shows no deleted row

Commits are exactly-once and order-independent:

* A chunk read appends its rows to the changelog, then replaces its chunk in ``current``: the chunk's
  rows at its high watermark (HW), overlaid with every later change of its keys the changelog already
  holds; keys in the chunk that are in neither are deleted. The commit records the chunk's HW as the app
  transaction ``dblog-chunk-N``; an older HW than the recorded one changes nothing (a slow re-read).
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

import logging
import threading
import time
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.store.atomic import dictionary_columns
from airflow_provider_dblog.store.lake import changelog_schema, changelog_uri, current_schema, current_uri

log = logging.getLogger("dblog")
TAIL_APP = "dblog-tail"
_OPENED = threading.local()  # DeltaTable objects of this thread, by URI
MAX_ATTEMPTS = 30


def chunk_app(chunk_id: int) -> str:
    return f"dblog-chunk-{chunk_id}"


def quote(name: str) -> str:
    """An identifier in delta-rs's SQL (DataFusion): double quotes keep case and odd characters."""
    return '"' + name.replace('"', '""') + '"'


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
    from deltalake.exceptions import CommitFailedError

    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return attempt_fn()
        except CommitFailedError as exc:
            if attempt == MAX_ATTEMPTS:
                raise DblogError(f"{what}: gave up after {attempt} commit conflicts ({str(exc).splitlines()[0]})") from None
            time.sleep(min(0.05 * attempt, 1.0))


class LakeTables:
    """``changelog`` and ``current`` of one captured table."""

    def __init__(self, sink: str, table: str, source: pa.Schema, key_columns: Sequence[str],
                 storage_options: dict | None = None):
        self.table, self.source, self.keys = table, source, tuple(key_columns)
        self.changelog_uri, self.current_uri = changelog_uri(sink, table), current_uri(sink, table)
        self.options = storage_options
        self.changelog_schema, self.current_schema = changelog_schema(source), current_schema(source)
        self.changelog_writer = writer_properties(self.changelog_schema)
        self.current_writer = writer_properties(self.current_schema)
        # the MERGE condition of a key: same chunk partition, same key columns
        self.key_match = " AND ".join(["s._chunk = t._chunk", *(f"t.{quote(k)} = s.{quote(k)}" for k in key_columns)])

    # ---- opening ----
    def _open(self, uri: str, schema: pa.Schema, partition_by: list[str] | None):
        """The table at its latest version: opened once per thread, then brought up to date by reading
        only the log entries added since (opening anew re-reads the whole log: 0.02-0.04 s per chunk)."""
        opened = _OPENED.__dict__.setdefault("tables", {})
        table = opened.get(uri)
        if table is not None:
            table.update_incremental()
            return table
        opened[uri] = table = self._open_or_create(uri, schema, partition_by)
        return table

    def _open_or_create(self, uri: str, schema: pa.Schema, partition_by: list[str] | None):
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        for _ in range(3):
            try:
                return DeltaTable(uri, storage_options=self.options)
            except TableNotFoundError:
                try:
                    return DeltaTable.create(uri, schema, mode="ignore", partition_by=partition_by,
                                             storage_options=self.options)
                except Exception:  # noqa: BLE001 - another writer created it at the same moment: open it
                    continue
        return DeltaTable(uri, storage_options=self.options)

    def changelog(self):
        return self._open(self.changelog_uri, self.changelog_schema, None)

    def current(self):
        return self._open(self.current_uri, self.current_schema, ["_chunk"])

    # ---- positions the lake records ----
    def tail_position(self) -> BinlogPosition | None:
        """How far the tail's changes are in the changelog (None before its first batch)."""
        return _version_position(self.changelog().transaction_version(TAIL_APP))

    # ---- snapshot chunks ----
    def commit_chunk(self, chunk_id: int, hw: BinlogPosition, rows: pa.Table) -> bool:
        """Append the chunk's rows (changelog schema) and replace its chunk in ``current``; False when a
        later read of the chunk is already in ``current`` (this one changes nothing there)."""
        from deltalake import write_deltalake

        _retrying(f"appending chunk {chunk_id} to {self.changelog_uri}", lambda: write_deltalake(
            self.changelog(), rows, mode="append", storage_options=self.options, writer_properties=self.changelog_writer))
        return _retrying(f"replacing chunk {chunk_id} of {self.table}",
                         lambda: self._replace_chunk(chunk_id, hw, rows))

    def _replace_chunk(self, chunk_id: int, hw: BinlogPosition, rows: pa.Table) -> bool:
        from deltalake import CommitProperties, Transaction

        current = self.current()
        recorded = _version_position(current.transaction_version(chunk_app(chunk_id)))
        if recorded is not None and recorded >= hw.boundary():
            return False
        commit = CommitProperties(app_transactions=[Transaction(chunk_app(chunk_id), hw.boundary().to_version())])
        if recorded is None and current.transaction_version(TAIL_APP) is None:
            # the first read of the chunk before any tail batch: nothing of it can be in ``current`` yet,
            # so a plain append (appends of other chunks commute; a concurrent read of this chunk
            # conflicts on the app transaction and is retried as a merge)
            from deltalake import write_deltalake

            write_deltalake(current, rows.select(self.current_schema.names), mode="append",
                            storage_options=self.options, commit_properties=commit,
                            writer_properties=self.current_writer)
            return True
        hw_pos = hw.as_snapshot().encode()
        later = self._changes(pc.field("_chunk") == chunk_id, pc.field("_pos") > hw_pos)
        state = latest_per_key(pa.concat_tables([rows.select(later.schema.names), later]), self.keys)
        live = state.filter(pc.not_equal(state["_op"], "d")).select(self.current_schema.names)
        (current.merge(live, f"t._chunk = {int(chunk_id)} AND {self.key_match}", source_alias="s", target_alias="t", commit_properties=commit,
                       writer_properties=self.current_writer)
         .when_matched_update_all()
         .when_not_matched_insert_all()
         .when_not_matched_by_source_delete(f"t._chunk = {int(chunk_id)}")
         .execute())
        return True

    # ---- tail micro-batches ----
    def commit_stream(self, rows: pa.Table, end: BinlogPosition, update_current: bool = True) -> str:
        """Commit a micro-batch ending at ``end`` (changes in changelog schema). Only changes after the
        position the changelog records are appended, so a replayed batch, or one another tail committed
        first, adds nothing twice. Returns "committed", or "replayed" when the lake already had it all.
        ``update_current`` False leaves ``current`` to a later ``update_current()`` (a merge interval)."""
        outcome = _retrying(f"appending changes to {self.changelog_uri}", lambda: self._append_changes(rows, end))
        if update_current:
            self.update_current(end)
        return outcome

    def update_current(self, end: BinlogPosition | None = None) -> None:
        """Apply the changelog's changes up to ``end`` (default: as far as the changelog goes) to ``current``."""
        end = end or self.tail_position()
        if end is not None:
            _retrying(f"updating the current state of {self.table}", lambda: self._apply_changes(end))

    def _append_changes(self, rows: pa.Table, end: BinlogPosition) -> str:
        from deltalake import CommitProperties, Transaction, write_deltalake

        changelog = self.changelog()
        recorded = _version_position(changelog.transaction_version(TAIL_APP))
        if recorded is not None and recorded >= end.boundary():
            return "replayed"
        if recorded is not None:
            rows = rows.filter(pc.greater(rows["_pos"], recorded.as_snapshot().encode()))
        write_deltalake(changelog, rows, mode="append", storage_options=self.options,
                        writer_properties=self.changelog_writer, commit_properties=CommitProperties(
                            app_transactions=[Transaction(TAIL_APP, end.boundary().to_version())]))
        return "committed"

    def _apply_changes(self, end: BinlogPosition) -> None:
        """Bring ``current`` from its recorded tail position to ``end`` with the changelog's changes."""
        from deltalake import CommitProperties, Transaction

        current = self.current()
        applied = _version_position(current.transaction_version(TAIL_APP))
        if applied is not None and applied >= end:
            return
        window = [pc.field("_pos") <= end.as_snapshot().encode()]
        if applied is not None:
            window.append(pc.field("_pos") > applied.as_snapshot().encode())
        changes = latest_per_key(self._changes(*window), self.keys)
        commit = CommitProperties(app_transactions=[Transaction(TAIL_APP, end.boundary().to_version())])
        if changes.num_rows == 0:
            from deltalake import write_deltalake

            # nothing to change: record the position alone (an empty append commits the transaction)
            write_deltalake(current, self.current_schema.empty_table(), mode="append",
                            storage_options=self.options, commit_properties=commit)
            return
        hws = {c: _version_position(current.transaction_version(chunk_app(c)))
               for c in pc.unique(changes["_chunk"]).to_pylist()}
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

    def _changes(self, *filters) -> pa.Table:
        """Changelog rows that are changes (not snapshot rows), in current-state columns, matching ``filters``."""
        expression = pc.field("_op") != "r"
        for f in filters:
            expression = expression & f
        data = self.changelog().to_pyarrow_dataset().to_table(columns=self.current_schema.names, filter=expression)
        return data.cast(self.current_schema)

    # ---- maintenance ----
    def maintain(self, retention_hours: float) -> dict:
        """Compact small files, write a log checkpoint, and delete files no version newer than
        ``retention_hours`` needs, on both tables (a compaction that races a tail commit is retried)."""
        out = {}
        for name, open_table in (("current", self.current), ("changelog", self.changelog)):
            metrics = _retrying(f"compacting {name} of {self.table}", lambda: open_table().optimize.compact())
            table = open_table()
            table.create_checkpoint()
            removed = table.vacuum(retention_hours=int(retention_hours), enforce_retention_duration=False,
                                   dry_run=False)
            out[name] = {"version": table.version(), "files_added": metrics.get("numFilesAdded"),
                         "files_removed": metrics.get("numFilesRemoved"), "vacuumed": len(removed)}
        return out

    # ---- reading ----
    def read_current(self, columns: Sequence[str] | None = None) -> pa.Table:
        return self.current().to_pyarrow_table(columns=list(columns) if columns else None)


def chunk_commits(sink: str, table: str, chunk_ids: Sequence[int],
                  storage_options: dict | None = None) -> dict[int, BinlogPosition | None]:
    """Per chunk the HW its latest commit to ``current`` recorded (the ``dblog-chunk-N`` app transaction;
    None: never committed), read without creating anything: what the driver checks after a snapshot job."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        current = DeltaTable(current_uri(sink, table), storage_options=storage_options)
    except TableNotFoundError:
        return dict.fromkeys(chunk_ids)
    return {c: _version_position(current.transaction_version(chunk_app(c))) for c in chunk_ids}


def latest_per_key(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Per key the row with the greatest ``_pos`` (deletes included: the caller decides)."""
    if rows.num_rows == 0:
        return rows
    ordered = rows.sort_by([(k, "ascending") for k in keys] + [("_pos", "descending")])
    if ordered.num_rows == 1:
        return ordered
    same = None  # row i has the key of row i - 1 (keys are never null)
    for k in keys:
        col = ordered[k]
        eq = pc.equal(col.slice(1), col.slice(0, len(col) - 1))
        same = eq if same is None else pc.and_(same, eq)
    first = pa.concat_arrays([pa.array([True]), pc.invert(same).combine_chunks()])
    return ordered.filter(first)


def _version_position(version: int | None) -> BinlogPosition | None:
    return None if version is None else BinlogPosition.from_version(version)
