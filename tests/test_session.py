"""The local driver's class-data-sharing archive: one writer at a time, adopted once complete, and a
damaged archive never stops a driver or writes to its stdout (the CLI prints JSON there)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from airflow_provider_dblog.spark import session


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
    key_of = ("from airflow_provider_dblog.spark.session import class_data_sharing_options as o; "
              "print(o().rsplit('/', 1)[-1].split('.')[0])")
    key = subprocess.run([sys.executable, "-c", key_of], env=env, capture_output=True, text=True, check=True).stdout.strip()
    for leftover in tmp_path.iterdir():
        leftover.unlink()
    (tmp_path / f"{key}.jsa").write_bytes(b"not an archive" * 1000)
    script = ("from airflow_provider_dblog.spark.session import local_session; s = local_session('cds-test'); "
              "assert 'SharedArchiveFile' in s.sparkContext.getConf().get('spark.driver.extraJavaOptions'); "
              "print(s.range(5).count())")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "5\n"
