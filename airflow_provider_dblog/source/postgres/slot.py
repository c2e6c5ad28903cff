"""The capture's logical replication slot and publication: their names, creation, checks, advance and drop.

A streaming capture (any ``--startup`` but ``snapshot-only``) owns one ``pgoutput`` slot and one publication,
both named ``dblog_<token>`` (a random token chosen by the plan and recorded in the state's options), so two
captures of one database never share them. ``plan`` creates them before it reads any position (the slot
keeps every WAL record from its creation on); a plan of more tables later adds them to the publication.

The slot's ``confirmed_flush_lsn`` is where the stream can still be read from: the tail advances it
(``pg_replication_slot_advance``) only to the smallest position the lake still needs, after the lake
committed (``steps``/``spark`` call ``DataSourceDialect.release``), so a restart loses nothing. A read
from before it would silently start later: ``ensure_available`` refuses it like a purged binlog.

What the server needs, refused in one line each: ``wal_level=logical``, a role with REPLICATION (or a
superuser), a free slot (``max_replication_slots``), the right to create the publication (or one made by
the table owner: ``--publication``-less captures create their own), and a replica identity that names
the capture's key columns for every table (DEFAULT with the primary key, USING INDEX on the key, or FULL).
"""
from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import psycopg2

from airflow_provider_dblog.core.errors import DblogError, StreamLost
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.postgres.connection import (
    CONFIGURATION_LIMIT_EXCEEDED, INSUFFICIENT_PRIVILEGE, PostgresClient, first_line, sqlstate,
)
from airflow_provider_dblog.source.postgres.pgoutput import format_lsn, parse_lsn
from airflow_provider_dblog.source.postgres.schema import split_name
from airflow_provider_dblog.source.postgres.sql import quote_ident

log = logging.getLogger("dblog")
PLUGIN = "pgoutput"
BUSY_RETRY_SECONDS = 30.0  # how long a read waits for the slot another process holds (DBLOG_SLOT_BUSY_SECONDS)
SLOT_WAIT_SECONDS = 300.0  # how long creating the slot waits for the transactions running (DBLOG_SLOT_WAIT_SECONDS)
SLOT_WAIT_LOG_SECONDS = 5.0  # and how often it says what it waits for


def new_stream_options() -> dict:
    """The state's record of a new capture's slot and publication (one random token names both)."""
    token = secrets.token_hex(6)
    return {"slot": f"dblog_{token}", "publication": f"dblog_{token}"}


@dataclass(frozen=True)
class SlotState:
    """What ``pg_replication_slots`` says of the capture's slot: its LSNs (``int``), who holds it, WAL kept."""

    confirmed_flush: int
    restart: int
    active_pid: int | None
    wal_status: str | None  # reserved | extended | unreserved | lost (PostgreSQL 13+); None before
    held_bytes: int


def check_stream_settings(client: PostgresClient) -> None:
    """``wal_level=logical`` and a role that may use replication slots, in one line each."""
    wal_level, replication = client.query(
        "SELECT current_setting('wal_level'), (SELECT rolreplication OR rolsuper FROM pg_roles "
        "WHERE rolname = current_user)", ())[0]
    if wal_level != "logical":
        raise DblogError(f"{client.where} has wal_level={wal_level}: the stream needs logical decoding; run ALTER "
                         f"SYSTEM SET wal_level = logical and restart PostgreSQL (or capture with --startup "
                         f"snapshot-only)")
    if not replication:
        raise DblogError(f"user {client.config.user} may not use replication slots on {client.where}: ALTER ROLE "
                         f"{quote_ident(client.config.user)} REPLICATION (or capture with --startup snapshot-only)")


def slot_state(client: PostgresClient, slot: str) -> SlotState | None:
    """The slot as the server has it now (None: there is no such slot)."""
    wal_status = "wal_status" if client.version_num >= 130000 else "NULL"
    rows = client.query(
        f"SELECT confirmed_flush_lsn::text, restart_lsn::text, active_pid, {wal_status}, plugin, database, "
        f"COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint "
        f"FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    if not rows:
        return None
    confirmed, restart, pid, status, plugin, database, held = rows[0]
    if plugin != PLUGIN or database != client.config.database:
        raise DblogError(f"replication slot {slot} on {client.where} is not the capture's ({plugin} on database "
                         f"{database}): use another --state, or drop that slot")
    return SlotState(parse_lsn(confirmed) if confirmed else 0, parse_lsn(restart) if restart else 0,
                     int(pid) if pid else None, status, int(held))


def slot_busy_seconds() -> float:
    return float(os.environ.get("DBLOG_SLOT_BUSY_SECONDS", BUSY_RETRY_SECONDS))


def slot_wait_seconds() -> float:
    return float(os.environ.get("DBLOG_SLOT_WAIT_SECONDS", SLOT_WAIT_SECONDS))


def ensure_slot(client: PostgresClient, slot: str, wait_seconds: float | None = None) -> bool:
    """Create the slot unless it exists; True if this call created it. Creating a logical slot waits until
    the transactions running at that moment end (PostgreSQL's consistent point), prepared ones included: the
    wait is watched from the control connection, which logs what it waits for, and after ``wait_seconds``
    cancels it and stops in one line naming them (the slot is not created)."""
    if slot_state(client, slot) is not None:
        return False
    wait_seconds = slot_wait_seconds() if wait_seconds is None else wait_seconds
    creator = client.connect()
    failed: list[psycopg2.Error] = []
    done = threading.Event()

    def create() -> None:
        try:
            with creator.cursor() as cur:
                cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, %s)", (slot, PLUGIN))
        except psycopg2.Error as exc:
            failed.append(exc)
        finally:
            done.set()

    pid = creator.get_backend_pid()
    started = time.monotonic()
    threading.Thread(target=create, name=f"create-slot-{slot}", daemon=True).start()
    try:
        next_log = SLOT_WAIT_LOG_SECONDS
        while not done.wait(0.2):
            waited = time.monotonic() - started
            if waited >= next_log or waited >= wait_seconds:
                blockers = _transactions_running_besides(client, pid)
                if waited >= wait_seconds:
                    client.query("SELECT pg_cancel_backend(%s)", (pid,))
                    done.wait(10)
                    if done.is_set() and not failed:  # it was created as the wait ended: keep it
                        break
                    raise DblogError(
                        f"creating the replication slot {slot} on {client.where} waited {waited:.0f} s for the "
                        f"transactions running when it started to end (PostgreSQL's consistent point): "
                        f"{blockers or 'transactions this user cannot see'}; commit or roll them back (COMMIT "
                        f"PREPARED / ROLLBACK PREPARED 'gid' for a prepared one) and plan again, or wait longer "
                        f"(DBLOG_SLOT_WAIT_SECONDS)")
                log.info("creating the replication slot %s waits for the transactions running when it started to "
                         "end (%.0f s of at most %.0f s): %s", slot, waited, wait_seconds,
                         blockers or "transactions this user cannot see")
                next_log = waited + SLOT_WAIT_LOG_SECONDS
    finally:
        creator.close()
    if failed:
        exc = failed[0]
        message = first_line(exc, client.config.password)
        if sqlstate(exc) == CONFIGURATION_LIMIT_EXCEEDED:
            raise DblogError(f"cannot create replication slot {slot} on {client.where}: {message}; drop an unused "
                             f"slot (SELECT pg_drop_replication_slot(name)) or raise max_replication_slots") from None
        if sqlstate(exc) == INSUFFICIENT_PRIVILEGE:
            raise DblogError(f"cannot create replication slot {slot} on {client.where}: {message}; ALTER ROLE "
                             f"{quote_ident(client.config.user)} REPLICATION") from None
        raise DblogError(f"cannot create replication slot {slot} on {client.where}: {message}") from None
    log.info("created the logical replication slot %s (pgoutput) on %s", slot, client.where)
    return True


def _transactions_running_besides(client: PostgresClient, pid: int) -> str:
    """The transactions with an id other than backend ``pid``'s, as far as this user may see them: prepared
    ones by their gid, the others by pid, state and start ("" when they cannot be listed)."""
    try:
        rows = client.query(
            "SELECT format('prepared transaction %%L (since %%s, database %%s)', gid, "
            "to_char(prepared AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS UTC'), database) FROM pg_prepared_xacts "
            "UNION ALL SELECT format('pid %%s (%%s, %%s, since %%s)', pid, usename, coalesce(state, '?'), "
            "coalesce(to_char(xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS UTC'), '?')) "
            "FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> %s", (pid,))
    except psycopg2.Error:
        return ""
    return ", ".join(r[0] for r in rows[:10]) + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")


def _table_sql(table: str) -> str:
    schema, name = split_name(table)
    return f"{quote_ident(schema)}.{quote_ident(name)}"


def published_tables(client: PostgresClient, publication: str) -> set[str] | None:
    """The tables the publication names, as ``SCHEMA.TABLE`` (None: no such publication)."""
    if not client.query("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)):
        return None
    return {f"{s}.{t}" for s, t in client.query(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (publication,))}


def publication_problem(client: PostgresClient, publication: str, tables: Sequence[str]) -> str | None:
    """What keeps changes of ``tables`` out of the publication's stream, in one line with its fix (None: nothing):
    the publication gone, a table no longer in it, an operation it no longer publishes, partitions published under
    their own names, a row filter or a column list (PostgreSQL 15+). A DBA's ALTER PUBLICATION is not in the WAL
    as a change of the tables: the tail checks before each read."""
    try:
        return _publication_problem(client, publication, tables)
    except psycopg2.Error as exc:
        raise DblogError(f"checking publication {publication} on {client.where} failed: "
                         f"{first_line(exc, client.config.password)}") from None


def _publication_problem(client: PostgresClient, publication: str, tables: Sequence[str]) -> str | None:
    flags = client.query("SELECT pubinsert, pubupdate, pubdelete, "
                         + ("pubtruncate" if client.version_num >= 110000 else "true") + ", "
                         + ("pubviaroot" if client.version_num >= 130000 else "true")
                         + " FROM pg_publication WHERE pubname = %s", (publication,))
    redo = "then re-read what was missed (dblog resnapshot --table TABLE)"
    if not flags:
        return (f"publication {publication} is gone from {client.where}: the tables' changes are not in the stream; "
                f"create it again (CREATE PUBLICATION {quote_ident(publication)} FOR TABLE ...), {redo}")
    if not flags[0][4] and tables and client.scalar(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'p' AND n.nspname || '.' || c.relname = ANY(%s)", (list(tables),)):
        return (f"publication {publication} on {client.where} publishes partitions under their own names: a "
                f"partitioned table's changes are not in the stream; ALTER PUBLICATION {quote_ident(publication)} SET "
                f"(publish_via_partition_root = true), {redo}")
    published = published_tables(client, publication) or set()
    missing = [t for t in tables if t not in published]
    if missing:
        return (f"publication {publication} on {client.where} no longer names {', '.join(missing)}: their changes are "
                f"not in the stream; add them back (ALTER PUBLICATION {publication} ADD TABLE {', '.join(missing)}), "
                f"{redo}")
    left_out = [op for op, on in zip(("insert", "update", "delete", "truncate"), flags[0][:4]) if not on]
    if left_out:
        return (f"publication {publication} on {client.where} leaves out {', '.join(left_out)}: those changes are not "
                f"in the stream; ALTER PUBLICATION {quote_ident(publication)} SET (publish = 'insert, update, delete, "
                f"truncate'), {redo}")
    if client.version_num >= 150000:
        narrowed = [f"{name} ({'a row filter' if qual else ''}{' and ' if qual and attrs else ''}"
                    f"{'a column list' if attrs else ''})"
                    for name, qual, attrs in client.query(
                        "SELECT n.nspname || '.' || c.relname, pr.prqual IS NOT NULL, pr.prattrs IS NOT NULL "
                        "FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid "
                        "JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE p.pubname = %s AND (pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL)", (publication,))
                    if name in tables]
        if narrowed:
            return (f"publication {publication} on {client.where} narrows {', '.join(narrowed)}: rows or columns are "
                    f"left out of the stream; ALTER PUBLICATION {quote_ident(publication)} SET TABLE ... without a WHERE "
                    f"or column list, {redo}")
    return None


def ensure_publication(client: PostgresClient, publication: str, tables: Sequence[str], given: bool = False) -> bool:
    """Create the publication for ``tables`` (changes of partitions published as their root; ``ONLY`` each table:
    an inheritance child published with its parent would need a replica identity for the application's UPDATEs and
    DELETEs of it to succeed), or add the ones it lacks; True if this call created it. One line naming the statement a table owner can run instead."""
    have = published_tables(client, publication)
    missing = [t for t in tables if have is None or t not in have]
    if not missing:
        return False
    listed = ", ".join("ONLY " + _table_sql(t) for t in missing)  # not a table's inheritance children
    if have is None:
        root = " WITH (publish_via_partition_root = true)" if client.version_num >= 130000 else ""
        statement = f"CREATE PUBLICATION {quote_ident(publication)} FOR TABLE {listed}{root}"
    else:
        statement = f"ALTER PUBLICATION {quote_ident(publication)} ADD TABLE {listed}"
    try:
        client.query(statement, ())
    except psycopg2.Error as exc:
        message = first_line(exc, client.config.password)
        again = ("then plan again" if have is not None or given else  # the plan records a new publication's
                 f"then plan again with --publication {publication}")  # name only once it exists
        raise DblogError(f"cannot publish {', '.join(missing)} on {client.where}: {message}; have the tables' owner "
                         f"(or a superuser) run: {statement}; {again}") from None
    log.info("publication %s on %s: %s %s", publication, client.where, "created for" if have is None else "added",
             ", ".join(missing))
    return have is None


_IDENTITIES = (  # per captured table: itself and its leaf partitions, each one's replica identity and the columns
    # of its primary key (immediate) and of its replica identity index
    "WITH RECURSIVE roots(root, name) AS (SELECT c.oid, w.s || '.' || w.t FROM unnest(%s::text[], %s::text[]) "
    "AS w(s, t) JOIN pg_namespace n ON n.nspname = w.s JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = w.t), "
    "tree(root, relid) AS (SELECT root, root FROM roots UNION ALL SELECT t.root, i.inhrelid FROM tree t "
    "JOIN pg_class p ON p.oid = t.relid AND p.relkind = 'p' JOIN pg_inherits i ON i.inhparent = t.relid) "
    "SELECT r.name, cn.nspname || '.' || c.relname, c.oid = r.root, c.relreplident, "
    "(SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(att, n), "
    " pg_attribute a WHERE i.indrelid = c.oid AND i.indisprimary AND i.indimmediate AND a.attrelid = c.oid "
    " AND a.attnum = k.att), "
    "(SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(att, n), "
    " pg_attribute a WHERE i.indrelid = c.oid AND i.indisreplident AND a.attrelid = c.oid AND a.attnum = k.att) "
    "FROM tree t JOIN roots r ON r.root = t.root JOIN pg_class c ON c.oid = t.relid "
    "JOIN pg_namespace cn ON cn.oid = c.relnamespace WHERE c.oid = r.root OR c.relkind = 'r' ORDER BY 1, 2")


def identity_misses_key(client: PostgresClient, metas: Sequence[TableMeta]) -> dict[str, list[str]]:
    """Per table whose replica identity does not give the old key of an UPDATE or DELETE in the capture's key
    columns now, the relations at fault (itself, or its partitions): one query. A table's identity must be DEFAULT
    with the key as primary key, USING INDEX on exactly the key, or FULL; under DEFAULT a DEFERRABLE primary key is no
    identity (PostgreSQL then logs no old key, and refuses UPDATEs and DELETEs of a published table). A partition's
    own identity decides what the WAL holds of its rows' old key (the root's only how pgoutput marks it), so each
    must carry the key as well, and be FULL when the root is (pgoutput then sends the old row as whole)."""
    if not metas:
        return {}
    schemas, names = zip(*(split_name(m.qualified) for m in metas))
    keys = {m.qualified: m.key_columns for m in metas}
    root_identity: dict[str, str] = {}
    bad: dict[str, list[str]] = {}
    rows = client.query(_IDENTITIES, (list(schemas), list(names)))
    for table, relation, is_root, identity, pk, index in sorted(rows, key=lambda r: (r[0], not r[2])):
        if is_root:
            root_identity[table] = identity
        if not carries_key(identity, {"d": pk, "i": index}.get(identity), keys[table]) or (
                not is_root and root_identity.get(table) == "f" and identity != "f"):
            bad.setdefault(table, []).append(relation)
    return bad


def carries_key(identity: str, columns: Sequence[str] | None, key: Sequence[str]) -> bool:
    """Whether a replica identity (``relreplident``: ``f`` FULL, ``d`` DEFAULT, ``i`` USING INDEX, ``n``
    NOTHING) whose old-key image holds ``columns`` gives an UPDATE's or DELETE's old row in the capture's
    ``key``: FULL, or exactly the key's columns."""
    return identity == "f" or (bool(columns) and set(columns) == set(key))


def identity_fix(bad: Mapping[str, Sequence[str]]) -> str:
    """The statements that give ``identity_misses_key``'s relations an identity carrying the key."""
    return "; ".join(f"ALTER TABLE {_table_sql(r)} REPLICA IDENTITY FULL" for rels in bad.values() for r in rels)


def check_replica_identity(client: PostgresClient, metas: Sequence[TableMeta]) -> None:
    """Every table's replica identity (and each of its partitions') gives the old key of an UPDATE or DELETE in the
    capture's key columns (``identity_misses_key``). One line naming the fix."""
    bad = identity_misses_key(client, metas)
    if bad:
        at_fault = ", ".join(t if rels == [t] else f"{t} (partition {', '.join(r for r in rels if r != t)})"
                             for t, rels in bad.items())
        raise DblogError(f"{at_fault}: the replica identity does not name the capture's key, so an UPDATE or "
                         f"DELETE would not say which row it changed: {identity_fix(bad)} (or USING INDEX on the "
                         f"key's unique index)")


def check_holds(client: PostgresClient, slot: str, lsn: int, position: str) -> None:
    """The slot still holds the WAL from ``lsn`` on: a peek starts at its ``confirmed_flush_lsn``, so a read from
    before it would silently start later (refused like a purged binlog)."""
    state = check_usable(client, slot, position)
    if lsn < state.confirmed_flush:
        raise DblogError(f"replication slot {slot} on {client.where} no longer holds the WAL from {position} (it "
                         f"holds from {format_lsn(state.confirmed_flush)}): the lake can no longer be caught up; "
                         f"re-snapshot the table")


def check_usable(client: PostgresClient, slot: str, position: str) -> SlotState:
    """The slot as it is, unless it is gone or the server invalidated it (``StreamLost``: the capture's whole
    stream, every table's changes since ``position``)."""
    state = slot_state(client, slot)
    if state is None:
        raise StreamLost(f"the capture's replication slot {slot} is gone from {client.where} (dropped by hand?): the "
                         f"changes since {position} are lost to every table; the tail's --on-purge resnapshot (the "
                         f"default) makes it anew and reads every table again; else capture again (dblog run with "
                         f"a new --state and --sink)")
    if state.wal_status == "lost":
        raise StreamLost(lost_slot_message(client, slot))
    return state


def lost_slot_message(client: PostgresClient, slot: str) -> str:
    """One line for a slot the server invalidated: its WAL is gone for every table and the slot itself cannot be
    read any more, so only a new slot and every table read again mend it (``renew_stream``)."""
    keep = ""
    if client.version_num >= 130000:
        keep = f" = {client.scalar('SHOW max_slot_wal_keep_size')}"
    return (f"replication slot {slot} on {client.where} was invalidated by the server: it removed WAL the slot "
            f"still held (max_slot_wal_keep_size{keep}), so no table of this capture can be caught up from it; the "
            f"tail's --on-purge resnapshot (the default) makes a new slot and reads every table again; and raise "
            f"max_slot_wal_keep_size (-1: no limit) above the WAL a tail's pause writes")


def advance(client: PostgresClient, slot: str, lsn: int) -> None:
    """Move the slot's ``confirmed_flush_lsn`` forward to ``lsn`` (never back); the server may then recycle
    the WAL before it. A slot held by a running read is left as it is (the next release moves it)."""
    state = slot_state(client, slot)
    if state is None or lsn <= state.confirmed_flush or state.active_pid is not None:
        return
    try:
        client.query("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(lsn)))
    except psycopg2.Error as exc:
        log.warning("could not advance replication slot %s to %s: %s (the next release tries again)", slot,
                    format_lsn(lsn), first_line(exc, client.config.password))


def drop(client: PostgresClient, slot: str | None, publication: str | None) -> list[str]:
    """Drop the capture's slot (waiting a little for a read that holds it) and publication; what was dropped."""
    dropped = []
    if slot:
        deadline = time.monotonic() + slot_busy_seconds()
        while (state := slot_state(client, slot)) is not None:
            if state.active_pid is not None and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            try:
                client.query("SELECT pg_drop_replication_slot(%s)", (slot,))
                dropped.append(f"replication slot {slot}")
            except psycopg2.Error as exc:
                raise DblogError(f"cannot drop replication slot {slot} on {client.where}: "
                                 f"{first_line(exc, client.config.password)}; stop the tail that uses it") from None
            break
    if publication and published_tables(client, publication) is not None:
        try:
            client.query(f"DROP PUBLICATION {quote_ident(publication)}", ())
            dropped.append(f"publication {publication}")
        except psycopg2.Error as exc:
            raise DblogError(f"cannot drop publication {publication} on {client.where}: "
                             f"{first_line(exc, client.config.password)}") from None
    return dropped
