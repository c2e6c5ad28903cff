"""What the binlog decoder tests share: a table of typed columns on the private MariaDB, value strategies for its
integer and DECIMAL columns, and parameters pymysql writes exactly."""
from __future__ import annotations

import decimal
from decimal import Decimal
from typing import Iterator, Mapping

from hypothesis import strategies as st

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.source.mysql.dialect import MySqlDialect

INT_RANGES = {"ti": (-128, 127), "tiu": (0, 255), "si": (-2**15, 2**15 - 1), "siu": (0, 2**16 - 1),
              "mi": (-2**23, 2**23 - 1), "miu": (0, 2**24 - 1), "i": (-2**31, 2**31 - 1), "iu": (0, 2**32 - 1),
              "bi": (-2**63, 2**63 - 1), "biu": (0, 2**64 - 1)}
WIDE = decimal.Context(prec=100)  # Decimal's default 28 digits would round DECIMAL(65,30) values


def decimals(precision: int, scale: int):
    """Every DECIMAL(precision, scale) value, exactly."""
    digits = st.integers(-(10 ** precision - 1), 10 ** precision - 1)
    return digits.map(lambda n: Decimal(n).scaleb(-scale, WIDE))


def sql_param(value):
    """Decimals as fixed-point text: pymysql would write 1E-30, which SQL reads as a DOUBLE."""
    return format(value, "f") if isinstance(value, Decimal) else value


def typed_table(mariadb, table: str, columns: Mapping[str, str]) -> Iterator[tuple]:
    """``table`` (``id INT PRIMARY KEY`` and ``columns``: name -> DDL type, utf8mb4) created on the server; yields
    (server, dialect, the table's meta) for a fixture (``yield from``) and closes the dialect after."""
    mariadb.sql(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    ddl = ", ".join(f"`{name}` {type_}" for name, type_ in columns.items())
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, {ddl}) DEFAULT CHARSET=utf8mb4")
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    yield mariadb, dialect, dialect.describe_table(table)
    dialect.close()
