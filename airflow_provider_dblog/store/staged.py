"""Parquet files written into a Delta table's location before one commit adds them all.

A change range larger than memory (one huge transaction) reaches the lake in pieces: each piece is a
file that no Delta version names yet (readers do not see it), and one commit adds every piece, so the
lake shows the range whole or not at all. A range that is never committed (a crash, a replayed batch)
leaves files no version names: ``dblog maintain``'s full vacuum removes them after the retention.

A ``StagedFile`` is a plain value: it travels from a Spark executor to the driver as JSON.
"""
from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.store.atomic import dictionary_columns
from airflow_provider_dblog.store.files import Files

ROW_GROUP_ROWS = 131_072  # a reader streams a staged file a row group at a time
STATS_COLUMNS = ("_op", "_pos", "_ts_ms", "_chunk")  # the metadata readers filter on: Delta stats for each file


@dataclass(frozen=True)
class StagedFile:
    """One written, uncommitted file of a table: its path relative to the table, size, rows, Delta
    statistics, partition values and Arrow schema (IPC bytes, base64)."""

    path: str
    size: int
    rows: int
    stats: str
    schema_ipc: str
    partition: dict = field(default_factory=dict)

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema_ipc)))

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "rows": self.rows, "stats": self.stats,
                "schema": self.schema_ipc, "partition": dict(self.partition)}

    @classmethod
    def from_dict(cls, data: dict) -> "StagedFile":
        return cls(data["path"], int(data["size"]), int(data["rows"]), data["stats"], data["schema"],
                   dict(data.get("partition") or {}))


def stage(table_uri: str, rows: pa.Table, partition: dict[str, str] | None = None,
          stats_columns: Sequence[str] = ()) -> StagedFile:
    """Write ``rows`` as one Parquet file under ``table_uri`` (in the folder of ``partition``, whose columns
    the file does not hold, as Delta lays partitions out); returns what a commit needs to add it. Its Delta
    statistics cover the metadata columns and ``stats_columns`` (e.g. the key: readers and the key-range
    update of ``current`` skip files by them; integer and text columns only, exact values)."""
    import pyarrow.parquet as pq

    partition = {k: str(v) for k, v in (partition or {}).items()}
    rows = rows.drop_columns([c for c in partition if c in rows.column_names])
    folder = "".join(f"{k}={v}/" for k, v in partition.items())
    name = f"{folder}part-dblog-{uuid.uuid4().hex}.snappy.parquet"
    files = Files(table_uri, "--sink")
    path = files.path_of(name)
    if files.local is not None:
        files.local.joinpath(folder).mkdir(parents=True, exist_ok=True)
    with files.fs.open_output_stream(path) as out:
        pq.write_table(rows, out, compression="snappy", use_dictionary=dictionary_columns(rows.schema) or False,
                       row_group_size=ROW_GROUP_ROWS)
    size = files.fs.get_file_info(path).size
    return StagedFile(name, size, rows.num_rows, file_stats(rows, stats_columns), base64.b64encode(
        rows.schema.serialize().to_pybytes()).decode(), partition)


def file_stats(rows: pa.Table, extra: Sequence[str] = ()) -> str:
    """Delta statistics of a file: its row count, and min, max and null count of the metadata columns
    readers filter on and of ``extra`` columns (a partial set, as the Delta protocol allows: other columns
    are read, not skipped). ``extra`` columns must be integer or text (their values go to JSON as they are)."""
    stats: dict = {"numRecords": rows.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name in (*STATS_COLUMNS, *(c for c in extra if c not in STATS_COLUMNS)):
        if name not in rows.column_names or not rows.num_rows:
            continue
        column = rows[name]
        bounds = pc.min_max(column).as_py()
        if bounds["min"] is not None:
            stats["minValues"][name], stats["maxValues"][name] = bounds["min"], bounds["max"]
        stats["nullCount"][name] = column.null_count
    return json.dumps(stats)


def add_actions(files: Sequence[StagedFile], data_change: bool = True) -> list:
    """Add actions of staged files (``data_change`` False: a rewrite of rows already there, e.g. a compaction)."""
    from deltalake.transaction import AddAction

    now = int(time.time() * 1000)
    return [AddAction(f.path, f.size, dict(f.partition), now, data_change, f.stats) for f in files]


def read_staged(table_uri: str, files: Sequence[StagedFile]) -> list[pa.Table]:
    """The rows of staged files, each in its own columns (partition columns are not in them)."""
    import pyarrow.parquet as pq

    store = Files(table_uri, "--sink")
    return [pq.read_table(store.path_of(f.path), filesystem=store.fs) for f in files]


def discard(table_uri: str, files: Sequence[StagedFile]) -> None:
    """Delete staged files no commit will add (best effort: vacuum removes what is left)."""
    store = Files(table_uri, "--sink")
    for f in files:
        try:
            store.delete(f.path)
        except OSError:
            pass
