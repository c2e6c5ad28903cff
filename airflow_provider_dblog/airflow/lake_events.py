"""What a dblog Spark application wrote, told to Airflow: asset events (one per lake table that advanced)
and OpenLineage datasets (the source tables in, the Delta tables out).

**Assets.** A captured table's lake is two Assets, ``SINK/DB.TABLE/current`` and ``SINK/DB.TABLE/changelog``
(``s3://bucket/lake/shop.orders/current``, or ``file:///var/lib/dblog/lake/shop.orders/current`` for a path;
the path percent-encoded on both: ``shop.my%20orders``).
The tables are known only when a run resolves its params and globs, so the lake-writing tasks declare the
asset alias ``dblog_lake`` as their outlet and, after their application, add an event for each table whose
Delta table moved, with its figures as the event's extra (``position``, ``rows_changed``, ``lag_seconds``,
...): a table that did not change gets no event. A downstream DAG is scheduled on one table with
``schedule=[lake_asset(SINK, "shop.orders")]`` (or ``Asset("s3://bucket/lake/shop.orders/current")``).

**OpenLineage** (with ``apache-airflow-providers-openlineage``; nothing without it): inputs are the source
tables (namespace ``mysql://HOST:PORT`` or ``postgres://HOST:PORT``, name ``db.table``, or ``db.schema.table``
for PostgreSQL), outputs the two Delta tables of each (namespace ``file`` or ``s3://BUCKET``, name the path),
each with its schema facet. No user, password or credential is ever part of a namespace or facet.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import quote, urlparse

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.store.lake import lake_uri

log = logging.getLogger(__name__)

LAKE_ALIAS = "dblog_lake"
KINDS = ("current", "changelog")


def asset_uri(sink: str, table: str, kind: str = "current") -> str:
    """The Asset URI of ``SINK/TABLE/KIND``: the object store's ``scheme://bucket`` or ``file://``, then the path
    percent-encoded the same way for both (a space is ``%20``, a non-ASCII letter its UTF-8 bytes): Airflow
    compares Asset URIs as strings and cuts one at a raw ``#`` or ``?``, so a table named ``my orders`` gets the
    same URI from every task and ``lake_asset`` whatever the store."""
    uri = lake_uri(sink, table, kind)
    if "://" not in uri:
        return "file://" + quote(uri)
    scheme, _, rest = uri.partition("://")
    bucket, slash, path = rest.partition("/")
    return f"{scheme}://{bucket}{slash}{quote(path)}"


def lake_asset(sink: str, table: str, kind: str = "current"):
    """The Asset of a captured table's ``current`` (or ``changelog``): schedule a downstream DAG on it."""
    from airflow.sdk import Asset

    return Asset(asset_uri(sink, table, kind))


def lake_alias():
    from airflow.sdk import AssetAlias

    return AssetAlias(LAKE_ALIAS)


@dataclass(frozen=True)
class Application:
    """What a dblog spark-submit application works on, read from its arguments."""

    command: str
    state: str | None = None
    sink: str | None = None
    batch: int | None = None
    table: str | None = None

    @classmethod
    def from_args(cls, args: Sequence[str]) -> "Application":
        args = [str(a) for a in args or ()]
        values = {}
        for flag in ("--state", "--sink", "--batch", "--table"):
            if flag in args[:-1]:
                values[flag[2:]] = args[args.index(flag) + 1]
        batch = values.get("batch")
        return cls(args[0] if args else "", values.get("state"), values.get("sink"),
                   int(batch) if batch not in (None, "") and str(batch).isdigit() else None, values.get("table"))

    @property
    def writes_lake(self) -> bool:
        return self.command in ("snapshot", "tail") and bool(self.state and self.sink)

    def tables(self) -> list[str]:
        """The captured tables this application may advance (those of its batch; a tail's offset map)."""
        from airflow_provider_dblog.store.state import StateDir

        if self.table:
            return [self.table]
        state = StateDir(self.state)
        if not state.has_plan():
            return []
        if self.command == "snapshot" and self.batch is not None:
            return list(state.batch(self.batch).tables)
        return sorted(state.offsets()) if state.has_offsets() else sorted(state.tables())

    def source(self) -> SourceConfig | None:
        """The state's source: host, port, database (the state keeps no password)."""
        from airflow_provider_dblog.store.state import StateDir

        state = StateDir(self.state)
        return SourceConfig.parse(state.load_raw()["source"]) if state.has_plan() else None


def lake_marks(sink: str, tables: Sequence[str]) -> dict:
    from airflow_provider_dblog.store.lake_figures import lake_mark

    return {t: lake_mark(sink, t) for t in tables}


def advanced(before: dict, after: dict) -> dict[str, dict]:
    """Per table that moved, which of its Delta tables moved and the changes its changelog gained."""
    from airflow_provider_dblog.store.lake_figures import LakeMark

    out = {}
    for table, now in after.items():
        then = before.get(table, LakeMark())
        kinds = [k for k, a, b in (("current", now.current_version, then.current_version),
                                   ("changelog", now.changelog_version, then.changelog_version)) if a != b]
        if kinds:
            out[table] = {"kinds": kinds, "rows_changed": now.changes_since(then)}
    return out


def event_extras(app: Application, moved: dict[str, dict], status: dict[str, dict]) -> dict[tuple[str, str], dict]:
    """The extra of each asset event: ``(table, kind) -> figures`` (JSON values only, no secret)."""
    out = {}
    for table, change in moved.items():
        entry = status.get(table, {})
        for kind in change["kinds"]:
            position = entry.get("current_position" if kind == "current" else "lake_position") \
                or entry.get("lake_position") or entry.get("chunk_hw_max")
            out[(table, kind)] = {
                "table": table, "lake": kind, "position": position, "rows_changed": change["rows_changed"],
                "lag_seconds": entry.get("lag_seconds"), "lag_bytes": entry.get("lag_bytes"),
                "phase": entry.get("phase"), "rows_current": entry.get("rows_current"),
                "chunks_done": entry.get("chunks_done"), "chunks_total": entry.get("chunks_total"),
                "last_commit_at": entry.get("last_commit_at"), "by": app.command}
    return out


def add_asset_events(outlet_events, sink: str, extras: dict[tuple[str, str], dict]) -> int:
    """One event per (table, kind) through the ``dblog_lake`` alias; returns how many."""
    from airflow.sdk import AssetAlias

    alias = outlet_events[AssetAlias(LAKE_ALIAS)]
    for (table, kind), extra in sorted(extras.items()):
        alias.add(lake_asset(sink, table, kind), extra=extra)
    return len(extras)


# ---- OpenLineage ---------------------------------------------------------------------------------------
def source_namespace(source: SourceConfig) -> str:
    """``mysql://host:port`` / ``postgres://host:port``: no user, no password."""
    scheme = "postgres" if source.scheme.startswith("postgres") else "mysql"
    return f"{scheme}://{source.host}:{source.port}"


def source_dataset_name(source: SourceConfig, table: str) -> str:
    return f"{source.database}.{table}" if source.scheme.startswith("postgres") and source.database else table


def lake_dataset(sink: str, table: str, kind: str) -> tuple[str, str]:
    """(namespace, name) of a Delta table: ``s3://BUCKET`` + key path, or ``file`` + the absolute path."""
    uri = lake_uri(sink, table, kind)
    if "://" not in uri:
        return "file", uri
    parsed = urlparse(uri)
    return f"{parsed.scheme}://{parsed.netloc.rpartition('@')[2]}", parsed.path.lstrip("/")


def lineage_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("airflow.providers.openlineage") is not None
    except ImportError:
        return False


def lake_schemas(sink: str, tables: Sequence[str]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """``(table, kind) -> [(column, type)]`` of the Delta tables that exist. Read in the task itself: the
    OpenLineage listener calls ``get_openlineage_facets_on_complete`` in a forked process, where delta-rs,
    already used by the parent, can hang."""
    from airflow_provider_dblog.store.lake_figures import lake_schema

    out = {}
    for table in tables:
        for kind in KINDS:
            pairs = lake_schema(sink, kind, table)
            if pairs:
                out[(table, kind)] = pairs
    return out


def operator_lineage(app: Application, schemas: dict | None = None):
    """``OperatorLineage`` of a dblog application (None: not one that writes the lake, or no OpenLineage);
    ``schemas``: the Delta tables' columns (``lake_schemas``), for their schema facets."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset
        from openlineage.client.facet_v2 import schema_dataset
    except ImportError:
        return None
    if not app.writes_lake:
        return None
    from airflow_provider_dblog.store.state import StateDir

    source = app.source()
    if source is None:
        return None

    def facet(pairs):
        return {"schema": schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in pairs])}

    state, inputs, outputs = StateDir(app.state), [], []
    for table in app.tables():
        meta = state.table(table).meta
        inputs.append(Dataset(namespace=source_namespace(source), name=source_dataset_name(source, table),
                              facets=facet([(c.name, c.column_type) for c in meta.columns])))
        for kind in KINDS:
            namespace, name = lake_dataset(app.sink, table, kind)
            pairs = (schemas or {}).get((table, kind))
            outputs.append(Dataset(namespace=namespace, name=name, facets=facet(pairs) if pairs else {}))
    return OperatorLineage(inputs=inputs, outputs=outputs)
