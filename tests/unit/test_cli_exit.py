"""The ``dblog`` command's way out (``cli.main.console``): the command's exit code, everything it printed,
and every exit handler registered while it ran, then no native teardown (apache/arrow#34314)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.cli import DBLOG, dblog

COMMAND = textwrap.dedent("""
    import atexit, pathlib, sys
    from airflow_provider_dblog.cli import main as cli

    def command():
        atexit.register(pathlib.Path(sys.argv[1]).write_text, "ran")  # as a temporary directory's cleanup does
        for i in range(20000):
            print(f"line {i}")
        return 3

    cli.main = command
    cli.console()
""")


def test_the_exit_keeps_the_code_the_output_and_the_exit_handlers(tmp_path):
    marker = tmp_path / "handler"
    result = subprocess.run([sys.executable, "-c", COMMAND, str(marker)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    assert result.stdout.splitlines()[-1] == "line 19999" and len(result.stdout.splitlines()) == 20000
    assert marker.read_text() == "ran"


def test_usage_errors_and_help_keep_their_codes():
    code, out, _ = dblog("--help")
    assert code == 0 and out.startswith("usage: dblog")
    code, _, err = dblog("status", "--state", "/nonexistent")
    assert code == 2 and "required: --sink" in err
    assert open(DBLOG).read().count("console()") == 1  # the installed script goes through console()
