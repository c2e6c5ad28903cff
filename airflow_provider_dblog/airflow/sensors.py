"""``DblogTailHealthSensor``: DBLog's health check as an Airflow sensor (logic in ``steps/health.py``)."""
from __future__ import annotations

from typing import Sequence

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_dblog.airflow.hooks import DblogHook, object_store_environment
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.steps.health import check_health, purge_messages


class DblogTailHealthSensor(BaseSensorOperator):
    """Succeeds while the tail keeps up; fails (no retry) when the source moved but no tail micro-batch
    committed for ``max_stall_seconds`` -- DBLog's health check. Works for the scheduled
    ``--available-now`` tail and for a detached ``--continuous`` one.

    It never waits for the tail to catch up (only for the initial load's offset map to exist): a check
    that passes returns at once. Use
    ``soft_fail=True`` to turn a stall into a skip instead of a failure. ``tables``: the captured tables to
    check, names or globs as ``dblog health --tables`` takes them (comma-separated or a list; a name may hold
    spaces); None or empty: all of them.

    The binlog purge horizon: a table whose tail still needs a binlog file the server may delete within
    ``purge_warning_seconds`` (by ``binlog_expire_logs_seconds`` / ``expire_logs_days``) or after
    ``purge_warning_bytes`` more binlog (by ``max_binlog_total_size``) is logged as a warning (default
    margins: 20% of the server's limits); a table whose file is already purged is logged as an error (the
    next tail reads it again, or stops under ``--on-purge fail``). Neither fails the sensor.
    """

    template_fields: Sequence[str] = ("dblog_conn_id", "state_dir", "max_stall_seconds", "tables", "checkpoint",
                                      "aws_conn_id", "purge_warning_seconds", "purge_warning_bytes")
    ui_color = "#f0e8f8"

    def __init__(self, *, state_dir: str, dblog_conn_id: str = DblogHook.default_conn_name,
                 max_stall_seconds: float | str = 1800, tables: str | Sequence[str] | None = None,
                 checkpoint: str | None = None, aws_conn_id: str | None = None,
                 purge_warning_seconds: float | str | None = None, purge_warning_bytes: int | str | None = None,
                 **kwargs) -> None:
        kwargs.setdefault("poke_interval", 30)
        kwargs.setdefault("timeout", 600)
        super().__init__(**kwargs)
        self.dblog_conn_id = dblog_conn_id
        self.aws_conn_id = aws_conn_id  # an aws connection for an s3:// state (None: the worker's AWS_* variables)
        self.state_dir = state_dir
        self.max_stall_seconds = max_stall_seconds
        self.tables = tables
        self.checkpoint = checkpoint  # the tail's --checkpoint (empty or None: STATE/checkpoints)
        self.purge_warning_seconds = purge_warning_seconds  # empty or None: 20% of the server's expiry period
        self.purge_warning_bytes = purge_warning_bytes  # empty or None: 20% of max_binlog_total_size

    def poke(self, context) -> bool:
        try:
            with object_store_environment(self.aws_conn_id):
                report = self._check()
        except (DblogError, ValueError) as exc:
            raise AirflowFailException(f"dblog: {exc}") from None
        if report is None:
            return False
        for name, info in report.items():
            self.log.info("tail of %s: %s", name, info)
        purged, close = purge_messages(report)
        for line in purged:
            self.log.error("binlog purged: %s", line)
        for line in close:
            self.log.warning("binlog purge horizon: %s", line)
        return True

    def _check(self) -> dict | None:
        """The health report; None while there is no offset map yet."""
        from airflow_provider_dblog.steps.verify import planned_tables
        from airflow_provider_dblog.store.state import StateDir

        max_stall = float(self.max_stall_seconds)
        warn_seconds = _optional(self.purge_warning_seconds, float)
        warn_bytes = _optional(self.purge_warning_bytes, lambda v: int(float(v)))
        state = StateDir(self.state_dir, self.checkpoint or None)
        if not state.has_offsets():
            self.log.info("no offset map in %s yet (initial load not reported): waiting", self.state_dir)
            return None
        source = DblogHook(self.dblog_conn_id).check_state_source(state.load_raw()["source"])
        # names or globs as ``dblog health --tables`` takes them (a name may hold spaces: "Mixed Case.Orders")
        tables = planned_tables(self.state_dir, patterns=self.tables) if _given(self.tables) else None
        return check_health(self.state_dir, max_stall, tables, source=source,
                            checkpoint=self.checkpoint or None, purge_warning_seconds=warn_seconds,
                            purge_warning_bytes=warn_bytes) or {}


def _given(tables) -> bool:
    """A templated ``tables``: None, an empty string or list (an unset Variable or param) means every table."""
    if isinstance(tables, (list, tuple)):
        return any(str(t).strip() for t in tables)
    return bool(tables and str(tables).strip())


def _optional(value, convert):
    """A templated number: None or an empty string (an unset Variable or param) means the default."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return convert(value)
