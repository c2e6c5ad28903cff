"""What the lake's Delta logs say about one captured table, read without reading a row or creating
anything (``dblog status``): the tail positions its two tables record, the last commit's time, and the
rows ``current`` holds, summed from the files' statistics (every file dblog writes has them; deletes
rewrite files, so the sum is exact)."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.lake import changelog_uri, current_uri
from airflow_provider_dblog.store.lake_tables import TAIL_APP


@dataclass(frozen=True)
class LakeFigures:
    """``changelog_position``: how far the tail's changes are in the changelog (None before its first
    commit); ``current_position``: how far ``current`` reflects them (behind the changelog within a
    ``--merge-interval``); ``rows``: rows in ``current`` (None: no ``current`` yet, or a file without
    statistics); ``committed_at``: the changelog's last commit (epoch seconds; None: no changelog)."""

    changelog_position: SourcePosition | None = None
    current_position: SourcePosition | None = None
    rows: int | None = None
    committed_at: float | None = None


def lake_figures(sink: str, table: str, storage_options: dict | None = None) -> LakeFigures:
    """The figures of ``SINK/TABLE``: two Delta logs opened, no data file read."""
    changelog, current = _open(changelog_uri(sink, table), storage_options), _open(current_uri(sink, table),
                                                                                   storage_options)
    rows = None
    if current is not None:
        records = pa.table(current.get_add_actions(flatten=True))["num_records"]
        rows = None if records.null_count else int(pc.sum(records).as_py() or 0)
    committed_at = None
    if changelog is not None:
        history = changelog.history(1)
        committed_at = history[0]["timestamp"] / 1000 if history and history[0].get("timestamp") else None
    return LakeFigures(_tail(changelog), _tail(current), rows, committed_at)


def _open(uri: str, storage_options: dict | None):
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError:
        return None


def _tail(table) -> SourcePosition | None:
    version = None if table is None else table.transaction_version(TAIL_APP)
    return None if version is None else SourcePosition.from_version(version)


@dataclass(frozen=True)
class LakeMark:
    """Where ``SINK/TABLE``'s two Delta tables are: their versions (None: not created yet) and the rows the
    append-only changelog holds (compaction keeps them): two marks taken around a run say whether the
    table's lake advanced and by how many changes."""

    changelog_version: int | None = None
    current_version: int | None = None
    changelog_rows: int = 0

    def changes_since(self, before: "LakeMark") -> int:
        return max(0, self.changelog_rows - before.changelog_rows)


def lake_mark(sink: str, table: str, storage_options: dict | None = None) -> LakeMark:
    """The table's ``LakeMark``: two Delta logs read, no data file."""
    changelog, current = _open(changelog_uri(sink, table), storage_options), _open(current_uri(sink, table),
                                                                                   storage_options)
    rows = 0
    if changelog is not None:
        records = pa.table(changelog.get_add_actions(flatten=True))["num_records"]
        rows = int(pc.sum(records).as_py() or 0)
    return LakeMark(None if changelog is None else changelog.version(),
                    None if current is None else current.version(), rows)


def lake_schema(sink: str, kind: str, table: str, storage_options: dict | None = None) -> list[tuple[str, str]] | None:
    """The (column, type) pairs of ``SINK/TABLE/KIND`` (None: no such Delta table yet)."""
    from airflow_provider_dblog.store.lake import lake_uri

    delta = _open(lake_uri(sink, table, kind), storage_options)
    if delta is None:
        return None
    schema = pa.schema(delta.schema().to_arrow())
    return [(f.name, str(f.type)) for f in schema]
