"""Sources: the ``DataSourceDialect`` protocol and its implementations."""
from __future__ import annotations

from airflow_provider_dblog.core.config import SourceConfig


def open_dialect(config: SourceConfig, options: dict | None = None):
    """The dialect for ``config`` with the state's options (watermark table, server id range)."""
    from airflow_provider_dblog.source.mysql.dialect import MySqlDialect

    options = options or {}
    extra = {"server_id_range": tuple(options["server_id_range"])} if options.get("server_id_range") else {}
    return MySqlDialect(config, watermark_table=options.get("watermark_table"), **extra)
