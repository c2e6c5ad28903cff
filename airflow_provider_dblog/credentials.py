"""Source passwords kept out of state files: an environment variable, or a 0600 file in $HOME.

Like ``~/.pgpass`` or MySQL's login path: ``dblog plan --source mysql://u:pw@h:p`` remembers the
password here so that later steps (``snapshot``, ``tail``) given only ``--state`` can connect.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_dblog.dialects.base import SourceConfig


def _path() -> Path:
    return Path(os.environ.get("DBLOG_CREDENTIALS", Path.home() / ".dblog" / "credentials.json"))


def _entry(config: "SourceConfig") -> str:
    return f"{config.user}@{config.host}:{config.port}"


def remember(config: "SourceConfig") -> None:
    if not config.password:
        return
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = json.loads(path.read_text()) if path.exists() else {}
    if data.get(_entry(config)) == config.password:
        return
    data[_entry(config)] = config.password
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def lookup(config: "SourceConfig") -> str | None:
    path = _path()
    if not path.exists():
        return None
    return json.loads(path.read_text()).get(_entry(config))
