"""Metrics: what the lower layers emit (``gauge``, ``incr``, ``timing``), sent to one process-wide sink.

The default sink drops everything, so the CLI, the tests and the Spark executors need nothing. An entry
point installs a real one: the Airflow operators install ``airflow.metrics.AirflowStatsSink`` (Airflow's own
stats interface: StatsD, Datadog or OpenTelemetry, as ``[metrics]`` configures it), and hand
``$DBLOG_METRICS=airflow`` to their spark-submit children, whose ``dblog`` entry point installs it too
(``install_from_env``). A metric never fails a capture: a sink's error is logged once and dropped.

Names (docs/operations.md lists them with their prefix and tags): per table (tag ``table``) ``lag_seconds``,
``lag_bytes``, ``changes_committed``, ``rows_snapshotted``, ``chunks_done``, ``chunks_total``,
``rows_current``; per tail (tag ``source``, the server's ``host:port``) ``micro_batch_seconds`` and
``binlog_bytes_behind``. Tag values never hold a password: a table name, or a host and port.
"""
from __future__ import annotations

import importlib
import logging
import os
from datetime import timedelta
from typing import Protocol

log = logging.getLogger("dblog")

PREFIX = "dblog"
# per table (tag ``table``)
LAG_SECONDS = "lag_seconds"
LAG_BYTES = "lag_bytes"
CHANGES_COMMITTED = "changes_committed"
ROWS_SNAPSHOTTED = "rows_snapshotted"
CHUNKS_DONE = "chunks_done"
CHUNKS_TOTAL = "chunks_total"
ROWS_CURRENT = "rows_current"
# per tail (tag ``source``)
MICRO_BATCH_SECONDS = "micro_batch_seconds"
BINLOG_BYTES_BEHIND = "binlog_bytes_behind"

ENV = "DBLOG_METRICS"  # "airflow", or MODULE:FACTORY returning a sink
SINKS = {"airflow": "airflow_provider_dblog.airflow.metrics:AirflowStatsSink"}


class MetricsSink(Protocol):
    """Where metrics go. ``name`` is one of the names above (without the prefix); ``tags`` name the table or
    the source it is about."""

    def gauge(self, name: str, value: float, tags: dict[str, str]) -> None: ...

    def incr(self, name: str, count: int, tags: dict[str, str]) -> None: ...

    def timing(self, name: str, seconds: float, tags: dict[str, str]) -> None: ...


class NullSink:
    """Drops every metric (the default)."""

    def gauge(self, name: str, value: float, tags: dict[str, str]) -> None:
        pass

    def incr(self, name: str, count: int, tags: dict[str, str]) -> None:
        pass

    def timing(self, name: str, seconds: float, tags: dict[str, str]) -> None:
        pass


class RecordingSink:
    """Keeps every metric in a list of ``(kind, name, value, tags)`` (tests; a quick look in a shell)."""

    def __init__(self):
        self.records: list[tuple[str, str, float, dict[str, str]]] = []

    def gauge(self, name, value, tags):
        self.records.append(("gauge", name, value, dict(tags)))

    def incr(self, name, count, tags):
        self.records.append(("incr", name, count, dict(tags)))

    def timing(self, name, seconds, tags):
        self.records.append(("timing", name, seconds, dict(tags)))


_sink: MetricsSink = NullSink()
_failed: set[str] = set()


def set_sink(sink: MetricsSink | None) -> MetricsSink:
    """Install ``sink`` (None: the no-op default); returns the one it replaces."""
    global _sink
    previous, _sink = _sink, sink or NullSink()
    return previous


def get_sink() -> MetricsSink:
    return _sink


def enabled() -> bool:
    """False with the no-op default: skip figures that cost something to gather."""
    return not isinstance(_sink, NullSink)


def install_from_env() -> MetricsSink | None:
    """Install the sink ``$DBLOG_METRICS`` names (``airflow``, or ``MODULE:FACTORY``); nothing when unset. A sink
    that cannot be loaded (e.g. ``airflow`` where Airflow is not installed) is logged and the default kept."""
    spec = os.environ.get(ENV, "").strip()
    if not spec or spec.lower() in ("0", "off", "none", "false"):
        return None
    target = SINKS.get(spec.lower(), spec)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        module, _, attr = target.partition(":")
        factory = getattr(importlib.import_module(module), attr or "sink")
        sink = factory()
    except Exception as exc:  # noqa: BLE001 - metrics are optional: say why, carry on without them
        log.warning("metrics: cannot load the sink %s named by $%s (%s): no metrics are sent", target, ENV, exc)
        return None
    finally:  # importing a sink's library (Airflow configures logging on import) leaves ours as it was
        root.handlers[:] = handlers
        root.setLevel(level)
    set_sink(sink)
    return sink


def _emit(kind: str, name: str, value, tags: dict[str, str]) -> None:
    try:
        getattr(_sink, kind)(name, value, {k: str(v) for k, v in tags.items()})
    except Exception as exc:  # noqa: BLE001 - a metric never fails a capture
        if name not in _failed:
            _failed.add(name)
            log.warning("metrics: %s %s not sent: %s", kind, name, exc)


def gauge(name: str, value: float | None, **tags: str) -> None:
    """Set gauge ``name`` (nothing for None: an unknown figure is not a zero)."""
    if value is not None:
        _emit("gauge", name, value, tags)


def incr(name: str, count: int = 1, **tags: str) -> None:
    if count:
        _emit("incr", name, int(count), tags)


def timing(name: str, seconds: float | timedelta, **tags: str) -> None:
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    _emit("timing", name, float(seconds), tags)


def source_tag(host: str, port: int | str) -> str:
    """The ``source`` tag of a tail's metrics: ``host:port`` (never the user or password)."""
    return f"{host}:{port}"
