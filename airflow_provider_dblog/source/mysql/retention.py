"""The facts of the binlog purge horizon (``core/retention.py`` decides): the files with their sizes,
the purge settings, the server's clock and the first-event times of the files that date the needed ones."""
from __future__ import annotations

from typing import Mapping, Sequence

import pymysql

from airflow_provider_dblog.core.positions import SourcePosition, file_sequence
from airflow_provider_dblog.core.retention import BinlogFile, BinlogRetention
from airflow_provider_dblog.source.mysql.binlog import binlog_sizes
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.startup import file_started

# MySQL 8 and MariaDB: binlog_expire_logs_seconds and expire_logs_days (MariaDB 10.6+ keeps them in step;
# MySQL ignores the days when the seconds are set); MySQL 8.0.29+: binlog_expire_logs_auto_purge;
# MariaDB 11.4+: max_binlog_total_size (binlog_space_limit is its Percona-compatible alias)
SETTINGS = ("binlog_expire_logs_seconds", "expire_logs_days", "binlog_expire_logs_auto_purge",
            "max_binlog_total_size", "binlog_space_limit")


def purge_settings(variables: Mapping[str, str]) -> tuple[float | None, int | None]:
    """(age limit in seconds, total-size limit in bytes) from the server's variables; None where that
    purge is off or the server has no such variable."""
    def number(name: str) -> float:
        try:
            return float(variables.get(name) or 0)
        except ValueError:
            return 0.0

    expire = number("binlog_expire_logs_seconds") or number("expire_logs_days") * 86400
    if str(variables.get("binlog_expire_logs_auto_purge", "ON")).upper() in ("OFF", "0"):
        expire = 0
    limit = int(number("max_binlog_total_size") or number("binlog_space_limit"))
    return (expire or None), (limit or None)


def binlog_retention(client: MySqlClient, server_ids: tuple[int, int],
                     needed: Sequence[SourcePosition] = ()) -> BinlogRetention:
    """The server's binlog files, purge settings and clock; with an age limit, for each closed file holding
    a ``needed`` position, the first-event time of the next file (when the rotation closed it), or of the
    file itself where the next one cannot be read."""
    sizes = binlog_sizes(client)
    names = list(sizes)
    variables = {str(k): str(v) for k, v in client.query(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + ", ".join(["%s"] * len(SETTINGS)) + ")", SETTINGS)}
    expire, limit = purge_settings(variables)
    now = float(client.scalar("SELECT UNIX_TIMESTAMP(NOW(6))"))
    started: dict[str, float | None] = {}

    def date(name: str) -> float | None:
        if name not in started:
            try:
                started[name] = float(file_started(client, server_ids, name)) or None
            except pymysql.MySQLError:  # no REPLICATION SLAVE right, or purged meanwhile: unknown
                started[name] = None
        return started[name]

    if expire is not None:
        by_seq = {file_sequence(n): i for i, n in enumerate(names)}
        for i in sorted({by_seq[p.seq] for p in needed if p.seq in by_seq}):
            if i + 1 < len(names) and date(names[i + 1]) is None:
                date(names[i])
    return BinlogRetention(tuple(BinlogFile(n, sizes[n], started.get(n)) for n in names), expire, limit, now)
