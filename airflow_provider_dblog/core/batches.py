"""Snapshot batches: chunks of one or several tables read by one Spark application (one mapped task).

Small tables share a batch, so 200 tables of 1,000 rows take one application instead of 200; a big
table's chunks still spread over many batches. Packing is by estimated rows against a row budget.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

LABEL_LENGTH = 200  # Airflow shows the label as the mapped instance's name: keep it readable


@dataclass(frozen=True)
class BatchGroup:
    """Chunks of one table inside a batch."""

    table: str
    chunk_ids: tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    index: int
    groups: tuple[BatchGroup, ...]
    rows: int = 0  # estimated rows (the packing's measure)

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(g.table for g in self.groups)

    @property
    def chunks(self) -> int:
        return sum(len(g.chunk_ids) for g in self.groups)

    def chunk_ids(self, table: str) -> tuple[int, ...]:
        """The batch's chunks of ``table`` (none if it holds no chunk of it)."""
        return next((g.chunk_ids for g in self.groups if g.table == table), ())

    def groups_where(self, keep: Callable[[str, int], bool]) -> list[BatchGroup]:
        """The batch's groups cut to the chunks ``keep(table, chunk_id)`` keeps; a table left with none is left out."""
        return [BatchGroup(g.table, ids) for g in self.groups if (ids := tuple(c for c in g.chunk_ids if keep(g.table, c)))]

    def label(self, key_span=None) -> str:
        """One table: ``shop.orders chunks 0-7 [-∞, 80000)`` (``key_span(table, ids)`` gives the range);
        several: ``12 tables, 14 chunks: shop.a, shop.b, ... crm.z``."""
        if len(self.groups) == 1:
            group = self.groups[0]
            span = f" {key_span(group.table, group.chunk_ids)}" if key_span else ""
            return f"{group.table} chunks {group.chunk_ids[0]}-{group.chunk_ids[-1]}{span}"
        head = f"{len(self.groups)} tables, {self.chunks} chunks: "
        names = ", ".join(self.tables)
        if len(head) + len(names) > LABEL_LENGTH:
            names = names[:LABEL_LENGTH - len(head) - len(self.tables[-1]) - 6].rsplit(", ", 1)[0]
            names += f", ... {self.tables[-1]}"
        return head + names

    def to_dict(self) -> dict:
        return {"groups": [{"table": g.table, "chunks": list(g.chunk_ids)} for g in self.groups], "rows": self.rows}

    @classmethod
    def from_dict(cls, index: int, data: dict) -> "Batch":
        if "table" in data:  # a plan written before batches were packed: one table per batch
            return cls(index, (BatchGroup(data["table"], tuple(data["chunks"])),))
        return cls(index, tuple(BatchGroup(g["table"], tuple(g["chunks"])) for g in data["groups"]),
                   int(data.get("rows", 0)))


@dataclass(frozen=True)
class ChunkWeight:
    """A chunk to pack and its estimated rows."""

    table: str
    chunk_id: int
    rows: int


def chunk_weights(table: str, chunk_ids: Sequence[int], table_rows: int, chunk_size: int) -> list[ChunkWeight]:
    """Estimated rows per chunk: a table split into several chunks has chunks of about ``chunk_size``
    rows (the splitter's target); a table in one chunk has its own row count. At least 1 row each, so
    a batch of empty tables still ends."""
    rows = chunk_size if len(chunk_ids) > 1 else min(table_rows, chunk_size)
    return [ChunkWeight(table, c, max(1, int(rows))) for c in chunk_ids]


def pack_batches(chunks: Iterable[ChunkWeight], budget: int, first_index: int = 0) -> list[Batch]:
    """Consecutive chunks (in the given order: tables kept together, chunks in key order) into batches
    of at most ``budget`` estimated rows; a chunk bigger than the budget gets a batch of its own."""
    if budget <= 0:
        raise ValueError("the row budget must be positive")
    packed: list[list[ChunkWeight]] = []
    rows = 0
    for chunk in chunks:
        if not packed or rows + chunk.rows > budget:
            packed.append([])
            rows = 0
        packed[-1].append(chunk)
        rows += chunk.rows
    return [Batch(first_index + i, _groups(items), sum(c.rows for c in items)) for i, items in enumerate(packed)]


def _groups(items: Sequence[ChunkWeight]) -> tuple[BatchGroup, ...]:
    """Per table (first appearance order) its chunk ids."""
    by_table: dict[str, list[int]] = {}
    for item in items:
        by_table.setdefault(item.table, []).append(item.chunk_id)
    return tuple(BatchGroup(t, tuple(ids)) for t, ids in by_table.items())


def spread(weights: Sequence[int], bins: int) -> list[list[int]]:
    """Indexes of ``weights`` in ``bins`` groups of about equal total weight (largest first onto the
    lightest group): the tasks of a batch whose chunks differ in size finish about together."""
    groups: list[list[int]] = [[] for _ in range(max(1, min(bins, len(weights))))]
    totals = [0] * len(groups)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        lightest = totals.index(min(totals))
        groups[lightest].append(i)
        totals[lightest] += weights[i]
    return [sorted(g) for g in groups if g]
