"""The lake's layout and its rows: source columns plus ``_``-prefixed metadata.

    SINK/DB.TABLE/changelog   Delta, append-only: every snapshot row and every change (``lake_tables``)
    SINK/DB.TABLE/current     Delta, the table's live rows, partitioned by ``_chunk``

Changelog rows carry ``_op`` (r snapshot, c insert, u update, d delete), ``_pos`` (the sortable
position: a snapshot row its chunk's HW), ``_ts_ms``, ``_kind`` (Flink's RowKind: +I/+U/-D), ``_chunk``
(the plan's chunk of the key) and ``_before`` (the before image). ``current`` holds per key the row of
the greatest ``_pos`` that is not a delete, with ``_op``, ``_pos``, ``_ts_ms`` and ``_chunk``.

Rows on their way to the changelog may carry one more column, ``_unchanged`` (``UNCHANGED``): the columns
whose value the source did not send (PostgreSQL's unchanged TOASTed values). The committer fills them from
the key's previous image and drops the column; it is never written.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.events import ROW_KINDS, ChangeEvent

UNCHANGED = "_unchanged"
UNCHANGED_TYPE = pa.list_(pa.string())


def changelog_schema(source: pa.Schema) -> pa.Schema:
    before = pa.struct([pa.field(f.name, f.type) for f in source])
    return pa.schema([*[pa.field(f.name, f.type) for f in source],
                      pa.field("_op", pa.string()), pa.field("_pos", pa.string()), pa.field("_ts_ms", pa.int64()),
                      pa.field("_kind", pa.string()), pa.field("_chunk", pa.int32()), pa.field("_before", before)])


def current_schema(source: pa.Schema) -> pa.Schema:
    """``current``: the source's columns, the position and kind of the change that left the row, its chunk."""
    return pa.schema([*[pa.field(f.name, f.type) for f in source], pa.field("_op", pa.string()),
                      pa.field("_pos", pa.string()), pa.field("_ts_ms", pa.int64()), pa.field("_chunk", pa.int32())])


def lake_uri(sink: str | os.PathLike, table: str, kind: str) -> str:
    """``SINK/DB.TABLE/KIND`` for a local path or an object store URI (``s3://BUCKET/PREFIX``)."""
    sink = str(sink)
    if "://" not in sink:
        sink = str(Path(sink).absolute())
    return f"{sink.rstrip('/')}/{table}/{kind}"


def changelog_uri(sink: str | os.PathLike, table: str) -> str:
    return lake_uri(sink, table, "changelog")


def current_uri(sink: str | os.PathLike, table: str) -> str:
    return lake_uri(sink, table, "current")


def constant_column(value: str | int, type_: pa.DataType, n: int) -> pa.Array:
    """``n`` copies of a string or integer, built from buffers: pyarrow's conversion of Python values
    (``pa.scalar``, ``pa.array``) imports pandas on first use, ≈0.5 s of CPU in every Spark Python
    worker that writes a chunk and would otherwise never need it."""
    if pa.types.is_string(type_):
        data = str(value).encode()
        offsets = np.arange(n + 1, dtype=np.int32) * len(data)
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(np.full(n, value, dtype=type_.to_pandas_dtype()))])


def snapshot_rows(rows: pa.Table, pos: str, chunk_id: int, ts_ms: int, source: pa.Schema) -> pa.Table:
    n = rows.num_rows
    schema = changelog_schema(source)
    columns = [rows.column(f.name) for f in source] + [
        constant_column("r", pa.string(), n), constant_column(pos, pa.string(), n),
        constant_column(ts_ms, pa.int64(), n), constant_column("+I", pa.string(), n),
        constant_column(chunk_id, pa.int32(), n), pa.nulls(n, schema.field("_before").type)]
    return pa.Table.from_arrays(columns, schema=schema)


def position_rows(rows: pa.Table, source: pa.Schema, op: str, pos: str, chunks: pa.Array | pa.ChunkedArray,
                  before: bool = False) -> pa.Table:
    """Changelog rows a read writes at one position ``pos`` for rows of ``source``'s columns: ``op`` "r" (the
    row as it is: ``_kind`` +I) or "d" (the key is gone: ``_kind`` -D; ``before`` puts the row in
    ``_before`` as well); ``chunks``: each row's chunk."""
    n = rows.num_rows
    schema = changelog_schema(source)
    image = schema.field("_before").type
    columns = [rows.column(f.name) for f in source]
    return pa.Table.from_arrays(columns + [
        constant_column(op, pa.string(), n), constant_column(pos, pa.string(), n),
        constant_column(int(time.time() * 1000), pa.int64(), n), constant_column("-D" if op == "d" else "+I", pa.string(), n),
        chunks.cast(pa.int32()),
        pa.StructArray.from_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns],
                                   fields=list(image)) if before else pa.nulls(n, image)], schema=schema)


def event_rows(events: Sequence[ChangeEvent], chunks: Sequence[int], source: pa.Schema) -> pa.Table:
    """Stream rows: a delete keeps its key columns (and the rest of its before image) in place;
    ``chunks`` is each event's key's chunk in the plan. The images go to Arrow as structs in one
    C++ call each (the tail's hot path: no Python dict per row is built here). Events with ``unchanged``
    columns add the ``UNCHANGED`` column (null where every value was sent)."""
    image_type = changelog_schema(source).field("_before").type
    unchanged = None
    if any(e.unchanged for e in events):
        unchanged = pa.array([list(e.unchanged) if e.unchanged else None for e in events], UNCHANGED_TYPE)
    return _changelog_rows(
        source, pa.array([e.after if e.after is not None else e.before for e in events], image_type),
        pa.array([e.before for e in events], image_type), pa.array([e.op for e in events], pa.string()),
        pa.array([e.pos.encode() for e in events], pa.string()), pa.array([e.ts_ms for e in events], pa.int64()),
        chunks, unchanged)


def block_rows(block: ChangeBlock, chunks: Sequence[int], source: pa.Schema) -> pa.Table:
    """The rows of a ``ChangeBlock``: the same as ``event_rows`` of the events of the same changes."""
    return _changelog_rows(source, block.images, block.before, block.ops, block.positions, block.ts_ms, chunks)


_OPS, _KINDS = pa.array(list(ROW_KINDS), pa.string()), pa.array(list(ROW_KINDS.values()), pa.string())


def _changelog_rows(source: pa.Schema, images: pa.StructArray, before: pa.StructArray, ops: pa.Array,
                    positions: pa.Array, ts_ms: pa.Array, chunks: Sequence[int],
                    unchanged: pa.Array | None = None) -> pa.Table:
    schema = changelog_schema(source)
    kinds = _KINDS.take(pc.index_in(ops, value_set=_OPS))
    columns = images.flatten() + [ops, positions, ts_ms, kinds, pa.array(chunks, pa.int32()), before]
    if unchanged is not None:
        schema = schema.append(pa.field(UNCHANGED, UNCHANGED_TYPE))
        columns.append(unchanged)
    return pa.Table.from_arrays(columns, schema=schema)
