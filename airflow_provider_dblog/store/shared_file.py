"""One Parquet file, encoded once, added to two Delta tables: a chunk's first read goes to the changelog
and to ``current`` with the same rows, and encoding them twice (delta-rs's writer, once per table) was
most of what the Delta lake cost a snapshot over plain Parquet files (docs/benchmarks.md, issue 16).

The rows are encoded once in the changelog's columns; the same bytes are written under each table's
root and committed there by an add action (delta-rs's ``create_write_transaction``) with the file's
statistics. ``current``'s copy carries three columns ``current`` does not declare (``_kind``,
``_before``, and its partition column ``_chunk``): Delta readers read a file by the table's schema and
ignore the rest (delta-rs, DuckDB's delta extension and Spark's Delta reader all do).

Statistics (what readers skip files by): exact min / max / null count of integer and date columns and of
short text columns (the metadata: ``_op``, ``_pos``), none for the others (a reader then reads the file
instead of skipping it; never a wrong answer).
"""
from __future__ import annotations

import io
import json
import time
import uuid
from typing import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_dblog.store.atomic import dictionary_columns
from airflow_provider_dblog.store.files import Files
from airflow_provider_dblog.store.object_store import is_object_store

# a text column's statistics are kept only if they are exact (Delta readers compare whole values)
MAX_TEXT_STAT = 32


def encode(rows: pa.Table, statistics: Sequence[str]) -> bytes:
    """``rows`` as one Parquet file: snappy, dictionary pages for text, binary, dates and the columns
    that repeat one value (the metadata), Parquet statistics only for ``statistics`` (computing them for
    every text column cost a fifth of the write)."""
    constant = [name for name in ("_ts_ms", "_chunk") if name in rows.schema.names]
    buffer = io.BytesIO()
    pq.write_table(rows, buffer, compression="snappy", use_dictionary=dictionary_columns(rows.schema) + constant,
                   write_statistics=[name for name in statistics if name in rows.schema.names])
    return buffer.getvalue()


def file_stats(rows: pa.Table, columns: Sequence[str]) -> str:
    """The add action's ``stats`` JSON for ``rows`` over ``columns`` (top-level, non-partition ones)."""
    mins, maxs, nulls = {}, {}, {}
    for name in columns:
        column = rows.column(name)
        kind = column.type
        if pa.types.is_struct(kind):
            continue
        nulls[name] = column.null_count
        if not (pa.types.is_integer(kind) or pa.types.is_date32(kind) or pa.types.is_string(kind)):
            continue
        bounds = pc.min_max(column).as_py()
        low, high = bounds["min"], bounds["max"]
        if low is None:
            continue
        if pa.types.is_string(kind) and max(len(low), len(high)) > MAX_TEXT_STAT:
            continue
        if pa.types.is_date32(kind):
            low, high = low.isoformat(), high.isoformat()
        mins[name], maxs[name] = low, high
    return json.dumps({"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def writable(table_uri: str) -> bool:
    """Whether ``add_file`` can write under ``table_uri``: a local path or ``s3://`` (other stores keep
    delta-rs's own writer)."""
    return not is_object_store(table_uri) or table_uri.startswith("s3://")


def add_file(table_uri: str, data: bytes, folder: str = "") -> tuple[str, int]:
    """Write ``data`` as a new file under the table's root (``folder``: a partition's directory); returns
    its path relative to the root (what the add action names) and its size."""
    path = f"{folder}/" if folder else ""
    path += f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    Files(table_uri, "--sink").write_bytes(path, data)
    return path, len(data)


def commit_file(table, path: str, size: int, stats: str, partition: Mapping[str, str] | None = None,
                commit=None) -> None:
    """Append the written file ``path`` to ``table`` in one Delta commit (``commit``: its properties,
    e.g. an app transaction)."""
    from deltalake.transaction import AddAction

    partition = dict(partition or {})
    action = AddAction(path, size, partition, int(time.time() * 1000), True, stats)
    table.create_write_transaction([action], "append", table.schema(), partition_by=list(partition) or None,
                                   commit_properties=commit)
