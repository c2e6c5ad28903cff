"""The SparkSession every dblog Spark application uses: UTC, Arrow on, quiet logs."""
from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

DEFAULT_MASTER = "local[2]"
# A short-lived driver (`dblog run`, a snapshot batch, a mirror) spends much of its life starting up: the
# C1 JIT alone compiles Spark's start-up code sooner and with less CPU (benchmarks/session_start.py: JVM
# and SparkContext start ~20-30% faster on 2 cores; `dblog run` of TPC-H SF1 orders: Spark start 5.8-7.1 s
# instead of 6.4-12.4 s, snapshot job unchanged). The tail's own session keeps the full tiered JIT.
SHORT_LIVED_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
CDS_SETTLE_SECONDS = 15  # the JVM writes its archive after the Python driver exited


def class_data_sharing_options(write: bool = True) -> str:
    """JVM options for a class-data-sharing archive of Spark's classes (JDK 13+): the first local driver
    writes one when its JVM exits (that driver runs several times slower, once), later ones map it
    instead of loading and verifying thousands of classes again (session start plus first job ≈2×
    faster here: 3.4 s instead of 6.9 s). Only short-lived drivers (``write``) write it: a long-running
    tail would run as the slower dumping JVM for its whole life. Kept in ``$DBLOG_SPARK_CDS_DIR``
    (default ``~/.cache/dblog``), one per Spark version, jars and Java home; ``DBLOG_SPARK_CDS=0``
    turns it off. A missing, stale or damaged archive only means a normal start: the JVM checks it,
    and its log goes to stderr (stdout carries the CLI's JSON)."""
    if os.environ.get("DBLOG_SPARK_CDS", "1") == "0":
        return ""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    fingerprint = "|".join([pyspark.__version__, str(jars.resolve()), os.environ.get("JAVA_HOME", ""),
                            *sorted(f"{j.name}:{j.stat().st_size}" for j in jars.glob("*.jar"))])
    key = hashlib.sha1(fingerprint.encode()).hexdigest()[:16]
    folder = Path(os.environ.get("DBLOG_SPARK_CDS_DIR") or Path.home() / ".cache" / "dblog")
    archive = folder / f"spark-{key}.jsa"
    for written in folder.glob(f"spark-{key}.*.tmp"):  # complete once its driver ended and the JVM stopped writing
        if not _alive(int(written.name.split(".")[1])) and time.time() - written.stat().st_mtime > CDS_SETTLE_SECONDS:
            if archive.exists():
                written.unlink(missing_ok=True)
            else:
                os.replace(written, archive)
    quiet = "-XX:+IgnoreUnrecognizedVMOptions -Xlog:disable -Xlog:all=warning:stderr"
    if archive.exists():
        (folder / f"spark-{key}.dumping").unlink(missing_ok=True)
        return f"{quiet} -XX:SharedArchiveFile={archive}"
    if not write or not _claim(folder / f"spark-{key}.dumping"):
        return ""  # another driver is writing the archive (a dumping JVM runs several times slower: one at a time)
    return f"{quiet} -XX:ArchiveClassesAtExit={folder / f'spark-{key}.{os.getpid()}.tmp'}"


def _claim(marker: Path) -> bool:
    """True for the one driver that may write the archive; a claim older than 10 minutes has failed."""
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        if time.time() - marker.stat().st_mtime < 600:
            return False
        marker.touch()
        return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        java_options = os.environ.get("DBLOG_SPARK_DRIVER_JAVA_OPTIONS", SHORT_LIVED_JAVA_OPTIONS) if short_lived else ""
        java_options = " ".join(o for o in (java_options, class_data_sharing_options(write=short_lived)) if o)
        if java_options:
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
