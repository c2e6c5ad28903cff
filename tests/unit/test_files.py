"""The state's filesystem abstraction (store/files.py) on a local path; object storage is in
tests/e2e/test_object_store.py (a real S3 server)."""
from __future__ import annotations

import pytest

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.store.files import Files
from airflow_provider_dblog.store.state import StateDir


def test_files_on_a_local_path_write_atomically_list_and_delete(tmp_path):
    files = Files(tmp_path / "state")
    assert files.local == tmp_path / "state" and not files.remote
    assert not files.exists("reports/d.t/chunk-000001.json") and files.names("reports/d.t") == []
    assert files.identity("plan.json") is None
    files.write_json("reports/d.t/chunk-000001.json", {"chunk": 1})
    files.write_json("reports/d.t/chunk-000000.json", {"chunk": 0})
    files.write_json("plan.json", {"v": 1})
    first = files.identity("plan.json")
    files.write_json("plan.json", {"v": 2})
    assert files.identity("plan.json") != first and files.read_json("plan.json") == {"v": 2}
    assert files.names("reports/d.t", ".json") == ["chunk-000000.json", "chunk-000001.json"]  # no temp files left
    assert files.read_all(["reports/d.t/chunk-000000.json", "reports/d.t/chunk-000001.json"]) == [{"chunk": 0},
                                                                                                  {"chunk": 1}]
    assert files.modified("plan.json") > 0 and files.uri("plan.json") == f"{tmp_path / 'state'}/plan.json"
    files.delete("plan.json")
    files.delete("plan.json")  # absent: nothing to do
    assert not files.exists("plan.json") and sorted(p.name for p in (tmp_path / "state").iterdir()) == ["reports"]
    assert files.has_file("reports/d.t/chunk-000000.json")
    assert not files.has_file("reports/d.t/chunk-000009.json") and not files.has_file("reports/d.t")  # a folder


def test_a_local_state_keeps_its_checkpoints_inside_unless_told(tmp_path):
    assert StateDir(tmp_path / "s").checkpoint_dir() == tmp_path / "s" / "checkpoints" / "tail"
    assert StateDir(tmp_path / "s", tmp_path / "ck").checkpoint_dir() == tmp_path / "ck" / "tail"
    state = StateDir(tmp_path / "s")
    state.write_report("d.t", 3, {"chunk": 3})
    assert state.reports("d.t") == {3: {"chunk": 3}} and not state.has_offsets() and not state.has_plan()


def test_unsupported_or_unauthenticated_state_locations_are_one_line(monkeypatch):
    with pytest.raises(DblogError, match="local path or s3://BUCKET/PREFIX only"):
        StateDir("gs://bucket/state")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    with pytest.raises(DblogError, match="no S3 credentials for s3://bucket/state: set AWS_ACCESS_KEY_ID"):
        StateDir("s3://bucket/state")


def test_snapshot_tasks_carry_the_drivers_object_store_settings(monkeypatch):
    """An executor needs no S3 credentials of its own: the snapshot task brings the driver's (task data,
    not Spark conf), and applies them before touching the lake."""
    import os

    from airflow_provider_dblog.spark.snapshot_job import _read_chunks
    from airflow_provider_dblog.store.object_store import SETTINGS

    class Dialect:
        def close(self):
            pass

    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-key")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    task = _read_chunks("s3://lake/x", {}, Dialect())  # built in the driver
    for name in SETTINGS:  # the executor's own environment: nothing
        monkeypatch.delenv(name, raising=False)
    assert list(task([])) == []
    assert {n: os.environ.get(n) for n in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL",
                                           "AWS_REGION")} == {
        "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret-key", "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_REGION": None}
