"""What an executor needs installed: a Python without the package gives one line naming the module and
the fix, and nothing is written (real MariaDB, Spark local[1] with its workers' Python stripped of the
package)."""
from __future__ import annotations

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
