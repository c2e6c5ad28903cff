"""What the server must offer (binlog settings, privileges) and what a table looks like."""
from __future__ import annotations

import re
from typing import Sequence

import pymysql

from airflow_provider_dblog.core.errors import DblogError, UnknownTable, UnsupportedTables
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.ddl import REFUSED_ENGINES
from airflow_provider_dblog.source.mysql.types import PYTHON_CODECS
from airflow_provider_dblog.source.row_identity import refuse_nullable

# What check_source() requires of the server (docker-compose.yaml is tested against this).
REQUIRED_SETTINGS = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}
SERVER_CONFIG_FIX = ("start the server with --log-bin --binlog-format=ROW --binlog-row-image=FULL "
                     "--binlog-row-metadata=FULL --server-id=N")


def check_source(client: MySqlClient) -> None:
    log_bin, fmt, image = client.query("SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image")[0]
    where = f"on {client.config.address}"
    if str(log_bin) not in ("1", "ON"):
        raise DblogError(f"binary logging is off {where} (log_bin=OFF): {SERVER_CONFIG_FIX}")
    if str(fmt).upper() != "ROW":
        raise DblogError(f"binlog_format is {fmt} {where}, CDC needs ROW: {SERVER_CONFIG_FIX}")
    if str(image).upper() != "FULL":
        raise DblogError(f"binlog_row_image is {image} {where}, CDC needs FULL: {SERVER_CONFIG_FIX}")
    try:
        metadata = client.scalar("SELECT @@GLOBAL.binlog_row_metadata")
    except pymysql.MySQLError:
        metadata = None  # older than MySQL 8.0.1 / MariaDB 10.5
    if str(metadata).upper() != "FULL":
        raise DblogError(f"binlog_row_metadata is {metadata} {where}, CDC needs FULL (column names in the "
                         f"binlog): {SERVER_CONFIG_FIX}")
    check_privileges(client)


def binlog_gap(client: MySqlClient, databases: Sequence[str]) -> str | None:
    """Why writes to ``databases`` may never be in this server's binlog, in one line with the fix (None: they
    are): a binlog filter leaving a database out (``--binlog-do-db`` / ``--binlog-ignore-db``), or a running
    replica whose applied writes are not logged (``log_slave_updates=OFF``). A tail would read an empty binlog
    and call itself current; both are server options, so the plan and each tail check them."""
    where = client.config.address
    try:
        try:
            status = client.query("SHOW MASTER STATUS")
        except pymysql.MySQLError:  # MySQL 8.4 renamed it
            status = client.query("SHOW BINARY LOG STATUS")
        logs_applied = str(client.scalar("SELECT @@GLOBAL.log_slave_updates")) in ("1", "ON")
    except pymysql.MySQLError as exc:
        raise DblogError(f"cannot read the binlog settings of {where}: {exc.args[-1]}; grant "
                         f"{'BINLOG MONITOR' if client.is_mariadb else 'REPLICATION CLIENT'} to {client.config.user}"
                         ) from None
    if status:
        do_db = {d for d in str(status[0][2] or "").split(",") if d}
        ignore_db = {d for d in str(status[0][3] or "").split(",") if d}
        left_out = sorted(d for d in set(databases) if d in ignore_db or (do_db and d not in do_db))
        if left_out:
            return (f"the binlog of {where} leaves out database(s) {', '.join(left_out)} (binlog_do_db="
                    f"{','.join(sorted(do_db)) or '-'}, binlog_ignore_db={','.join(sorted(ignore_db)) or '-'}): their "
                    f"changes would never reach the lake; remove the filter from the server's options and restart it")
    if logs_applied or not _applies_replicated_writes(client):
        return None
    return (f"{where} is a replica applying its primary's writes with log_slave_updates=OFF: they are not in its "
            f"binlog, so they would never reach the lake; restart it with --log-slave-updates (log_replica_updates), "
            f"or capture the primary")


def _applies_replicated_writes(client: MySqlClient) -> bool:
    """Whether replication threads apply a primary's writes here: ``SHOW REPLICA STATUS`` (MySQL: with
    REPLICATION CLIENT) or MariaDB's ``Slaves_running``; False when the login may see neither."""
    for statement in ("SHOW REPLICA STATUS", "SHOW SLAVE STATUS"):
        try:
            with client.conn.cursor() as cur:
                cur.execute(statement)
                names = [d[0].lower() for d in cur.description or ()]
                rows = cur.fetchall()
        except pymysql.MySQLError:
            continue
        column = next((names.index(c) for c in ("replica_sql_running", "slave_sql_running") if c in names), None)
        if column is not None:
            return any(str(r[column]).lower() == "yes" for r in rows)
    try:
        rows = client.query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Slaves_running', 'Slave_running')")
    except pymysql.MySQLError:
        return False
    found = {name.lower(): str(value) for name, value in rows}
    if "slaves_running" in found:
        return found["slaves_running"] not in ("0", "")
    return found.get("slave_running", "").upper() == "ON"


def check_privileges(client: MySqlClient) -> None:
    grants = " ".join(row[0] for row in client.query("SHOW GRANTS")).upper()
    if "ALL PRIVILEGES ON *.*" in grants or "SUPER" in grants:
        return
    missing = []
    if "REPLICATION SLAVE" not in grants and "REPLICATION REPLICA" not in grants:
        missing.append("REPLICATION SLAVE")
    if not any(p in grants for p in ("REPLICATION CLIENT", "BINLOG MONITOR", "REPLICATION SLAVE ADMIN")):
        missing.append("BINLOG MONITOR" if client.is_mariadb else "REPLICATION CLIENT")
    if missing:
        user = client.config.user
        raise DblogError(f"user {user} lacks {' and '.join(missing)} on {client.config.address}: "
                         f"GRANT {', '.join(missing)} ON *.* TO '{user}'@'%'")


def declared_type(column_type: str) -> str:
    """COLUMN_TYPE in lower case but for its quoted ENUM and SET labels: those are values, and case-sensitive."""
    return "".join(p if p.startswith("'") else p.lower() for p in re.split(r"('(?:[^']|'')*')", column_type))


def describe_table(client: MySqlClient, table: str, chunk_key: Sequence[str] | None = None) -> TableMeta:
    if "." not in table:
        raise DblogError(f"bad table name {table!r}: use DB.TABLE")
    database, name = table.split(".", 1)
    refuse_unclear_name(client, table)
    rows = client.query(
        "SELECT COLUMN_NAME, LOWER(DATA_TYPE), COLUMN_TYPE, IS_NULLABLE = 'YES', CHARACTER_SET_NAME, "
        "COLLATION_NAME, NUMERIC_PRECISION, NUMERIC_SCALE, CHARACTER_MAXIMUM_LENGTH "
        "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, name))
    if not rows:
        raise UnknownTable(f"unknown table {table} on {client.config.address}: check the name "
                         f"(DB.TABLE, case-sensitive on Linux) and that {client.config.user} may SELECT it")
    columns = tuple(Column(r[0], r[1], declared_type(r[2]), bool(r[3]), r[4], r[5], r[6], r[7], r[8]) for r in rows)
    undecodable = [f"{table}.{c.name} ({c.charset})" for c in columns
                   if c.charset and c.charset.lower() not in PYTHON_CODECS]
    if undecodable:
        raise UnsupportedTables(undecodable, charset_refusal)
    engine = str(client.scalar("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                               "TABLE_NAME = %s", (database, name)) or "")
    if engine.upper() in REFUSED_ENGINES:
        raise UnsupportedTables([f"{table} ({engine})"], engine_refusal)
    if system_versioned(client, [table]):
        raise UnsupportedTables([table], versioned_refusal)
    if any("compressed" in c.column_type for c in columns):
        raise UnsupportedTables([table], compressed_refusal)
    old_temporal = [f"{table}.{c.name}" for c in columns if "mariadb-5.3" in c.column_type]
    if old_temporal:
        raise UnsupportedTables(old_temporal, old_temporal_refusal)
    if client.is_mariadb:  # MariaDB reports JSON as longtext guarded by json_valid()
        json_cols = {r[0] for r in client.query(
            "SELECT CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s AND CHECK_CLAUSE LIKE 'json_valid(%%'",
            (database, name))}
        columns = tuple(Column(c.name, "json", c.column_type, c.nullable, c.charset, c.collation, c.precision,
                               c.scale, c.char_length) if c.name in json_cols else c for c in columns)
    keys = client.query(
        "SELECT INDEX_NAME, COLUMN_NAME, NULLABLE FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 ORDER BY INDEX_NAME = 'PRIMARY' DESC, "
        "INDEX_NAME, SEQ_IN_INDEX", (database, name))
    indexes: dict[str, list[tuple[str, bool]]] = {}
    for index, column, nullable in keys:
        indexes.setdefault(index, []).append((column, nullable == "YES"))
    names = {c.name for c in columns}
    if chunk_key:
        unknown = [c for c in chunk_key if c not in names]
        if unknown:
            raise DblogError(f"--chunk-key {','.join(unknown)} is not a column of {table}: "
                             f"choose from {', '.join(c.name for c in columns)}")
        refuse_nullable(table, [c.name for c in columns if c.name in chunk_key and c.nullable])
        unique = any([c for c, _ in cols] == list(chunk_key) for cols in indexes.values())
        return TableMeta(database, name, columns, tuple(chunk_key), "unique" if unique else "chunk_key")
    if "PRIMARY" in indexes:
        return TableMeta(database, name, columns, tuple(c for c, _ in indexes["PRIMARY"]), "primary")
    for cols in indexes.values():
        if not any(nullable for _, nullable in cols):
            return TableMeta(database, name, columns, tuple(c for c, _ in cols), "unique")
    raise DblogError(f"table {table} has no primary key or NOT NULL unique key: add one, or pass "
                     f"--chunk-key COL[,COL] (an indexed column to split on)")


def refuse_unclear_name(client: MySqlClient, table: str) -> None:
    """``table`` (``DB.TABLE``) must name exactly one table, by a database without a dot: ``we.ird.t`` is table
    ``t`` of database ``we.ird`` or table ``ird.t`` of ``we``, and every step splits a name at its first dot. Nor
    may another table's name differ from it only in case (``shop.Orders``, ``shop.orders``): the binlog reader
    compares names without case (a server with lower_case_table_names=1 logs them as written), so one table's
    changes and DDL would be taken for the other's."""
    rows = client.query("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                        "WHERE LOWER(CONCAT(TABLE_SCHEMA, '.', TABLE_NAME)) = LOWER(%s)", (table,))
    found = [(str(db), str(name)) for db, name in rows if f"{db}.{name}".lower() == table.lower()]
    same = sorted((db, name) for db, name in found if f"{db}.{name}" == table)  # the catalog's order varies
    if any("." in db for db, _ in same):
        spelled = " or ".join(f"table `{name}` of database `{db}`" for db, name in same)
        raise UnsupportedTables([f"{table} ({spelled})"], dotted_database_refusal)
    twins = sorted(f"{db}.{name}" for db, name in found if f"{db}.{name}" != table)
    if twins:
        raise UnsupportedTables([f"{table} (and {', '.join(twins)})"], case_twins_refusal)


def dotted_database_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table name(s) cannot say where the database ends, a database name holding a '.': "
            f"{', '.join(tables)}; DB.TABLE is split at its first '.', so dblog would capture another table or mix "
            f"two: rename the database (RENAME TABLE `a.b`.t TO ab.t), or take the tables out of the capture "
            f"(--exclude)")


def case_twins_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table(s) have a name differing only in case from another table's on the server: "
            f"{'; '.join(tables)}; the binlog reader compares table names without case, so their changes would "
            f"be taken for each other's: rename one of each pair (RENAME TABLE), or take these tables out of the "
            f"capture (--exclude)")


SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


def list_tables(client: MySqlClient, internal: Sequence[str] = ()) -> list[str]:
    """Every table, system-versioned ones included (a pattern that matches one gets it refused in one line,
    never left out without a word)."""
    rows = client.query(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
        "WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') "
        f"AND TABLE_SCHEMA NOT IN ({', '.join(['%s'] * len(SYSTEM_SCHEMAS))})", SYSTEM_SCHEMAS)
    return sorted(f"{db}.{name}" for db, name in rows if name not in internal)


VERSIONED_FIX = ("take them out of the capture (--exclude), or ALTER TABLE ... DROP SYSTEM VERSIONING (the next tail "
                 "reads them again)")


def system_versioned(client: MySqlClient, tables: Sequence[str]) -> list[str]:
    """The ``tables`` that are system-versioned now (MariaDB ``WITH SYSTEM VERSIONING``): their binlog rows
    events mix the history rows the server keeps with the current ones (a DELETE is logged as an UPDATE that
    ends the row, an UPDATE writes the old row again as history), which dblog does not follow."""
    return _mariadb_tables_where(client, tables, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                                                 "WHERE TABLE_TYPE = 'SYSTEM VERSIONED'")


def _mariadb_tables_where(client: MySqlClient, tables: Sequence[str], select: str) -> list[str]:
    """The ``tables`` among the (schema, table) rows of ``select`` (its WHERE is narrowed to their schemas), as the
    capture names them; MariaDB only."""
    if not client.is_mariadb or not tables:
        return []
    schemas = sorted({t.split(".", 1)[0] for t in tables})
    rows = client.query(f"{select} AND TABLE_SCHEMA IN ({', '.join(['%s'] * len(schemas))})", schemas)
    wanted = {t.lower(): t for t in tables}
    return sorted(wanted[f"{db}.{name}".lower()] for db, name in rows if f"{db}.{name}".lower() in wanted)


def undecodable_refusal(client: MySqlClient, tables: Sequence[str]) -> str | None:
    """The one line for ``tables`` whose binlog images cannot be decoded now, or None: a column MariaDB compresses
    (``COMPRESSED``: python-mysql-replication 1.0.17 cannot read such a table map, types 140/141), or one of its
    old temporal format (``old_temporal_refusal``: a column added by ALTER after the plan, under
    ``mysql56_temporal_format=OFF``). One catalog query for both; MariaDB only."""
    if not client.is_mariadb or not tables:
        return None
    schemas = sorted({t.split(".", 1)[0] for t in tables})
    rows = client.query("SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE LIKE '%%compressed%%' FROM "
                        "information_schema.COLUMNS WHERE (COLUMN_TYPE LIKE '%%compressed%%' OR COLUMN_TYPE LIKE "
                        f"'%%mariadb-5.3%%') AND TABLE_SCHEMA IN ({', '.join(['%s'] * len(schemas))})", schemas)
    wanted = {t.lower(): t for t in tables}
    found = [(wanted[f"{db}.{name}".lower()], column, packed) for db, name, column, packed in rows
             if f"{db}.{name}".lower() in wanted]
    packed = sorted({table for table, _, is_packed in found if is_packed})
    if packed:
        return compressed_refusal(packed)
    old = sorted(f"{table}.{column}" for table, column, _ in found)
    return old_temporal_refusal(old) if old else None


def compressed_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table(s) have COMPRESSED columns (MariaDB column compression): {', '.join(tables)}; their "
            f"binlog images cannot be decoded (the replication library does not know the compressed types); take them "
            f"out of the capture (--exclude), or ALTER TABLE ... MODIFY each such column without COMPRESSED and "
            f"capture the table again")


def old_temporal_refusal(columns: Sequence[str]) -> str:
    """MariaDB's TIME/DATETIME/TIMESTAMP of the 5.3 format (``COLUMN_TYPE`` ends ``/* mariadb-5.3 */``: made under
    ``mysql56_temporal_format=OFF``, or older than 10.1.2): their binlog images are not the MySQL 5.6 format the
    decoders read. Before, the tail stopped on the first change of such a column, at every restart, in a line that
    blamed a COMPRESSED column."""
    return (f"{len(columns)} column(s) use MariaDB's old temporal format (mariadb-5.3): {', '.join(columns)}; their "
            f"binlog images cannot be decoded; with mysql56_temporal_format=ON (the default) run ALTER TABLE ... FORCE "
            f"on each such table (it rewrites them in the current format; a captured table's changes the binlog holds "
            f"in the old format stay unreadable: capture it again after the FORCE), or take the table out of the "
            f"capture (--exclude)")


def charset_refusal(columns: Sequence[str]) -> str:
    return (f"{len(columns)} column(s) use a character set whose binlog bytes dblog cannot decode exactly: "
            f"{', '.join(columns)}; ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4 (or MODIFY the column), or take "
            f"the table out of the capture (--exclude)")


def engine_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table(s) use a storage engine whose rows the binlog does not follow: {', '.join(tables)} "
            f"(BLACKHOLE keeps no rows; MERGE shows other tables' rows, changed under their names; FEDERATED, CONNECT, "
            f"SPIDER, SPHINX, OQGRAPH keep them elsewhere; COLUMNSTORE bulk loads and CSV files bypass it); take them "
            f"out of the capture (--exclude), or capture the tables that hold the rows")


def versioned_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table(s) are system-versioned (WITH SYSTEM VERSIONING): {', '.join(tables)}; their "
            f"binlog mixes history rows with current ones (a DELETE is logged as an UPDATE), which dblog does not "
            f"follow; {VERSIONED_FIX}")
