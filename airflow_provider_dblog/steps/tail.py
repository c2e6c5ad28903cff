"""Tail: stream the binlog into the lake, one Structured Streaming query for every table (one read of the
binlog per micro-batch, whatever the number of tables), until caught up (``available_now``) or stopped;
log lag per table while it runs.

Before the query starts, an available-now tail skips tables whose binlog range provably holds no change
(``DataSourceDialect.scan_changes``), and the executor may read small cold ranges itself (``Executor.catch_up``:
the local executor of CLI runs reads them in this process)."""
from __future__ import annotations

import fcntl
import functools
import logging
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Callable

from airflow_provider_dblog.core import metrics
from airflow_provider_dblog.core.errors import DblogError, StreamLost
from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.parallel import for_each_table
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.status import LISTED_TABLES, lag_text, rows_text
from airflow_provider_dblog.readers.change_reader import release_log
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.steps.change_committer import table_committers, unfollowed_schema_changes
from airflow_provider_dblog.steps.executor import Executor
from airflow_provider_dblog.steps.failover import follow_promoted_server
from airflow_provider_dblog.steps.health import check_same_server
from airflow_provider_dblog.steps.signals import SIGNAL_SECONDS, SignalWatcher
from airflow_provider_dblog.store.lake_tables import LakeTables
from airflow_provider_dblog.store.object_store import check_sink, table_threads
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")
TABLE_SCAN_SECONDS = 10.0  # how often a continuous tail looks for tables reported since it started
BATCH_MEMORY_BYTES = 256 * 1024 * 1024  # a micro-batch's changes in the driver's memory; more are staged


def run_tail(state_dir: str, sink: str, available_now: bool = True, trigger_seconds: float = 1.0,
             max_events: int = 0, tables: list[str] | None = None, *, executor: Executor,
             stop_event: threading.Event | None = None, progress_seconds: float = 10.0,
             decode_parallelism: int = 0, merge_interval: float = 0.0,
             checkpoint: str | None = None, schema_changes: str = "evolve",
             table_scan_seconds: float = TABLE_SCAN_SECONDS, on_purge: str = "resnapshot",
             batch_memory_bytes: int = BATCH_MEMORY_BYTES, signal_table: str | None = None,
             signal_seconds: float = SIGNAL_SECONDS) -> dict:
    """Run the tail on ``executor`` (``steps.executor``); ``checkpoint``: the directory of its Spark checkpoints
    (default STATE/checkpoints; required for an object-store state); ``merge_interval``: update the
    lake's ``current`` tables at most this often (seconds; 0: every micro-batch), and when the tail ends;
    ``schema_changes``: what a DDL statement of a captured table does (``steps.change_committer``).
    A tail of every planned table (no ``tables``) first plans, reads and reports tables that started to
    match the capture's patterns (``steps.new_tables``). A continuous one also follows tables that join the offset map
    while it runs (planned, snapshotted and reported later, e.g. a wider ``--tables`` pattern, or created
    at the source and matching the plan's patterns: ``steps.new_tables``, looked for every
    ``table_scan_seconds``): its query reads them from their own floor in its next micro-batch.
    ``on_purge``: what a table whose binlog was purged past its floor does (``reread_purged``).
    ``batch_memory_bytes``: the changes of a micro-batch the driver holds in memory (``readers.staging``).
    ``signal_table`` (default: the plan's ``--signal-table``): the source table whose ``execute-snapshot`` rows
    are acted on at the start and every ``signal_seconds`` while the tail runs (``steps.signals``)."""
    state = StateDir(state_dir, checkpoint)
    check_sink(sink)
    with tail_lock(state):
        if available_now and tables is None:  # a scheduled catch-up also captures tables created under the
            from airflow_provider_dblog.steps.new_tables import capture_new_tables  # capture's patterns

            capture_new_tables(state, sink, executor)
        offsets = state.offsets()
        names = tables or sorted(offsets)
        unknown = [t for t in names if t not in offsets]
        if unknown:
            raise DblogError(f"{', '.join(unknown)} not in the offset map of {state.path}: plan, snapshot and "
                             f"report it first")
        dialect = open_dialect(state.source(), state.options())
        try:
            dialect.check_stream(names)
            recorded = state.tail_positions()
            dialect, again = follow_promoted_server(state, sink, dialect, sorted(offsets), offsets, recorded)
            recorded = state.tail_positions()
            check_same_server(state, dialect, [recorded[n][0] for n in names if n in recorded])
            for name in again:
                read_table_again(state, sink, name, executor)
            if again:
                offsets, recorded = state.offsets(), state.tail_positions()
            if names and finish_replans(state, sink, dialect, names, offsets, executor):
                offsets = state.offsets()
            if names and reread_purged(state, sink, dialect, names, offsets, recorded, on_purge, executor):
                offsets = state.offsets()
            create_unread_tables(state, sink, dialect, names)
            bring_current_up_to_date(state, sink, dialect, names, batch_memory_bytes)
            signal_table = signal_table or state.options().get("signal_table")
            signals = SignalWatcher(state, sink, dialect, signal_table, signal_seconds, executor) if signal_table else None
            if signals is not None:
                signals.poll()
            settled: dict[str, SourcePosition] = {}
            rows: dict[str, int] = {}
            skipped, in_driver = [], []
            if available_now:  # before a query starts: nothing to read, or little enough for the executor's catch-up
                now = dialect.current_position()
                now_gtid = functools.cache(lambda: dialect.gtid_at(now))  # asked once, if a table needs it
                skipped = skip_catch_ups(state, dialect, {n: offsets[n].min_hw for n in names}, now, recorded,
                                         now_gtid)
                changed = [n for n in names if n not in skipped]
                if changed:  # a re-read after a schema change in it runs here too (``reread_here``)
                    read = executor.catch_up(state, sink, dialect, {n: offsets[n] for n in changed}, now,
                                             table_committers(state, sink, schema_changes, batch_memory_bytes),
                                             now_gtid)
                    in_driver, rows = sorted(read or {}), dict(read or {})
                settled.update(dict.fromkeys([*skipped, *in_driver], now))
            todo = [name for name in names if name not in settled]
            started, restarts = time.time(), 0
            tracker = LagTracker(dialect)
            if todo:
                follow_all = not available_now and tables is None  # tables joining the offset map join the query

                def start():  # committers of this start: a restart after a re-plan reads the new plan
                    return executor.start_tail(state, sink, None if follow_all else todo, available_now,
                                               trigger_seconds, max_events, decode_parallelism, merge_interval,
                                               table_committers(state, sink, schema_changes, batch_memory_bytes,
                                                                executor), batch_memory_bytes)

                query, lake_sink = start()
                sinks = [lake_sink]  # the query's sink, and those of the queries it replaced
                last_log, last_scan, refused = [0.0], [time.time()], set()

                def join_new_tables() -> None:
                    """Plan, read and report tables that started to match the capture's patterns; the query
                    reads every table of the offset map, so they join it at its next micro-batch."""
                    from airflow_provider_dblog.steps.new_tables import capture_new_tables

                    capture_new_tables(state, sink, executor, refused)
                    last_scan[0] = time.time()
                    added = [t for t in sorted(state.offsets()) if t not in names]
                    if added:
                        log.info("tail: %s joined the offset map: the stream reads them from their snapshot on",
                                 ", ".join(added))
                        create_unread_tables(state, sink, dialect, added)
                        names.extend(added)

                def progress() -> tuple[dict, dict]:
                    done = {n: sum(s.rows.get(n, 0) for s in sinks) for n in names if n not in in_driver}
                    positions = {n: p for s in sinks for n, p in s.positions.items()}
                    return {**rows, **done}, {**settled, **positions}

                def tick() -> None:
                    if signals is not None and signals.due():
                        signals.poll()
                    tracker.sample()
                    if follow_all and time.time() - last_scan[0] >= table_scan_seconds:
                        join_new_tables()
                    if time.time() - last_log[0] >= progress_seconds:
                        last_log[0] = time.time()
                        done, positions = progress()
                        lag_now = tracker.lag(positions)
                        log.info("tail: %s so far; lag %s", rows_text(done), lag_text(lag_now))
                        lag_metrics(lag_now)

                def restart():
                    """A table was planned again (a new key): the query starts again with the new plan."""
                    log.info("tail: a table was planned again: the stream starts again")
                    again, again_sink = start()
                    sinks[-1].close()
                    sinks.append(again_sink)
                    return again

                try:
                    query = executor.watch(query, lambda: stop_event is not None and stop_event.is_set(), tick, restart)
                finally:
                    sinks[-1].close()
                done, positions = progress()
                rows.update(done)
                settled.update(positions)
                restarts = len(sinks) - 1
            release_log(state, dialect)  # what the lake now holds, the source need not keep (a PostgreSQL slot)
            lag = tracker.lag(settled)
            lag_metrics(lag, tracker, settled, state)
        finally:
            dialect.close()
    rows = {name: rows.get(name, 0) for name in sorted(names)}
    log.info("tail: %s in %.1fs; lag %s", rows_text(rows), time.time() - started, lag_text(lag))
    summary = {"rows": rows, "lag": lag, "seconds": round(time.time() - started, 1), "query_restarts": restarts}
    if skipped:
        summary["skipped"] = {name: str(settled[name]) for name in sorted(skipped)}
    if in_driver:
        summary["caught_up_in_driver"] = {name: str(settled[name]) for name in sorted(in_driver)}
    return summary


def create_unread_tables(state: StateDir, sink: str, dialect, names: list[str]) -> None:
    """Tables whose startup mode read no snapshot get their (empty) lake tables before the tail starts:
    readable, mirrored and verified like the others before their first change arrives."""
    plans = state.tables()  # read once: on object storage each read of the plan is a request

    def create(name: str) -> None:
        plan = state.table_of(plans, name)
        lake = LakeTables(sink, name, dialect.arrow_schema(plan.meta), plan.meta.key_columns, capture=plan.capture)
        lake.changelog(), lake.current()

    for_each_table(create, [name for name in names if not state.table_of(plans, name).startup.snapshots],
                   threads=table_threads(sink))


def reread_purged(state: StateDir, sink: str, dialect, names: list[str], offsets: dict, recorded: dict,
                  on_purge: str, executor: Executor) -> bool:
    """Tables whose floor (where their read resumes) is in a binlog file the server purged can no longer be
    caught up from the binlog. ``resnapshot`` (the default: the changes are gone, a re-read is the only way
    to converge, and doing it for those tables alone keeps the others current): every chunk of each is
    read again, and its offsets move to the new high watermarks; ``fail``: one line naming them, before
    anything is read. True when a table was read again. The server purges oldest first, so one check of
    the oldest floor clears them all in the common case."""
    plans = state.tables()
    floors = {name: state.resume_position(name, offsets[name].min_hw, recorded, plans) for name in names}
    try:
        dialect.ensure_available(min(floors.values()))
        return False
    except StreamLost as exc:  # the whole capture's log (a slot lost): a new one, then every table read again
        if on_purge == "fail" or not dialect.renew_stream():
            raise
        log.warning("tail: %s -- made anew: every table is read again (--on-purge resnapshot)", exc)
        first = str(exc)
    except DblogError as exc:
        first = str(exc)
    purged = []
    for name in names:
        try:
            dialect.ensure_available(floors[name])
        except DblogError:
            purged.append(name)
    if on_purge == "fail" or not purged:
        raise DblogError(f"{first} [tables: {', '.join(purged) or '?'}; --on-purge resnapshot reads them again "
                         f"alone]")
    for name in purged:
        log.warning("tail: the binlog %s needs from %s was purged: reading its %d chunks again (--on-purge "
                    "resnapshot); the other tables resume after it", name, floors[name], len(state.table(name).chunks))
        read_table_again(state, sink, name, executor)
    return True


def finish_replans(state: StateDir, sink: str, dialect, names: list[str], offsets: dict, executor: Executor) -> bool:
    """A table planned again (a new key) whose offsets still describe its old chunks: the tail was killed
    between saving the new plan and its new offsets. Its ``current`` starts again with the new key and every
    new chunk is read again, then it gets its offsets; streaming it with the old ones would put keys in the
    wrong chunks. True when a table was finished."""
    done, plans = False, state.tables()
    for name in names:
        plan = state.table_of(plans, name)
        ordered = sorted(plan.chunks, key=lambda c: c.id)
        if [c.hi for c in ordered[:-1]] == list(offsets[name].boundaries):
            continue
        log.warning("tail: %s was planned again (key %s) but its offsets are the old plan's: a re-plan was "
                    "interrupted; reading its %d new chunks", name, ", ".join(plan.meta.key_columns), len(ordered))
        LakeTables(sink, name, dialect.arrow_schema(plan.meta), plan.meta.key_columns, capture=plan.capture).restart_current(
            dialect.arrow_schema(plan.meta), plan.meta.key_columns, plan.planned_at)
        read_table_again(state, sink, name, executor)
        done = True
    return done


def read_table_again(state: StateDir, sink: str, name: str, executor: Executor) -> None:
    """Every chunk of ``name`` read again (each replaces its range at its new HW), and its offsets moved to
    the new high watermarks: its stream starts from there."""
    from airflow_provider_dblog.steps.resnapshot import resnapshot

    plan = state.table(name)
    resnapshot(str(state.path), sink, name, executor=executor)
    reports = state.reports(name)
    hws = {c.id: SourcePosition.from_dict(reports[c.id]["hw"]) for c in plan.chunks}
    state.restart_table_stream(name, min(SourcePosition.from_dict(reports[c.id]["lw"]) for c in plan.chunks))
    state.replace_table_offsets(name, TableOffsets.from_chunks(name, plan.chunks, hws))
    log.info("tail: %s read again; it streams from %s", name, min(hws.values()))


def bring_current_up_to_date(state: StateDir, sink: str, dialect, names: list[str],
                             memory_bytes: int = BATCH_MEMORY_BYTES) -> None:
    """Apply to ``current`` what the changelog holds beyond it: a tail killed between a micro-batch's
    changelog commit and its ``current`` update (or within a merge interval) left it behind, and a table
    that sees no further change would otherwise stay stale. The changelog is the truth; ``current``
    records the position it reflects and is rebuilt from it."""
    plans = state.tables()  # read once: on object storage each read of the plan is a request

    def check(name: str) -> None:
        plan = state.table_of(plans, name)
        lake = LakeTables(sink, name, dialect.arrow_schema(plan.meta), plan.meta.key_columns, capture=plan.capture)
        lake.memory_bytes = memory_bytes
        behind = lake.current_behind()
        if behind is None or unfollowed_schema_changes(state, lake, behind[1]):
            return  # up to date, or a schema change to follow first: the stream's first commit does both
        log.info("tail: %s: current reflects %s, its changelog %s: applying the difference", name, *behind)
        lake.update_current(behind[1])

    for_each_table(check, names, "tail: checking that current follows the changelog", table_threads(sink))


@contextmanager
def tail_lock(state: StateDir):
    """One tail per checkpoint at a time on this host (Spark only guards a checkpoint within one JVM): a
    second tail, e.g. a scheduled catch-up beside a running one, waits, then resumes. The lock file is
    ``STATE/tail.lock`` for a local state, ``CHECKPOINT/tail.lock`` for one on object storage (a flock
    needs a local file); tails on other hosts are fenced by the lake (the ``dblog-tail`` app transaction:
    of two commits of one batch, one wins and the other adds nothing)."""
    folder = state.files.local or state.checkpoint_root()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "tail.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another tail of %s is running; waiting for it to finish", state.path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def skip_catch_up(state: StateDir, dialect, table: str, min_hw: SourcePosition, now: SourcePosition,
                  recorded: dict | None = None, gtid: Callable[[], str | None] = lambda: None) -> bool:
    """``skip_catch_ups`` of one table: True if it was skipped."""
    return bool(skip_catch_ups(state, dialect, {table: min_hw}, now, recorded, gtid))


def skip_catch_ups(state: StateDir, dialect, min_hws: dict[str, SourcePosition], now: SourcePosition,
                   recorded: dict | None = None, gtid: Callable[[], str | None] = lambda: None) -> list[str]:
    """The tables whose available-now catch-up can be skipped: the binlog from the table's floor (where the
    lake holds every change of it) to ``now`` holds no row event or DDL statement of it, as one pass over
    the binlog proves for all of them (``DataSourceDialect.scan_each``). For each, ``[floor, now)`` is
    recorded as checked (``state.caught_up``: the next read of the table starts at ``now``, so an idle
    table pins no old binlog file)."""
    plans = state.tables()
    floors = {t: state.resume_position(t, min_hw, recorded, plans) for t, min_hw in min_hws.items()}
    floors = {t: floor for t, floor in floors.items() if floor <= now}
    scans = dialect.scan_each({t: floor for t, floor in floors.items() if floor < now}, now) if floors else {}
    skipped = []
    level = logging.INFO if len(floors) <= LISTED_TABLES else logging.DEBUG  # many tables: one line for all
    for table, floor in floors.items():
        scan = scans.get(table)
        if scan is not None and not scan.clean:
            log.log(level, "tail: %s may have changes in [%s, %s) (%s): running the catch-up", table, floor, now,
                    scan.reason)
            continue
        state.write_caught_up(table, floor, now, gtid())
        log.log(level, "tail: %s has no changes in [%s, %s): skipped (%d binlog events checked)", table, floor, now,
                scan.events if scan else 0)
        skipped.append(table)
    if level == logging.DEBUG:
        log.info("tail: %d of %d tables may have changes up to %s: running their catch-up; %d have none: skipped",
                 len(floors) - len(skipped), len(floors), now, len(skipped))
    return skipped


def lag_metrics(lag: dict, tracker: "LagTracker | None" = None, positions: dict | None = None,
                state: StateDir | None = None) -> None:
    """Per table ``lag_seconds`` (``LagTracker.lag``'s figures); with the tracker, the tables' positions and
    the state, also this tail's ``binlog_bytes_behind``: from its slowest table to the server's position."""
    if not metrics.enabled():
        return
    for name, figures in lag.items():
        metrics.gauge(metrics.LAG_SECONDS, figures["seconds_behind"], table=name)
    if tracker is None or not positions or state is None:
        return
    try:
        source = state.source()
        now = tracker.samples[-1][1] if tracker.samples else tracker.dialect.current_position()
        metrics.gauge(metrics.BINLOG_BYTES_BEHIND, tracker.dialect.range_bytes(min(positions.values()), now),
                      source=metrics.source_tag(source.host, source.port))
    except Exception as exc:  # noqa: BLE001 - a figure, not the capture
        log.debug("tail: no binlog_bytes_behind: %s", exc)


class LagTracker:
    """How far the tail is behind the source, in bytes and in seconds.

    The server's position is sampled while the tail runs; "seconds behind" is how long ago the server
    was where the tail is now (0 when caught up), so it needs no clock in the binlog events.
    """

    def __init__(self, dialect):
        self.dialect = dialect
        self.samples: deque[tuple[float, SourcePosition]] = deque(maxlen=50_000)

    def sample(self) -> None:
        self.samples.append((time.time(), self.dialect.current_position()))

    def lag(self, positions: dict[str, SourcePosition]) -> dict:
        """Per table the lag of its position."""
        if not self.samples:
            self.sample()
        now_t, now = self.samples[-1]
        out = {}
        for name, pos in sorted(positions.items()):
            later = [t for t, p in self.samples if p > pos]
            seconds = 0.0 if pos >= now else now_t - (later[0] if later else self.samples[0][0])
            out[name] = {"offset": str(pos), "seconds_behind": round(seconds, 1),
                         "bytes_behind": now.offset - pos.offset if now.seq == pos.seq else None,
                         "files_behind": now.seq - pos.seq}
        return out
