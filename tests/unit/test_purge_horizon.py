"""The binlog purge horizon (core/retention.py): which tables are close to losing the binlog file their tail
still needs, by age and by total size; the MySQL/MariaDB settings that decide it; and the health check's
report over the in-memory dialect. The same check runs against a real MariaDB in
tests/integration/test_purge_horizon.py."""
from __future__ import annotations

import pytest

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.retention import BinlogFile, BinlogRetention, purge_risks
from airflow_provider_dblog.local.chunk_readers import snapshot_table
from airflow_provider_dblog.source.mysql.retention import purge_settings
from airflow_provider_dblog.steps.health import check_health, purge_messages
from airflow_provider_dblog.steps.plan import plan_table
from airflow_provider_dblog.steps.report import build_offsets
from tests.support.fake_dialect import BINLOG, InMemoryServer

NOW = 1_000_000.0


def at(seq: int, offset: int = 400) -> SourcePosition:
    return SourcePosition.at(f"mysql-bin.{seq:06d}", offset)


def files(*started, sizes=None) -> tuple[BinlogFile, ...]:
    """mysql-bin.000001.. with these first-event times (seconds before NOW; None: not looked up)."""
    sizes = sizes or [1000] * len(started)
    return tuple(BinlogFile(f"mysql-bin.{i + 1:06d}", size, None if ago is None else NOW - ago)
                 for i, (ago, size) in enumerate(zip(started, sizes)))


def test_age_a_closed_file_is_dated_by_the_next_files_first_event():
    retention = BinlogRetention(files(None, 3300, 100, 50), expire_seconds=3600, max_total_size=None, checked_at=NOW)
    risks = purge_risks({"d.old": at(1), "d.recent": at(3), "d.live": at(4)}, retention, NOW)
    old, recent, live = risks["d.old"], risks["d.recent"], risks["d.live"]
    assert old.seconds_left == pytest.approx(300) and old.warn  # closed 3300 s ago: 300 s left < 20% of 3600
    assert recent.seconds_left == pytest.approx(3550) and not recent.warn
    assert live.seconds_left == 3600 and not live.warn  # being written: a whole period once closed
    fields = old.fields()
    assert fields["binlog_needed"] == "mysql-bin.000001" and fields["binlog_oldest"] == "mysql-bin.000001"
    assert fields["purge_in_seconds"] == 300.0 and fields["purge_in_bytes"] is None
    assert fields["binlog_purged"] is False
    assert "d.old needs binlog mysql-bin.000001" in fields["purge_warning"] and "purgeable in 5 min" in \
        fields["purge_warning"]
    assert recent.fields()["purge_warning"] is None and recent.message() is None


def test_age_the_margin_is_configurable_and_an_overdue_file_is_purgeable_now():
    retention = BinlogRetention(files(None, 4000, 10), 3600, None, NOW)
    risks = purge_risks({"d.a": at(1), "d.b": at(2)}, retention, NOW, warn_seconds=3595)
    assert risks["d.a"].seconds_left == pytest.approx(-400) and risks["d.a"].fields()["purge_in_seconds"] == 0
    assert "purgeable now (at the next binlog rotation)" in risks["d.a"].message()
    assert risks["d.b"].seconds_left == pytest.approx(3590) and risks["d.b"].warn  # within the wide margin
    assert not purge_risks({"d.b": at(2)}, retention, NOW, warn_seconds=60)["d.b"].warn


def test_age_falls_back_to_the_files_own_first_event_then_to_unknown():
    own = BinlogRetention(files(3000, None, 5), 3600, None, NOW)
    risk = purge_risks({"d.t": at(1)}, own, NOW)["d.t"]
    assert risk.seconds_left == pytest.approx(600) and risk.warn  # earlier than its real end: warns early
    unknown = BinlogRetention(files(None, None, 5), 3600, None, NOW)
    risk = purge_risks({"d.t": at(1)}, unknown, NOW)["d.t"]
    assert risk.seconds_left is None and not risk.warn and risk.fields()["purge_in_seconds"] is None


def test_size_a_file_survives_while_it_and_every_later_file_fit_in_the_limit():
    retention = BinlogRetention(files(None, None, None, None, sizes=[400, 300, 200, 100]), None, 1000, NOW)
    risks = purge_risks({"d.first": at(1), "d.second": at(2), "d.last": at(4)}, retention, NOW)
    assert risks["d.first"].bytes_left == 0 and risks["d.first"].warn
    assert "over the binlog size limit" in risks["d.first"].message()
    assert risks["d.second"].bytes_left == 400 and not risks["d.second"].warn  # default margin: 200 bytes
    assert risks["d.second"].fields()["purge_in_bytes"] == 400 and risks["d.second"].seconds_left is None
    assert purge_risks({"d.second": at(2)}, retention, NOW, warn_bytes=500)["d.second"].warn
    assert "after 400 bytes more binlog" in purge_risks({"d.second": at(2)}, retention, NOW,
                                                         warn_bytes=500)["d.second"].message()
    assert not risks["d.last"].warn and risks["d.last"].bytes_left == 900


def test_a_purged_file_is_reported_as_such_and_without_limits_nothing_warns():
    retention = BinlogRetention(files(None, 10, sizes=[100, 100])[1:], None, None, NOW)  # 000001 is gone
    risks = purge_risks({"d.gone": at(1), "d.here": at(2), "d.other_server": at(9)}, retention, NOW)
    gone = risks["d.gone"]
    assert gone.purged and gone.fields()["binlog_purged"] is True
    assert "already purged (oldest is mysql-bin.000002)" in gone.message()
    assert "--on-purge resnapshot" in gone.message() and "--on-purge fail" in gone.message()
    assert not risks["d.here"].purged and risks["d.here"].message() is None
    assert risks["d.here"].seconds_left is None and risks["d.here"].bytes_left is None
    assert not risks["d.other_server"].purged and risks["d.other_server"].message() is None  # newer: refused elsewhere


@pytest.mark.parametrize("variables, expected", [
    ({"binlog_expire_logs_seconds": "0", "expire_logs_days": "0.000000"}, (None, None)),  # MariaDB 10.11 default
    ({"binlog_expire_logs_seconds": "43200", "expire_logs_days": "0.500000"}, (43200, None)),  # linked in MariaDB
    ({"expire_logs_days": "2"}, (172800, None)),  # only the days (MySQL 5.7)
    ({"binlog_expire_logs_seconds": "600", "expire_logs_days": "7"}, (600, None)),  # MySQL 8: the seconds win
    ({"binlog_expire_logs_seconds": "2592000", "binlog_expire_logs_auto_purge": "OFF"}, (None, None)),
    ({"binlog_expire_logs_seconds": "0", "max_binlog_total_size": "1073741824"}, (None, 1073741824)),  # 11.4+
    ({"binlog_space_limit": "5000"}, (None, 5000)),  # Percona
])
def test_purge_settings_of_mysql_and_mariadb(variables, expected):
    assert purge_settings(variables) == expected


def test_the_health_report_carries_the_purge_horizon_and_a_stall_names_it(tmp_path):
    server = InMemoryServer("purge-horizon")
    server.create("shop.t", [("id", "bigint"), ("v", "bigint")], ["id"])
    for i in range(5):
        server.transaction(("shop.t", "insert", {"id": i, "v": i}))
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan_table(SourceConfig.parse(server.uri), "shop.t", state, chunk_size=10)
    snapshot_table(state, sink, "shop.t", None, spark=None, driver_threads=1)
    build_offsets(state)
    # the table's floor is in fake-bin.000001, closed when fake-bin.000002 started 3000 s ago; 1 h expiry
    server.retention = BinlogRetention(
        (BinlogFile(BINLOG, 500, NOW - 5000), BinlogFile("fake-bin.000002", 10, NOW - 3000)), 3600, None, NOW)
    report = check_health(state, 600)
    info = report["shop.t"]
    assert info["binlog_needed"] == BINLOG and info["purge_in_seconds"] == 600.0 and not info["binlog_purged"]
    purged, close = purge_messages(report)
    assert purged == [] and len(close) == 1 and close[0].startswith(f"shop.t needs binlog {BINLOG}")
    assert check_health(state, 600, purge_warning_seconds=60)["shop.t"]["purge_warning"] is None

    server.transaction(("shop.t", "insert", {"id": 99, "v": 99}))  # the source moves; the tail does not
    with pytest.raises(DblogError, match=r"tail stalled: .*Binlog purge horizon: shop.t needs binlog fake-bin"):
        check_health(state, -1)

    server.retention = BinlogRetention((BinlogFile("fake-bin.000002", 10, NOW - 3000),), 3600, None, NOW)
    purged, close = purge_messages(check_health(state, 600))
    assert close == [] and len(purged) == 1 and "already purged" in purged[0]


class RecordingLog:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level):
        return lambda message, *args: self.lines.append((level, message % args))


def test_the_sensor_logs_the_warning_and_succeeds(tmp_path, monkeypatch):
    from airflow_provider_dblog.airflow import sensors

    server = InMemoryServer("purge-horizon-sensor")
    server.create("shop.t", [("id", "bigint"), ("v", "bigint")], ["id"])
    server.transaction(("shop.t", "insert", {"id": 1, "v": 1}))
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    plan_table(SourceConfig.parse(server.uri), "shop.t", state, chunk_size=10)
    snapshot_table(state, sink, "shop.t", None, spark=None, driver_threads=1)
    build_offsets(state)
    server.retention = BinlogRetention((BinlogFile(BINLOG, 500, None), BinlogFile("fake-bin.000002", 10, NOW - 3000)),
                                       3600, None, NOW)
    monkeypatch.setattr(sensors.DblogHook, "check_state_source", lambda self, uri: SourceConfig.parse(uri))
    log = RecordingLog()
    monkeypatch.setattr(sensors.DblogTailHealthSensor, "log", property(lambda self: log))
    sensor = sensors.DblogTailHealthSensor(task_id="health_check", state_dir=state, purge_warning_seconds="")
    assert {"purge_warning_seconds", "purge_warning_bytes"} <= set(sensor.template_fields)
    assert sensor.poke({}) is True  # 600 s left < 20% of the hour (the default margin): a warning, not a failure
    warnings = [line for level, line in log.lines if level == "warning"]
    assert len(warnings) == 1 and warnings[0].startswith(f"binlog purge horizon: shop.t needs binlog {BINLOG} (from ")
    assert "purgeable in 10 min" in warnings[0]
    log.lines.clear()
    sensor.purge_warning_seconds = "60"  # as rendered from a template
    assert sensor.poke({}) is True
    assert [level for level, _ in log.lines] == ["info"]


def test_a_log_lost_as_a_whole_reports_every_table_purged_with_its_own_reason():
    """An invalidated PostgreSQL slot: whatever file a table's position names (even one listed), it is gone."""
    kept = BinlogRetention(files(None, None, sizes=[100, 100]), None, None, NOW)
    lost = BinlogRetention(kept.files, None, None, NOW, lost="slot s was invalidated; capture again")
    assert not purge_risks({"d.t": at(2)}, kept, NOW)["d.t"].purged
    risks = purge_risks({"d.t": at(2), "d.u": at(1)}, lost, NOW)
    assert all(r.purged for r in risks.values())
    assert risks["d.t"].fields()["purge_warning"] == "d.t: slot s was invalidated; capture again"
