"""Fail early (issue 28): the plan's checks of what later steps need, on real paths and binaries."""
from __future__ import annotations

import os

import pytest

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.steps.preflight import SPARK_SUBMIT_BINARIES, check_later_steps, check_spark_submit
from airflow_provider_dblog.store.state import StateDir


def _executable(folder, name):
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_the_spark_binary_a_connection_names_is_found_and_a_missing_one_is_one_line(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    with pytest.raises(DblogError) as missing:
        check_spark_submit(SPARK_SUBMIT_BINARIES, str(bin_dir))
    assert "spark-submit is not on this worker's PATH" in str(missing.value) and "\n" not in str(missing.value)
    found = _executable(bin_dir, "spark3-submit")  # a connection's spark-binary extra: accepted at plan
    assert check_spark_submit(SPARK_SUBMIT_BINARIES, str(bin_dir)) == str(found)
    with pytest.raises(DblogError):  # the operator asks for exactly its connection's binary
        check_spark_submit(["spark-submit"], str(bin_dir))


def test_the_plans_checkpoint_rule_is_the_tails(tmp_path):
    initial, snapshot_only = StartupMode.parse("initial"), StartupMode.parse("snapshot-only")
    with pytest.raises(DblogError) as at_plan:
        check_later_steps("s3://bucket/state", initial, checkpoint="")
    assert "--checkpoint DIR" in str(at_plan.value)
    check_later_steps("s3://bucket/state", snapshot_only, checkpoint="")  # no tail: no checkpoint needed
    check_later_steps("s3://bucket/state", initial, checkpoint=None)  # not known to the caller: not checked
    check_later_steps("s3://bucket/state", initial, checkpoint=str(tmp_path / "cp"))
    # the tail's own check says the same (a local state stands in for the object store's missing default)
    state = StateDir(tmp_path / "state")
    state.checkpoints = None
    with pytest.raises(DblogError) as at_tail:
        state.checkpoint_root()
    assert str(at_tail.value).replace(str(tmp_path / "state"), "s3://bucket/state") == str(at_plan.value)
    assert not (tmp_path / "cp").exists() and not (tmp_path / "state").exists()


def test_a_local_sink_is_checked_without_being_created(tmp_path):
    check_later_steps(str(tmp_path / "state"), StartupMode.parse("initial"), sink=str(tmp_path / "a" / "b" / "lake"))
    assert os.listdir(tmp_path) == []
    (tmp_path / "file").write_text("")
    with pytest.raises(DblogError) as blocked:
        check_later_steps(str(tmp_path / "state"), StartupMode.parse("initial"), sink=str(tmp_path / "file" / "lake"))
    assert "is a file, not a directory" in str(blocked.value) and "--sink" in str(blocked.value)
