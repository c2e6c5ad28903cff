"""pgoutput against a private PostgreSQL: a table of many types (and its REPLICA IDENTITY FULL twin), a
publication and a pgoutput slot; inserts, updates (a key change, an untouched TOASTed value), deletes, a
TRUNCATE, a replication origin and logical decoding messages, read back through psycopg2's replication
connection, decoded and converted, compared with what was written value by value."""
from __future__ import annotations

import datetime as dt
import select
import struct
import time
from decimal import Decimal

import psycopg2
import psycopg2.extras

from airflow_provider_dblog.source.postgres.pgoutput import (
    UNCHANGED_TOAST, Begin, Commit, Delete, Insert, LogicalMessage, Origin, Relation, Truncate, Type, Update, decode,
    parse_lsn,
)
from airflow_provider_dblog.source.postgres.values import libpq_options
from tests.support.pg_typing import typed_values
from tests.support.postgres_fixtures import pg_db, postgres  # noqa: F401  (fixtures)

UTC = dt.timezone.utc
TYPES = {
    "id": "bigint PRIMARY KEY", "i2": "smallint", "i4": "integer", "i8": "bigint", "n": "numeric(20,6)",
    "n_unb": "numeric", "n_big": "numeric(50,10)", "f4": "real", "f8": "double precision", "b": "boolean",
    "t": "text", "vc": "varchar(20)", "ch": "char(5)", "by": "bytea", "d": "date", "ts": "timestamp",
    "tstz": "timestamptz", "tm": "time", "u": "uuid", "j": "json", "jb": "jsonb", "ip": "inet", "net": "cidr",
    "m": "money", "iv": "interval", "arr": "integer[]", "tarr": "text[]", "e": "mood", "big": "text",
}
COLUMNS = ", ".join(f"{name} {sql}" for name, sql in TYPES.items())
NAMES = list(TYPES)
# psycopg2 adapts Python values; the text-typed ones are cast in SQL
CASTS = {"u": "::uuid", "j": "::json", "jb": "::jsonb", "ip": "::inet", "net": "::cidr", "m": "::money",
         "iv": "::interval", "arr": "::integer[]", "tarr": "::text[]", "e": "::mood", "n_unb": "::numeric",
         "n_big": "::numeric"}
INSERT = "INSERT INTO {table} ({cols}) VALUES ({values})".format(
    table="{table}", cols=", ".join(NAMES), values=", ".join(f"%({n})s{CASTS.get(n, '')}" for n in NAMES))

BIG = "".join(f"{i:06d}-toasted;" for i in range(2_000))  # 22 kB, stored out of line (STORAGE EXTERNAL)
PI = "3.141592653589793238462643383279502884197169399375105820974944592307816406286"
WIDE = "1234567890123456789012345678901234567890.0123456789"  # numeric(50,10): wider than decimal128

# what is written, and what the stream must give back for it (Python values after values.converter)
ROW_1 = dict(
    id=1, i2=-32768, i4=2147483647, i8=-9223372036854775808, n=Decimal("-12345678901234.567890"), n_unb=PI,
    n_big=WIDE, f4=1.1, f8=0.1, b=True, t='héllo wörld 🎉 "quoted" \\ back\nslash', vc="varchar", ch="ab",
    by=bytes(range(256)), d=dt.date(2024, 2, 29), ts=dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
    tstz=dt.datetime(2024, 3, 10, 1, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    tm=dt.time(23, 59, 59, 999999), u="550e8400-e29b-41d4-a716-446655440000", j='{"b": 2,  "a": [1, 2]}',
    jb='{"b": 2, "a": [1, 2]}', ip="192.168.0.1/24", net="10.0.0.0/8", m="1234.56",
    iv="1 year 2 months 3 days 04:05:06.789", arr="{1,2,NULL}", tarr='{a,"b c",NULL}', e="happy", big=BIG,
)
EXPECTED_1 = dict(
    ROW_1, n_unb=PI, n_big=WIDE, ch="ab   ", tstz=dt.datetime(2024, 3, 10, 6, 59, 59, 999999, tzinfo=UTC),
    u="550e8400-e29b-41d4-a716-446655440000", jb='{"a": [1, 2], "b": 2}', m="$1,234.56", iv="P1Y2M3DT4H5M6.789S",
    tm="23:59:59.999999",
)
ROW_2 = dict({name: None for name in NAMES}, id=2)  # every column NULL
ROW_3 = dict(
    id=3, i2=32767, i4=0, i8=9223372036854775807, n=Decimal("0.000001"), n_unb="NaN", n_big="-0.0000000001",
    f4=float("inf"), f8=float("-inf"), b=False, t="", vc="", ch="", by=b"", d=dt.date(1, 1, 1),
    ts=dt.datetime(9999, 12, 31, 23, 59, 59, 999999), tstz=dt.datetime(1970, 1, 1, tzinfo=UTC), tm=dt.time(0, 0),
    u="00000000-0000-0000-0000-000000000000", j="[]", jb="{}", ip="::1", net="2001:db8::/32", m="-0.01",
    iv="-1 days -00:00:00.000001", arr="{}", tarr="{}", e="sad", big="short",
)
EXPECTED_3 = dict(ROW_3, n_big="-0.0000000001", ch="     ", m="-$0.01", iv="P-1DT-0.000001S", tm="00:00:00")


def expected_tuple(row: dict) -> tuple:
    return tuple(row[name] for name in NAMES)


def create_schema(pg, db):
    pg.sql(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
        f"CREATE TABLE all_types ({COLUMNS})",
        f"CREATE TABLE all_types_full ({COLUMNS})",
        "ALTER TABLE all_types ALTER COLUMN big SET STORAGE EXTERNAL",
        "ALTER TABLE all_types_full ALTER COLUMN big SET STORAGE EXTERNAL",
        "ALTER TABLE all_types_full REPLICA IDENTITY FULL",
        "CREATE TABLE trunc_me (id serial PRIMARY KEY, v text)",
        "INSERT INTO trunc_me (v) VALUES ('a')",
        "CREATE TABLE not_published (id int PRIMARY KEY)",
        "CREATE PUBLICATION dblog_pub FOR TABLE all_types, all_types_full, trunc_me",
        "SELECT pg_create_logical_replication_slot('dblog_slot', 'pgoutput')",
        db=db,
    )


def run(conn, *statements, params=None):
    with conn.cursor() as cur:
        for stmt in statements:
            cur.execute(stmt, params)
        return cur.fetchall() if cur.description else None


def workload(pg, db) -> dict:
    """The changes, one transaction each; returns what the checks need (xids, times)."""
    facts = {}
    conn = psycopg2.connect(pg.dsn(db), options=libpq_options())
    try:
        with conn:  # one transaction: three rows into both tables
            for table in ("all_types", "all_types_full"):
                for row in (ROW_1, ROW_2, ROW_3):
                    run(conn, INSERT.format(table=table), params=row)
            ((xid, now),) = run(conn, "SELECT txid_current() % 4294967296, now()")
            facts["insert_xid"], facts["insert_now"] = xid, now
            # the rows' text as a snapshot read with the same session settings sees it: the output functions'
            # text, as format('%s') gives it (not ::text, whose casts trim char(n) and spell bool 'true')
            texts = ", ".join(f"CASE WHEN {n} IS NOT NULL THEN format('%s', {n}) END" for n in NAMES)
            facts["as_text"] = run(conn, f"SELECT {texts} FROM all_types ORDER BY id")
        conn.autocommit = True
        run(conn, "UPDATE all_types SET i4 = i4 - 1 WHERE id = 1")  # big untouched: 'u'
        run(conn, "UPDATE all_types SET id = 10 WHERE id = 1")  # a key change: old key 'K'
        run(conn, "UPDATE all_types SET i4 = 5 WHERE id = 2")  # big is NULL: 'n', not 'u'
        run(conn, "DELETE FROM all_types WHERE id = 2")
        run(conn, "UPDATE all_types_full SET i4 = 0 WHERE id = 1")  # FULL: old row 'O', big still 'u' in new
        run(conn, "DELETE FROM all_types_full WHERE id = 3")
        run(conn, "INSERT INTO not_published VALUES (1)")  # not in the publication: an empty transaction at most
        run(conn, "TRUNCATE trunc_me RESTART IDENTITY")
        run(conn, "SELECT pg_replication_origin_create('upstream')")
        run(conn, "SELECT pg_replication_origin_session_setup('upstream')")
        conn.autocommit = False
        with conn:
            run(conn, "SELECT pg_replication_origin_xact_setup('0/ABCDEF', now())")
            run(conn, "INSERT INTO trunc_me (v) VALUES ('from upstream')")
        conn.autocommit = True
        run(conn, "SELECT pg_replication_origin_session_reset()")
        run(conn, "SELECT pg_logical_emit_message(false, 'dblog', 'heartbeat')")
        conn.autocommit = False
        with conn:
            ((lsn,),) = run(conn, "SELECT pg_logical_emit_message(true, 'dblog', 'lw-1')")
            facts["lw_lsn"] = parse_lsn(lsn)
    finally:
        conn.close()
    return facts


def read_slot(pg, db, until, timeout=20.0):
    """Every message of the slot until ``until(message)`` holds for a Commit; then feedback up to its end."""
    conn = psycopg2.connect(pg.dsn(db), connection_factory=psycopg2.extras.LogicalReplicationConnection,
                            options=libpq_options())
    try:
        cur = conn.cursor()
        cur.start_replication(slot_name="dblog_slot", decode=False,
                              options={"proto_version": "1", "publication_names": "dblog_pub", "messages": "true"})
        messages, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = cur.read_message()
            if raw is None:
                select.select([cur], [], [], 0.5)
                continue
            message = decode(raw.payload)
            messages.append(message)
            if isinstance(message, Commit) and until(messages):
                cur.send_feedback(flush_lsn=message.end_lsn, reply=True)
                return messages
        raise AssertionError(f"no final commit within {timeout}s; got {messages[-5:]}")
    finally:
        conn.close()


def transactions(messages):
    """[(begin, [changes], commit)] plus the messages outside transactions."""
    done, outside, current = [], [], None
    for message in messages:
        if isinstance(message, Begin):
            assert current is None, "Begin inside a transaction"
            current = (message, [])
        elif isinstance(message, Commit):
            done.append((current[0], current[1], message))
            current = None
        elif current is None:
            outside.append(message)
        else:
            current[1].append(message)
    assert current is None
    return done, outside


def assert_row(decoded: tuple, expected: dict, what: str):
    assert len(decoded) == len(NAMES)
    for name, got in zip(NAMES, decoded):
        want = expected[name]
        if name == "f4" and isinstance(got, float) and want is not None:  # a real: compare as single precision
            got, want = struct.pack("!f", got), struct.pack("!f", want)
        assert got == want and type(got) is type(want), f"{what}.{name}: {got!r} != {want!r}"


def test_pgoutput_stream_decodes_to_what_was_written(postgres, pg_db):
    pg, db = postgres, pg_db
    create_schema(pg, db)
    facts = workload(pg, db)
    messages = read_slot(pg, db, until=lambda got: any(
        isinstance(m, LogicalMessage) and m.content == b"lw-1" for m in got))
    txs, outside = transactions(messages)

    # -- transaction framing: Begin and Commit agree, commits in WAL order ---------------------------------------
    for begin, _, commit in txs:
        assert begin.final_lsn == commit.commit_lsn < commit.end_lsn
        assert begin.commit_ts_us == commit.commit_ts_us
    assert [c.commit_lsn for _, _, c in txs] == sorted(c.commit_lsn for _, _, c in txs)
    first_begin, first_changes, first_commit = txs[0]
    assert first_begin.xid == facts["insert_xid"]
    started_us = int(facts["insert_now"].timestamp() * 1_000_000)
    assert started_us <= first_commit.commit_ts_us < started_us + 60_000_000

    # -- Relation and Type messages describe the tables as the catalog does -----------------------------------
    relations = {m.oid: m for m in messages if isinstance(m, Relation)}
    oids = dict(pg.sql("SELECT relname, oid::bigint FROM pg_class WHERE relname IN "
                       "('all_types', 'all_types_full', 'trunc_me')", db=db))
    catalog = pg.sql("SELECT attname, atttypid::bigint, atttypmod FROM pg_attribute WHERE attrelid = "
                     "'all_types'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum", db=db)
    plain, full = relations[oids["all_types"]], relations[oids["all_types_full"]]
    assert (plain.namespace, plain.name, plain.replica_identity) == ("public", "all_types", "d")
    assert (full.namespace, full.name, full.replica_identity) == ("public", "all_types_full", "f")
    assert [(c.name, c.type_oid, c.typmod) for c in plain.columns] == [tuple(r) for r in catalog]
    assert plain.key_columns == ("id",) and full.key_columns == tuple(NAMES)
    ((mood_oid,),) = pg.sql("SELECT 'mood'::regtype::oid::bigint", db=db)
    assert Type(mood_oid, "public", "mood") in messages
    assert messages.index(Type(mood_oid, "public", "mood")) < messages.index(plain)

    types = {oid: [(c.type_oid, c.typmod) for c in rel.columns] for oid, rel in relations.items()}

    def typed(relation_oid, values):
        return typed_values(types[relation_oid], values)

    # -- the inserts, value by value -----------------------------------------------------------------------------
    inserts = [m for m in first_changes if isinstance(m, Insert)]
    assert [m.relation_oid for m in inserts] == [oids["all_types"]] * 3 + [oids["all_types_full"]] * 3
    for message, expected in zip(inserts, [EXPECTED_1, ROW_2, EXPECTED_3] * 2):
        assert_row(typed(message.relation_oid, message.new), expected, f"insert {expected['id']}")
    # the stream's text is what a SELECT ::text under the same session settings gives (snapshot reads match)
    for message, row in zip(inserts[:3], facts["as_text"]):
        for name, streamed, selected in zip(NAMES, message.new, row):
            assert streamed == selected, f"{name}: stream {streamed!r} != SELECT {selected!r}"
    raw_1 = dict(zip(NAMES, inserts[0].new))
    assert raw_1["tstz"].endswith("+00") and raw_1["by"].startswith("\\x") and raw_1["iv"].startswith("P")

    # -- updates, deletes: key images, before images, unchanged TOAST vs NULL ------------------------------------
    changes = [tx[1] for tx in txs[1:] if tx[1]]
    (touch,), (key_change,), (null_big,), (delete_2,), (full_update,), (full_delete,) = changes[:6]
    assert isinstance(touch, Update) and touch.old is None and touch.old_kind is None
    assert_row(typed(touch.relation_oid, touch.new), dict(EXPECTED_1, i4=2147483646, big=UNCHANGED_TOAST), "touch")
    assert touch.new[-1] is UNCHANGED_TOAST

    assert key_change.old_kind == "K"
    assert typed(key_change.relation_oid, key_change.old) == (1,) + (None,) * (len(NAMES) - 1)
    assert_row(typed(key_change.relation_oid, key_change.new),
               dict(EXPECTED_1, id=10, i4=2147483646, big=UNCHANGED_TOAST), "key change")

    assert null_big.new[-1] is None and null_big.new[-1] is not UNCHANGED_TOAST  # NULL is sent as NULL
    assert_row(typed(null_big.relation_oid, null_big.new), dict(ROW_2, i4=5), "null row")

    assert isinstance(delete_2, Delete) and delete_2.old_kind == "K"
    assert typed(delete_2.relation_oid, delete_2.old) == (2,) + (None,) * (len(NAMES) - 1)

    assert full_update.relation_oid == oids["all_types_full"] and full_update.old_kind == "O"
    assert_row(typed(full_update.relation_oid, full_update.old), EXPECTED_1, "full before image")
    assert_row(typed(full_update.relation_oid, full_update.new), dict(EXPECTED_1, i4=0, big=UNCHANGED_TOAST),
               "full after image")

    assert isinstance(full_delete, Delete) and full_delete.old_kind == "O"
    assert_row(typed(full_delete.relation_oid, full_delete.old), EXPECTED_3, "full delete")

    # -- TRUNCATE, the origin, the messages ----------------------------------------------------------------------
    truncates = [m for m in messages if isinstance(m, Truncate)]
    assert truncates == [Truncate(2, (oids["trunc_me"],))] and truncates[0].restart_identity
    origin_tx = next(tx for tx in txs if any(isinstance(m, Origin) for m in tx[1]))
    assert origin_tx[1][0] == Origin(parse_lsn("0/ABCDEF"), "upstream")
    assert [m.new for m in origin_tx[1] if isinstance(m, Insert)] == [("1", "from upstream")]
    heartbeat = [m for m in outside if isinstance(m, LogicalMessage)]
    assert [(m.transactional, m.prefix, m.content) for m in heartbeat] == [(False, "dblog", b"heartbeat")]
    last_begin, last_changes, last_commit = txs[-1]
    assert last_changes == [LogicalMessage(True, facts["lw_lsn"], "dblog", b"lw-1")]
    assert not any(m for m in messages if getattr(m, "name", None) == "not_published")

    # -- feedback moves the slot: a restart would begin after the last commit ------------------------------------
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ((confirmed,),) = pg.sql("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                 "WHERE slot_name = 'dblog_slot'", db=db)
        if parse_lsn(confirmed) >= last_commit.end_lsn:
            break
        time.sleep(0.1)
    assert parse_lsn(confirmed) == last_commit.end_lsn
    pg.sql("SELECT pg_drop_replication_slot('dblog_slot')", db=db)


def test_wal_level_and_private_cluster(postgres):
    """The private cluster is logical-ready and is not the system's server on 5432."""
    assert postgres.port != 5432
    assert postgres.sql("SHOW wal_level") == [("logical",)]
    assert postgres.sql("SHOW max_replication_slots") == [("10",)]
    assert postgres.sql("SELECT rolreplication FROM pg_roles WHERE rolname = current_user") == [(True,)]
    assert postgres.uri("x") == f"postgresql://postgres@127.0.0.1:{postgres.port}/x"
    # its defaults differ from dblog's session settings, so the stream test above proves they are applied
    assert postgres.sql("SHOW TimeZone", "SHOW bytea_output") == [("escape",)]
    assert postgres.sql("SHOW TimeZone") == [("America/New_York",)]

