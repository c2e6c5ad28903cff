"""What the server must offer and what a table looks like, from PostgreSQL's catalogs.

A capture is one database; its tables are ``SCHEMA.TABLE`` (``TableMeta.database`` holds the schema).
Columns carry their (base) type's OID and typmod, which decide their values and Arrow types
(``values.arrow_type``); a domain is typed as its base type. The key is the primary key, else the first
unique index whose columns are all NOT NULL (no expressions, no predicate), else ``--chunk-key``.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Mapping, NamedTuple, Sequence

from airflow_provider_dblog.core.errors import DblogError, UnknownTable, UnsupportedTables
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.postgres.connection import PostgresClient
from airflow_provider_dblog.source.postgres.sql import quote_ident
from airflow_provider_dblog.source.postgres.values import numeric_precision_scale
from airflow_provider_dblog.source.row_identity import refuse_nullable

log = logging.getLogger("dblog")
MIN_VERSION = 100000  # pg_current_wal_lsn(), pgoutput, publications: PostgreSQL 10
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")
NUMERIC_OID, VARCHAR_OID, BPCHAR_OID = 1700, 1043, 1042


def check_source(client: PostgresClient) -> None:
    """The server can be read with positions: PostgreSQL 10 or later, a primary (a standby has no
    ``pg_current_wal_lsn()``). ``wal_level`` is the stream's concern: a warning here, for now."""
    version, in_recovery, wal_level = client.query(
        "SELECT current_setting('server_version_num')::int, pg_is_in_recovery(), current_setting('wal_level')", ())[0]
    if version < MIN_VERSION:
        raise DblogError(f"{client.where} runs PostgreSQL {version // 10000}: dblog needs PostgreSQL 10 or later")
    if in_recovery:
        raise DblogError(f"{client.where} is a standby (in recovery): capture from the primary, whose WAL locations "
                         f"the positions are")
    if wal_level != "logical":
        log.warning("%s has wal_level=%s: snapshots work, the logical-replication stream will need "
                    "wal_level=logical (ALTER SYSTEM SET wal_level = logical, then a restart)", client.where, wal_level)


def list_tables(client: PostgresClient) -> list[str]:
    """Every table (and partitioned table, not its partitions) of the database the login may SELECT, as
    ``SCHEMA.TABLE``; system schemas excluded."""
    rows = client.query(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND n.nspname <> ALL(%s) "
        "AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%' "
        "AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')",
        (list(SYSTEM_SCHEMAS),))
    return sorted(f"{schema}.{name}" for schema, name in rows)


def split_name(table: str) -> tuple[str, str]:
    if "." not in table:
        raise DblogError(f"bad table name {table!r}: use SCHEMA.TABLE (e.g. public.orders)")
    schema, name = table.split(".", 1)
    return schema, name


FIRST_USER_OID = 16384  # PostgreSQL's FirstNormalObjectId: every built-in type's OID is below it


def unlogged_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table(s) are UNLOGGED (or temporary): {', '.join(tables)}; their changes are not in "
            f"the WAL, so no stream can follow them: ALTER TABLE ... SET LOGGED, or take them out of the capture "
            f"(--exclude)")


def refuse_dotted_schema(client: PostgresClient, table: str) -> None:
    """``SCHEMA.TABLE`` is split at its first dot: a table of a schema whose name holds a dot (``"a.b".c``) has a
    name that another table's (``a."b.c"``) may spell too, so it is refused in one line, never taken for the other."""
    rows = client.query("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE strpos(n.nspname, '.') > 0 AND n.nspname || '.' || c.relname = %s "
                        "AND c.relkind IN ('r', 'p')", (table,))
    if rows:
        schema, name = split_name(table)
        spelled = " or ".join(_spelled(s, n) for s, n in [*sorted(rows), *([(schema, name)] if _exists(client, schema, name)
                                                                      else [])])
        raise UnsupportedTables([f"{table} ({spelled})"], dotted_schema_refusal)


def _spelled(schema: str, name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))


def _exists(client: PostgresClient, schema: str, name: str) -> bool:
    return bool(client.query("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                             "WHERE n.nspname = %s AND c.relname = %s", (schema, name)))


def dotted_schema_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} table name(s) cannot say where the schema ends, a schema name holding a '.': "
            f"{', '.join(tables)}; SCHEMA.TABLE is split at its first '.', so dblog would capture another table or "
            f"mix two: ALTER SCHEMA ... RENAME TO a name without '.', or take the tables out of the capture (--exclude)")


def relation_oid(client: PostgresClient, table: str) -> int:
    """The table's OID; one line when it is unknown, not a table, or not readable by the login."""
    schema, name = split_name(table)
    rows = client.query(
        "SELECT c.oid, c.relkind, has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT'), "
        "c.relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, name))
    if not rows:
        raise UnknownTable(f"unknown table {table} in {client.where}: check the name (SCHEMA.TABLE as the catalog "
                         f"spells it: unquoted names are lower case) and that {client.config.user} may read it")
    oid, kind, readable, persistence = rows[0]
    if kind not in ("r", "p"):
        what = {"v": "a view", "m": "a materialized view", "f": "a foreign table", "S": "a sequence"}.get(
            kind, "not a table")
        raise DblogError(f"{table} is {what}: capture its tables")
    if persistence != "p":  # no WAL, so no stream; PostgreSQL refuses them a publication
        raise UnsupportedTables([table], unlogged_refusal)
    if not readable:
        raise DblogError(f"user {client.config.user} may not read {table}: GRANT USAGE ON SCHEMA "
                         f"{quote_ident(schema)} TO {quote_ident(client.config.user)}; GRANT SELECT ON "
                         f"{quote_ident(schema)}.{quote_ident(name)} TO {quote_ident(client.config.user)}")
    return int(oid)


def _base_types(client: PostgresClient, oids: set[int]) -> dict[int, tuple[int, int]]:
    """Domain OID -> (its base type's OID, the domain's typmod), following domains of domains."""
    found: dict[int, tuple[int, int]] = {}
    todo = set(oids)
    while todo:
        rows = client.query("SELECT oid, typbasetype, typtypmod FROM pg_type WHERE oid = ANY(%s) AND typtype = 'd'",
                            (sorted(todo),))
        todo = set()
        for oid, base, typmod in rows:
            found[int(oid)] = (int(base), int(typmod))
            todo.add(int(base))
    resolved = {}
    for oid in found:
        base, typmod = found[oid]
        while base in found:
            base, inner = found[base]
            typmod = typmod if typmod >= 0 else inner
        resolved[oid] = (base, typmod)
    return resolved


FIRST_USER_OID = 16384  # types below are built in (no domains among them)


def resolve_types(client: PostgresClient, oids: set[int]) -> dict[int, tuple[int, int]]:
    """Of ``oids``, the domains' (base type OID, typmod); built-in types need no query."""
    user = {o for o in oids if o >= FIRST_USER_OID}
    return _base_types(client, user) if user else {}


def collation_name(schema: str | None, name: str | None) -> str | None:
    """A column's collation as ``Column.collation`` holds it (None for a type without one)."""
    return f"{quote_ident(schema)}.{quote_ident(name)}" if name else None


def refuse_hidden_rows(client: PostgresClient, table: str, oid: int) -> None:
    """One line if a row-level security policy applies to the capture's role on ``table``: its reads would see some
    rows while the stream carries every row's changes. The readers run with ``row_security = off``
    (``values.SESSION_SETTINGS``), so a policy enabled later fails the next read rather than hiding rows."""
    if client.scalar("SELECT row_security_active(%s::oid)", (oid,)):
        user = client.scalar("SELECT current_user")
        raise DblogError(f"{table} has row-level security that applies to role {user}: a capture must read every "
                         f"row (the stream carries every row's changes); ALTER ROLE {quote_ident(user)} BYPASSRLS, or "
                         f"capture as the table's owner (without FORCE ROW LEVEL SECURITY) or a superuser")


def generated_columns(client: PostgresClient, oid: int) -> list[str]:
    """The table's generated (``GENERATED ALWAYS AS (...) STORED``) columns, in order. PostgreSQL's logical
    replication does not send them (before PostgreSQL 18's ``publish_generated_columns``), so a capture leaves
    them out of the snapshot as well: a lake column the stream cannot keep would differ after the first change."""
    if client.version_num < 120000:
        return []
    return [r[0] for r in client.query(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped "
        "AND attgenerated <> '' ORDER BY attnum", (oid,))]


def _columns(client: PostgresClient, oid: int, leave_out: Sequence[str] = ()) -> tuple[Column, ...]:
    rows = client.query(
        "SELECT a.attname, NOT a.attnotnull, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod), "
        "t.typtype, cn.nspname, co.collname, a.attnum "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "LEFT JOIN pg_collation co ON co.oid = a.attcollation LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attname <> ALL(%s) ORDER BY a.attnum",
        (oid, list(leave_out)))
    domains = _base_types(client, {int(r[2]) for r in rows if r[5] == "d"})
    names = {int(o): n for o, n in client.query(
        "SELECT oid, format_type(oid, NULL) FROM pg_type WHERE oid = ANY(%s)",
        (sorted({domains.get(int(r[2]), (int(r[2]), 0))[0] for r in rows}),))}
    columns = []
    for name, nullable, type_oid, typmod, declared, _, coll_schema, coll_name, attnum in rows:
        base, base_typmod = domains.get(int(type_oid), (int(type_oid), int(typmod)))
        typmod = int(typmod) if int(typmod) >= 0 else base_typmod
        precision = scale = length = None
        if base == NUMERIC_OID and numeric_precision_scale(typmod):
            precision, scale = numeric_precision_scale(typmod)
        elif base in (VARCHAR_OID, BPCHAR_OID) and typmod >= 4:
            length = typmod - 4
        collation = collation_name(coll_schema, coll_name)
        columns.append(Column(name, names[base], declared, bool(nullable), None, collation, precision, scale, length,
                              type_oid=base, typmod=typmod, ordinal=int(attnum)))
    return tuple(columns)


class UniqueKey(NamedTuple):
    """A valid unique index of plain columns without a predicate (``unique_keys``)."""

    index: str
    identity: str  # ``c`` + its constraint's OID (PRIMARY KEY, UNIQUE), else ``i`` + the index's: dropped and
    #                created again it has another; REINDEX CONCURRENTLY gives the index a new OID, not its constraint
    primary: bool
    columns: tuple[str, ...]  # its key columns, in order (not its INCLUDE columns)
    not_null: bool  # every one of them NOT NULL
    immediate: bool  # not DEFERRABLE: checked at each row, so no two rows share it at any point of a transaction


def unique_keys(client: PostgresClient, oids: Sequence[int]) -> dict[int, list[UniqueKey]]:
    """Per table OID, its valid unique indexes on plain columns without a predicate, the primary key first, then
    by name; an index on a generated column is left out (the stream does not carry those: ``generated_columns``).
    One query whatever the tables (each tail read asks it: ``key_problem``)."""
    generated = "AND a.attgenerated = ''" if client.version_num >= 120000 else ""
    rows = client.query(
        "SELECT i.indrelid, ic.relname, COALESCE('c' || con.oid::text, 'i' || i.indexrelid::text), i.indisprimary, "
        "array_agg(a.attname::text ORDER BY k.ord), bool_and(a.attnotnull), i.indimmediate, count(*) = i.indnkeyatts "
        "FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid "
        "LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid "
        "AND con.contype IN ('p', 'u') "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
        f"JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum {generated} "
        "WHERE i.indrelid = ANY(%s::oid[]) AND i.indisunique AND i.indisvalid AND i.indpred IS NULL "
        "AND i.indexprs IS NULL AND k.ord <= i.indnkeyatts "
        "GROUP BY i.indrelid, ic.relname, i.indexrelid, con.oid, i.indisprimary, i.indimmediate, i.indnkeyatts "
        "ORDER BY i.indrelid, i.indisprimary DESC, ic.relname", (list(oids),))
    keys: dict[int, list[UniqueKey]] = {int(oid): [] for oid in oids}
    for oid, index, identity, primary, columns, not_null, immediate, whole in rows:
        if whole:  # else a key column is generated
            keys[int(oid)].append(UniqueKey(index, identity, bool(primary), tuple(columns), bool(not_null),
                                            bool(immediate)))
    return keys


def chosen_key(keys: Sequence[UniqueKey]) -> UniqueKey | None:
    """The key a capture takes when no ``--chunk-key`` names one: the primary key, else the first unique index
    whose columns are all NOT NULL; DEFERRABLE ones never (PostgreSQL does not use them as the replica identity,
    and inside a transaction two rows may share one, so changes applied by key would lose rows)."""
    usable = [k for k in keys if k.immediate]
    return next((k for k in usable if k.primary), None) or next((k for k in usable if k.not_null), None)


def key_problem(meta: TableMeta, keys: Sequence[UniqueKey], not_null: Mapping[str, bool]) -> str | None:
    """Why ``meta``'s key may no longer identify the table's rows (None: it still does), from the catalog now
    (``keys``: ``unique_keys``; ``not_null``: each column's NOT NULL). DDL is not in the WAL: a primary key dropped
    or replaced (``DROP CONSTRAINT``, ``ADD PRIMARY KEY (id, region)``), recreated DEFERRABLE, or a key column made
    nullable leaves the stream applying changes by a key two rows may share, and rows would collapse in the lake.
    The constraint (or index) the key rested on when the table was described (``storage_identities``' key part)
    must still be there: a key dropped and added back between two reads leaves nothing else behind, and while it
    was gone two rows could share it. A ``--chunk-key`` that is not unique has nothing to lose."""
    if not meta.key_unique:
        return None
    key = set(meta.key_columns)
    nullable = sorted(c for c in key if not not_null.get(c, False))
    if nullable:
        return f"key column {', '.join(nullable)} of {meta.qualified} is nullable now (or gone)"
    identifies = [k for k in keys if k.immediate and k.not_null and set(k.columns) <= key]
    rested_on = key_identity(meta.storage)
    if rested_on is not None and identifies and all(k.identity != rested_on for k in identifies):
        what = f"constraint OID {rested_on[1:]}" if rested_on.startswith("c") else f"index OID {rested_on[1:]}"
        return (f"the key of {meta.qualified} rested on {what}, which is gone: dropped, or dropped and created again, "
                f"since the table was read")
    if identifies:
        return None
    deferrable = [k.index for k in keys if not k.immediate and set(k.columns) <= key]
    if deferrable:
        return f"the unique index on the key of {meta.qualified} ({deferrable[0]}) is DEFERRABLE now"
    return f"no unique index of {meta.qualified} covers its key ({', '.join(meta.key_columns)}) now"


def storage_identities(client: PostgresClient, oids: Sequence[int], publication: str | None = None) -> dict[int, str]:
    """Per table OID, ``OID|`` and its files: ``oid:relfilenode`` of the table and of every partition under it
    (not of inheritance children: a plain table is read ``ONLY``, ``sql.table_sql``), a partition whose changes are
    not in the WAL marked (``outside_the_wal``); a table dropped and created again has another OID. A rewrite gives
    a table new files (ALTER COLUMN ... TYPE ... USING, SET LOGGED, VACUUM FULL, CLUSTER, TRUNCATE), and attaching or
    detaching a partition changes the list: row changes the WAL does not carry as changes of the table.
    With ``publication``, a table it names also gets ``|pub=X.Y``: the ``xmin`` of the publication's row and of the
    table's membership row. A table whose values are made of enums (arrays, domains, composites of them too) gets
    ``|enum=`` their labels (``renamed_labels``), and of composite types ``|comp=`` a hash of their attributes
    (``changed_composites``). ALTER PUBLICATION is not in the WAL, and a table dropped from the publication and added
    back, or ``publish`` narrowed and widened again, between two reads leaves no other trace: the changes of that
    while are not in the stream. Each such statement writes a new catalog row, so its ``xmin`` changes. A partitioned
    table gets ``|rid=`` its partitions' ``oid:xmin`` (``changed_partition_identities``)."""
    if not oids:
        return {}
    rows = client.query(
        "WITH RECURSIVE tree(root, relid) AS (SELECT o, o FROM unnest(%s::oid[]) AS o UNION ALL "
        "SELECT t.root, i.inhrelid FROM tree t JOIN pg_class p ON p.oid = t.relid AND p.relkind = 'p' "
        "JOIN pg_inherits i ON i.inhparent = t.relid) "
        "SELECT t.root, string_agg(c.oid::text || ':' || c.relfilenode::text || CASE WHEN c.relkind = 'f' THEN "
        f"'{FOREIGN}' WHEN c.relpersistence <> 'p' THEN '{UNLOGGED}' ELSE '' END, ',' ORDER BY c.oid), "
        "string_agg(CASE WHEN t.relid <> t.root THEN c.oid::text || ':' || c.xmin::text END, ',' ORDER BY c.oid) "
        "FROM tree t JOIN pg_class c ON c.oid = t.relid WHERE c.relkind IN ('r', 'f') GROUP BY t.root",
        (list(oids),))
    found = {int(oid): text for oid, text, _ in rows}
    identities = {int(oid): text for oid, _, text in rows if text is not None}
    members = {} if publication is None else {int(oid): f"{pub}.{rel}" for oid, pub, rel in client.query(
        "SELECT pr.prrelid, p.xmin::text, pr.xmin::text FROM pg_publication p JOIN pg_publication_rel pr "
        "ON pr.prpubid = p.oid WHERE p.pubname = %s AND pr.prrelid = ANY(%s::oid[])", (publication, list(oids)))}
    labels, composites = _value_types(client, oids)
    return {int(oid): f"{int(oid)}|{found.get(int(oid), '')}"
                      + (f"|{PUBLISHED}{members[int(oid)]}" if int(oid) in members else "")
                      + (f"|{PARTITION_IDENTITIES}{identities[int(oid)]}" if int(oid) in identities else "")
                      + (f"|{ENUM_LABELS}{labels[int(oid)]}" if int(oid) in labels else "")
                      + (f"|{COMPOSITES}{composites[int(oid)]}" if int(oid) in composites else "") for oid in oids}


# the types a table's values are made of: its columns' types, and through arrays, domains, ranges and composite
# types (nested too) the types they are made of
_REACHED_TYPES = (
    "WITH RECURSIVE reach(rel, typ) AS (SELECT a.attrelid, a.atttypid FROM pg_attribute a "
    "WHERE a.attrelid = ANY(%s::oid[]) AND a.attnum > 0 AND NOT a.attisdropped UNION "
    "SELECT r.rel, n.typ FROM reach r JOIN pg_type t ON t.oid = r.typ CROSS JOIN LATERAL ("
    "SELECT t.typelem WHERE t.typcategory = 'A' AND t.typelem <> 0 "
    "UNION ALL SELECT t.typbasetype WHERE t.typtype = 'd' "
    "UNION ALL SELECT g.rngsubtype FROM pg_range g WHERE t.typtype = 'r' AND g.rngtypid = t.oid "
    "UNION ALL SELECT ca.atttypid FROM pg_attribute ca WHERE t.typtype = 'c' AND ca.attrelid = t.typrelid "
    "AND ca.attnum > 0 AND NOT ca.attisdropped) AS n(typ)) ")


def _value_types(client: PostgresClient, oids: Sequence[int]) -> tuple[dict[int, str], dict[int, str]]:
    """Per table OID, the labels of the enums its values are made of (each label's OID and hash: ``renamed_labels``)
    and a hash of the attributes of the composite types they are made of (``changed_composites``): one query."""
    rows = client.query(
        _REACHED_TYPES + ", labels AS (SELECT r.rel, string_agg(DISTINCT e.oid::text || ':' || md5(e.enumlabel), ',') "
                         "AS l FROM reach r JOIN pg_enum e ON e.enumtypid = r.typ GROUP BY r.rel), "
                         "comps AS (SELECT r.rel, md5(string_agg(t.oid::text || '=' || (SELECT string_agg(ca.attnum || "
                         "':' || ca.atttypid || ':' || ca.atttypmod || ':' || ca.attisdropped, ',' ORDER BY ca.attnum) "
                         "FROM pg_attribute ca WHERE ca.attrelid = t.typrelid AND ca.attnum > 0), ';' ORDER BY t.oid)) "
                         "AS c FROM reach r JOIN pg_type t ON t.oid = r.typ AND t.typtype = 'c' GROUP BY r.rel) "
                         "SELECT rel, l, c FROM labels FULL JOIN comps USING (rel)", (list(oids),))
    return ({int(rel): l for rel, l, _ in rows if l is not None}, {int(rel): c for rel, _, c in rows if c is not None})


def key_problems(client: PostgresClient, tables: Mapping[int, TableMeta],
                 not_null: Mapping[int, Mapping[str, bool]] | None = None) -> dict[str, str]:
    """``key_problem`` of each table (by OID) whose key may no longer identify its rows: one query whatever the
    tables (each tail read asks), and one more for the columns' NOT NULL unless the caller read them (``not_null``,
    per OID)."""
    keyed = {oid: meta for oid, meta in tables.items() if meta.key_unique}
    if not keyed:
        return {}
    keys = unique_keys(client, sorted(keyed))
    if not_null is None:
        found: dict[int, dict[str, bool]] = {oid: {} for oid in keyed}
        for oid, column, attnotnull in client.query(
                "SELECT attrelid, attname, attnotnull FROM pg_attribute WHERE attrelid = ANY(%s::oid[]) "
                "AND attnum > 0 AND NOT attisdropped", (sorted(keyed),)):
            found[int(oid)][column] = bool(attnotnull)
        not_null = found
    return {meta.qualified: problem for oid, meta in keyed.items()
            if (problem := key_problem(meta, keys[oid], not_null.get(oid, {})))}


# the named parts of a ``storage_identities`` value (``KEY_IDENTITY``: added by ``describe_table``, which knows the key)
PUBLISHED, ENUM_LABELS, COMPOSITES, KEY_IDENTITY, PARTITION_IDENTITIES = "pub=", "enum=", "comp=", "key=", "rid="
COLUMN_LIST = "cols="  # added by ``describe_table`` (``column_list``): the columns the source had then
UNLOGGED, FOREIGN = ":unlogged", ":foreign"  # a partition's marks in it: its changes are not in the WAL


def outside_the_wal(storage: str | None) -> dict[int, str]:
    """Per partition of a ``storage_identities`` value whose changes the WAL does not carry, its OID and what it is
    (``UNLOGGED``, or ``foreign``: its rows live elsewhere). Such a partition's rows are read with the table, but
    no change to them ever reaches a slot (PostgreSQL refuses an unlogged or foreign table a publication, and a
    table in one SET UNLOGGED, but not a partition of a published partitioned table)."""
    files = (storage or "").split("|")[1:2]
    marks = {UNLOGGED: "UNLOGGED", FOREIGN: "foreign"}
    return {int(entry.split(":", 1)[0]): marks[mark] for entry in (files[0].split(",") if files and files[0] else ())
            for mark in marks if entry.endswith(mark)}


def outside_the_wal_names(client: PostgresClient, partitions: Mapping[int, str]) -> str:
    """``outside_the_wal``'s partitions as ``SCHEMA.NAME (UNLOGGED)``, for a line that names the fix."""
    names = dict(client.query("SELECT c.oid, n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n "
                              "ON n.oid = c.relnamespace WHERE c.oid = ANY(%s::oid[])", (sorted(partitions),)))
    return ", ".join(f"{names.get(oid, f'OID {oid}')} ({what})" for oid, what in sorted(partitions.items()))


def partitions_refusal(tables: Sequence[str]) -> str:
    return (f"{len(tables)} partitioned table(s) have partitions whose changes are not in the WAL: "
            f"{'; '.join(tables)}; no stream can follow their rows: ALTER TABLE ... SET LOGGED, DETACH PARTITION a "
            f"foreign one, or take the tables out of the capture (--exclude)")


def _named_part(storage: str | None, name: str) -> str | None:
    parts = (storage or "").split("|")[2:]
    return next((part[len(name):] for part in parts if part.startswith(name)), None)


def storage_files(storage: str | None) -> str | None:
    """A ``storage_identities`` value without its named parts: the table and its files."""
    return None if storage is None else "|".join(storage.split("|")[:2])


def storage_publication(storage: str | None) -> str | None:
    """The publication part of a ``storage_identities`` value (None: not recorded, or not a member then)."""
    return _named_part(storage, PUBLISHED)


def renamed_labels(was: str | None, now: str | None) -> bool:
    """Whether an enum label the table's columns had (``storage_identities``' enum part when it was read) has
    another name now (``ALTER TYPE … RENAME VALUE``: every row holding it shows the new name, with no change in the
    WAL). A label added since (``ADD VALUE``) changes no row."""
    old, new = _named_part(was, ENUM_LABELS), _named_part(now, ENUM_LABELS)
    return bool(old) and not set(old.split(",")) <= set((new or "").split(","))


def changed_composites(was: str | None, now: str | None) -> bool:
    """Whether a composite type the table's values are made of gained, lost or changed an attribute since ``was``
    (``ALTER TYPE … ADD / DROP / ALTER ATTRIBUTE``, ``ALTER TABLE`` of a table whose row type a column holds): every
    row holding one prints otherwise, with no change in the WAL. Unknown before (``was`` without the part): no."""
    old = _named_part(was, COMPOSITES)
    return old is not None and old != _named_part(now, COMPOSITES)


def changed_partition_identities(was: str | None, now: str | None) -> bool:
    """Whether a partition was altered since ``was`` (its catalog row's ``xmin``: ``ALTER TABLE partition REPLICA
    IDENTITY`` among others, also when set back): the WAL does not say (a partitioned table's Relation is its root's),
    and while a partition's identity did not carry the key an UPDATE of the key that left the identity's columns
    alone came with no old key. Unknown before (no part): no."""
    old = _named_part(was, PARTITION_IDENTITIES)
    return old is not None and old != _named_part(now, PARTITION_IDENTITIES)


def column_list(attnums: Mapping[str, int]) -> str:
    """The columns a table has (names and attnums, generated ones left out), as a short hash."""
    import hashlib

    text = ",".join(f"{name}:{attnum}" for name, attnum in sorted(attnums.items(), key=lambda item: item[1]))
    return hashlib.md5(text.encode()).hexdigest()[:16]


def changed_column_list(storage: str | None, attnums: Mapping[str, int], had: Sequence[str]) -> bool:
    """Whether the table's columns now (``attnums``) are not those it had when ``storage`` was described (without
    that part: not the names ``had``): ADD, DROP or RENAME COLUMN, which the WAL shows only in the Relation message
    before the table's next change."""
    was = _named_part(storage, COLUMN_LIST)
    return was != column_list(attnums) if was is not None else set(attnums) != set(had)


def key_identity(storage: str | None) -> str | None:
    """What the key rested on when the table was described (``UniqueKey.identity``; None: a ``--chunk-key``, or
    described before it was recorded)."""
    return _named_part(storage, KEY_IDENTITY) or None


def storage_oid(storage: str | None) -> int | None:
    """The table's OID in a ``storage_identities`` value (None: unknown, or the table was dropped)."""
    return int(storage.split("|", 1)[0]) if storage and "|" in storage else None


def describe_table(client: PostgresClient, table: str, chunk_key: Sequence[str] | None = None,
                   publication: str | None = None) -> TableMeta:
    """The table's columns, key and storage (with ``publication``'s part when the capture has one)."""
    return _with_enum_orders(client, _described(client, table, chunk_key, publication))


def _with_enum_orders(client: PostgresClient, meta: TableMeta) -> TableMeta:
    """Each key column of an enum type with its labels in their order (``Column.order``): a label renamed (ALTER
    TYPE ... RENAME VALUE) changes the keys, and the plan's chunk boundaries may name a label that no longer
    exists, so the table is planned again, as for a new collation (a label added plans it again too)."""
    oids = sorted({c.type_oid for c in (meta.column(k) for k in meta.key_columns)
                   if c.type_oid and c.type_oid >= FIRST_USER_OID})  # an enum is a user type: no query otherwise
    orders = {int(oid): labels for oid, labels in client.query(
        "SELECT enumtypid, md5(string_agg(enumlabel, ',' ORDER BY enumsortorder)) FROM pg_enum "
        "WHERE enumtypid = ANY(%s::oid[]) GROUP BY enumtypid", (oids,))} if oids else {}
    if not orders:
        return meta
    columns = tuple(replace(c, order=orders[c.type_oid]) if c.name in meta.key_columns and c.type_oid in orders
                    else c for c in meta.columns)
    return replace(meta, columns=columns)


def _described(client: PostgresClient, table: str, chunk_key: Sequence[str] | None,
               publication: str | None) -> TableMeta:
    schema, name = split_name(table)
    refuse_dotted_schema(client, table)
    oid = relation_oid(client, table)
    refuse_hidden_rows(client, table, oid)
    generated = generated_columns(client, oid)
    columns = _columns(client, oid, generated)
    storage = storage_identities(client, [oid], publication)[oid]
    storage += f"|{COLUMN_LIST}{column_list({c.name: c.ordinal for c in columns})}"
    outside = outside_the_wal(storage)
    if outside:
        raise UnsupportedTables([f"{table} ({outside_the_wal_names(client, outside)})"], partitions_refusal)
    if not columns:
        raise DblogError(f"{table} has no columns: nothing to capture")
    by_name = {c.name: c for c in columns}
    keys = unique_keys(client, [oid])[oid]
    if generated:
        log.warning("%s: generated column%s %s not captured: PostgreSQL's logical replication does not send "
                    "generated columns (compute them from the captured ones in a view over the lake)", table,
                    "s" if len(generated) > 1 else "", ", ".join(generated) + (" are" if len(generated) > 1 else " is"))
        if chunk_key and set(chunk_key) & set(generated):
            raise DblogError(f"--chunk-key {','.join(chunk_key)}: {table}.{sorted(set(chunk_key) & set(generated))[0]} "
                             f"is a generated column, which PostgreSQL's logical replication does not send: choose "
                             f"from {', '.join(c.name for c in columns)}")
    if chunk_key:
        unknown = [c for c in chunk_key if c not in by_name]
        if unknown:
            raise DblogError(f"--chunk-key {','.join(unknown)} is not a column of {table}: "
                             f"choose from {', '.join(c.name for c in columns)}")
        refuse_nullable(table, [c for c in chunk_key if by_name[c].nullable])
        unique = next((k for k in keys if k.columns == tuple(chunk_key) and k.immediate), None)
        if unique is None:
            return TableMeta(schema, name, columns, tuple(chunk_key), "chunk_key", storage)
        return TableMeta(schema, name, columns, tuple(chunk_key), "unique",
                         f"{storage}|{KEY_IDENTITY}{unique.identity}")
    key = chosen_key(keys)
    if key is not None:
        return TableMeta(schema, name, columns, key.columns, "primary" if key.primary else "unique",
                         f"{storage}|{KEY_IDENTITY}{key.identity}")
    deferrable = next((k for k in keys if not k.immediate), None)
    if deferrable is not None:
        raise DblogError(f"table {table}'s {'primary key' if deferrable.primary else 'unique key'} "
                         f"({', '.join(deferrable.columns)}) is DEFERRABLE and it has no other key: PostgreSQL "
                         f"does not use a deferrable key as the replica identity, and two rows may share it inside a "
                         f"transaction; recreate it NOT DEFERRABLE, or add a NOT NULL unique key that is not")
    without = (f" without a generated column (PostgreSQL's logical replication does not send {', '.join(generated)})"
               if generated else "")
    raise DblogError(f"table {table} has no primary key or NOT NULL unique key{without}: add one, or pass "
                     f"--chunk-key COL[,COL] (an indexed NOT NULL column to split on)")
