"""``dblog executor-zip OUT.zip``: the package as one zip for Spark's ``--py-files`` (or
``spark.submit.pyFiles``), so that executors need only the engine's libraries installed, not the package,
Airflow or pyodbc (docs/deploy.md).

The Airflow entry points (``airflow/``) stay out: executors never import them. Each module travels with
its bytecode, checked against the source by hash: Python cannot write bytecode into a zip, so without
it every Python worker would compile the package again. The zip is reproducible (fixed timestamps).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import marshal
import os
import sys
import zipfile
from pathlib import Path

import airflow_provider_dblog

PACKAGE = "airflow_provider_dblog"
DISTRIBUTION = "airflow-provider-dblog"
LEFT_OUT = ("airflow",)  # sub-packages executors never import
STAMP = (2020, 1, 1, 0, 0, 0)
CHECKED_HASH = 0b11  # PEP 552 flags: hash-based, checked against the source


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py")
                  if "__pycache__" not in p.parts and p.relative_to(root).parts[0] not in LEFT_OUT)


def _bytecode(source: bytes, name: str) -> bytes:
    """A hash-checked ``.pyc`` (PEP 552): valid whatever the zip's timestamps and the executor's time zone."""
    code = compile(source, name, "exec", dont_inherit=True)
    return (importlib.util.MAGIC_NUMBER + CHECKED_HASH.to_bytes(4, "little") + importlib.util.source_hash(source)
            + marshal.dumps(code))


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, STAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def executor_requirements() -> list[str]:
    """What an executor's Python needs installed beside the zip: the package's own requirements without
    extras and without pyspark (the cluster's Spark provides it)."""
    requires = importlib.metadata.requires(DISTRIBUTION) or []
    return [r for r in requires if "extra ==" not in r and not r.replace("-", "_").lower().startswith("pyspark")]


def write_executor_zip(out: str | os.PathLike) -> dict:
    """Write the zip atomically; returns what the CLI prints (the path, its size, the requirements)."""
    root = Path(airflow_provider_dblog.__file__).parent
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    modules = _modules(root)
    with zipfile.ZipFile(partial, "w") as archive:
        for path in modules:
            name = f"{PACKAGE}/{path.relative_to(root).as_posix()}"
            source = path.read_bytes()
            _add(archive, name, source)
            _add(archive, name + "c", _bytecode(source, name))
    os.replace(partial, out)
    return {"zip": str(out), "modules": len(modules), "bytes": out.stat().st_size,
            "python": f"{sys.version_info.major}.{sys.version_info.minor}", "requires": executor_requirements()}
