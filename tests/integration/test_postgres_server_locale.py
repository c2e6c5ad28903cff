"""A DBA changes the server's ``lc_monetary`` at run time: ``money`` prints by it (``$1,234.50`` in C,
``1.234,50 €`` in de_DE, and with another number of decimals elsewhere), so a reader that took the server's
default would write one column in two formats. Every dblog session prints with ``lc_monetary = C``.

The German locale is compiled for the private server only (``localedef`` into a directory named by its
``LOCPATH``): the machine needs no locale installed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.support.cli import dblog
from tests.support.local_postgres import LocalPostgres


@pytest.fixture(scope="module")
def locales():
    """A directory with de_DE.UTF-8 compiled, readable by the server's user."""
    if not shutil.which("localedef") or not Path("/usr/share/i18n/locales/de_DE").exists():
        pytest.skip("localedef or the de_DE locale source is missing")
    path = Path(tempfile.mkdtemp(prefix="dblog-locales-", dir="/tmp"))
    path.chmod(0o755)
    done = subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8", str(path / "de_DE.UTF-8")],
                          capture_output=True, text=True)
    assert (path / "de_DE.UTF-8").is_dir(), done.stderr
    for root, dirs, files in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


def test_money_keeps_one_format_when_lc_monetary_changes_at_run_time(locales, tmp_path):
    server = LocalPostgres(tmp_path / "pg", environment={"LOCPATH": locales}).start()
    try:
        server.sql("CREATE DATABASE m")
        server.sql("CREATE TABLE public.prices (id int PRIMARY KEY, price money, note text)",
                   "INSERT INTO public.prices VALUES (1, 1234.5, 'a'), (2, -7.25, 'b')", db="m")
        state, sink = str(tmp_path / "state"), str(tmp_path / "lake")
        code, _, err = dblog("run", "--source", server.uri("m"), "--tables", "public.prices", "--state", state,
                             "--sink", sink)
        assert code == 0, err
        server.sql("ALTER SYSTEM SET lc_monetary = 'de_DE.UTF-8'", "SELECT pg_reload_conf()")
        assert server.sql("SELECT 1234.5::money::text", db="m") == [("1.234,50 €",)]  # the premise
        server.sql("UPDATE public.prices SET price = price + 1::money WHERE id = 1",
                   "INSERT INTO public.prices VALUES (3, 99.99, 'c')", db="m")
        code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
        assert code == 0, err
        lake = DeltaTable(f"{sink}/public.prices/current").to_pyarrow_table(columns=["id", "price"])
        assert sorted(lake.to_pylist(), key=lambda r: r["id"]) == [
            {"id": 1, "price": "$1,235.50"}, {"id": 2, "price": "-$7.25"}, {"id": 3, "price": "$99.99"}]
        changes = DeltaTable(f"{sink}/public.prices/changelog").to_pyarrow_table(columns=["price"])
        assert all(p.startswith(("$", "-$")) for p in changes["price"].to_pylist()), changes
        code, out, err = dblog("verify", "--state", state, "--sink", sink, "--tables", "public.prices")
        assert code == 0, out + err
        # a re-read under the German setting prints the same
        code, _, err = dblog("resnapshot", "--state", state, "--sink", sink, "--table", "public.prices")
        assert code == 0, err
        lake = DeltaTable(f"{sink}/public.prices/current").to_pyarrow_table(columns=["id", "price"])
        assert sorted(lake.to_pylist(), key=lambda r: r["id"])[0] == {"id": 1, "price": "$1,235.50"}
    finally:
        server.stop()
