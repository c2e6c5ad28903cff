"""The spark-submit application shipped in the package: ``spark-submit .../submit.py COMMAND ARGS``
runs ``dblog COMMAND ARGS`` inside the Spark driver (``SparkSession.getActiveSession()`` then is the
spark-submit session) and exits with its code.

    spark-submit --master local[2] $(python -c 'import airflow_provider_dblog.spark.submit as s; print(s.__file__)') \\
        snapshot --state STATE --batch 3 --sink LAKE

The password never appears here: the driver and its executors read ``$DBLOG_SOURCE_PASSWORD`` (set by
``DblogSparkSubmitOperator`` in the child's environment) or the credentials file.

``tail`` runs hold an exclusive lock on ``STATE/tail.lock`` for their whole run, so two tails of the
same state directory (the initial load's and a scheduled catch-up, say) never append at once: the
second waits for the first to finish, then catches up from the checkpoint.
"""
from __future__ import annotations

import os
import sys

APPLICATION = os.path.abspath(__file__)


def _state_dir(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--state" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--state="):
            return arg.split("=", 1)[1]
    return None


def _lock_tail(argv: list[str]):
    state = _state_dir(argv)
    if not state or not os.path.isdir(state):
        return None  # the CLI reports the missing state directory
    import fcntl

    handle = open(os.path.join(state, "tail.lock"), "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"dblog: another tail of {state} is running; waiting for it to finish", file=sys.stderr, flush=True)
        fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def main(argv: list[str]) -> int:
    here = os.path.dirname(APPLICATION)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # no shadowing by this folder
    from airflow_provider_dblog.cli.main import main as dblog

    lock = _lock_tail(argv) if argv[:1] == ["tail"] else None
    try:
        return dblog(argv)
    finally:
        if lock is not None:
            lock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
