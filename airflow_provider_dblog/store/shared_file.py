"""One Parquet file written once, added to two Delta tables: a chunk's first read goes to the changelog
and to ``current`` with the same rows, and encoding them twice (delta-rs's writer, once per table) was
most of what the Delta lake cost a snapshot over plain Parquet files (docs/benchmarks.md, issue 16).

delta-rs writes the changelog's file (its encoding, its statistics); the commit's add action is read
back from the changelog's log entry (Delta's public log format), the file is copied under ``current``'s
partition and added there with the same statistics. ``current``'s copy carries columns ``current`` does
not declare (``_kind``, ``_before``, its partition column ``_chunk``): Delta readers read a file by the
table's schema and ignore the rest (delta-rs, DuckDB's delta extension and Spark's Delta reader do).
"""
from __future__ import annotations

import json
import posixpath
import time
from typing import Sequence

from airflow_provider_dblog.store.files import Files
from airflow_provider_dblog.store.object_store import is_object_store

MARK = "dblog-write"  # commitInfo key: which write a log entry is


def shareable(table_uri: str) -> bool:
    """Whether files can be copied under ``table_uri`` here: a local path or ``s3://`` (other stores keep
    delta-rs's own writer for each table)."""
    return not is_object_store(table_uri) or table_uri.startswith("s3://")


def marked_adds(table_uri: str, mark: str, first: int, last: int) -> list[dict] | None:
    """The add actions of the commit among versions ``first``..``last`` of the table at ``table_uri`` whose
    commitInfo carries ``{MARK: mark}`` (its ``custom_metadata``); None when none of them does. Newest
    first: the writer that made the commit finds it in the first entry it reads."""
    log = Files(table_uri, "--sink")
    for version in range(last, max(first, 0) - 1, -1):
        adds, ours = [], False
        for action in json_lines(log.read_bytes(f"_delta_log/{version:020d}.json")):
            if "add" in action:
                adds.append(action["add"])
            ours = ours or action.get("commitInfo", {}).get(MARK) == mark
        if ours:
            return adds
    return None


def json_lines(data: bytes) -> list[dict]:
    """The JSON values of a JSON-lines file (a Delta log entry), split at ``\\n`` only: ``str.splitlines`` also
    breaks at U+2028, U+2029 and NEL, which JSON leaves unescaped inside a string (a column's statistics)."""
    return [json.loads(line) for line in data.decode().split("\n") if line.strip()]


def copy_into(adds: Sequence[dict], source_uri: str, target_uri: str, partition: dict[str, str],
              drop: Sequence[str]) -> list:
    """Copy the files of ``adds`` (under ``source_uri``) into ``target_uri``'s ``partition`` (its values
    by column); returns the target's add actions, their statistics without the columns ``drop`` (the
    target does not declare them)."""
    from urllib.parse import unquote

    from deltalake.transaction import AddAction

    source, target = Files(source_uri, "--sink"), Files(target_uri, "--sink")
    folder = "/".join(f"{name}={value}" for name, value in partition.items())
    actions = []
    for add in adds:
        name = unquote(add["path"])
        path = f"{folder}/{posixpath.basename(name)}" if folder else posixpath.basename(name)
        source.copy_to(name, target, path)
        stats = json.loads(add.get("stats") or "{}")
        for kind in ("minValues", "maxValues", "nullCount"):
            for column in drop:
                stats.get(kind, {}).pop(column, None)
        actions.append(AddAction(path, int(add["size"]), dict(partition), int(time.time() * 1000), True,
                                 json.dumps(stats)))
    return actions


def commit_added(table, actions: list, partition_by: Sequence[str], commit=None) -> None:
    """Add the copied files (``copy_into``'s actions) to ``table`` in one Delta commit."""
    table.create_write_transaction(list(actions), "append", table.schema(), partition_by=list(partition_by) or None,
                                   commit_properties=commit)
