"""The stock SparkSession of every dblog Spark application.

Under spark-submit (Airflow's operators, a cluster) the session is built from what the user configured
(master, resources, ``spark.python.*``): dblog adds only the settings its data needs (UTC session time
zone, Arrow, microsecond Parquet timestamps) and never overrides a setting the user gave. Outside
spark-submit the master is ``$DBLOG_SPARK_MASTER`` (default ``local[2]``); ``LOCAL_DEFAULTS`` apply to a
``local[N]`` master only: a cluster's session gets what its ``spark-defaults.conf`` says.
"""
from __future__ import annotations

import os
import re
import sys

DEFAULT_MASTER = "local[2]"
# what dblog's rows need, whatever the cluster: timestamps are UTC wall clock to the microsecond
REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
# defaults for a local[N] driver started here (not under spark-submit): small shuffles, no UI
LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": os.environ.get("DBLOG_SPARK_UI", "false"),
    "spark.driver.memory": os.environ.get("DBLOG_SPARK_DRIVER_MEMORY", "2g"),
}


def local_master() -> str:
    return os.environ.get("DBLOG_SPARK_MASTER", DEFAULT_MASTER)


def task_slots(master: str) -> int | None:
    """How many tasks ``master`` runs at once: N for local[N], the cores for local[*], 1 for local;
    None (unknown, presumably many) for a cluster."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return None
    if match.group(1) is None:
        return 1
    if match.group(1) == "*":
        return os.cpu_count() or 1
    return int(match.group(1))


def local_defaults(master: str) -> dict[str, str]:
    """``LOCAL_DEFAULTS`` for a ``local[N]`` master; nothing for a cluster (its own configuration rules)."""
    return dict(LOCAL_DEFAULTS) if task_slots(master) is not None else {}


def under_spark_submit() -> bool:
    """spark-submit starts the Python driver with a gateway to its JVM already running."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_builder(app_name: str, master: str | None = None):
    """A builder with ``REQUIRED_CONF``; outside spark-submit also the master and its ``local_defaults``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if not under_spark_submit():
        master = master or local_master()
        builder = builder.master(master)
        for key, value in local_defaults(master).items():
            builder = builder.config(key, value)
    for key, value in REQUIRED_CONF.items():
        builder = builder.config(key, value)
    return builder


def started(session):
    session.sparkContext.setLogLevel(os.environ.get("DBLOG_SPARK_LOG_LEVEL", "WARN"))
    return session


def spark_context(app_name: str, spark=None):
    """The SparkContext of ``spark`` (a session or a factory of one), or the running one, or a new stock
    one. RDD jobs (the snapshot) need no SparkSession: building one costs ≈3 s of a spark-submit
    application's start here (SQL state, catalog) for nothing."""
    if spark is not None:
        return spark_session(app_name, spark).sparkContext
    from pyspark import SparkConf, SparkContext

    conf = SparkConf().setAppName(app_name)
    if not under_spark_submit():
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        conf = conf.setMaster(local_master()).setAll(list(local_defaults(local_master()).items()))
    context = SparkContext.getOrCreate(conf)
    context.setLogLevel(os.environ.get("DBLOG_SPARK_LOG_LEVEL", "WARN"))
    return context


def spark_session(app_name: str, spark=None):
    """``spark`` if it is a session; ``spark()`` if it is a factory (a session that starts only when a
    step needs one, e.g. the tuned local session of CLI runs); else the active session or a new stock one."""
    if spark is not None:
        return spark if hasattr(spark, "sparkContext") else spark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return started(session_builder(app_name).getOrCreate())
