"""Source passwords kept out of state files: an environment variable, or a 0600 file in $HOME.

Like ``~/.pgpass`` or MySQL's login path: ``dblog plan --source mysql://u:pw@h:p`` remembers the
password here so that later steps (``snapshot``, ``tail``) given only ``--state`` can connect.
"""
from __future__ import annotations

import os
from pathlib import Path

from airflow_provider_dblog.core.config import PASSWORD_ENV, SourceConfig
from airflow_provider_dblog.store.atomic import read_json, write_json


def _path() -> Path:
    return Path(os.environ.get("DBLOG_CREDENTIALS", Path.home() / ".dblog" / "credentials.json"))


def _entry(config: SourceConfig) -> str:
    return f"{config.user}@{config.host}:{config.port}"


def remember(config: SourceConfig) -> None:
    if not config.password:
        return
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = read_json(path) if path.exists() else {}
    if data.get(_entry(config)) == config.password:
        return
    data[_entry(config)] = config.password
    write_json(path, data, mode=0o600)


def lookup(config: SourceConfig) -> str | None:
    path = _path()
    if not path.exists():
        return None
    return read_json(path).get(_entry(config))


def with_password(config: SourceConfig) -> SourceConfig:
    """Fill a missing password from $DBLOG_SOURCE_PASSWORD or the user's credentials file."""
    if config.password:
        return config
    if os.environ.get(PASSWORD_ENV):
        return config.with_password(os.environ[PASSWORD_ENV])
    return config.with_password(lookup(config) or "")
