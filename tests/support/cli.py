"""The ``dblog`` CLI as a user runs it: a process of the venv's console script, and its one error line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DBLOG = str(Path(sys.executable).parent / "dblog")


def dblog(*args: str, env: dict | None = None, timeout: float = 600) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``dblog ARGS`` with this environment plus ``env``."""
    result = subprocess.run([DBLOG, *args], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    return result.returncode, result.stdout, result.stderr


def one_error_line(stderr: str) -> str:
    """The single ``dblog: error:`` line of a failed command (fails the test if there is not exactly one)."""
    lines = [line for line in stderr.splitlines() if line.startswith("dblog: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def captured(source_uri: str, table: str, tmp_path, chunk_size: int) -> tuple[str, str]:
    """``dblog run`` of ``table`` into ``tmp_path/state`` and ``tmp_path/lake`` (the test fails on an error);
    returns (state, sink)."""
    state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
    code, _, err = dblog("run", "--source", source_uri, "--table", table, "--state", state, "--sink", sink,
                         "--chunk-size", str(chunk_size))
    assert code == 0, err
    return state, sink
