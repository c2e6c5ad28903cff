"""Provider metadata for Airflow's providers manager (entry point ``apache_airflow_provider``).

Kept import-light on purpose: Airflow calls this while it initialises its configuration, so it
must not import Airflow, Spark or database drivers.
"""
from __future__ import annotations

import importlib.util

INTEGRATION = "DBLog (MySQL/MariaDB CDC on Spark)"


def _mysql_provider_installed() -> bool:
    try:
        return importlib.util.find_spec("airflow.providers.mysql") is not None
    except (ImportError, ValueError):
        return False


def get_provider_info() -> dict:
    connection_types = []
    # The hook reads ordinary ``mysql`` connections. Register the type (so the UI offers it) only
    # when apache-airflow-providers-mysql is not installed: that provider owns it otherwise.
    if not _mysql_provider_installed():
        connection_types.append({
            "connection-type": "mysql",
            "hook-class-name": "airflow_provider_dblog.airflow.hooks.DblogHook",
            "hook-name": "MySQL / MariaDB (dblog)",
        })
    return {
        "package-name": "airflow-provider-dblog",
        "name": "DBLog",
        "description": ("Lock-free parallel chunked snapshots of MySQL/MariaDB tables on Spark (DBLog watermark "
                        "algorithm), kept current from the binlog by a Spark Structured Streaming tail."),
        "versions": ["0.1.0"],
        "integrations": [{
            "integration-name": INTEGRATION,
            "external-doc-url": "https://netflixtechblog.com/dblog-a-generic-change-data-capture-framework-69351fb9099b",
            "tags": ["software"],
        }],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_provider_dblog.airflow.hooks"]}],
        "operators": [{"integration-name": INTEGRATION,
                       "python-modules": ["airflow_provider_dblog.airflow.operators"]}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["airflow_provider_dblog.airflow.sensors"]}],
        "connection-types": connection_types,
    }
