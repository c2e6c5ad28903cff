"""Verify: is the lake's ``current`` equal to the live source, chunk by chunk, while writers and the tail
keep running? And ``--repair``: re-read only the chunks that are not.

Each chunk's checksum (``core.checksums``) is computed inside the database in one consistent snapshot at
an exact binlog position P (no row leaves the server). The lake's side is ``current`` at one pinned
version, brought to the same position P: each chunk there is exact as of S = max(its read's HW, the
position ``current``'s update got to), so its keys' changes in (S, P] are applied to it (the greatest position
per key wins, as everywhere in the lake): from the changelog up to the position the tail recorded (``current``
follows the changelog's commit a moment or a merge interval later), from the binlog after it; and its checksum
is computed the same way. The two agree
exactly when the chunk's rows do, FLOAT/DOUBLE to their last bit (their exact binary form, not their print,
which differs between engines). A schema change in (S, P] the lake has not
followed yet makes the table unverifiable for now: one line, run the tail first.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.checksums import ChunkChecksum, table_checksum
from airflow_provider_dblog.core.config import SourceConfig, compress_ids, match_tables, table_patterns
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.exact import bits_view, exact_key
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.schema_events import UNREADABLE, SchemaChange, SchemaVersion
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.readers.change_reader import TableChangeReader
from airflow_provider_dblog.readers.unchanged_values import carry_unchanged
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.source.dialect import DataSourceDialect
from airflow_provider_dblog.steps.health import check_same_server
from airflow_provider_dblog.store.lake_tables import PinnedCurrent, changelog_changes
from airflow_provider_dblog.store.object_store import check_sink
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
SOURCE_ROUNDS = 3  # a chunk read again after the snapshot began is checked in a later snapshot


def planned_tables(state_dir: str, table: str | None = None, patterns: str | None = None) -> list[str]:
    """The captured tables ``--table`` or ``--tables`` names (globs over the plan's tables)."""
    planned = list(StateDir(state_dir).tables())
    if table:
        if table not in planned:
            raise DblogError(f"{table} is not captured in {state_dir} (captured: {', '.join(planned[:10])})")
        return [table]
    if not patterns:
        raise DblogError("say which tables to verify: --table DB.TABLE or --tables PATTERNS")
    chosen = match_tables(planned, table_patterns(patterns))
    if not chosen:
        raise DblogError(f"no captured table matches --tables {patterns} (captured: {', '.join(planned[:10])})")
    return chosen


def verify_tables(state_dir: str, sink: str, tables: Sequence[str], repair: bool = False, executor=None,
                  source: SourceConfig | None = None) -> dict:
    """Checksum verify (and repair) of ``tables``; the result names what was checked, what drifted and what
    was repaired (read again on ``executor``, ``steps.executor``). Raises nothing for drift: the caller decides
    (``equal`` says it). ``source``: the connection to use (default: the state's, with its stored password)."""
    if repair and executor is None:
        raise TypeError("verify_tables(repair=True) reads drifted chunks again: pass the executor that reads them")
    check_sink(sink)
    state = StateDir(state_dir)
    per_table, started = {}, time.time()
    for table in tables:
        result = verify_table(state, sink, table, source=source)
        if repair and result["drifted"]:
            from airflow_provider_dblog.steps.resnapshot import resnapshot

            log.info("verify %s: repairing chunks %s", table, compress_ids(result["drifted"]))
            resnapshot(state_dir, sink, table, chunk_ids=compress_ids(result["drifted"]), executor=executor)
            again = verify_table(state, sink, table, result["drifted"], source=source)
            result["repaired"] = [c for c in result["drifted"] if c not in again["drifted"]]
            result["still_drifted"] = again["drifted"]
        per_table[table] = result
    one = len(tables) == 1

    def ids(key):
        return [c if one else f"{t}:{c}" for t, r in per_table.items() for c in r.get(key, [])]

    drifted, repaired = ids("drifted"), ids("repaired")
    unrepaired = ids("still_drifted") if repair else drifted
    return {"tables": per_table, "chunks": sum(r["chunks"] for r in per_table.values()), "drifted": drifted,
            "repaired": repaired, "equal": not unrepaired, "unrepaired": unrepaired,
            "seconds": round(time.time() - started, 3)}


def verify_table(state: StateDir, sink: str, table: str, chunk_ids: Sequence[int] | None = None,
                 source: SourceConfig | None = None) -> dict:
    plan = state.table(table)
    meta = state.meta_in_force(table).with_identity_of(plan.meta)  # the plan keeps the identities the lake reflects
    offsets = state.offsets().get(table) if state.has_offsets() else None
    if offsets is None:
        raise DblogError(f"{table} has no offset map yet: run dblog report (or finish its snapshot) before verify")
    chunks = [c for c in plan.chunks if chunk_ids is None or c.id in chunk_ids]
    dialect = open_dialect(source or state.source(), state.options())
    try:
        check_same_server(state, dialect)
        source_only, lake_only = _column_differences(dialect, table, meta, plan.keep_columns)
        if lake_only:  # compared on the columns both have (the key among them)
            meta = replace(meta, columns=tuple(c for c in meta.columns if c.name not in lake_only))
        resumed = state.resume_position(table, offsets.min_hw)  # before the lake is pinned: it records after it commits
        lake = PinnedCurrent(sink, table)
        missing = [c for c in meta.column_names if c not in lake.columns]
        exact_at = _exact_positions(lake, [c.id for c in chunks], resumed)
        source_sums, position = {}, None
        pending = list(chunks)
        for _ in range(SOURCE_ROUNDS):  # a chunk whose lake state is newer than the snapshot: a later one
            position, sums = dialect.checksum_chunks(meta, pending)
            source_sums.update({c: s for c, s in sums.items() if exact_at[c] is None or exact_at[c] <= position})
            pending = [c for c in pending if c.id not in source_sums]
            if not pending:
                break
        if pending:
            raise DblogError(f"the lake's {table} chunks {compress_ids([c.id for c in pending])} kept moving past "
                             f"the source's snapshot: verify again")
        if missing:
            drifted = sorted(source_sums)
            log.error("verify %s: the lake lacks the source's columns %s: every chunk differs", table,
                      ", ".join(missing))
        else:
            latest = _latest_changes(dialect, meta, offsets, exact_at, position, lake, resumed, sink)
            drifted = [c.id for c in chunks if not _lake_checksum(lake, meta, c.id, exact_at[c.id],
                                                                  latest.get(c.id, {})).matches(source_sums[c.id])]
        if chunk_ids is None:
            _check_no_stray_rows(lake, table, [c.id for c in plan.chunks])
    finally:
        dialect.close()
    for chunk_id in drifted:
        log.error("verify %s: chunk %d %s differs from the source at %s", table, chunk_id,
                  plan.key_span([chunk_id]), position)
    log.info("verify %s: %d chunks checked against the source at %s (lake version %d): %d differ", table,
             len(chunks), position, lake.version, len(drifted))
    return {"chunks": len(chunks), "drifted": drifted, "repaired": [], "position": str(position),
            "lake_version": lake.version, "missing_columns": missing, "source_only_columns": source_only,
            "lake_only_columns": lake_only}


def _column_differences(dialect: DataSourceDialect, table: str, meta: TableMeta, frozen: bool
                        ) -> tuple[list[str], list[str]]:
    """The source's columns the lake does not follow (yet: a tail follows them; or kept out by ``--schema-changes
    freeze``), and, for a lake kept by freeze (``frozen``: ``TablePlan.keep_columns``), the lake's columns the source
    no longer has, which it keeps for good: both said in the result and the log, the checksums compare the columns
    both have. Any other lake column the source no longer has (dropped or renamed since the lake's position, not
    followed yet), or a key column gone, makes the table unverifiable for now: one line."""
    live = dialect.describe_table(table, meta.chunk_key).column_names
    gone = [c for c in meta.column_names if c not in live]
    if gone and (not frozen or any(c in meta.key_columns for c in gone)):
        raise DblogError(f"verify {table}: the source no longer has the lake's column(s) {', '.join(gone)} (dropped "
                         f"or renamed since the lake's position): let the tail follow it (dblog tail), then verify")
    if gone:
        log.warning("verify %s: the source no longer has the lake's column(s) %s, which the lake keeps "
                    "(--schema-changes freeze): the checksums compare the other columns", table, ", ".join(gone))
    new = [c for c in live if c not in meta.column_names]
    if new:
        log.warning("verify %s: the source has columns the lake does not follow (yet): %s; the checksums compare "
                    "the lake's columns (a tail with --schema-changes evolve follows them)", table, ", ".join(new))
    return new, gone


def _same_compared_columns(version: TableMeta, meta: TableMeta) -> bool:
    """A new version of the table's columns (a ``Relation``, a schema version of the binlog) still has each
    compared column, of the same type: its rows' compared values mean what the lake's do (columns verify does not
    compare may come, go or be renamed: a frozen lake's changes after it are verified too)."""
    now = {c.name: replace(c, ordinal=None) for c in version.columns}
    return all(now.get(c.name) == replace(c, ordinal=None) for c in meta.columns)


def _exact_positions(lake: PinnedCurrent, chunk_ids: Sequence[int],
                     resumed: SourcePosition) -> dict[int, SourcePosition | None]:
    """Per chunk, the position ``current`` holds it exactly at (None: never read, nothing to compare): its read, or
    where ``current``'s update by the tail got to. Not the state's ``resumed``: the tail records it once the
    changelog committed, and ``current`` follows after (at once, or after a merge interval; never, for a tail
    killed between the two): its changes since are taken from the changelog (``_latest_changes``)."""
    logged = lake.tail_position()
    tail = None if logged is None else logged.in_file_of(resumed)
    out = {}
    for chunk_id in chunk_ids:
        read = lake.chunk_position(chunk_id)
        out[chunk_id] = None if read is None else max(read, tail) if tail is not None else read
    return out


def _latest_changes(dialect: DataSourceDialect, meta: TableMeta, offsets, exact_at: dict, position: SourcePosition,
                    lake: PinnedCurrent, resumed: SourcePosition, sink: str) -> dict[int, dict[tuple, ChangeEvent]]:
    """Per chunk, the last change of each key after the earliest exact position, up to ``position``: up to
    ``resumed`` from the changelog (it holds every change up to there, ``current`` may lag it), after it from the
    source (a PostgreSQL slot holds the WAL from there on, not from the lake's older position); a value the
    source did not send (PostgreSQL's unchanged TOASTed values) taken from the key's previous image: an earlier
    change in the range, else the lake's row."""
    known = [p for p in exact_at.values() if p is not None]
    if not known or min(known) >= position:
        return {}
    low = min(known)

    def changes():
        if low < resumed:
            yield from _changelog_events(sink, meta, low, min(resumed, position))
        start = max(low, resumed)
        if start >= position:
            return
        # the lake records positions as numbers: the binlog file is named as the server names it
        for item in dialect.read_changes(start.in_file_of(position), position, [meta]):
            if isinstance(item, SchemaVersion) and _same_compared_columns(item.meta, meta):
                continue
            if isinstance(item, SchemaChange) and item.kind == UNREADABLE:  # its own line names the fix
                raise DblogError(f"verify {meta.qualified}: {item.statement}")
            if not isinstance(item, ChangeEvent):
                what = item.describe() if isinstance(item, SchemaChange) else f"its columns changed at {item.pos}"
                raise DblogError(f"{meta.qualified}: {what}, after the lake's position: let the tail follow it "
                                 f"(dblog tail), then verify")
            yield item

    # keyed as the lake matches keys (``core.exact``: a NaN key finds itself, -0.0 is not 0.0)
    latest: dict[tuple, ChangeEvent] = {}
    sources: dict[tuple, tuple] = {}  # key -> the key whose lake row holds the values its change lacks
    for event, source in carry_unchanged(changes()):
        key = exact_key(event.key)
        latest[key] = event
        if event.unchanged:
            sources[key] = source
        else:
            sources.pop(key, None)
    if not latest:
        return {}
    reader = TableChangeReader(meta, offsets, dialect)
    if sources:
        latest.update(_unchanged_from_lake(lake, meta, reader, {k: latest[k] for k in sources}, sources))
    keys = list(latest)
    by_chunk: dict[int, dict[tuple, ChangeEvent]] = {}
    for key, chunk in zip(keys, reader.chunks_of([latest[k].key for k in keys])):
        by_chunk.setdefault(chunk, {})[key] = latest[key]
    return by_chunk


def _changelog_events(sink: str, meta: TableMeta, after: SourcePosition, upto: SourcePosition) -> list[ChangeEvent]:
    """The changelog's changes of the table in (``after``, ``upto``] as change events (complete rows: the tail filled
    what the source did not send before it wrote them)."""
    rows = changelog_changes(sink, meta.qualified, meta.column_names, after, upto).to_pylist()
    keys, out = meta.key_columns, []
    for row in rows:
        op, pos = row.pop("_op"), SourcePosition.decode(row.pop("_pos"))
        out.append(ChangeEvent(meta.qualified, op, pos, tuple(row[k] for k in keys), None if op == "d" else row, None))
    return out


def _unchanged_from_lake(lake: PinnedCurrent, meta: TableMeta, reader: TableChangeReader,
                         events: dict[tuple, ChangeEvent], sources: dict[tuple, tuple]) -> dict[tuple, ChangeEvent]:
    """``events`` (by exact key) with their missing values taken from the lake's row of their source key (its
    values, ``sources``), older than them."""
    names, keys = list(meta.column_names), list(meta.key_columns)
    wanted = sorted(set(sources.values()), key=repr)
    rows: dict[tuple, dict] = {}
    for chunk in set(reader.chunks_of(wanted)):
        for row in lake.chunk_rows(chunk, [*names, "_pos"]).to_pylist():
            rows[exact_key(row[k] for k in keys)] = row
    out = {}
    for key, event in events.items():
        row = rows.get(exact_key(sources[key]))
        if row is None or SourcePosition.decode(row["_pos"]) >= event.pos:
            raise DblogError(f"verify {meta.qualified}: the change of key {event.key} at {event.pos} left "
                             f"{', '.join(event.unchanged)} unchanged and the lake has no earlier image of it: let "
                             f"the tail commit it (dblog tail), then verify")
        out[key] = replace(event, after={**event.after, **{c: row[c] for c in event.unchanged}}, unchanged=())
    return out


def _check_no_stray_rows(lake: PinnedCurrent, table: str, chunk_ids: Sequence[int]) -> None:
    """Rows of ``current`` in no planned chunk (its ``_chunk`` another id, or null) are in no chunk's checksum: not
    the source's rows (a writer other than dblog), they stop verify in one line instead of passing unseen."""
    outside = ~pc.field("_chunk").isin(list(chunk_ids)) | pc.field("_chunk").is_null()
    stray = lake.table.to_pyarrow_dataset().count_rows(filter=outside)
    if stray:
        raise DblogError(f"verify {table}: current holds {stray} rows in no planned chunk (_chunk not one of the "
                         f"plan's, or null): a writer other than dblog put them there; delete them (DELETE FROM the "
                         f"table's current WHERE _chunk is not a planned chunk), or capture the table again")


def _lake_checksum(lake: PinnedCurrent, meta: TableMeta, chunk_id: int, exact_at: SourcePosition | None,
                   changes: dict[tuple, ChangeEvent]) -> ChunkChecksum:
    """The chunk's checksum in ``current`` brought forward by ``changes`` (the last per key). A key held twice is
    never the source's: such a chunk differs (no checksum matches a row count of -1), also when a change of that
    key would replace its rows here."""
    names, keys = list(meta.column_names), list(meta.key_columns)
    rows = lake.chunk_rows(chunk_id, [*names, "_pos"])
    doubled = _doubled_keys(rows, keys)
    if doubled.num_rows:
        log.error("verify %s: chunk %d holds %d keys more than once in current, e.g. %s", meta.qualified, chunk_id,
                  doubled.num_rows, doubled.slice(0, 3).to_pylist())
        return ChunkChecksum(-1, 0)
    if exact_at is not None and changes:
        row_keys = [exact_key(r[k] for k in keys) for r in rows.select(keys).to_pylist()]
        pos_of = dict(zip(row_keys, rows["_pos"].to_pylist()))
        applied = {}
        for key, event in changes.items():
            if event.pos <= exact_at:
                continue  # the chunk's state already includes it
            have = pos_of.get(key)
            if have is not None and SourcePosition.decode(have) >= event.pos:
                continue
            applied[key] = event
        if applied:
            keep = pa.array([k not in applied for k in row_keys], pa.bool_())
            after = [e.after for e in applied.values() if e.after is not None]
            rows = pa.concat_tables([rows.filter(keep).select(names),
                                     pa.Table.from_pylist(after, schema=rows.select(names).schema)])
    return table_checksum(rows.select(names), names)


def _doubled_keys(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The keys ``rows`` hold more than once, compared as stored (floats by their bits)."""
    stored = pa.table({k: bits_view(rows[k]) for k in keys})
    counted = stored.group_by(list(keys)).aggregate([([], "count_all")])
    return counted.filter(pc.greater(counted["count_all"], 1)).select(list(keys))
