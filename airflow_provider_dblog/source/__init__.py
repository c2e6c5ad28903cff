"""Sources: the ``DataSourceDialect`` protocol and its implementations, chosen by the URI's scheme."""
from __future__ import annotations

from typing import Callable

from airflow_provider_dblog.core.config import SOURCE_FORMS, SOURCE_SCHEMES, SourceConfig
from airflow_provider_dblog.core.errors import DblogError

_FACTORIES: dict[str, Callable] = {}


def register_dialect(scheme: str, factory: Callable) -> None:
    """Make ``scheme://`` sources open with ``factory(config, options)``."""
    SOURCE_SCHEMES[scheme] = scheme
    _FACTORIES[scheme] = factory


def _mysql(config: SourceConfig, options: dict):
    from airflow_provider_dblog.source.mysql.dialect import MySqlDialect

    extra = {"server_id_range": tuple(options["server_id_range"])} if options.get("server_id_range") else {}
    return MySqlDialect(config, watermark_table=options.get("watermark_table"), epoch=int(options.get("epoch", 0)),
                        **extra)


def _postgresql(config: SourceConfig, options: dict):
    from airflow_provider_dblog.source.postgres.dialect import PostgresDialect

    return PostgresDialect(config, options)


_FACTORIES["mysql"] = _mysql
_FACTORIES["postgresql"] = _postgresql


def open_dialect(config: SourceConfig, options: dict | None = None):
    """The dialect for ``config`` with the state's options (watermark table, server id range, the epoch of
    its positions after failovers: ``steps.failover``)."""
    factory = _FACTORIES.get(config.scheme)
    if factory is None:
        raise DblogError(f"no dialect for {config.scheme}:// sources: use {SOURCE_FORMS}")
    return factory(config, options or {})
