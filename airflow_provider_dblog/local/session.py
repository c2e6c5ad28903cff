"""A local Spark session tuned for a 2-core machine, for CLI runs outside spark-submit only.

Each trick is measured in docs/benchmarks.md ("local path"): the C1 JIT for short-lived drivers, a
class-data-sharing archive of Spark's classes, a Spark home without the bundled pyspark.zip (so
Python workers import the installed, compiled pyspark) with the task daemon module that makes forked
workers use it, and a session that starts in the background while the driver plans and reads.
Under spark-submit (Airflow, clusters) none of this applies: ``spark.session`` gives the stock session.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from airflow_provider_dblog.spark.session import local_master, session_builder, started, task_slots

# A short-lived driver (`dblog run`, a snapshot batch, a mirror) spends much of its life starting up: the
# C1 JIT alone compiles Spark's start-up code sooner and with less CPU (benchmarks/session_start.py: JVM
# and SparkContext start ~20-30% faster on 2 cores; `dblog run` of TPC-H SF1 orders: Spark start 5.8-7.1 s
# instead of 6.4-12.4 s, snapshot job unchanged). The tail's own session keeps the full tiered JIT.
SHORT_LIVED_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
CDS_SETTLE_SECONDS = 15  # the JVM writes its archive after the Python driver exited


def class_data_sharing_options(write: bool = True, spark_home: str | None = None) -> str:
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
    # the JVM checks the archive against its class path: the home it starts from is part of the key
    fingerprint = "|".join([pyspark.__version__, str(jars.resolve()), os.environ.get("JAVA_HOME", ""), spark_home or "",
                            *sorted(f"{j.name}:{j.stat().st_size}" for j in jars.glob("*.jar"))])
    key = hashlib.sha1(fingerprint.encode()).hexdigest()[:16]
    folder = _cache_folder()
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


def _cache_folder() -> Path:
    return Path(os.environ.get("DBLOG_SPARK_CDS_DIR") or Path.home() / ".cache" / "dblog")


def home_without_bundled_python(pyspark_home: Path, folder: Path) -> Path | None:
    """A Spark home for a local JVM whose Python processes import the installed, compiled pyspark.

    The JVM puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
    starts, and Python compiles modules imported from a zip again each time (≈1.5 s of CPU each): the
    task daemon, the Python data source planners and the streaming source runner (4 processes before
    a tail's first micro-batch). This home links everything of pip's pyspark except ``python/``, so
    those processes find the installed package instead. ``None`` where it cannot be built."""
    key = hashlib.sha1(str(pyspark_home.resolve()).encode()).hexdigest()[:16]
    home = folder / f"spark-home-{key}"
    if home.is_dir():
        return home
    staging = folder / f"spark-home-{key}.{os.getpid()}.tmp"
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for entry in pyspark_home.iterdir():
            if entry.is_dir() and entry.name not in ("python", "__pycache__"):
                (staging / entry.name).symlink_to(entry.resolve(), target_is_directory=True)
        os.replace(staging, home)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return home if home.is_dir() else None  # another driver may have built it meanwhile
    return home


def _local_spark_home() -> str | None:
    """The home to start a local JVM with, when the workers run this interpreter and pip's pyspark."""
    if os.environ.get("SPARK_HOME") or os.environ.get("PYSPARK_PYTHON") != sys.executable:
        return None
    import pyspark

    pyspark_home = Path(pyspark.__file__).parent
    if not (pyspark_home / "bin" / "spark-submit").exists() or not (pyspark_home / "jars").is_dir():
        return None
    home = home_without_bundled_python(pyspark_home, _cache_folder())
    return str(home) if home else None


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
    """A local session tuned for a single machine (see the module's docstring); never used under
    spark-submit, where ``spark.session.spark_session`` returns the stock session instead.

    ``short_lived``: the driver JVM gets ``$DBLOG_SPARK_DRIVER_JAVA_OPTIONS`` (default
    ``SHORT_LIVED_JAVA_OPTIONS``; empty for none) and may write the CDS archive."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or local_master()
    builder = session_builder(app_name, master)
    if task_slots(master) is None:  # a cluster (DBLOG_SPARK_MASTER): its stock session, nothing tuned for one machine
        return started(builder.getOrCreate())
    spark_home = _local_spark_home()
    java_options = os.environ.get("DBLOG_SPARK_DRIVER_JAVA_OPTIONS", SHORT_LIVED_JAVA_OPTIONS) if short_lived else ""
    java_options = " ".join(o for o in (java_options, class_data_sharing_options(short_lived, spark_home)) if o)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    # forked Python workers start with the worker module imported, from the installed pyspark
    builder = builder.config("spark.python.daemon.module", "airflow_provider_dblog.local.worker_daemon")
    if spark_home:
        os.environ["SPARK_HOME"] = spark_home  # only the JVM started here sees it
        try:
            return started(builder.getOrCreate())
        finally:
            del os.environ["SPARK_HOME"]
    return started(builder.getOrCreate())


class BackgroundSession:
    """A local session starting in a daemon thread while the driver plans and reads chunks. A daemon
    thread: a failed plan exits at once, and the JVM child dies with its stdin pipe; a run that never
    needs Spark (every chunk read in the driver, nothing to tail) exits without waiting for it."""

    def __init__(self, app_name: str, **options):
        self._result: dict = {}
        self._thread = threading.Thread(target=self._start, args=(app_name, options), name="dblog-spark-start",
                                        daemon=True)
        self._thread.start()

    def _start(self, app_name: str, options: dict) -> None:
        try:
            self._result["session"] = local_session(app_name, **options)
        except BaseException as exc:  # noqa: BLE001 - raised again by get()
            self._result["error"] = exc

    def ready(self) -> bool:
        return not self._thread.is_alive()

    def __call__(self):
        return self.get()

    def get(self):
        """The session, once started (or the error that stopped it)."""
        self._thread.join()
        if "error" in self._result:
            raise self._result["error"]
        return self._result["session"]


def lazy_local_session(app_name: str, short_lived: bool = True):
    """A factory of the tuned local session: Spark starts only if a step asks for a session."""
    return functools.partial(local_session, app_name, short_lived=short_lived)
