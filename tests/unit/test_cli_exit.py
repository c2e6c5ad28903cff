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


LEAKY = textwrap.dedent("""
    import argparse, logging, os
    from urllib.parse import quote
    from airflow_provider_dblog.cli import main as cli
    from airflow_provider_dblog.core.errors import DblogError

    def command(args):
        token, password = os.environ["AWS_SESSION_TOKEN"], os.environ["DBLOG_SOURCE_PASSWORD"]
        try:
            raise RuntimeError(f"a library's message quoting {token} and {quote(password, safe='')}")
        except RuntimeError:
            logging.getLogger("dblog").warning("retrying", exc_info=True)  # a traceback in the log
        if args.kind == "dblog":
            raise DblogError(f"a value quoted in our own line: {password}")
        raise ValueError(f"connect to mysql://u:{quote(password, safe='')}@h failed")

    class Parser:
        def parse_args(self, argv):
            return argparse.Namespace(func=command, verbose=True, kind=os.environ["KIND"])

    cli.build_parser = Parser
    cli.console()
""")


def test_secrets_from_the_environment_never_reach_stderr_not_in_a_traceback_nor_percent_encoded(tmp_path):
    """The S3 session token and ``$DBLOG_SOURCE_PASSWORD`` are redacted like the secret key and the URI's
    password, in tracebacks (``-v``) and in every error line too, also in their percent-encoded form."""
    import os

    password, token = "p@ss w/rd#9", "FQoGZXIvYXdzEXAMPLEsessionTOKEN"
    for kind, code in (("dblog", 2), ("other", 1)):
        env = {**os.environ, "AWS_SESSION_TOKEN": token, "DBLOG_SOURCE_PASSWORD": password, "KIND": kind}
        result = subprocess.run([sys.executable, "-c", LEAKY], capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == code, result.stderr
        assert "Traceback" in result.stderr and result.stderr.strip().splitlines()[-1].startswith("dblog: error:")
        for secret in (password, token, "p%40ss%20w%2Frd%239"):
            assert secret not in result.stderr + result.stdout, (secret, result.stderr)
