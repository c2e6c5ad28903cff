"""Chunk checksums computed inside PostgreSQL (``core.checksums`` says what they are), at an exact position.

The canonical text of each value follows its lake type, as the lake computes it: integers, decimals and
booleans as PostgreSQL prints them (``numeric(p,s)`` with every digit of its scale, ``true``/``false``),
dates as days and timestamps as microseconds since 1970 (``EXTRACT(EPOCH ...)``, exact numeric), ``bytea``
as the hex MD5 of its bytes, and every type the lake holds as text as its output function prints it under
the readers' session settings (``format('%s', v)``: what COPY prints, ``char(n)`` padded). Each row's text is
``concat_ws(chr(31), ...)`` (a NULL leaves its value out) plus one ``0``/``1`` per column; a chunk's digest is
the exact sum (``numeric``) of the first 64 bits of each row text's MD5.

Position. Verify compares the lake brought to a position P with the source's rows in one read view, so that
view must hold exactly the transactions before P. A REPEATABLE READ snapshot is taken between two WAL
locations LW (read before it) and HW (after the checksums): every transaction before LW is in it
(``watermarks`` says why) and none from HW on; of those committed in [LW, HW) some are. The slot's
transactions in that range that change the table are read back (xids from ``Begin``) and sorted by commit:
the snapshot (``pg_current_snapshot()``: xmin, xmax, running xids) sees a prefix of them, and P is the
first one it does not see (HW when it sees all). PostgreSQL makes commits visible in commit order except
for a few microseconds between the commit record and the proc array; a snapshot that sees a later
transaction but not an earlier one is taken again.
"""
from __future__ import annotations

from typing import Sequence

import psycopg2
import pyarrow as pa

from airflow_provider_dblog.core.checksums import ChunkChecksum
from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition, lsn_position
from airflow_provider_dblog.core.progress import ProgressLog
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.postgres.connection import PostgresClient, first_line
from airflow_provider_dblog.source.postgres.sql import quote_ident, range_condition, table_sql
from airflow_provider_dblog.source.postgres.stream import SlotReader

SNAPSHOT_ROUNDS = 5  # snapshots taken again while one sees a later commit but not an earlier one


def value_sql(name: str, target: pa.DataType) -> str:
    """The SQL of a column's canonical text (``core.checksums.value_text`` on its lake type)."""
    q = quote_ident(name)
    if pa.types.is_floating(target):
        return float_sql(q)
    if pa.types.is_binary(target):
        return f"md5({q})"
    if pa.types.is_date32(target):
        return f"({q} - DATE '1970-01-01')::text"
    if pa.types.is_timestamp(target):
        return f"(EXTRACT(EPOCH FROM {q}) * 1000000)::numeric(30,0)::text"
    if pa.types.is_boolean(target):
        return f"{q}::text"
    if pa.types.is_string(target):  # format() makes NULL an empty string: NULL must stay NULL (left out)
        return f"CASE WHEN num_nulls({q}) = 0 THEN format('%%s', {q}) END"  # not IS NULL: see checksum_sql
    return f"{q}::text"  # integers, decimals: their digits


def float_sql(q: str) -> str:
    """A real/double precision's exact binary form (``core.checksums.float_text``; NaN and the infinities as
    ``n``, ``+i``, ``-i``): the power of two from ``ln``, put right when rounding moved it across one, then the
    significand by exact division and multiplication. A real widens to a double exactly."""
    a = f"abs({q}::float8)"
    near = f"greatest(least(floor(ln({a}) / ln(2::float8)), 1023), -1074)"
    power = f"({near} + ({a} / power(2::float8, {near}) >= 2)::int - ({a} / power(2::float8, {near}) < 1)::int)"
    return (f"CASE WHEN {q} = 'NaN' THEN 'n' WHEN {q} = 'Infinity' THEN '+i' WHEN {q} = '-Infinity' THEN '-i' "
            f"WHEN {q} = 0 THEN '0' ELSE (CASE WHEN {q} < 0 THEN '-' ELSE '' END) || "
            f"({a} / power(2::float8, {power}) * 4503599627370496::float8)::bigint::text || 'p' || "
            f"({power} - 52)::int::text END")


def checksum_sql(meta: TableMeta, schema: pa.Schema, chunk: ChunkRange) -> tuple[str, list]:
    values = [value_sql(f.name, f.type) for f in schema]
    # num_nulls, not IS NULL: a composite value is IS NULL when all its fields are null, and neither IS NULL
    # nor IS NOT NULL when some are; the lake holds its text either way
    flags = "concat(" + ", ".join(f"num_nulls({quote_ident(f.name)})::text" for f in schema) + ")"
    text = f"concat_ws(chr(31), {', '.join([*values, flags])})"
    digest = (f"SUM(('x' || substr(h, 1, 8))::bit(32)::bigint::numeric * 4294967296 + "
              f"('x' || substr(h, 9, 8))::bit(32)::bigint)")
    where, params = range_condition(meta, chunk.lo, chunk.hi)
    return (f"SELECT COUNT(*), {digest} FROM (SELECT md5({text}) AS h FROM {table_sql(meta)} WHERE {where}) r",
            params)


def visible(xid: int, snapshot: tuple[int, int, set[int]]) -> bool:
    """Whether a transaction (pgoutput's 32-bit xid) is in a snapshot (``pg_current_snapshot()``: 64-bit xids)."""
    xmin, xmax, running = snapshot
    ahead = (xid - xmax) & 0xFFFFFFFF  # 32-bit xids compare modulo 2^32, within 2^31 of each other
    full = xmax + (ahead - (1 << 32) if ahead >= 1 << 31 else ahead)
    return full < xmin or (full < xmax and full not in running)


def parse_snapshot(text: str) -> tuple[int, int, set[int]]:
    xmin, xmax, running = text.split(":")
    return int(xmin), int(xmax), {int(x) for x in running.split(",") if x}


def exact_position(commits: Sequence[tuple[int, int]], snapshot: tuple[int, int, set[int]], hw: int
                   ) -> int | None:
    """The WAL location P the snapshot is exact at, from the table's transactions committed in [LW, HW)
    (``(final_lsn, xid)`` in commit order): the first one it does not see (``hw`` when it sees all); None
    when it sees a later one but not an earlier one."""
    seen = [visible(xid, snapshot) for _, xid in commits]
    first_unseen = next((i for i, s in enumerate(seen) if not s), len(seen))
    if any(seen[first_unseen:]):
        return None
    return commits[first_unseen][0] if first_unseen < len(commits) else hw


def checksum_chunks(client: PostgresClient, stream: SlotReader, meta: TableMeta, schema: pa.Schema,
                    chunks: Sequence[ChunkRange]) -> tuple[SourcePosition, dict[int, ChunkChecksum]]:
    snapshot_sql = "pg_current_snapshot()" if client.version_num >= 130000 else "txid_current_snapshot()"
    for _ in range(SNAPSHOT_ROUNDS):
        lw = client.current_lsn()
        conn = client.snapshot_conn
        conn.rollback()
        out: dict[int, ChunkChecksum] = {}
        try:
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute(f"SELECT {snapshot_sql}::text")
                snapshot = parse_snapshot(cur.fetchone()[0])
                progress = ProgressLog(f"verify {meta.qualified}: source checksums", len(chunks))
                for chunk in chunks:
                    cur.execute(*checksum_sql(meta, schema, chunk))
                    row = cur.fetchone()
                    out[chunk.id] = ChunkChecksum(int(row[0]), int(row[1] or 0))
                    progress.step()
        except psycopg2.Error as exc:
            client.drop_snapshot()
            raise DblogError(f"checksum of {meta.qualified} failed: {first_line(exc, client.config.password)}") from None
        finally:
            if not conn.closed:
                conn.rollback()
        hw = client.current_lsn()
        commits = stream.transactions(lw, hw, meta.qualified)
        position = exact_position(commits, snapshot, hw)
        if position is not None:
            return lsn_position(position), out
    raise DblogError(f"checksum of {meta.qualified}: {SNAPSHOT_ROUNDS} snapshots in a row saw a later commit but not "
                     f"an earlier one: verify again")
