"""Chunk checksums computed inside MySQL/MariaDB (``core.checksums`` says what they are): one query per
chunk, no row leaves the server, all chunks of a table read in one consistent snapshot whose exact
binlog position is known (``START TRANSACTION WITH CONSISTENT SNAPSHOT``: MariaDB, Percona Server)."""
from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pymysql

from airflow_provider_dblog.core.checksums import ChunkChecksum
from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.progress import ProgressLog
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.sql import range_condition, table_sql
from airflow_provider_dblog.source.mysql.types import arrow_type, known_date_sql, plain_sql, quote_ident


def value_sql(col: Column) -> str:
    """The SQL of a column's canonical text (``core.checksums.value_text`` on its lake type)."""
    q, t, target = quote_ident(col.name), col.data_type, arrow_type(col)
    if pa.types.is_floating(target):
        return float_sql(q)
    if pa.types.is_binary(target):
        return f"MD5({q})"
    if pa.types.is_date32(target):
        return f"TO_DAYS({known_date_sql(col)}) - 719528"
    if pa.types.is_timestamp(target):
        return (f"CAST({known_date_sql(col)} * 1000000 AS SIGNED)" if t == "timestamp"
                else f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {known_date_sql(col)})")
    if t == "year":
        return f"({q} + 0)"
    if pa.types.is_string(target):
        return f"CAST({plain_sql(col)} AS CHAR)" if t in ("decimal", "time") else f"CONVERT({q} USING utf8mb4)"
    return f"CAST({plain_sql(col)} AS CHAR)"  # integers and decimals: their digits (ZEROFILL: not its padding)


def float_sql(q: str) -> str:
    """A FLOAT/DOUBLE's exact binary form (``core.checksums.float_text``): the power of two from LOG2, put right
    when rounding moved it across one (and kept within a double's range: LOG2 of the largest double rounds to
    1024), then the significand by exact division and multiplication. A FLOAT widens to a DOUBLE exactly."""
    a = f"ABS({q})"
    near = f"GREATEST(LEAST(FLOOR(LOG2({a})), 1023), -1074)"
    power = f"({near} + ({a} / POW(2, {near}) >= 2) - ({a} / POW(2, {near}) < 1))"
    return (f"IF({q} = 0, '0', CONCAT(IF({q} < 0, '-', ''), CAST({a} / POW(2, {power}) * 4503599627370496 AS "
            f"UNSIGNED), 'p', {power} - 52))")


def checksum_sql(meta: TableMeta, chunk: ChunkRange) -> str:
    values = [value_sql(c) for c in meta.columns]
    flags = "CONCAT(" + ", ".join(f"ISNULL({known_date_sql(c)})" for c in meta.columns) + ")"  # zero dates: NULL
    text = f"CONCAT_WS(CHAR(31), {', '.join([*values, flags])})"
    return (f"SELECT COUNT(*), SUM(CAST(CONV(LEFT(MD5({text}), 16), 16, 10) AS UNSIGNED)) "
            f"FROM {table_sql(meta)} WHERE {range_condition(meta, chunk.lo, chunk.hi)}")


def checksum_chunks(client: MySqlClient, meta: TableMeta, chunks: Sequence[ChunkRange]
                    ) -> tuple[SourcePosition, dict[int, ChunkChecksum]]:
    """(the snapshot's binlog position, each chunk's checksum in that snapshot)."""
    out: dict[int, ChunkChecksum] = {}
    with client.conn.cursor() as cur:
        try:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {k.lower(): v for k, v in cur.fetchall()}
            if "binlog_snapshot_position" not in status:
                raise DblogError(f"checksum verify needs the exact binlog position of a consistent snapshot "
                                 f"(MariaDB or Percona Server); {client.config.address} runs {client.version}: "
                                 f"compare row by row with dblog verify --rows")
            position = client.position(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))
            progress = ProgressLog(f"verify {meta.qualified}: source checksums", len(chunks))
            for chunk in chunks:
                cur.execute(checksum_sql(meta, chunk))
                row = cur.fetchone()
                out[chunk.id] = ChunkChecksum(int(row[0]), int(row[1] or 0))
                progress.step()
        except pymysql.MySQLError as exc:
            raise DblogError(f"checksum of {meta.qualified} failed: {exc.args[-1]}") from None
        finally:
            try:
                cur.execute("COMMIT")
            except pymysql.MySQLError:
                pass
    return position, out
