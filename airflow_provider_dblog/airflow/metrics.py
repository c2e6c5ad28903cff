"""dblog's metrics through Airflow's own stats interface (``airflow.sdk.observability.stats``): StatsD,
Datadog or OpenTelemetry, whichever the deployment's ``[metrics]`` section turns on; nothing when none is.

Each figure goes out twice, as Airflow does with its own metrics (``[metrics] legacy_names_on``):

* tagged: ``dblog.lag_seconds`` with tag ``table=shop.orders`` (OpenTelemetry, Datadog, StatsD with
  ``statsd_influxdb_enabled``);
* named: ``dblog.lag_seconds.shop__orders`` for plain StatsD / Graphite, which drop tags (the table's ``.``
  written ``__``, Airflow's rule for a dotted name variable, so the name keeps its depth; a tail's ``source``
  ``127.0.0.1:3306`` becomes ``127_0_0_1_3306``).

Airflow prefixes both with ``[metrics] statsd_prefix`` (default ``airflow``). docs/operations.md lists them.
"""
from __future__ import annotations

import re
import sys
from datetime import timedelta

from airflow_provider_dblog.core import metrics

_INVALID = re.compile(r"[^a-zA-Z0-9_.-]")
MAX_NAME = 200  # Airflow refuses names over 250 characters with its prefix


def install() -> "AirflowStatsSink | None":
    """Install the Airflow sink in this process (what the operators do before their step runs), when
    ``[metrics]`` turns a backend on."""
    if not metrics_on():
        return None
    sink = AirflowStatsSink()
    metrics.set_sink(sink)
    return sink


def metrics_on() -> bool:
    """Whether ``[metrics]`` turns on a backend (StatsD, Datadog or OpenTelemetry)."""
    from airflow.sdk.configuration import conf

    return any(conf.getboolean("metrics", key, fallback=False)
               for key in ("statsd_on", "statsd_datadog_enabled", "otel_on"))


def spark_env() -> dict[str, str]:
    """For a spark-submit child: its ``dblog`` entry point installs this sink too (no secret in it). Only
    when a backend is on: importing Airflow costs the child a few seconds of start-up."""
    return {metrics.ENV: "airflow"} if metrics_on() else {}


class AirflowStatsSink:
    """A ``core.metrics.MetricsSink`` over Airflow's stats. In a process Airflow did not start (a spark-submit
    child, the CLI) the stats backend is set up from Airflow's configuration first."""

    def __init__(self):
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability import stats

        self.stats = stats
        impl = sys.modules.get(stats.initialize.__module__)
        if getattr(impl, "_factory", None) is None:  # a task runner sets it up; another process has not
            from airflow.sdk.observability.metrics.stats_utils import get_stats_factory

            stats.initialize(factory=get_stats_factory(),
                             export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True))
        self.named = conf.getboolean("metrics", "legacy_names_on", fallback=True)

    def _names(self, name: str, tags: dict[str, str]) -> list[str]:
        base = f"{metrics.PREFIX}.{name}"
        if not self.named or not tags:
            return [base]
        suffix = ".".join(_INVALID.sub("_", str(v).replace(".", "__") if k == "table" else
                                       str(v).replace(".", "_").replace(":", "_")) for k, v in tags.items())
        return [base, f"{base}.{suffix}"[:MAX_NAME]]

    def gauge(self, name: str, value: float, tags: dict[str, str]) -> None:
        tagged, *named = self._names(name, tags)
        self.stats.gauge(tagged, value, tags=tags)
        for other in named:
            self.stats.gauge(other, value)

    def incr(self, name: str, count: int, tags: dict[str, str]) -> None:
        tagged, *named = self._names(name, tags)
        self.stats.incr(tagged, count, tags=tags)
        for other in named:
            self.stats.incr(other, count)

    def timing(self, name: str, seconds: float, tags: dict[str, str]) -> None:
        tagged, *named = self._names(name, tags)
        self.stats.timing(tagged, timedelta(seconds=seconds), tags=tags)
        for other in named:
            self.stats.timing(other, timedelta(seconds=seconds))
