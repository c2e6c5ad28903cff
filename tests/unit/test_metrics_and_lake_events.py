"""The metrics sink (core/metrics.py) and the pure parts of the asset / lineage naming (airflow/lake_events.py)."""
from __future__ import annotations

import logging

import pytest

from airflow_provider_dblog.core import metrics
from airflow_provider_dblog.core.config import SourceConfig


@pytest.fixture
def recorded():
    sink = metrics.RecordingSink()
    previous = metrics.set_sink(sink)
    yield sink
    metrics.set_sink(previous)


def test_the_default_sink_drops_everything_and_a_recording_sink_gets_the_figures(recorded):
    metrics.set_sink(None)
    assert not metrics.enabled()
    metrics.gauge(metrics.LAG_SECONDS, 3.0, table="shop.orders")  # no-op, no error
    metrics.set_sink(recorded)
    assert metrics.enabled()
    metrics.gauge(metrics.LAG_SECONDS, 2.5, table="shop.orders")
    metrics.gauge(metrics.LAG_BYTES, None, table="shop.orders")  # an unknown figure is not a zero
    metrics.incr(metrics.CHANGES_COMMITTED, 0, table="shop.orders")  # nothing committed: nothing sent
    metrics.incr(metrics.CHANGES_COMMITTED, 7, table="shop.orders")
    metrics.timing(metrics.MICRO_BATCH_SECONDS, 0.25, source=metrics.source_tag("db", 3306))
    assert recorded.records == [
        ("gauge", "lag_seconds", 2.5, {"table": "shop.orders"}),
        ("incr", "changes_committed", 7, {"table": "shop.orders"}),
        ("timing", "micro_batch_seconds", 0.25, {"source": "db:3306"}),
    ]


def test_a_failing_sink_never_fails_the_caller(caplog):
    class Broken:
        def gauge(self, *a):
            raise OSError("network down")

    previous = metrics.set_sink(Broken())
    try:
        with caplog.at_level(logging.WARNING, "dblog"):
            metrics.gauge("lag_seconds_test", 1.0, table="t.a")
            metrics.gauge("lag_seconds_test", 2.0, table="t.a")
    finally:
        metrics.set_sink(previous)
    assert [r.getMessage() for r in caplog.records].count("metrics: gauge lag_seconds_test not sent: network down") == 1


def test_install_from_env(monkeypatch, caplog):
    previous = metrics.get_sink()
    try:
        monkeypatch.delenv(metrics.ENV, raising=False)
        assert metrics.install_from_env() is None and metrics.get_sink() is previous
        monkeypatch.setenv(metrics.ENV, "airflow_provider_dblog.core.metrics:RecordingSink")
        sink = metrics.install_from_env()
        assert isinstance(sink, metrics.RecordingSink) and metrics.get_sink() is sink
        monkeypatch.setenv(metrics.ENV, "no_such_module:Sink")
        with caplog.at_level(logging.WARNING, "dblog"):
            assert metrics.install_from_env() is None
        assert metrics.get_sink() is sink  # kept: a bad setting costs the metrics, never the run
        assert "cannot load the sink no_such_module:Sink" in caplog.text
    finally:
        metrics.set_sink(previous)


def test_asset_uris_and_lineage_names_hold_no_secret(tmp_path):
    from airflow_provider_dblog.airflow.lake_events import (
        Application, asset_uri, lake_dataset, source_dataset_name, source_namespace,
    )

    assert asset_uri("s3://bucket/lake", "shop.orders") == "s3://bucket/lake/shop.orders/current"
    assert asset_uri("s3://bucket/lake/", "shop.orders", "changelog") == "s3://bucket/lake/shop.orders/changelog"
    assert asset_uri(str(tmp_path / "my lake"), "shop.orders") == f"file://{tmp_path}/my%20lake/shop.orders/current"
    # the same encoding on both stores: a table named with a space or a non-ASCII letter, a sink path with '#'
    assert asset_uri("s3://bucket/my lake", "shop.my orders") == "s3://bucket/my%20lake/shop.my%20orders/current"
    assert asset_uri(str(tmp_path), "shop.ördrë") == f"file://{tmp_path}/shop.%C3%B6rdr%C3%AB/current"
    assert asset_uri("s3://bucket/lake#1", "shop.ördrë") == "s3://bucket/lake%231/shop.%C3%B6rdr%C3%AB/current"
    assert lake_dataset("s3://bucket/lake", "shop.orders", "current") == ("s3://bucket", "lake/shop.orders/current")
    assert lake_dataset(str(tmp_path), "shop.orders", "changelog") == ("file", f"{tmp_path}/shop.orders/changelog")

    mysql = SourceConfig.parse("mysql://dblog:s3cret@db.internal:3307")
    assert (source_namespace(mysql), source_dataset_name(mysql, "shop.orders")) == ("mysql://db.internal:3307",
                                                                                   "shop.orders")
    pg = SourceConfig.parse("postgresql://dblog:s3cret@pg:5433/sales")
    assert (source_namespace(pg), source_dataset_name(pg, "public.orders")) == ("postgres://pg:5433",
                                                                               "sales.public.orders")

    app = Application.from_args(["snapshot", "--state", "/s", "--batch", "3", "--sink", "s3://b/l", "--force"])
    assert (app.command, app.state, app.sink, app.batch, app.table, app.writes_lake) == (
        "snapshot", "/s", "s3://b/l", 3, None, True)
    tail = Application.from_args(["tail", "--state", "/s", "--sink", "/l", "--available-now", "--table", "a.b"])
    assert (tail.command, tail.table, tail.tables()) == ("tail", "a.b", ["a.b"])
    assert not Application.from_args(["verify", "--state", "/s"]).writes_lake


def test_advanced_tables_and_event_extras():
    from airflow_provider_dblog.airflow.lake_events import Application, advanced, event_extras
    from airflow_provider_dblog.store.lake_figures import LakeMark

    before = {"a.x": LakeMark(3, 2, 100), "a.y": LakeMark(1, 1, 10)}
    after = {"a.x": LakeMark(5, 4, 130), "a.y": LakeMark(1, 1, 10), "a.z": LakeMark(0, 0, 7)}
    moved = advanced(before, after)
    assert moved == {"a.x": {"kinds": ["current", "changelog"], "rows_changed": 30},
                     "a.z": {"kinds": ["current", "changelog"], "rows_changed": 7}}
    status = {"a.x": {"phase": "streaming", "lake_position": "bin.000002:400", "current_position": "bin.000002:300",
                      "lag_seconds": 1.5, "lag_bytes": 120, "rows_current": 99}}
    extras = event_extras(Application("tail"), moved, status)
    assert extras[("a.x", "current")]["position"] == "bin.000002:300"
    assert extras[("a.x", "changelog")] == {
        "table": "a.x", "lake": "changelog", "position": "bin.000002:400", "rows_changed": 30, "lag_seconds": 1.5,
        "lag_bytes": 120, "phase": "streaming", "rows_current": 99, "chunks_done": None, "chunks_total": None,
        "last_commit_at": None, "by": "tail"}
    assert extras[("a.z", "current")]["position"] is None and extras[("a.z", "current")]["rows_changed"] == 7


def test_lineage_is_silent_without_the_openlineage_provider(monkeypatch, tmp_path):
    """``operator_lineage`` answers None (no error) where ``apache-airflow-providers-openlineage`` is missing,
    and for an application that writes no lake table."""
    import sys

    from airflow_provider_dblog.airflow.lake_events import Application, operator_lineage

    app = Application.from_args(["tail", "--state", str(tmp_path / "state"), "--sink", str(tmp_path / "lake")])
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", None)  # import -> ImportError
    assert operator_lineage(app) is None
    monkeypatch.delitem(sys.modules, "airflow.providers.openlineage.extractors")
    assert operator_lineage(Application.from_args(["report", "--state", str(tmp_path)])) is None
    assert operator_lineage(app) is None  # no plan in the state yet: nothing to name
