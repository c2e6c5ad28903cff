"""Stopping what a test started: a process group, politely first."""
from __future__ import annotations

import os
import signal
import subprocess


def stop_group(process: subprocess.Popen, grace: float = 30) -> None:
    """SIGTERM to the process's group (started with ``start_new_session=True``), SIGKILL after ``grace`` s."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
