"""The SparkSession every dblog Spark application uses: UTC, Arrow on, quiet logs."""
from __future__ import annotations

import os
import sys

DEFAULT_MASTER = "local[2]"
# A short-lived driver (`dblog run`, a snapshot batch, a mirror) spends much of its life starting up: the
# C1 JIT alone compiles Spark's start-up code sooner and with less CPU (benchmarks/session_start.py: JVM
# and SparkContext start ~20-30% faster on 2 cores; `dblog run` of TPC-H SF1 orders: Spark start 5.8-7.1 s
# instead of 6.4-12.4 s, snapshot job unchanged). The tail's own session keeps the full tiered JIT.
SHORT_LIVED_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def local_session(app_name: str, master: str | None = None, short_lived: bool = True):
    """The running session under spark-submit; otherwise a local one (``$DBLOG_SPARK_MASTER`` or local[2]).

    ``short_lived``: the driver JVM gets ``$DBLOG_SPARK_DRIVER_JAVA_OPTIONS`` (default
    ``SHORT_LIVED_JAVA_OPTIONS``; empty for none), which only matters when this call starts the JVM."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit, which sets --master itself
        builder = builder.master(master or os.environ.get("DBLOG_SPARK_MASTER", DEFAULT_MASTER))
        java_options = os.environ.get("DBLOG_SPARK_DRIVER_JAVA_OPTIONS", SHORT_LIVED_JAVA_OPTIONS)
        if short_lived and java_options:
            builder = builder.config("spark.driver.extraJavaOptions", java_options)
    session = (builder
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.enabled", os.environ.get("DBLOG_SPARK_UI", "false"))
               .config("spark.driver.memory", os.environ.get("DBLOG_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
               .getOrCreate())
    session.sparkContext.setLogLevel(os.environ.get("DBLOG_SPARK_LOG_LEVEL", "WARN"))
    return session
