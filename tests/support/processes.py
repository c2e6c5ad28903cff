"""Stopping what a test started: a process group, politely first."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable


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


def serve_in_foreground(module: str, make_server: Callable[[Path], object], argv: list[str] | None = None) -> int:
    """``python -m MODULE start DIR``: start the server ``make_server(DIR)`` builds (a fresh temporary
    directory when DIR is empty), print its URI, run until SIGTERM/SIGINT, then stop it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "start":
        print(f"usage: python -m {module} start DIR", file=sys.stderr)
        return 2
    server = make_server(Path(argv[1] or tempfile.mkdtemp(prefix=f"dblog-{module.rsplit('_', 1)[-1]}-")))
    server.start()
    print(server.uri(), flush=True)
    stop = lambda *_: (server.stop(), sys.exit(0))  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        time.sleep(3600)
