"""The local driver's class-data-sharing archive: one writer at a time, adopted once complete, and a
damaged archive never stops a driver or writes to its stdout (the CLI prints JSON there)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from airflow_provider_dblog.local import session


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_one_driver_writes_the_archive_and_later_ones_map_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DBLOG_SPARK_CDS_DIR", str(tmp_path))
    monkeypatch.delenv("DBLOG_SPARK_CDS", raising=False)
    first = session.class_data_sharing_options()
    assert f"-XX:ArchiveClassesAtExit={tmp_path}/" in first and f".{os.getpid()}.tmp" in first
    assert session.class_data_sharing_options() == ""  # claimed: no second dumping JVM meanwhile

    written = next(iter(tmp_path.glob("*.dumping"))).name.replace(".dumping", f".{_dead_pid()}.tmp")
    (tmp_path / written).write_bytes(b"archive")
    assert session.class_data_sharing_options() == ""  # its JVM may still be writing: not adopted yet
    old = time.time() - session.CDS_SETTLE_SECONDS - 1
    os.utime(tmp_path / written, (old, old))
    options = session.class_data_sharing_options()
    archive = tmp_path / written.split(".")[0]
    assert options.endswith(f"-XX:SharedArchiveFile={archive}.jsa") and "-Xlog:disable" in options
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{archive.name}.jsa"]

    monkeypatch.setenv("DBLOG_SPARK_CDS", "0")
    assert session.class_data_sharing_options() == ""


@pytest.mark.slow
def test_a_damaged_archive_means_a_normal_start_and_a_clean_stdout(tmp_path):
    env = {**os.environ, "DBLOG_SPARK_CDS_DIR": str(tmp_path), "DBLOG_SPARK_CDS": "1"}
    key_of = ("import os, sys; os.environ['PYSPARK_PYTHON'] = sys.executable; "
              "from airflow_provider_dblog.local import session as s; "
              "print(s.class_data_sharing_options(True, s._local_spark_home()).rsplit('/', 1)[-1].split('.')[0])")
    key = subprocess.run([sys.executable, "-c", key_of], env=env, capture_output=True, text=True, check=True).stdout.strip()
    for leftover in tmp_path.glob("*.dumping"):
        leftover.unlink()
    (tmp_path / f"{key}.jsa").write_bytes(b"not an archive" * 1000)
    script = ("from airflow_provider_dblog.local.session import local_session; s = local_session('cds-test'); "
              "assert 'SharedArchiveFile' in s.sparkContext.getConf().get('spark.driver.extraJavaOptions'); "
              "print(s.range(5).count())")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "5\n"


def _bundle(path, package: str, version: str):
    import zipfile

    with zipfile.ZipFile(path, "w") as bundle:
        bundle.writestr(f"{package}/version.py", f'__version__ = "{version}"\n')
    return str(path)


def _installed(folder, package: str, version: str) -> str:
    (folder / package).mkdir(parents=True)
    (folder / package / "version.py").write_text(f'__version__ = "{version}"\n')
    return str(folder)


def test_bundled_zips_move_behind_the_same_installed_version(tmp_path):
    from airflow_provider_dblog.local.worker_daemon import prefer_installed_packages

    pyspark_zip = _bundle(tmp_path / "pyspark.zip", "pyspark", "4.3.0")
    py4j_zip = _bundle(tmp_path / "py4j-0.10.9.9-src.zip", "py4j", "0.10.9.9")
    site = _installed(tmp_path / "site", "pyspark", "4.3.0")
    _installed(tmp_path / "site", "py4j", "0.10.9.9")
    assert prefer_installed_packages(["/cwd", pyspark_zip, py4j_zip, site]) == ["/cwd", site, pyspark_zip, py4j_zip]

    other = _installed(tmp_path / "other", "pyspark", "4.2.0")  # another version: the bundle must win
    assert prefer_installed_packages([pyspark_zip, other]) == [pyspark_zip, other]
    assert prefer_installed_packages([pyspark_zip, "/nowhere"]) == [pyspark_zip, "/nowhere"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "pyspark.zip").write_bytes(b"not a zip")
    broken = str(tmp_path / "bad" / "pyspark.zip")
    assert prefer_installed_packages([broken, site]) == [broken, site]


def test_the_local_home_links_all_of_spark_but_its_bundled_python(tmp_path):
    pyspark_home = tmp_path / "pyspark"
    for name in ("bin", "jars", "python", "sbin", "__pycache__"):
        (pyspark_home / name).mkdir(parents=True)
    (pyspark_home / "version.py").write_text("")
    home = session.home_without_bundled_python(pyspark_home, tmp_path / "cache")
    assert sorted(p.name for p in home.iterdir()) == ["bin", "jars", "sbin"]
    assert (home / "jars").resolve() == (pyspark_home / "jars").resolve()
    assert session.home_without_bundled_python(pyspark_home, tmp_path / "cache") == home  # built once
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [home.name]  # no staging left behind


def test_the_archive_key_follows_the_home_the_jvm_starts_from(tmp_path, monkeypatch):
    monkeypatch.setenv("DBLOG_SPARK_CDS_DIR", str(tmp_path))
    monkeypatch.delenv("DBLOG_SPARK_CDS", raising=False)
    first = session.class_data_sharing_options(spark_home="/a")
    for marker in tmp_path.glob("*.dumping"):
        marker.unlink()
    second = session.class_data_sharing_options(spark_home="/b")
    assert first.rsplit("/", 1)[-1].split(".")[0] != second.rsplit("/", 1)[-1].split(".")[0]


PROBE_SCRIPT = """
import json, sys, tempfile
from pathlib import Path
from pyspark.sql.datasource import DataSource, DataSourceReader
from airflow_provider_dblog.local.session import local_session
spark = local_session("worker-test")
planner_report = Path(tempfile.mkdtemp()) / "planner.txt"

class Probe(DataSource):  # its schema() runs in a Python process the JVM starts outside the task daemon
    @classmethod
    def name(cls):
        return "probe"

    def schema(self):
        import pyspark
        planner_report.write_text(pyspark.__file__)
        return "x int"

    def reader(self, schema):
        return ProbeReader()

class ProbeReader(DataSourceReader):
    def read(self, partition):
        yield (1,)

def probe(_):
    import pyspark
    yield json.dumps({"pyspark": pyspark.__file__, "worker_loaded": "pyspark.worker" in sys.modules,
                      "pandas": "pandas" in sys.modules})

workers = [json.loads(r) for r in spark.sparkContext.parallelize(range(2), 2).mapPartitions(probe).collect()]
spark.dataSource.register(Probe)
assert spark.read.format("probe").load().collect()[0].x == 1
print(json.dumps({"workers": workers, "planner": planner_report.read_text(), "driver_pandas": "pandas" in sys.modules}))
"""


def _probe(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _compiled(path: str) -> bool:
    return ".zip" not in path and path.endswith("pyspark/__init__.py")


@pytest.mark.slow
def test_python_processes_start_without_compiling_pyspark():
    """Spark's pyspark.zip has no bytecode: every Python process of a local run imports the installed,
    compiled pyspark, and task workers never import pandas."""
    result = _probe(dict(os.environ))
    assert _compiled(result["planner"]), result
    for worker in result["workers"]:
        assert _compiled(worker["pyspark"]) and worker["worker_loaded"] and not worker["pandas"], worker


@pytest.mark.slow
def test_task_workers_import_the_installed_pyspark_under_any_spark_home():
    """As under spark-submit: Spark's own home puts pyspark.zip first, the task daemon moves it back."""
    import pyspark

    result = _probe({**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__)})
    assert ".zip" in result["planner"]  # what every Python process did before
    for worker in result["workers"]:
        assert _compiled(worker["pyspark"]) and worker["worker_loaded"], worker


@pytest.mark.parametrize("master, slots", [("local[2]", 2), ("local[16]", 16), ("local[4,3]", 4), ("local", 1),
                                           ("local[*]", os.cpu_count()), ("spark://h:7077", None), ("yarn", None)])
def test_task_slots_of_a_master(master, slots):
    assert session.task_slots(master) == slots


@pytest.mark.parametrize("threads, master, needed", [(2, "local[2]", False), (2, "local[1]", False),
                                                     (2, "local[3]", True), (0, "local[2]", True),
                                                     (2, "spark://h:7077", True), (4, "local[4]", False)])
def test_dblog_run_starts_spark_only_when_it_adds_task_slots(threads, master, needed):
    from airflow_provider_dblog.local.chunk_readers import driver_reading_needs_spark

    assert driver_reading_needs_spark(threads, master) is needed


STOCK_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from airflow_provider_dblog.spark.session import spark_session
conf = spark_session("probe").sparkContext.getConf()
print(json.dumps({k: conf.get(k) for k in ("spark.python.daemon.module", "spark.driver.extraJavaOptions",
                                             "spark.sql.shuffle.partitions", "spark.sql.session.timeZone")}))
"""


@pytest.mark.slow
def test_spark_submit_applications_get_the_stock_session_with_the_users_settings(tmp_path):
    """Under spark-submit none of the local tuning applies, and dblog overrides no setting the user gave
    (it adds only the UTC session time zone its rows need)."""
    import pyspark

    script = tmp_path / "probe.py"
    script.write_text(STOCK_PROBE)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    done = subprocess.run([submit, "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=7", str(script), root],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    conf = json.loads(done.stdout.strip().splitlines()[-1])
    java_options = conf.pop("spark.driver.extraJavaOptions") or ""  # Spark's own JDK module flags only
    assert "TieredStopAtLevel" not in java_options and "SharedArchive" not in java_options, java_options
    assert conf == {"spark.python.daemon.module": None, "spark.sql.shuffle.partitions": "7",
                    "spark.sql.session.timeZone": "UTC"}
