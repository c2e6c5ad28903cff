"""The state's files on a local path or ``s3://BUCKET/PREFIX``, through pyarrow's filesystems: one small
interface (read, write, list, delete by a name relative to the root), so the state never asks where it
lives.

Writes are atomic either way: locally a temp file beside the target and one rename (``store.atomic``);
on S3 one PUT (an object appears whole or not at all). An S3 root is checked once per process
(``object_store.check_location``): a wrong bucket, credential or endpoint is one line naming the fix,
before anything is written. Credentials come from the standard ``AWS_*`` variables only
(``object_store``).
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.store.atomic import read_json, write_atomic, write_json
from airflow_provider_dblog.store.object_store import check_location, is_object_store, s3_filesystem, settings

_CHECKED: dict[tuple, Any] = {}  # (bucket, AWS_* settings) -> a filesystem whose location was checked
_CHECK_LOCK = threading.Lock()


def _checked_s3(root: str, option: str):
    """One S3 filesystem per bucket and settings, its location checked on first use."""
    key = (root.split("://", 1)[1].split("/", 1)[0], *sorted(settings().items()))
    with _CHECK_LOCK:
        if key not in _CHECKED:
            check_location(root, option)
            _CHECKED[key] = s3_filesystem()[0]
        return _CHECKED[key]


def check_writable_dir(path: str | os.PathLike, option: str) -> None:
    """A local directory a later step will write (``--sink``, ``--checkpoint``): it, or the nearest folder
    that exists above it, must be a directory this user may write; checked without creating anything.
    One line naming ``option`` and the fix otherwise (an object-store location: ``check_location``)."""
    target = Path(path).absolute()
    existing = next((p for p in (target, *target.parents) if p.exists()), None)
    if existing is None:
        return
    if not existing.is_dir():
        raise DblogError(f"{option} {path}: {existing} is a file, not a directory: choose another {option}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise DblogError(f"{option} {path} is not writable by this user ({existing} is not): fix its "
                         f"permissions or choose another {option}")


class Files:
    """Small files under ``root`` (a local directory or ``s3://BUCKET/PREFIX``), named relative to it."""

    def __init__(self, root: str | os.PathLike, option: str = "--state"):
        self.root = str(root).rstrip("/") or "/"
        self.remote = is_object_store(self.root)
        if self.remote:
            self.fs = _checked_s3(self.root, option)
            self.base = self.root.split("://", 1)[1]
        else:
            import pyarrow.fs as pafs

            self.fs = pafs.LocalFileSystem()
            self.base = str(Path(self.root).absolute())

    @property
    def local(self) -> Path | None:
        """The root as a local directory (None on object storage)."""
        return None if self.remote else Path(self.base)

    def uri(self, name: str) -> str:
        """Where ``name`` lives, for messages."""
        return f"{self.root}/{name}"

    def _path(self, name: str) -> str:
        return f"{self.base}/{name}"

    def path_of(self, name: str) -> str:
        """``name``'s path on ``self.fs`` (to read or write it with pyarrow)."""
        return self._path(name)

    def _info(self, name: str):
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(self._path(name))
        return None if info.type == pafs.FileType.NotFound else info

    def exists(self, name: str) -> bool:
        return self._info(name) is not None

    def has_file(self, name: str) -> bool:
        """Whether the file ``name`` exists: on S3 one HEAD (``exists`` lists the prefix as well when it is
        missing, to tell a folder, which doubles the cost of the common answer "no")."""
        if not self.remote:
            return os.path.isfile(self._path(name))
        try:
            self.fs.open_input_file(self._path(name)).close()
            return True
        except (FileNotFoundError, IsADirectoryError):
            return False

    def read_json(self, name: str):
        if not self.remote:
            return read_json(self._path(name))
        with self.fs.open_input_stream(self._path(name)) as stream:
            return json.loads(stream.read())

    def read_all(self, names: list[str]) -> list:
        """``read_json`` of each name; on object storage eight requests at a time (a report per chunk)."""
        if not self.remote or len(names) < 2:
            return [self.read_json(name) for name in names]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(self.read_json, names))

    def write_json(self, name: str, data) -> None:
        """Replace ``name`` atomically (never a torn file)."""
        if not self.remote:
            write_json(Path(self._path(name)), data)
            return
        body = json.dumps(data, indent=1, default=str).encode()
        with self.fs.open_output_stream(self._path(name)) as out:
            out.write(body)

    def read_bytes(self, name: str) -> bytes:
        if not self.remote:
            return Path(self._path(name)).read_bytes()
        with self.fs.open_input_stream(self._path(name)) as stream:
            return stream.read()

    def copy_to(self, name: str, target: "Files", target_name: str) -> None:
        """Copy ``name`` to ``target_name`` under ``target``, on the same store (a temp file and a rename
        locally; a server-side copy on S3)."""
        if self.remote != target.remote:
            raise ValueError(f"copy from {self.uri(name)} to {target.uri(target_name)}: not on one store")
        if self.remote:
            self.fs.copy_file(self._path(name), target._path(target_name))
            return
        import shutil

        write_atomic(Path(target._path(target_name)), lambda tmp: shutil.copyfile(self._path(name), tmp))

    def names(self, folder: str, suffix: str = "") -> list[str]:
        """The names of the files directly in ``folder`` ending in ``suffix``, sorted (none if it is absent)."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self._path(folder), allow_not_found=True)
        return sorted(info.base_name for info in self.fs.get_file_info(selector)
                      if info.type == pafs.FileType.File and info.base_name.endswith(suffix)
                      and not info.base_name.startswith("."))

    def modified(self, name: str) -> float:
        return self._info(name).mtime_ns / 1e9

    def identity(self, name: str) -> tuple | None:
        """What changes whenever ``name`` is replaced (None if absent): to re-read a file only when it changed."""
        if not self.remote:
            try:
                st = os.stat(self._path(name))
            except FileNotFoundError:
                return None
            return st.st_mtime_ns, st.st_size, st.st_ino
        info = self._info(name)
        return None if info is None else (info.mtime_ns, info.size)

    def delete(self, name: str) -> None:
        if self.exists(name):
            self.fs.delete_file(self._path(name))
