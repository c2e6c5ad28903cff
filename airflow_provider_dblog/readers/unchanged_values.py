"""Values the source did not send, taken from the key's previous image before a range is committed.

PostgreSQL leaves an unchanged TOASTed value out of an UPDATE's new row (pgoutput's ``u``), and under
REPLICA IDENTITY DEFAULT the old row holds only the key, so the change itself cannot say what the value
is. It is the value the key had just before the change: its latest image at a smaller position. That is
an earlier row of the same key in the range being committed, or else what the lake holds: every change
before the range is committed in order, so ``current``'s row of the key is that image when its position is
smaller than the change's; when a chunk read at a later position is already in ``current``, the changelog's
latest row of the key before the change is (``LakeTables.previous_images``). A key change is a delete of the
old key and an insert of the new one at the next row: the insert's values come from the old key.

A value found nowhere stops the commit in one line, before anything is written: never a NULL for it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Iterator, Sequence

import pyarrow as pa

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.exact import exact_key
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.lake import UNCHANGED
from airflow_provider_dblog.store.lake_schema import LAKE_COLUMNS

# {exact key: (position, chunk)} -> {exact key: image}: the lake's latest image of each key before its position
PreviousImages = Callable[[dict[tuple, tuple[str, int]]], dict[tuple, dict]]
FIX = ("make the source send whole rows (PostgreSQL: ALTER TABLE {table} REPLICA IDENTITY FULL), then read the "
       "table again (dblog resnapshot --table {table})")


def has_unchanged(parts: Sequence[pa.Table | pa.RecordBatch]) -> bool:
    return any(UNCHANGED in p.schema.names for p in parts)


def fill_unchanged(table: str, parts: Sequence[pa.Table | pa.RecordBatch], key_columns: Sequence[str],
                   previous_images: PreviousImages) -> list[pa.Table]:
    """``parts`` (changelog rows in position order per key, some with an ``UNCHANGED`` column) with every
    value the source did not send filled in, and without that column."""
    tables = [p if isinstance(p, pa.Table) else pa.Table.from_batches([p]) for p in parts]
    if not has_unchanged(tables):
        return tables
    rows = _Rows(tables, key_columns)
    marked = rows.marked()
    if not marked:
        return [t.drop_columns([UNCHANGED]) if UNCHANGED in t.schema.names else t for t in tables]
    wanted = rows.lake_requests(marked)
    found = previous_images(wanted) if wanted else {}
    fills = rows.fills(marked, found, table)
    return [_apply(t, fills.get(i, {})) for i, t in enumerate(tables)]


class _Rows:
    """The parts' positions, ops and keys as Python values (only computed when some value is missing); a key is
    looked up and asked of the lake by its ``exact_key`` (a NaN key is its own), named by its values."""

    def __init__(self, tables: list[pa.Table], key_columns: Sequence[str]):
        self.tables, self.key_columns = tables, tuple(key_columns)
        self.order = []  # (pos, part, row, op, key, chunk, unchanged columns, exact key)
        for i, t in enumerate(tables):
            unchanged = t[UNCHANGED].to_pylist() if UNCHANGED in t.schema.names else [None] * t.num_rows
            keys = zip(*[t[k].to_pylist() for k in self.key_columns])
            self.order.extend((*r, exact_key(r[4])) for r in zip(
                t["_pos"].to_pylist(), [i] * t.num_rows, range(t.num_rows), t["_op"].to_pylist(), keys,
                t["_chunk"].to_pylist(), unchanged))
        self.order.sort(key=lambda r: r[0])
        self.by_pos = {r[0]: r for r in self.order}

    def marked(self) -> list[tuple]:
        return [r for r in self.order if r[6]]

    def source_of(self, row: tuple) -> tuple:
        """The row whose key's previous image holds ``row``'s missing values: ``row``, or for the insert of a
        key change the deleted old key's (the row before it at the same position)."""
        if row[3] == "c":
            pos = SourcePosition.decode(row[0])
            before = SourcePosition(pos.seq, pos.offset, pos.row - 1, pos.file)
            deleted = self.by_pos.get(before.encode())
            if deleted is not None and deleted[3] == "d" and _key_change(before, pos):
                return deleted
        return row

    def lake_requests(self, marked: list[tuple]) -> dict[tuple, tuple[str, int]]:
        """For each key whose first missing values have no earlier image in the range: (position, chunk). A key
        change's old key is asked at its delete's position, not the insert's: a range read again after a tail died
        past its changelog commit finds that delete already in the lake, just before the insert."""
        first_marked = {}  # exact key -> (position, chunk)
        for row in marked:
            source = self.source_of(row)
            first_marked.setdefault(source[7], (source[0], source[5]))
        live = {}  # exact key -> position of its first image in the range that holds values
        for row in self.order:
            if row[3] != "d":
                live.setdefault(row[7], row[0])
        return {exact: (pos, chunk) for exact, (pos, chunk) in first_marked.items()
                if exact not in live or live[exact] >= pos}

    def fills(self, marked: list[tuple], found: dict[tuple, dict], table: str) -> dict[int, dict[int, dict]]:
        """part -> row -> {column: value}, walking the keys' images in position order."""
        wanted = {self.source_of(r)[7] for r in marked} | {r[7] for r in marked}
        rows = [r for r in self.order if r[7] in wanted]
        images = self._images(rows)
        latest = dict(found)  # exact key -> its latest image with values (the lake's, the range's)
        fills: dict[int, dict[int, dict]] = {}
        for row in rows:
            pos, part, index, op, key = row[:5]
            if op == "d":
                continue  # the old key's image stays: a key change's insert reads it
            image = images[(part, index)]
            if row[6]:
                before = latest.get(self.source_of(row)[7])
                missing = [c for c in row[6] if before is None or c not in before]
                if missing:
                    raise DblogError(f"{table}: the change of key {key} at {SourcePosition.decode(pos)} left "
                                     f"{', '.join(missing)} unchanged and the source did not send the value, and "
                                     f"the lake holds no earlier image of the key to take it from; "
                                     + FIX.format(table=table))
                values = {c: before[c] for c in row[6]}
                fills.setdefault(part, {})[index] = values
                image = {**image, **values}
            latest[row[7]] = image
        return fills

    def _images(self, rows: list[tuple]) -> dict[tuple[int, int], dict]:
        by_part: dict[int, list[int]] = {}
        for r in rows:
            by_part.setdefault(r[1], []).append(r[2])
        images = {}
        for part, indices in by_part.items():
            t = self.tables[part]
            names = [n for n in t.schema.names if n not in LAKE_COLUMNS]  # a source's "_body" is its own
            for index, image in zip(indices, t.select(names).take(indices).to_pylist()):
                images[(part, index)] = image
        return images


def _apply(table: pa.Table, fills: dict[int, dict]) -> pa.Table:
    """``table`` with the filled values set, without the ``UNCHANGED`` column."""
    if UNCHANGED in table.schema.names:
        table = table.drop_columns([UNCHANGED])
    columns = sorted({c for values in fills.values() for c in values})
    for name in columns:
        i = table.schema.get_field_index(name)
        values = table[name].to_pylist()
        for index, filled in fills.items():
            if name in filled:
                values[index] = filled[name]
        table = table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))
    return table


def carry_unchanged(events: Iterable[ChangeEvent]) -> Iterator[tuple[ChangeEvent, tuple]]:
    """The events in order, each with the values the source did not send taken from its key's previous image
    among the events before it (for the insert of a key change: the deleted old key's), and the key whose
    image holds them. What no earlier event holds stays in ``unchanged``: the caller takes it from the lake
    (``steps.verify`` brings ``current`` forward with such events without committing them)."""
    images: dict[tuple, tuple[dict, frozenset, tuple]] = {}  # exact key -> (latest after image, lacking, its source)
    previous = None
    for event in events:
        source = event.key
        if event.op == "c" and previous is not None and previous.op == "d" and _key_change(previous.pos, event.pos):
            source = previous.key
        if event.unchanged and exact_key(source) in images:
            image, lacking, origin = images[exact_key(source)]
            have = {c: image[c] for c in event.unchanged if c not in lacking and c in image}
            rest = tuple(c for c in event.unchanged if c not in have)
            event = replace(event, after={**event.after, **have}, unchanged=rest)
            if rest:
                source = origin  # the earlier image lacked them too: they are in its source's lake row
        if event.after is not None:
            images[exact_key(event.key)] = (event.after, frozenset(event.unchanged), source)
        previous = event
        yield event, source


def _key_change(deleted: SourcePosition, inserted: SourcePosition) -> bool:
    """The two events ``core.events.row_change`` makes of one key-changing update (rows 2i and 2i + 1)."""
    return ((deleted.seq, deleted.offset, deleted.file) == (inserted.seq, inserted.offset, inserted.file)
            and deleted.row % 2 == 0 and inserted.row == deleted.row + 1)
