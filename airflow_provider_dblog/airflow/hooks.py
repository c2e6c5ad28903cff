"""``DblogHook``: an Airflow ``mysql`` connection -> ``SourceConfig`` and the MySQL/MariaDB dialect.

The connection holds host, port, login, password and (optionally) schema; its extras may hold::

    {"watermark": "auto|position|watermark_table|consistent_snapshot",
     "watermark_table": "DB.TABLE",
     "server_id_range": [1000000, 2000000000]}      # or "1000000-2000000000"

The password stays in this process and in the environment of the spark-submit children
(``$DBLOG_SOURCE_PASSWORD``): it is never returned in an XCom, logged, written to the state
directory or put on a command line. Airflow masks connection passwords in task logs as well.
"""
from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_dblog.core.config import PASSWORD_ENV, SourceConfig, server_id_range, watermark_strategy
from airflow_provider_dblog.core.errors import DblogError

CONN_TYPES = ("mysql", "mariadb", "dblog")


def _mask(secret: str) -> None:
    if not secret:
        return
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDKs
        return
    mask_secret(secret)


class DblogHook(BaseHook):
    """Reads a ``mysql`` connection; builds the ``SourceConfig`` and dialect the pipeline uses."""

    conn_name_attr = "dblog_conn_id"
    default_conn_name = "dblog_source"
    conn_type = "mysql"
    hook_name = "MySQL / MariaDB (dblog)"

    def __init__(self, dblog_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dblog_conn_id = dblog_conn_id
        self._conn = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden-fields": [],
            "relabeling": {"schema": "Database (optional)"},
            "placeholders": {
                "host": "127.0.0.1", "port": "3306", "login": "dblog",
                "extra": '{"watermark": "auto", "watermark_table": "db._dblog_watermark", '
                         '"server_id_range": [1000000, 2000000000]}',
            },
        }

    # ---- connection ------------------------------------------------------------------------
    @property
    def connection(self):
        if self._conn is None:
            conn = self.get_connection(self.dblog_conn_id)
            if conn.conn_type and conn.conn_type.lower() not in CONN_TYPES:
                raise DblogError(f"connection {self.dblog_conn_id!r} has type {conn.conn_type!r}: dblog reads a "
                                 f"MySQL/MariaDB connection (type mysql)")
            if not conn.host or not conn.login:
                raise DblogError(f"connection {self.dblog_conn_id!r} needs a host and a login")
            _mask(conn.password or "")
            self._conn = conn
        return self._conn

    @property
    def extras(self) -> dict:
        return dict(self.connection.extra_dejson or {})

    def source_config(self) -> SourceConfig:
        conn = self.connection
        try:
            port = int(conn.port or 3306)
        except (TypeError, ValueError):
            raise DblogError(f"connection {self.dblog_conn_id!r}: port {conn.port!r} is not a number") from None
        return SourceConfig(conn.host, port, conn.login, conn.password or "", conn.schema or "")

    def watermark(self) -> str:
        try:
            return watermark_strategy(self.extras.get("watermark") or self.extras.get("watermark_strategy"))
        except DblogError as exc:
            raise DblogError(f"connection {self.dblog_conn_id!r}: {exc}") from None

    def options(self) -> dict:
        """The dialect options kept in the state directory (no secrets)."""
        extras = self.extras
        options: dict[str, Any] = {}
        if extras.get("watermark_table"):
            options["watermark_table"] = str(extras["watermark_table"])
        server_ids = server_id_range(extras.get("server_id_range"))
        if server_ids:
            options["server_id_range"] = list(server_ids)
        return options

    def get_conn(self):
        """A ``MySqlDialect`` for the connection (call ``close()`` when done)."""
        from airflow_provider_dblog.source import open_dialect

        return open_dialect(self.source_config(), self.options())

    def check_state_source(self, state_source_uri: str) -> SourceConfig:
        """The source of a state directory with this connection's password; refuses another server."""
        state = SourceConfig.parse(state_source_uri)
        mine = self.source_config()
        if (state.host, state.port, state.user) != (mine.host, mine.port, mine.user):
            raise DblogError(f"the state directory belongs to {state.public_uri}, connection {self.dblog_conn_id!r} "
                             f"points at {mine.public_uri}: use the connection the table was planned with")
        return state.with_password(mine.password)

    def spark_env(self) -> dict[str, str]:
        """Environment for spark-submit children: how they learn the password (never argv)."""
        password = self.connection.password or ""
        return {PASSWORD_ENV: password} if password else {}

    def test_connection(self) -> tuple[bool, str]:
        try:
            dialect = self.get_conn()
            try:
                dialect.check_source()
                return True, f"{self.source_config().public_uri}: binlog ready for CDC (at {dialect.current_position()})"
            finally:
                dialect.close()
        except DblogError as exc:
            return False, str(exc)
