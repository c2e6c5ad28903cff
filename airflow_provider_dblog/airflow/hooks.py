"""``DblogHook``: an Airflow ``mysql`` or ``postgres`` connection -> ``SourceConfig`` and the source's dialect.

The connection holds host, port, login, password and (optionally for MySQL) schema; a ``postgres``
connection's schema field is its database (required: a PostgreSQL capture is one database, its tables
``SCHEMA.TABLE``). A MySQL connection's extras may hold::

    {"watermark": "auto|position|watermark_table|consistent_snapshot",
     "watermark_table": "DB.TABLE",
     "server_id_range": [1000000, 2000000000]}      # or "1000000-2000000000"

The password stays in this process and in the environment of the spark-submit children
(``$DBLOG_SOURCE_PASSWORD``): it is never returned in an XCom, logged, written to the state
directory or put on a command line. Airflow masks connection passwords in task logs as well.

``object_store_env`` does the same for an ``aws`` connection (``aws_conn_id``): the standard ``AWS_*``
variables of ``s3://`` state and lake, for the spark-submit child's environment or, through
``object_store_environment``, for a step that runs inside the Airflow task.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator

from airflow.sdk import BaseHook

from airflow_provider_dblog.core.config import (
    DEFAULT_PORTS, PASSWORD_ENV, SourceConfig, server_id_range, watermark_strategy,
)
from airflow_provider_dblog.core.errors import DblogError

POSTGRES_CONN_TYPES = ("postgres", "postgresql")
CONN_TYPES = ("mysql", "mariadb", "dblog", *POSTGRES_CONN_TYPES)
AWS_CONN_TYPES = ("aws", "s3")
# the extras DblogHook reads (``watermark_strategy``: an older spelling of ``watermark``)
KNOWN_EXTRAS = ("watermark", "watermark_table", "server_id_range", "publication", "watermark_strategy")
# TLS settings that ask for no verification (what dblog does anyway): accepted without a word
_TLS_PREFERENCES = ("prefer", "preferred", "allow", "disable", "disabled", "false", "0", "off", "no")
_TLS_KEYS_ALLOWED = ("ssl", "ssl_mode", "sslmode")


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
                                 f"MySQL/MariaDB connection (type mysql) or a PostgreSQL one (type postgres)")
            if not conn.host or not conn.login:
                raise DblogError(f"connection {self.dblog_conn_id!r} needs a host and a login")
            _mask(conn.password or "")
            self._check_extras(dict(conn.extra_dejson or {}))
            self._conn = conn
        return self._conn

    def _check_extras(self, extras: dict) -> None:
        """Extras that ask for a verified TLS connection fail in one line (dblog cannot honour them: silently
        ignored, the password would go to a server never verified); others dblog does not use get a warning."""
        tls = sorted(k for k, v in extras.items() if k.lower().startswith("ssl") and v not in (None, "", False, {})
                     and str(v).strip().lower() not in _TLS_PREFERENCES)
        if tls:
            raise DblogError(f"connection {self.dblog_conn_id!r}: extras {', '.join(tls)}: dblog cannot verify the "
                             f"server's TLS certificate (it uses TLS when the server offers it, unverified): remove "
                             f"them to accept that, or reach the server over a trusted network or tunnel")
        unused = sorted(k for k in extras if k not in KNOWN_EXTRAS and k.lower() not in _TLS_KEYS_ALLOWED)
        if unused:
            self.log.warning("connection %r: extras %s are not used by dblog (it reads %s)", self.dblog_conn_id,
                             ", ".join(unused), ", ".join(KNOWN_EXTRAS[:4]))

    @property
    def extras(self) -> dict:
        return dict(self.connection.extra_dejson or {})

    def source_config(self) -> SourceConfig:
        conn = self.connection
        scheme = "postgresql" if (conn.conn_type or "").lower() in POSTGRES_CONN_TYPES else "mysql"
        try:
            port = int(conn.port or DEFAULT_PORTS[scheme])
        except (TypeError, ValueError):
            raise DblogError(f"connection {self.dblog_conn_id!r}: port {conn.port!r} is not a number") from None
        if scheme == "postgresql" and not conn.schema:
            raise DblogError(f"connection {self.dblog_conn_id!r} (type postgres) needs its database in the schema "
                             f"field: a PostgreSQL capture is one database")
        return SourceConfig(conn.host, port, conn.login, conn.password or "", conn.schema or "", scheme)

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
        if extras.get("publication"):  # PostgreSQL: the tables' owner's publication (the CLI's --publication)
            options.update(publication=str(extras["publication"]), publication_given=True)
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
                return True, f"{self.source_config().public_uri}: ready for CDC (at {dialect.current_position()})"
            finally:
                dialect.close()
        except DblogError as exc:
            return False, str(exc)


def object_store_env(aws_conn_id: str | None) -> dict[str, str]:
    """The ``AWS_*`` variables an Airflow ``aws`` connection stands for: login = access key id, password =
    secret key, extras ``endpoint_url`` (``AWS_ALLOW_HTTP`` follows an ``http://`` one), ``region_name``,
    ``aws_session_token``. None or empty: nothing (the worker's own variables or role apply). The secrets
    are masked in task logs."""
    if not aws_conn_id:
        return {}
    conn = BaseHook.get_connection(aws_conn_id)
    if conn.conn_type and conn.conn_type.lower() not in AWS_CONN_TYPES:
        raise DblogError(f"connection {aws_conn_id!r} has type {conn.conn_type!r}: aws_conn_id names an Amazon Web "
                         f"Services connection (type aws) for s3:// state and lake")
    extras = dict(conn.extra_dejson or {})
    if extras.get("role_arn"):
        raise DblogError(f"connection {aws_conn_id!r}: role_arn is not supported: give the connection an access key "
                         f"(login) and secret (password), or the role to the workers and executors themselves")
    key, secret = conn.login or extras.get("aws_access_key_id"), conn.password or extras.get("aws_secret_access_key")
    if bool(key) != bool(secret):
        raise DblogError(f"connection {aws_conn_id!r} needs both an access key id (login) and a secret key (password)")
    endpoint = extras.get("endpoint_url") or ((extras.get("service_config") or {}).get("s3") or {}).get("endpoint_url")
    env = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_SESSION_TOKEN": extras.get("aws_session_token"),
           "AWS_REGION": extras.get("region_name"), "AWS_ENDPOINT_URL": endpoint,
           "AWS_ALLOW_HTTP": "true" if str(endpoint or "").startswith("http://") else None}
    _mask(secret or "")
    _mask(env["AWS_SESSION_TOKEN"] or "")
    return {name: str(value) for name, value in env.items() if value}


@contextmanager
def object_store_environment(aws_conn_id: str | None) -> Iterator[None]:
    """``object_store_env`` in this process's environment while a step runs in the Airflow task (the store
    reads only the environment), restored afterwards."""
    env = object_store_env(aws_conn_id)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def checked_spark_hook(operator, env: dict | None):
    """The Spark provider's hook of a ``SparkSubmitOperator`` (what its ``execute`` would build), once the
    spark-submit binary it runs (``spark-binary`` of its connection) is found on the PATH its child gets:
    otherwise the task fails (no retry) with one line naming the fix, not the provider's traceback."""
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dblog.steps.preflight import check_spark_submit

    hook = operator._get_hook()
    binary = (getattr(hook, "_connection", None) or {}).get("spark_binary") or "spark-submit"
    try:
        check_spark_submit([binary], (env or {}).get("PATH") or os.environ.get("PATH"))
    except DblogError as exc:
        raise AirflowFailException(f"dblog: {exc}") from None
    return hook
