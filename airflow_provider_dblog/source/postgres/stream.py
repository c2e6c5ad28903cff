"""The change stream of a PostgreSQL capture: its slot's ``pgoutput`` messages as ``ChangeEvent`` s.

A range ``(start, end]`` is read with ``pg_logical_slot_peek_binary_changes(slot, end, ...)`` through a
binary ``COPY`` (``copy_out``; a cursor's fetches cost ≈0.4 s more per 300,000 messages): plain SQL on an
ordinary connection, decoded from the slot's restart point up to the first record that ends at or past
``end``, and *peeked*: nothing is consumed, so a read that fails or is
killed is simply read again (the slot moves only on ``slot.advance``, after the lake committed). A read of
a slot another process holds waits a little, then says which process.

Positions: a transaction is *before* a WAL location ``L`` (``PostgresClient.current_lsn``, a chunk's LW, a
micro-batch's end) when its commit record starts below ``L`` (pgoutput's ``Begin.final_lsn``). Its changes
are at ``change_position(final_lsn, i)`` (``lsn_position(final_lsn + 1, i)`` for the first 49,999,999), ``i`` their
order in the transaction, so they sort after every boundary the transaction is after and at or before every
boundary it is before, and a transaction is whole on one side of every boundary.

Messages: ``Relation`` (before a table's first change in a read, and after its columns change: a new
``SchemaVersion`` when they differ from the version in force; a captured table's OID under a new name is a
RENAME), ``Insert`` / ``Update`` / ``Delete`` as whole-row images (an UPDATE that keeps its key has no old
image under REPLICA IDENTITY DEFAULT: its before image is the key), ``Truncate`` as a TRUNCATE schema change
(the committer reads the table again). A column dropped and added again leaves no trace when it was the last
one (the next Relation lists the same columns): each read compares the catalog's attnums with the meta's
(``Column.ordinal``) and ends with a ``recreate`` schema change for such a table, so it is read again; likewise
a ``rewrite`` when the table's files changed (``TableMeta.storage``: a rewrite that changes values in place, or
a partition attached or detached, leaves no row change in the WAL). An unchanged TOASTed value (``u``) is
taken from the old row under REPLICA IDENTITY FULL; under DEFAULT the event names it (``ChangeEvent.unchanged``) and the committer takes it
from the key's previous image in the lake (``readers.unchanged_values``): never a NULL.
"""
from __future__ import annotations

import itertools
import logging
import struct
import time
from dataclasses import replace
from typing import Iterator, Mapping, NamedTuple, Sequence

import numpy as np
import psycopg2
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import ChangeEvent, row_change
from airflow_provider_dblog.core.positions import (
    ROWS_PER_POSITION, SourcePosition, lsn_position, position_lsn, position_prefix,
)
from airflow_provider_dblog.core.schema_events import UNREADABLE, SchemaChange, SchemaVersion
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source import spans
from airflow_provider_dblog.source.postgres import pgoutput
from airflow_provider_dblog.source.postgres.connection import OBJECT_IN_USE, PostgresClient, first_line, sqlstate
from airflow_provider_dblog.source.postgres.copy_out import binary_values, copy_out
from airflow_provider_dblog.source.postgres.block_decoder import MIN_BLOCK, decode_blocks
from airflow_provider_dblog.source.postgres.pgoutput import UNCHANGED_TOAST, format_lsn
from airflow_provider_dblog.source.postgres.row_decoder import compile_tuple_decoder, decode_row_message
from airflow_provider_dblog.source.postgres.schema import (
    changed_column_list, changed_composites, changed_partition_identities, collation_name, key_problems,
    outside_the_wal, outside_the_wal_names, relation_oid, renamed_labels, resolve_types, split_name, storage_files, storage_identities,
    storage_oid, storage_publication,
)
from airflow_provider_dblog.source.postgres.slot import (
    carries_key, check_holds, check_usable, identity_fix, identity_misses_key, publication_problem, slot_busy_seconds,
)
from airflow_provider_dblog.source.postgres.values import UnrepresentableValue
from airflow_provider_dblog.source.reconnect import LOST_CONNECTION_RETRIES, ConnectionLost

log = logging.getLogger("dblog")
BLOCK_ROWS = 10_000  # row messages per ChangeBlock
BLOCK_BYTES = 8 << 20  # and their bytes: the block decoder gathers a column's values through an 8-byte index per byte
_INSERT, _UPDATE, _DELETE = ord("I"), ord("U"), ord("D")
_ROW_TAGS = frozenset((_INSERT, _UPDATE, _DELETE))
_OID = struct.Struct("!I").unpack_from
_NOT_CAPTURED = ("", None)
GENERATED = "a.attgenerated <> ''"  # a generated column: not in the WAL, nor in the lake
TOAST_FIX = "give the key a column that is never TOASTed, or ALTER TABLE {table} REPLICA IDENTITY FULL"


def identity_problem(relation: pgoutput.Relation, meta: TableMeta) -> str | None:
    """Why the table's UPDATEs and DELETEs under this Relation cannot be applied (None: they can): its replica
    identity (changed at run time: ALTER TABLE ... REPLICA IDENTITY) does not carry the capture's key
    (``slot.carries_key``), so an old row's key is missing or another column set."""
    if carries_key(relation.replica_identity, relation.key_columns, meta.key_columns):
        return None
    identity = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}.get(relation.replica_identity, "?")
    return (f"replica identity {identity} carries {', '.join(relation.key_columns) or 'nothing'}, not the capture's "
            f"key ({', '.join(meta.key_columns)})")


COMMIT_RECORD_BYTES = 34  # the least WAL a commit record takes (its 24-byte header, a 2-byte data header, its time)
POSITION_STEPS = COMMIT_RECORD_BYTES - 1  # WAL locations inside a commit record after its start: no boundary is there


def change_position(final_lsn: int, row: int = 0) -> SourcePosition:
    """The position of the ``row``-th change of the transaction whose commit record starts at ``final_lsn``: inside
    that record, where no boundary falls (boundaries are where records start), so the transaction is whole on one
    side of each. Its first ``ROWS_PER_POSITION`` changes are at ``final_lsn + 1``, the next ones at ``+ 2``, and so
    on: a transaction of a billion row changes still has an ordered position for each."""
    step, row = divmod(row, ROWS_PER_POSITION)
    if step >= POSITION_STEPS:
        raise DblogError(f"the transaction committed at {format_lsn(final_lsn)} holds more than "
                         f"{POSITION_STEPS * ROWS_PER_POSITION:,} changes, more than dblog's positions order; dblog "
                         f"stops before it (nothing of it is committed): write such changes in smaller transactions, "
                         f"then capture the database again (dblog drop, then dblog plan)")
    return lsn_position(final_lsn + 1 + step, row)


def _at(first: SourcePosition, row: int) -> SourcePosition:
    """``change_position(final, row)`` from ``first = change_position(final)`` (the hot path's ``with_row``)."""
    return first.with_row(row) if row < ROWS_PER_POSITION else change_position(position_lsn(first) - 1, row)


def _starts(firsts: Sequence[SourcePosition], span: np.ndarray, rows: np.ndarray
            ) -> tuple[Sequence[SourcePosition], np.ndarray, np.ndarray]:
    """Per message of a run (``span``: the index in ``firsts`` of its transaction's first position, ``rows``: its
    row in the transaction): the positions its row index counts from, which of them is its own, and that index
    (``change_position``: past ``ROWS_PER_POSITION`` changes a transaction's rows count from the next location)."""
    steps = rows // ROWS_PER_POSITION
    if not steps.any():
        return firsts, span, rows
    width = int(steps.max()) + 1  # (past POSITION_STEPS, ``change_position`` refuses the transaction)
    keys, which = np.unique(span * width + steps, return_inverse=True)
    starts = [_at(firsts[k // width], (k % width) * ROWS_PER_POSITION) for k in keys.tolist()]
    return starts, which, rows % ROWS_PER_POSITION


class _Catalog(NamedTuple):
    """What orders and identifies each captured table's rows now: its columns' collations (as ``schema`` names
    them) and, for a table whose key no longer identifies its rows, why (``schema.key_problem``)."""

    collations: Mapping[str, Mapping[str, str | None]]
    key_problems: Mapping[str, str]
    # a partitioned table whose partitions' replica identity does not carry the key: the WAL does not say (its
    # Relation is the root's), so its UPDATEs and DELETEs are not applied (``slot.identity_misses_key``)
    partition_identity: Mapping[str, str] = {}
    columns: Mapping[str, Mapping[str, int]] = {}  # each table's columns now, their attnums (not generated ones)


class _Version:
    """A captured table's columns as a ``Relation`` message gave them: its meta and its tuple decoder."""

    def __init__(self, meta: TableMeta):
        self.meta, self.key_columns = meta, tuple(meta.key_columns)
        self.decode = compile_tuple_decoder(meta)
        self.signature = tuple((c.name, c.type_oid, c.typmod) for c in meta.columns)


class _Run:
    """One table's row messages of one version since its last flush: collected and decoded as ``ChangeBlock`` s
    when ``blocks`` (the reader asked for blocks past this point), else decoded one by one as they come. A run
    per table, so tables whose changes interleave in a transaction still make long runs."""

    def __init__(self, name: str, version: _Version, blocks: bool) -> None:
        self.name, self.version, self.blocks = name, version, blocks
        self.payloads: list[bytes] = []
        self.spans: list[tuple[SourcePosition, int, int, int]] = []  # (its transaction's first position, first row,
        self.bytes = 0                                                 # messages, ts) per span of one transaction

    def add(self, payloads: Sequence[bytes], lengths: Sequence[int], first: SourcePosition, row: int, ts: int) -> int:
        """Collect messages of one transaction (its rows ``row``, ``row + 1``, ...; ``lengths``: theirs) up to a full
        run (``BLOCK_ROWS`` messages or ``BLOCK_BYTES``, then ``full``): how many were taken."""
        take = min(len(payloads), BLOCK_ROWS - len(self.payloads))
        size = sum(lengths[:take])
        if self.bytes + size >= BLOCK_BYTES:  # the run is full at the message that reaches BLOCK_BYTES
            size, take = self.bytes, 0
            while size < BLOCK_BYTES:
                size += lengths[take]
                take += 1
            size -= self.bytes
        self.payloads += payloads[:take]
        self.spans.append((first, row, take, ts))
        self.bytes += size
        return take

    @property
    def full(self) -> bool:
        return len(self.payloads) >= BLOCK_ROWS or self.bytes >= BLOCK_BYTES

    def flush(self, reader: "SlotReader") -> list[ChangeBlock | ChangeEvent]:
        """The collected messages as blocks, and as events those the block decoder leaves (``decode_blocks``)."""
        if not self.payloads:
            return []
        payloads, collected, self.payloads, self.spans, self.bytes = self.payloads, self.spans, [], [], 0
        if len(payloads) < MIN_BLOCK:  # a block's array work costs more than a few messages one by one
            return self._one_by_one(reader, payloads, collected)
        span, rows, ts_ms = _span_arrays(collected)
        starts, which, rows = _starts([first for first, _, _, _ in collected], span, rows)
        positions = _position_texts(starts, which, rows)
        pieces = decode_blocks(self.name, self.version.meta, payloads,
                               lambda i: starts[which[i]].with_row(2 * int(rows[i])), positions, ts_ms)
        out: list[ChangeBlock | ChangeEvent] = []
        for piece in pieces:
            if isinstance(piece, ChangeBlock):
                if _lacks_old_key(piece, self.version.key_columns):  # rare: said per row, by the row path
                    return self._one_by_one(reader, payloads, collected)
                out.append(piece)
                continue
            for i in piece:  # the boundary from the transaction's first position (``starts`` may be a later step)
                out += reader._known_row_events(self.name, self.version, payloads[i][0], payloads[i],
                                                starts[which[i]].with_row(int(rows[i])), int(ts_ms[i]),
                                                _boundary(collected[int(span[i])][0]))
        return out

    def _one_by_one(self, reader: "SlotReader", payloads: Sequence[bytes],
                    collected: Sequence[tuple[SourcePosition, int, int, int]]) -> list[ChangeEvent]:
        out: list[ChangeEvent] = []
        i = 0
        for first, row, count, ts in collected:
            for r in range(row, row + count):
                out += reader._known_row_events(self.name, self.version, payloads[i][0], payloads[i], _at(first, r),
                                                ts, _boundary(first))
                i += 1
        return out


def _boundary(first: SourcePosition) -> SourcePosition:
    """The boundary before a transaction whose first change is at ``first`` (``change_position(final)``)."""
    return lsn_position(position_lsn(first) - 1)


def _lacks_old_key(block: ChangeBlock, key_columns: Sequence[str]) -> bool:
    """Whether an UPDATE or DELETE of ``block`` came with an old key that holds no value for a key column (its
    partition's replica identity names other columns): such a row is not applied (``OldKeyUnknown``)."""
    changed = pc.not_equal(block.ops, "c")
    return any(pc.any(pc.and_(changed, pc.is_null(block.before.field(k)))).as_py() for k in key_columns)


class OldKeyUnknown(Exception):
    """An UPDATE or DELETE whose old key holds no value for a key column: the row it changed is unknown."""


class NoLakeValue(DblogError):
    """A row holding a value the lake has no twin for (``values.UnrepresentableValue``, its column named): one line
    where nothing decides whether the lake needs the row (``_known_row_events`` does)."""


def _position_texts(starts: Sequence[SourcePosition], which: np.ndarray, rows: np.ndarray) -> pa.Array:
    """The lake's ``_pos`` of each message's first event (``row_change``: row ``2 * i``), as the MySQL block decoder
    makes them: ``starts[which[i]]``'s location, then the row's eight digits."""
    return spans.fixed_strings([position_prefix(p) for p in starts], which, spans.decimal_digits(2 * rows, 8))


def _span_arrays(collected: Sequence[tuple[SourcePosition, int, int, int]]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per message of a run's ``collected`` spans: the index of its span, its row in its transaction, its ts."""
    counts = np.array([count for _, _, count, _ in collected], np.int64)
    span = np.repeat(np.arange(len(collected)), counts)
    starts = np.zeros(len(collected), np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    rows = np.array([row for _, row, _, _ in collected], np.int64)[span] + np.arange(len(span)) - starts[span]
    return span, rows, np.array([ts for _, _, _, ts in collected], np.int64)[span]


def _row_spans(batch: Sequence[bytes], lengths: Sequence[int]) -> list[int]:
    """Per message of ``batch``, the end of its span: the row messages (Insert, Update, Delete) of one relation
    that follow it without another message between (a non-row message is a span of its own)."""
    n = len(batch)
    if n == 1:
        return [1]
    starts = np.zeros(n, np.int64)
    np.cumsum(np.asarray(lengths[:-1], np.int64), out=starts[1:])
    data = np.frombuffer(b"".join(batch) + bytes(spans.PAD), np.uint8)
    tags = data[starts]
    row = (tags == _INSERT) | (tags == _UPDATE) | (tags == _DELETE)
    oid = spans.big_endian(data, starts + 1, 4)  # a row message's relation OID (anything, for other messages)
    cut = np.flatnonzero(~row[1:] | ~row[:-1] | (oid[1:] != oid[:-1])) + 1
    ends = np.append(cut, n)
    return np.repeat(ends, np.diff(np.append(0, ends))).tolist()


class SlotReader:
    """Reads of the capture's slot (``slot``) through its publication (``publication``)."""

    def __init__(self, client: PostgresClient, slot: str, publication: str):
        self.client, self.slot, self.publication = client, slot, publication
        self._planned_versions: dict[str, _Version] = {}
        self._unknown_rows: dict[str, tuple[str, SourcePosition, SourcePosition]] = {}  # of the read (``changes``)

    # ---- the rows of the slot ----
    def _messages(self, end: int) -> Iterator[bytes]:
        """The payloads of every message of the slot up to ``end`` (``_batches``), one by one."""
        for batch in self._batches(end):
            yield from batch

    def _batches(self, end: int) -> Iterator[list[bytes]]:
        """The payloads of every message of the slot up to ``end``, from a peek (nothing consumed), as the cursor
        fetches them. A connection the server closed mid-read (``pg_terminate_backend``, a restart) is opened again
        and peeked again, the messages already given skipped: a peek from the same slot position gives the same
        messages, and the first one (a Begin, naming its transaction and commit) proves the position did not move
        meanwhile."""
        given, first, lost = 0, None, 0
        while True:
            try:
                seen = 0
                for batch in self._peek(end):
                    if seen == 0:
                        if first is None:
                            first = batch[0]
                        elif batch[0] != first:
                            raise DblogError(f"replication slot {self.slot} on {self.client.where} moved while its "
                                             f"read was connected again: run the tail again")
                    skipped, seen = given - seen, seen + len(batch)
                    if seen <= given:
                        continue
                    given = seen
                    yield batch[skipped:] if skipped > 0 else batch
                return
            except ConnectionLost as exc:
                lost += 1
                if lost > LOST_CONNECTION_RETRIES:
                    raise DblogError(f"reading the changes of replication slot {self.slot} on {self.client.where} "
                                     f"failed: the server closed the connection {lost} times ({exc})") from None
                log.warning("reading replication slot %s: the server closed the connection (%s): connecting again, "
                            "%d messages read are skipped", self.slot, exc, given)
                time.sleep(min(0.2 * lost, 2.0))

    def _peek(self, end: int) -> Iterator[list[bytes]]:
        """One peek of the slot up to ``end`` on its own connection, as a binary COPY read as it arrives, about
        ``copy_out.BLOCK_BYTES`` of messages at a time (``ConnectionLost``: the server closed it)."""
        conn = self.client.connect(autocommit=False)
        deadline, waited = time.monotonic() + slot_busy_seconds(), False
        try:
            with conn.cursor() as cur:
                statement = cur.mogrify(
                    "COPY (SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, 'proto_version', "
                    "'1', 'publication_names', %s)) TO STDOUT WITH (FORMAT binary)",
                    (self.slot, format_lsn(end), self.publication)).decode()
            while True:
                try:
                    with copy_out(conn, statement) as source:
                        yield from binary_values(source, f"reading replication slot {self.slot}")
                    return
                except psycopg2.Error as exc:
                    message = first_line(exc, self.client.config.password)
                    if conn.closed:
                        raise ConnectionLost(message) from None
                    conn.rollback()
                    busy = sqlstate(exc) == OBJECT_IN_USE  # "... is active for PID ...", in the server's language
                    if busy and time.monotonic() < deadline:
                        if not waited:
                            log.info("replication slot %s on %s: %s; waiting up to %.0f s for it", self.slot,
                                     self.client.where, message, slot_busy_seconds())
                        waited = True
                        time.sleep(0.5)
                        continue
                    # gone or invalidated since the tail's check (a dropped publication has the same SQLSTATE
                    # as a dropped slot: the slot itself is asked)
                    check_usable(self.client, self.slot, "the lake's position")
                    raise DblogError(f"reading the changes of replication slot {self.slot} on {self.client.where} "
                                     f"failed: {message}" + (f"; another process has read it for "
                                                             f"{slot_busy_seconds():.0f} s (a second dblog tail?): "
                                                             f"stop it, or wait longer (DBLOG_SLOT_BUSY_SECONDS)"
                                                             if busy else "")) from None
        finally:
            if not conn.closed:
                conn.close()

    def transactions(self, lo: int, hi: int, table: str) -> list[tuple[int, int]]:
        """``(final_lsn, xid)`` of each transaction with ``lo <= final_lsn < hi`` that changes ``table``, in
        commit order (``checksum`` finds the position of a snapshot with them)."""
        found: list[tuple[int, int]] = []
        names: dict[int, str] = {}
        begin = None
        for payload in self._messages(hi):
            message = pgoutput.decode(payload)
            kind = type(message)
            if kind is pgoutput.Begin:
                begin = (message.final_lsn, message.xid) if lo <= message.final_lsn < hi else None
            elif kind is pgoutput.Relation:
                names[message.oid] = f"{message.namespace or 'pg_catalog'}.{message.name}"
            elif begin is not None and kind in (pgoutput.Insert, pgoutput.Update, pgoutput.Delete, pgoutput.Truncate):
                oids = message.relation_oids if kind is pgoutput.Truncate else (message.relation_oid,)
                if any(names.get(oid) == table for oid in oids):
                    found.append(begin)
                    begin = None
        return found

    # ---- the captured tables' changes ----
    def changes(self, start: SourcePosition, end: SourcePosition, tables: Sequence[TableMeta],
                blocks_after: Mapping[str, SourcePosition] | None = None
                ) -> Iterator[ChangeEvent | ChangeBlock | SchemaVersion | SchemaChange]:
        """Row changes of ``tables`` with ``start < position <= end`` (as ``SourcePosition`` s), each after the
        ``SchemaVersion`` it was decoded with when that is not the planned one, and TRUNCATE / RENAME as schema
        changes, in commit order. A table's changes after ``blocks_after[table]`` may come as ``ChangeBlock`` s
        (runs of up to ``BLOCK_ROWS`` messages or ``BLOCK_BYTES`` decoded column by column) instead of events."""
        metas = {m.qualified: m for m in tables}
        blocks_after = blocks_after or {}
        runs: dict[str, _Run] = {}  # per table, its messages waiting to be decoded as blocks
        undecided: list[str] = []  # tables whose run is not in blocks: decided again at the next transaction
        versions: dict[str, _Version] = {}  # the version in force per table (the planned one at first)
        relations: dict[int, tuple[str, _Version | None]] = {}  # relation OID -> (its table, version if captured)
        refused: dict[int, str] = {}  # relation OID -> why its UPDATEs and DELETEs cannot be applied (its identity)
        # the last change per table whose old key is unknown (refused, or ``OldKeyUnknown``): (why, boundary, at)
        unknown_rows = self._unknown_rows = {}
        oids, attnums, storage, catalog = self._catalog(metas)
        created = {n for n, m in metas.items() if n in storage and m.storage is not None
                   and storage_oid(m.storage) != storage_oid(storage[n])}  # published when the committer follows it
        problem = publication_problem(self.client, self.publication,
                                      [n for n in metas if n in attnums and n not in created])
        if problem:
            raise DblogError(problem)
        after, upto = start.as_snapshot(), end.as_snapshot()
        final, row, ts, boundary, skip, first = 0, 0, 0, start, True, start
        batches = self._batches(position_lsn(end))
        head = next(batches, None)  # the peek has begun: it started at the slot's confirmed_flush_lsn of then,
        check_holds(self.client, self.slot, position_lsn(start), str(start))  # which a DBA may have moved
        done = False
        for batch in batches if head is None else itertools.chain((head,), batches):
            lengths = list(map(len, batch))
            span_end, k = _row_spans(batch, lengths), 0
            while k < len(batch):
                payload = batch[k]
                tag = payload[0]
                if tag in _ROW_TAGS:  # Insert, Update, Delete: the hot path, a span of one relation's at a time
                    position_row, count = row, span_end[k] - k
                    if skip:  # the transaction is at or before ``start`` (a whole transaction is on one side)
                        row, k = row + count, k + count
                        continue
                    oid = _OID(payload, 1)[0]
                    name, version = relations.get(oid, _NOT_CAPTURED)
                    if version is None:
                        row, k = row + count, k + count
                        continue
                    if refused and oid in refused:  # one by one: its UPDATEs and DELETEs are not applied
                        count = 1
                        if tag != _INSERT:  # its old key is unknown: said once per table, at the last one
                            unknown_rows[name] = (refused[oid], boundary, _at(first, position_row))
                            row, k = row + 1, k + 1
                            continue
                    run = runs.get(name)
                    if run is None or run.version is not version:
                        if run is not None:
                            yield from run.flush(self)
                        pos = _at(first, position_row)
                        if versions.get(name) is not version:
                            if version.signature != self._planned(metas[name]).signature or name in versions:
                                yield SchemaVersion(version.meta, pos)
                            versions[name] = version
                        after_block = blocks_after.get(name)
                        run = runs[name] = _Run(name, version, after_block is not None and pos > after_block)
                        if not run.blocks:
                            undecided.append(name)
                    if run.blocks:
                        while count:
                            taken = run.add(batch[k:k + count], lengths[k:k + count], first, row, ts)
                            row, k, count = row + taken, k + taken, count - taken
                            if run.full:
                                yield from run.flush(self)
                        continue
                    row, k = row + 1, k + 1
                    yield from self._known_row_events(name, version, tag, payload, _at(first, position_row), ts,
                                                      boundary)
                    continue
                k += 1
                message = pgoutput.decode(payload)
                kind = type(message)
                if kind is pgoutput.Begin:
                    final, row, ts = message.final_lsn, 0, message.commit_ts_us // 1000
                    first = change_position(final)
                    if first > upto:
                        done = True
                        break
                    for name in undecided:  # their blocks may start in this transaction
                        runs.pop(name, None)
                    undecided.clear()
                    skip = first <= after  # and so is every row of it: ``after`` is a snapshot position
                    boundary = lsn_position(final)
                    continue
                if kind is not pgoutput.Commit:
                    for waiting in runs.values():  # the rows before a Relation, Truncate or Origin come first
                        yield from waiting.flush(self)
                if kind is pgoutput.Relation:
                    name = f"{message.namespace or 'pg_catalog'}.{message.name}"
                    renamed = oids.get(message.oid)
                    if renamed is not None and renamed != name:
                        pos = change_position(final, row)
                        if after < pos:
                            yield SchemaChange(renamed, "rename", f"(table renamed to {name} in the WAL)", boundary,
                                               pos)
                    if name not in metas:
                        relations[message.oid] = (name, None)
                        continue
                    version = self._version(message, versions.get(name) or self._planned(metas[name]))
                    relations[message.oid] = (name, version)
                    problem = identity_problem(message, metas[name]) or catalog.partition_identity.get(name)
                    if problem:
                        refused[message.oid] = problem
                    else:
                        refused.pop(message.oid, None)
                    continue
                if kind is pgoutput.Truncate:
                    pos = change_position(final, row)
                    row += 1
                    if pos <= after:
                        continue
                    for oid in message.relation_oids:
                        name, version = relations.get(oid, ("", None))
                        if version is not None:
                            yield SchemaChange(name, "truncate", f"TRUNCATE {name} (in the WAL)", boundary, pos)
                # Commit, Origin, Type, LogicalMessage: nothing to emit (positions come from Begin)
            if done:
                break
        for run in runs.values():
            yield from run.flush(self)
        for name, (problem, at, pos) in unknown_rows.items():
            if name not in catalog.key_problems:  # else the table is read again, with the key it has now
                yield self._unreadable(metas[name], problem, at, pos)
        if start < end:
            latest = {n: v.meta for n, v in relations.values() if v is not None}  # the last Relation of each
            latest.update((n, v.meta) for n, v in versions.items())
            yield from self._unlogged_changes(metas, attnums, storage, created, start, end, catalog, latest)

    def _unlogged_changes(self, metas: Mapping[str, TableMeta], attnums: Mapping[str, Mapping[str, int]],
                          storage: Mapping[str, str], created: set[str], start: SourcePosition,
                          end: SourcePosition, catalog: "_Catalog", latest: Mapping[str, TableMeta] | None = None
                          ) -> Iterator[SchemaChange]:
        """A schema change at ``end`` for each table whose rows may have changed without a change in the WAL
        since its meta was read, so that the committer reads it again: ``recreate``, a column dropped and added
        again (its rows now hold the new column's default, not the old values); ``rewrite``, the table's files
        replaced or its partitions changed (``schema.storage_identities``); ``UNREADABLE`` while a partition's
        changes are not in the WAL (``schema.outside_the_wal``: SET UNLOGGED, or a foreign table attached), which
        stops the reader until SET LOGGED or DETACH gives the table new files. The catalog says it, not the WAL: it
        happened after the previous read's check, so it spans the read (from ``start``: ``fail`` commits none of
        the read's rows; its position is the read's end), and its statement names what changed. A key that no
        longer identifies the rows (``schema.key_problem``) is a ``rewrite`` too: the committer plans the table
        again with the key it has now, or stops in one line when it has none. Columns added, dropped or renamed
        after the table's last change in the read (whose Relation, in ``latest``, or its meta has other columns)
        are an ``alter`` at ``end``: the committer follows them as it follows a Relation's."""
        collations, key_problems = catalog.collations, catalog.key_problems
        for name, meta in metas.items():
            if name not in attnums:  # the lake keeps its rows until a table of that name exists again
                if meta.storage:  # known, and not gone already
                    yield SchemaChange(name, "drop", f"({name} is gone from the catalog: dropped or renamed; "
                                                     f"PostgreSQL's WAL carries no DDL)", start, end)
                continue
            if name in created:
                yield SchemaChange(name, "create", f"({name} is a new table (OID {storage_oid(storage.get(name))}): "
                                                   f"dropped and created again; PostgreSQL's WAL carries no DDL)", start, end)
                continue
            outside = outside_the_wal(storage.get(name))
            if outside:  # its changes are not in the stream from now on: the tail stops until they are
                yield SchemaChange(name, UNREADABLE, f"{name} has partitions whose changes are not in the WAL: "
                                   f"{outside_the_wal_names(self.client, outside)}; ALTER TABLE ... SET LOGGED, or "
                                   f"DETACH PARTITION a foreign one (the tail then reads {name} again)", start, end)
                continue
            recreated = self.recreated_columns(meta, attnums[name])
            if recreated:
                moves = ", ".join(f"{c} (attnum {meta.column(c).ordinal} -> {attnums[name][c]})" for c in recreated)
                yield SchemaChange(name, "recreate", f"(column {moves} of {name} dropped and added again: in the "
                                                     f"catalog; PostgreSQL's WAL carries no DDL)", start, end)
            elif reordered := [(c, collation, now) for c, collation in ((k, meta.column(k).collation)
                                                                        for k in meta.key_columns)
                               if (now := collations.get(name, {}).get(c, collation)) != collation]:
                moves = ", ".join(f"{c} ({old or 'none'} -> {new or 'none'})" for c, old, new in reordered)
                yield SchemaChange(name, "rewrite", f"(the collation of key column {moves} of {name} changed: the "
                                                    f"keys sort in another order, so the planned chunks no longer "
                                                    f"apply; PostgreSQL's WAL carries no DDL)", start, end)
            elif name in key_problems:
                yield SchemaChange(name, "rewrite", f"({key_problems[name]}: two rows may have shared the capture's "
                                                    f"key meanwhile, so the table is read again, with the key it has "
                                                    f"now; PostgreSQL's WAL carries no DDL)", start, end)
            elif meta.storage is not None and storage_files(storage.get(name, meta.storage)) != storage_files(meta.storage):
                yield SchemaChange(name, "rewrite", f"({name} has new files ({storage[name][:200]}): rewritten by "
                                                    f"ALTER COLUMN ... TYPE ... USING, SET LOGGED, VACUUM FULL, CLUSTER "
                                                    f"or TRUNCATE, or a partition attached or detached; the WAL holds "
                                                    f"no row changes for it)", start, end)
            elif changed_partition_identities(meta.storage, storage.get(name)):
                yield SchemaChange(name, "rewrite", f"(the replica identity of a partition of {name} changed (ALTER "
                                                    f"TABLE ... REPLICA IDENTITY, not in the WAL): while it did not "
                                                    f"carry the key, an UPDATE of the key may have come with no old "
                                                    f"key)", start, end)
            elif renamed_labels(meta.storage, storage.get(name)):
                yield SchemaChange(name, "rewrite", f"(an enum label of a column of {name} was renamed (ALTER TYPE ... "
                                                    f"RENAME VALUE): its rows show the new label, with no change in "
                                                    f"the WAL)", start, end)
            elif changed_composites(meta.storage, storage.get(name)):
                yield SchemaChange(name, "rewrite", f"(a composite type the values of {name} hold gained, lost or "
                                                    f"changed an attribute (ALTER TYPE ... ADD/DROP/ALTER ATTRIBUTE): "
                                                    f"its rows print otherwise, with no change in the WAL)", start, end)
            elif (was := storage_publication(meta.storage)) and was != storage_publication(storage.get(name)):
                yield SchemaChange(name, "rewrite", f"(publication {self.publication} was altered for {name} since it "
                                                    f"was read (ALTER PUBLICATION: the table dropped from it and added "
                                                    f"back, or what it publishes narrowed and widened again); changes "
                                                    f"of that while may be missing from the stream)", start, end)
            elif ((now := catalog.columns.get(name)) is not None
                  and changed_column_list(meta.storage, now, meta.column_names)
                  and set(now) != (had := {c.name for c in (latest or {}).get(name, meta).columns})):
                yield SchemaChange(name, "alter", f"(the columns of {name} changed with no row change after it: "
                                                  f"{', '.join(sorted(set(now) - had)) or 'none'} now, "
                                                  f"{', '.join(sorted(had - set(now))) or 'none'} gone; PostgreSQL's "
                                                  f"WAL carries no DDL)", end, end)

    def _unreadable(self, meta: TableMeta, problem: str, boundary: SourcePosition, pos: SourcePosition
                    ) -> SchemaChange:
        """The last UPDATE or DELETE of a read whose old key the replica identity did not carry (``problem``:
        ``identity_problem``; the one the lake needs if any is): once the identity carries the key again, an
        ``identity`` change (the committer reads the table again, as after a TRUNCATE, which covers every such
        change before it); until then ``UNREADABLE``, which stops the reader when the lake needs it (past the
        table's floor)."""
        name = meta.qualified
        what = f"{name}: an UPDATE or DELETE at {pos} under {problem}"
        misses = identity_misses_key(self.client, [meta])
        if not misses:
            return SchemaChange(name, "identity", f"({what}: its row is unknown, and the identity carries the key "
                                                  f"now: the table is read again)", boundary, pos)
        key = key_problems(self.client, {relation_oid(self.client, name): meta})
        if key:  # a new key since the read began, which the identity carries: read again with it
            return SchemaChange(name, "rewrite", f"({what}: {key[name]}: the table is read again, with the key it "
                                                 f"has now)", boundary, pos)
        return SchemaChange(name, UNREADABLE, f"{what}, so the row it changed is unknown: {identity_fix(misses)} "
                                              f"(the tail then reads the table again)", boundary, pos)

    def _planned(self, meta: TableMeta) -> _Version:
        version = self._planned_versions.get(meta.qualified)
        if version is None or version.meta is not meta:
            version = self._planned_versions[meta.qualified] = _Version(meta)
        return version

    def _version(self, relation: pgoutput.Relation, current: _Version) -> _Version:
        """The version a Relation message describes: ``current`` when its columns are the same (a domain is
        typed as its base type, as ``schema.describe_table`` does)."""
        types = resolve_types(self.client, {c.type_oid for c in relation.columns})
        signature = []
        for column in relation.columns:
            base, base_typmod = types.get(column.type_oid, (column.type_oid, -1))
            signature.append((column.name, base, column.typmod if column.typmod >= 0 else base_typmod))
        if tuple(signature) == tuple((n, o, -1 if t is None else t) for n, o, t in current.signature):
            return current
        old = {c.name: c for c in current.meta.columns}
        formats = dict(self.client.query("SELECT oid, format_type(oid, NULL) FROM pg_type WHERE oid = ANY(%s)",
                                         (sorted({o for _, o, _ in signature}),)))
        columns = []
        for name, oid, typmod in signature:
            was = old.get(name)
            if was is not None and (was.type_oid, -1 if was.typmod is None else was.typmod) == (oid, typmod):
                columns.append(was)
            else:  # a new or retyped column: nullable until the catalog says otherwise (a re-plan reads it)
                columns.append(Column(name, formats.get(oid, str(oid)), formats.get(oid, str(oid)), True,
                                      type_oid=oid, typmod=typmod))
        key = current.meta.key_columns
        if not set(key) <= {c.name for c in columns}:
            key = relation.key_columns
        meta = replace(current.meta, columns=tuple(columns), key_columns=tuple(key))
        return _Version(meta)

    def _catalog(self, metas: dict[str, TableMeta]) -> tuple[dict[int, str], dict[str, dict[str, int]], dict[str, str],
                                                             "_Catalog"]:
        """The captured tables' OIDs now (a RENAME keeps the OID: a later Relation under another name is one),
        each one's columns' attnums, its storage (``schema.storage_identities``), and what orders and identifies
        its rows (``_Catalog``): four queries whatever the tables, and one more when some are partitioned."""
        if not metas:
            return {}, {}, {}, _Catalog({}, {})
        rows = self.client.query(
            "SELECT c.oid, n.nspname, c.relname, a.attname, a.attnum, cn.nspname, co.collname, a.attnotnull, "
            f"c.relkind = 'p', {GENERATED if self.client.version_num >= 120000 else 'false'} "
            "FROM unnest(%s::text[], %s::text[]) AS w(s, t) "
            "JOIN pg_namespace n ON n.nspname = w.s JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = w.t "
            "AND c.relkind IN ('r', 'p') JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
            "LEFT JOIN pg_collation co ON co.oid = a.attcollation LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace",
            tuple(map(list, zip(*(split_name(name) for name in metas)))))
        oids: dict[int, str] = {}
        attnums: dict[str, dict[str, int]] = {}
        collations: dict[str, dict[str, str | None]] = {}
        not_null: dict[int, dict[str, bool]] = {}
        partitioned: set[str] = set()
        columns: dict[str, dict[str, int]] = {}
        for oid, schema, table, column, attnum, coll_schema, coll_name, attnotnull, is_partitioned, generated in rows:
            name = f"{schema}.{table}"
            oids[int(oid)] = name
            if is_partitioned:
                partitioned.add(name)
            if not generated:
                columns.setdefault(name, {})[column] = int(attnum)
            attnums.setdefault(name, {})[column] = int(attnum)
            collations.setdefault(name, {})[column] = collation_name(coll_schema, coll_name)
            not_null.setdefault(int(oid), {})[column] = bool(attnotnull)
        storage = {oids[oid]: files for oid, files in storage_identities(self.client, sorted(oids),
                                                                          self.publication).items()}
        problems = key_problems(self.client, {oid: metas[name] for oid, name in oids.items()}, not_null)
        misses = identity_misses_key(self.client, [metas[name] for name in sorted(partitioned)]) if partitioned else {}
        partition_identity = {name: f"the replica identity of partition {', '.join(r for r in rels if r != name)}, "
                                    f"which does not carry the capture's key ({', '.join(metas[name].key_columns)})"
                              for name, rels in misses.items() if any(r != name for r in rels)}
        return oids, attnums, storage, _Catalog(collations, problems, partition_identity,
                                                columns)

    @staticmethod
    def recreated_columns(meta: TableMeta, attnums: Mapping[str, int]) -> list[str]:
        """``meta``'s columns the catalog has under another attnum: dropped and added again since ``meta`` was
        read (DDL is not in the WAL, and when the column was the last one the Relation message is unchanged)."""
        return [c.name for c in meta.columns if c.ordinal is not None and attnums.get(c.name, c.ordinal) != c.ordinal]

    def _row_events(self, name: str, version: _Version, tag: int, buf: bytes, pos: SourcePosition, ts: int
                    ) -> list[ChangeEvent]:
        """The events of one Insert / Update / Delete message (``tag``) of ``name``, decoded by ``version``."""
        try:
            after, before, old_kind, toast = decode_row_message(buf, version.decode)
        except UnrepresentableValue as exc:
            raise NoLakeValue(f"a change of {name} at {pos}: {exc}; the lake has no value for it: change it at the "
                              f"source, then re-snapshot the table (dblog resnapshot --table {name})") from None
        unchanged = ()
        if toast:
            after, unchanged = self._unchanged_toast(name, version, after, before if old_kind == "O" else None, pos)
        if tag == _UPDATE and before is None:  # key unchanged, REPLICA IDENTITY DEFAULT: no old image
            before = {k: after[k] for k in version.key_columns}
        elif tag != _INSERT and (lacking := [k for k in version.key_columns if before.get(k) is None]):
            raise OldKeyUnknown(f"an old key without {', '.join(lacking)} (the replica identity of the partition that "
                                f"holds the row names other columns)")
        return row_change(name, pos, version.key_columns, before, after, ts, unchanged)

    def _known_row_events(self, name: str, version: _Version, tag: int, buf: bytes, pos: SourcePosition, ts: int,
                          boundary: SourcePosition) -> list[ChangeEvent | SchemaChange]:
        """``_row_events``, with a row whose old key is unknown (``OldKeyUnknown``) kept out and recorded as the
        table's last such change in this read (``changes``: the table is read again, or the reader stops), and a
        row holding a value the lake has none for (``NoLakeValue``) as an ``UNREADABLE`` change: it stops the
        reader where the lake needs it, and is passed once every chunk of the table was read after it (a
        re-snapshot, after the value was changed at the source), where a stop for good left no way on."""
        try:
            return self._row_events(name, version, tag, buf, pos, ts)
        except OldKeyUnknown as exc:
            self._unknown_rows[name] = (str(exc), boundary, pos)
            return []
        except NoLakeValue as exc:
            return [SchemaChange(name, UNREADABLE, str(exc), boundary, pos)]

    @staticmethod
    def _unchanged_toast(name: str, version: _Version, after: dict, old: dict | None, pos: SourcePosition
                         ) -> tuple[dict, tuple[str, ...]]:
        """``after`` with its unchanged TOASTed values taken from the old row (REPLICA IDENTITY FULL), and the
        columns still without one (``None`` in ``after``): the committer takes them from the key's previous
        image (``readers.unchanged_values``)."""
        missing = [c for c, v in after.items() if v is UNCHANGED_TOAST and (old is None or old.get(c) is UNCHANGED_TOAST)]
        if set(missing) & set(version.key_columns):
            raise DblogError(f"an UPDATE of {name} at {pos} left key column(s) {', '.join(missing)} unchanged and "
                             f"TOASTed, so the WAL does not hold the key: " + TOAST_FIX.format(table=name))
        filled = {c: (None if c in missing else old[c]) if v is UNCHANGED_TOAST else v for c, v in after.items()}
        return filled, tuple(missing)

