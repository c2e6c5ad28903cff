"""Spark's Python worker daemon, importing pyspark and py4j from their installed packages.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path. Python never
caches bytecode for modules imported from a zip, so every daemon and every worker it forks compiled
pyspark's sources again: ≈2 s of CPU before a job's first task could start on 2 cores. Where the same
version is installed as a package (``pip install pyspark``, as ``make install`` does, with bytecode
compiled up front), this daemon moves those zips behind it; otherwise it changes nothing. It also
imports the worker module once, before forking, so the forked workers start with it loaded.
Selected by ``spark.python.daemon.module`` (``spark/session.py``)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
import zipfile
from pathlib import Path

# the zip entries Spark adds, and the file in each that names its version
BUNDLED = {"pyspark": "pyspark/version.py", "py4j": "py4j/version.py"}


def _bundled_zip(entry: str) -> str | None:
    name = Path(entry).name
    if name == "pyspark.zip":
        return "pyspark"
    if name.startswith("py4j-") and name.endswith(".zip"):
        return "py4j"
    return None


def _installed_version_file(package: str, path: list[str]) -> bytes | None:
    for entry in path:
        candidate = Path(entry) / BUNDLED[package]
        if candidate.is_file():
            return candidate.read_bytes()
    return None


def prefer_installed_packages(path: list[str]) -> list[str]:
    """``path`` with each bundled zip moved to the end when the same version is installed elsewhere on it."""
    zips = [(entry, _bundled_zip(entry)) for entry in path]
    others = [entry for entry, package in zips if package is None]
    moved = []
    for entry, package in zips:
        if package is None:
            continue
        try:
            with zipfile.ZipFile(entry) as bundle:
                bundled = bundle.read(BUNDLED[package])
        except (OSError, KeyError, zipfile.BadZipFile):
            continue
        if _installed_version_file(package, others) == bundled:
            moved.append(entry)
    return [entry for entry in path if entry not in moved] + moved


if __name__ == "__main__":
    sys.path[:] = prefer_installed_packages(sys.path)
    import pyspark.daemon

    if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark") and importlib.util.find_spec(sys.argv[1]):
        importlib.import_module(sys.argv[1])
    pyspark.daemon.manager()
