"""What an executor needs installed: a Python without the package gives one line naming the module and
the fix, and nothing is written (real MariaDB, Spark local[1] with its workers' Python stripped of the
package); with the package shipped as ``dblog executor-zip``'s zip, executors that have only the engine's
libraries (no package, no Airflow, no pyodbc) on a standalone cluster produce a lake equal to the source."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
DBLOG = str(Path(sys.executable).parent / "dblog")


def test_a_package_missing_on_the_executors_is_one_line(mariadb, db, tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()  # sitecustomize runs in every worker: it drops the package's (editable) import finder
    (hide / "sitecustomize.py").write_text(
        "import sys\nsys.meta_path[:] = [f for f in sys.meta_path\n"
        "                 if 'airflow_provider_dblog' not in getattr(f, '__module__', '')]\n")
    executor_python = tmp_path / "executor-python"
    executor_python.write_text(f'#!/bin/sh\nPYTHONPATH="{hide}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    executor_python.chmod(0o755)
    mariadb.sql(f"CREATE TABLE {db}.m (id INT PRIMARY KEY, v INT)", f"INSERT INTO {db}.m VALUES (1, 1), (2, 2)")
    env = {**os.environ, "DBLOG_SPARK_MASTER": "local[1]", "PYSPARK_PYTHON": str(executor_python)}
    state, sink = tmp_path / "state", tmp_path / "sink"
    plan = subprocess.run([DBLOG, "plan", "--source", mariadb.uri(), "--table", f"{db}.m", "--state", str(state)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr[-2000:]
    snapshot = subprocess.run([DBLOG, "snapshot", "--state", str(state), "--batch", "0", "--sink", str(sink)],
                              capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    lines = [line for line in snapshot.stderr.splitlines() if line.startswith("dblog: error:")]
    assert snapshot.returncode != 0 and len(lines) == 1, snapshot.stderr[-3000:]
    assert "cannot import airflow_provider_dblog" in lines[0] and "--py-files" in lines[0], lines[0]
    assert not list((state / "reports").glob("*/*.json")) if (state / "reports").exists() else True


# One interpreter path, installed differently per host (as spark.pyspark.python names one path everywhere):
# on the driver's host (which sees DRIVER_MARK) the full install; on the worker's, the engine's libraries
# only: the editable install's finder is dropped and Airflow and pyodbc refused.
SLIM_SITECUSTOMIZE = """
import os, sys

class Refused:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split('.')[0] in ('airflow', 'pyodbc'):
            raise ImportError(name + ' is not installed on this executor')
        return None

if not os.path.exists(DRIVER_MARK):
    sys.meta_path[:] = [f for f in sys.meta_path if 'airflow_provider_dblog' not in getattr(f, '__module__', '')]
    sys.meta_path.insert(0, Refused)
    sys.stderr.write('slim executor python\\n')
"""


def _slim_executor_python(folder: Path, driver_mark: Path) -> Path:
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SLIM_SITECUSTOMIZE.replace("DRIVER_MARK", repr(str(driver_mark))))
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{folder}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def test_executors_without_the_package_get_it_through_py_files(mariadb, db, tmp_path):
    """A standalone cluster whose executors cannot see the driver's disk and whose Python has no
    airflow_provider_dblog, Airflow or pyodbc: ``dblog executor-zip`` builds the zip, the snapshot goes
    through spark-submit ``--py-files`` (as Airflow's operators submit it), the tail through the CLI with
    ``spark.submit.pyFiles`` in the cluster's ``spark-defaults.conf``, which dblog leaves as it is. The lake
    equals the source."""
    from deltalake import DeltaTable

    from airflow_provider_dblog.cli.spark_app import APPLICATION
    from tests.support.lakecheck import SEED_SQL, TYPES_DDL, compare_rows, typed_mutation, typed_row
    from tests.support.spark_cluster import SparkCluster, spark_home
    from tests.support.workload import Writer

    driver = tmp_path / "driver"  # the zip, the state, the checkpoint, the event log: hidden from the worker
    driver.mkdir()
    bundle = subprocess.run([DBLOG, "executor-zip", str(driver / "dblog-executor.zip")], capture_output=True,
                            text=True, timeout=120)
    assert bundle.returncode == 0, bundle.stderr[-2000:]
    built = json.loads(bundle.stdout)
    assert not any(r.startswith(("apache-airflow", "pyodbc", "pyspark")) for r in built["requires"]), built
    (driver / "mark").write_text("the driver's host")
    python = _slim_executor_python(tmp_path / "executor", driver / "mark")
    conf_dir = driver / "conf"  # the user's configuration for the CLI's session on the cluster
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.submit.pyFiles {built['zip']}\nspark.sql.shuffle.partitions 7\nspark.eventLog.enabled true\n"
        f"spark.eventLog.compress false\nspark.eventLog.dir file://{driver / 'events'}\n")
    (driver / "events").mkdir()
    table = f"{db}.x"
    mariadb.sql(f"CREATE TABLE {table} {TYPES_DDL}")
    mariadb.sql(f"INSERT INTO {table} {SEED_SQL.format(n=3000)}", db=db)
    state, sink, checkpoint = driver / "state", tmp_path / "lake", driver / "checkpoint"  # the lake: a shared disk
    with SparkCluster(tmp_path / "cluster", hidden=driver) as cluster:
        env = {**os.environ, "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": sys.executable}
        plan = subprocess.run([DBLOG, "plan", "--source", mariadb.uri(), "--table", table, "--state", str(state),
                               "--chunk-size", "700"], capture_output=True, text=True, env=env, timeout=300, cwd=driver)
        assert plan.returncode == 0, plan.stderr[-2000:]
        writer = Writer(mariadb.port, table, 4000, typed_row, typed_mutation, seed=41, pause=0.003)
        writer.start()
        try:
            writer.wait_started()
            submit = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master,
                      "--py-files", built["zip"], APPLICATION]
            snapshot = subprocess.run([*submit, "snapshot", "--state", str(state), "--batch", "0", "--sink", str(sink)],
                                      capture_output=True, text=True, env=env, timeout=600, cwd=driver)
            assert snapshot.returncode == 0, snapshot.stderr[-4000:]
        finally:
            writer.stop()
        report = subprocess.run([DBLOG, "report", "--state", str(state)], capture_output=True, text=True, env=env,
                                timeout=300, cwd=driver)
        assert report.returncode == 0 and json.loads(report.stdout)["chunks"] >= 4, report.stderr[-2000:]
        tail = subprocess.run([DBLOG, "tail", "--state", str(state), "--sink", str(sink), "--checkpoint",
                               str(checkpoint), "--available-now", "--driver-catch-up-mb", "0"],
                              capture_output=True, text=True, timeout=600, cwd=driver,
                              env={**env, "DBLOG_SPARK_MASTER": cluster.master, "SPARK_CONF_DIR": str(conf_dir)})
        assert tail.returncode == 0, tail.stderr[-4000:]
    executor_logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "cluster" / "work").rglob("stderr"))
    assert executor_logs.count("slim executor python") >= 2, executor_logs[-3000:]  # both applications' workers
    properties = _tail_properties(driver / "events")
    assert properties.get("spark.sql.shuffle.partitions") == "7", properties  # the user's, not LOCAL_DEFAULTS
    assert "spark.python.daemon.module" not in properties and "spark.driver.memory" not in properties, properties
    lake = DeltaTable(str(sink / table / "current")).to_pyarrow_dataset().to_table()
    problems = compare_rows(lake, mariadb.port, table)
    assert not problems, problems[:5]


def _tail_properties(events: Path) -> dict:
    """The Spark properties the tail's application ran with (its event log's environment update)."""
    for log in sorted(p for p in events.rglob("*") if p.is_file()):
        for line in log.read_text(errors="replace").splitlines():
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("Event") == "SparkListenerEnvironmentUpdate":
                return dict(event["Spark Properties"])  # a JSON object (or [key, value] pairs)
    raise AssertionError(f"no environment in the event logs {list(events.iterdir())}")
