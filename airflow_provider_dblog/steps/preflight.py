"""Fail early: what the later steps of a capture need, checked when it is planned (``dblog plan``, ``dblog run``,
the planner task), before any chunk is read or anything is written. Each check is the rule the later step
applies itself (the tail's checkpoint, the sink's location), so both say the same one line naming the fix."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.store.files import check_writable_dir
from airflow_provider_dblog.store.object_store import check_sink, is_object_store
from airflow_provider_dblog.store.state import require_checkpoints, tail_checkpoints

# what the Spark provider may run (its ``spark-binary`` connection extra); the plan accepts any of them
SPARK_SUBMIT_BINARIES = ("spark-submit", "spark2-submit", "spark3-submit")


def check_spark_submit(binaries: Sequence[str] = ("spark-submit",), path: str | None = None) -> str:
    """The first of ``binaries`` found on ``path`` (default ``$PATH``): what the Spark provider's hook will
    run. Otherwise one line naming the fix, instead of the provider's raw ``FileNotFoundError`` traceback."""
    for binary in binaries:
        found = shutil.which(binary, path=path)
        if found:
            return found
    binary = binaries[0]
    here = Path(sys.executable).parent
    hint = (f"add {here} (this environment's pyspark has it) to the worker's PATH" if (here / binary).exists()
            else "install Spark there (or pip install 'pyspark>=4.3,<4.4' in this environment) and put its bin "
                 "directory on the worker's PATH")
    raise DblogError(f"{binary} is not on this worker's PATH, and the Spark provider runs it for every snapshot "
                     f"batch and the tail: {hint}")


def check_later_steps(state_dir: str, mode: StartupMode, sink: str | None = None, checkpoint: str | None = None,
                      spark_submit: Sequence[str] | None = None) -> None:
    """What the snapshot and the tail will need, checked now (cheap: no source, no Spark, nothing written).

    ``checkpoint``: the tail's ``--checkpoint`` ("" for its default; None: the caller does not know it, not
    checked), needed when ``mode`` follows the binlog; ``sink``: the lake's location (None: not known here):
    an object store's bucket and credentials, or a local directory this user may write; ``spark_submit``: the
    binaries any of which the later tasks run through ``spark-submit`` (None: they do not)."""
    if checkpoint is not None and mode.tails:
        local_state = None if is_object_store(state_dir) else Path(state_dir)
        folder = require_checkpoints(state_dir, tail_checkpoints(local_state, checkpoint or None))
        check_writable_dir(folder, "--checkpoint" if checkpoint else "the tail's checkpoint (STATE/checkpoints)")
    if sink:
        if is_object_store(sink):
            check_sink(sink)
        else:
            check_writable_dir(sink, "--sink")
    if spark_submit and (mode.snapshots or mode.tails):
        check_spark_submit(spark_submit, os.environ.get("PATH"))
