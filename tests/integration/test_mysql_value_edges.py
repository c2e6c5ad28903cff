"""MySQL/MariaDB values at the edges, on a real MariaDB: what the tail writes from the binlog (the compiled per-row
decoder and the column blocks) must be what the snapshot's SELECT reads, and ``dblog verify``'s SQL checksum must
agree with the lake's, for character sets other than UTF-8 (every character a utf8mb4 client can store in them)
and for DECIMAL ZEROFILL wider than 38 digits."""
from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_dblog.core.change_block import ChangeBlock
from airflow_provider_dblog.core.checksums import table_checksum
from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.source.codegen import Builder
from airflow_provider_dblog.source.mysql import rows as mysql_rows
from airflow_provider_dblog.source.mysql.checksum import checksum_sql
from airflow_provider_dblog.source.mysql.dialect import MySqlDialect
from airflow_provider_dblog.source.mysql.types import PYTHON_CODECS
from airflow_provider_dblog.store.lake import block_rows, event_rows

UNICODE = {"utf8mb4", "utf8mb3", "utf8", "utf16", "utf16le", "utf32", "ucs2", "ascii", "binary"}


def _candidates(charset: str, maxlen: int) -> list[bytes]:
    """Every 1- and 2-byte sequence (and ujis's 3-byte ones, a slice of gb18030's 4-byte ones)."""
    out = [bytes([i]) for i in range(256)]
    if maxlen >= 2:
        out += [bytes([a, b]) for a in range(0x80, 0x100) for b in range(0x21, 0x100)]
    if charset == "ujis":
        out += [bytes([0x8F, a, b]) for a in range(0xA1, 0xFF) for b in range(0xA1, 0xFF)]
        out += [bytes([0x8E, a]) for a in range(0xA1, 0xE0)]
    if charset == "gb18030":
        out += [bytes([a, b, c, d]) for a in (0x81, 0x82, 0x84, 0x90, 0xE3) for b in range(0x30, 0x3A)
                for c in range(0x81, 0xFF) for d in range(0x30, 0x3A)]
    return out


def _decode(charset: str, data: bytes) -> str:
    """``data`` through the row decoder's own expression for a ``charset`` column."""
    b = Builder()
    expression = mysql_rows._text_expression(b, charset, "data")
    return eval(expression, {**b.env, "data": data})  # noqa: S307 (the decoder's generated expression)


def test_every_storable_character_decodes_as_the_server_reads_it(mariadb):
    """For every character set dblog accepts, every byte sequence that holds a character a utf8mb4 client can store
    (the server converts it to utf8mb4 and back to the same bytes) decodes in the tail as the server converts it (what
    the snapshot reads). Before: cp866, greek, hebrew, koi8u and sjis each had characters the tail wrote otherwise
    (silent), and euckr (8,823 characters), big5 (7) and ujis (1,880) stopped the tail in a line blaming COMPRESSED."""
    mariadb.sql("CREATE DATABASE IF NOT EXISTS edges")
    maxlen = dict(mariadb.sql("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS"))
    wrong: dict[str, list] = {}
    checked = 0
    for charset in sorted(set(PYTHON_CODECS) - UNICODE):
        if charset not in maxlen:
            continue
        mariadb.sql("DROP TABLE IF EXISTS edges.bytes", "CREATE TABLE edges.bytes (b VARBINARY(8))")
        candidates = _candidates(charset, maxlen[charset])
        for i in range(0, len(candidates), 4000):
            values = ", ".join(f"(0x{c.hex()})" for c in candidates[i:i + 4000])
            mariadb.sql(f"INSERT INTO edges.bytes VALUES {values}")
        rows = mariadb.sql(f"SELECT b, CONVERT(CONVERT(b USING {charset}) USING utf8mb4) FROM edges.bytes WHERE CAST("
                           f"CONVERT(CONVERT(CONVERT(b USING {charset}) USING utf8mb4) USING {charset}) AS BINARY) = b")
        for data, server in rows:
            server = server.decode() if isinstance(server, bytes) else server
            if "\ufffd" in server:  # no character of its own: not storable from a utf8mb4 client
                continue
            checked += 1
            try:
                tail = _decode(charset, data)
            except UnicodeDecodeError as exc:
                tail = f"<{exc.reason}>"
            if tail != server:
                wrong.setdefault(charset, []).append((data.hex(), server, tail))
    assert checked > 100_000
    assert not wrong, {cs: (len(v), v[:5]) for cs, v in wrong.items()}


# a column per character set with a character Python's codec of that name decodes otherwise or not at all
CHARSET_COLUMNS = {"k866": ("cp866", "xⁿ²"), "gr": ("greek", "ʽʼ"), "he": ("hebrew", "‾"), "ku": ("koi8u", "•"),
                   "sj": ("sjis", "\\a"), "kr": ("euckr", "갂"), "b5": ("big5", "碁"), "uj": ("ujis", "\ue000\ue3ac"),
                   "l1": ("latin1", "\x81€ "), "u16": ("utf16", "🦆 ")}
COLUMNS = {**{name: f"VARCHAR(20) CHARACTER SET {cs}" for name, (cs, _) in CHARSET_COLUMNS.items()},
           "ch": "CHAR(6) CHARACTER SET sjis",
           "dz": "DECIMAL(50,2) ZEROFILL", "dz0": "DECIMAL(40,0) ZEROFILL", "dzs": "DECIMAL(65,30) ZEROFILL",
           "dn": "DECIMAL(10,2) ZEROFILL", "iz": "INT ZEROFILL",
           # labels not in UTF-8 (latin1 'Ã©' is the UTF-8 bytes of 'é'): the table map's labels in the column's set
           "el": "ENUM('é','Ã©','b') CHARACTER SET latin1", "sl": "SET('ü','x') CHARACTER SET latin1",
           "e866": "ENUM('ⁿ','b') CHARACTER SET cp866"}


def _sql_text(text: str) -> str:
    return "_utf8mb4 0x" + text.encode().hex()


@pytest.fixture(scope="module")
def edges(mariadb):
    mariadb.sql("CREATE DATABASE IF NOT EXISTS edges", "DROP TABLE IF EXISTS edges.t")
    ddl = ", ".join(f"`{name}` {type_}" for name, type_ in COLUMNS.items())
    mariadb.sql(f"CREATE TABLE edges.t (id INT PRIMARY KEY, {ddl}) DEFAULT CHARSET=utf8mb4")
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    yield mariadb, dialect, dialect.describe_table("edges.t")
    dialect.close()


def _changelog_rows(items, schema) -> list[dict]:
    out, events = [], []
    for item in items:
        if isinstance(item, ChangeEvent):
            events.append(item)
        elif isinstance(item, ChangeBlock):
            if events:
                out.extend(event_rows(events, [0] * len(events), schema).to_pylist())
                events.clear()
            out.extend(block_rows(item, [0] * len(item), schema).to_pylist())
    if events:
        out.extend(event_rows(events, [0] * len(events), schema).to_pylist())
    return out


def test_tail_and_verify_agree_with_the_snapshot_on_edge_values(edges):
    """Inserts, updates and deletes of rows holding those characters and wide ZEROFILL decimals: the changelog rows
    of both binlog paths are the snapshot's rows, and the SQL checksum equals the lake's of the snapshot and of the
    tail's images. Before: the tail wrote cp866 'ⁿ' as '№' (and the like: silent), stopped on euckr/big5/ujis
    characters, and wrote a DECIMAL(50,2) ZEROFILL as '1.50' where the snapshot (and verify's SQL) had 48 zeros
    before it; an ENUM or SET label not in UTF-8 was '' in every table map: each change looked like a schema change
    and the tail wrote '' (or the wrong label, 'é' for 'Ã©')."""
    mariadb, dialect, meta = edges
    mariadb.sql("DELETE FROM edges.t")
    schema = dialect.arrow_schema(meta)
    names = [c.name for c in meta.columns]
    start = dialect.current_position()
    values = {name: _sql_text(text) for name, (_, text) in CHARSET_COLUMNS.items()}
    values |= {"ch": _sql_text("\\ "), "dz": "1.5", "dz0": "7", "dzs": "0.000000000000000000000000000001",
               "dn": "1.5", "iz": "1", "el": _sql_text("Ã©"), "sl": _sql_text("ü,x"), "e866": _sql_text("ⁿ")}
    for k in range(12):  # one statement per row: a run the column blocks decode
        mariadb.sql(f"INSERT INTO edges.t (id, {', '.join(values)}) VALUES ({k}, {', '.join(values.values())})")
    mariadb.sql("UPDATE edges.t SET dz = dz + 1, k866 = CONCAT(k866, _utf8mb4'²') WHERE id % 2 = 0",
                "DELETE FROM edges.t WHERE id % 3 = 0")
    end = dialect.current_position()
    snapshot = sorted(dialect.read_snapshot(meta, ChunkRange(0, None, None)).to_pylist(), key=lambda r: r["id"])
    assert snapshot[0]["k866"] == "xⁿ²" and snapshot[0]["dz"] == "1.50" and snapshot[1]["dz"] == "2.50"
    assert (snapshot[0]["el"], snapshot[0]["sl"], snapshot[0]["e866"]) == ("Ã©", "ü,x", "ⁿ")

    for blocks_after in (None, {meta.qualified: start}):
        items = list(dialect.read_changes(start, end, [meta], blocks_after=blocks_after))
        assert not [i for i in items if not isinstance(i, (ChangeEvent, ChangeBlock))], "a schema change was seen"
        changelog = _changelog_rows(items, schema)
        latest: dict[int, dict] = {}
        for row in changelog:  # in binlog order: the last image of each key, a delete removes it
            if row["_op"] == "d":
                latest.pop(row["id"], None)
            else:
                latest[row["id"]] = {n: row[n] for n in names}
        tail = [latest[k] for k in sorted(latest)]
        assert tail == snapshot, f"blocks_after={blocks_after}"
        lake = table_checksum(pa.Table.from_pylist(tail, schema=schema), names)
        source = dialect.client.query(checksum_sql(meta, ChunkRange(0, None, None)))[0]
        assert (int(source[0]), int(source[1])) == (lake.rows, lake.digest)


def test_old_temporal_format_is_refused_in_one_line(mariadb):
    """A TIME/DATETIME/TIMESTAMP made under ``mysql56_temporal_format=OFF`` (MariaDB's 5.3 format) has binlog images
    the decoders do not read: refused when the table is described, naming the columns and the fix. Before, the plan
    took it and the tail stopped on its first change, at every restart, blaming a COMPRESSED column."""
    from airflow_provider_dblog.core.errors import UnsupportedTables

    mariadb.sql("CREATE DATABASE IF NOT EXISTS edges", "DROP TABLE IF EXISTS edges.old", "DROP TABLE IF EXISTS edges.new",
                "SET GLOBAL mysql56_temporal_format = OFF")
    try:
        mariadb.sql("CREATE TABLE edges.old (id INT PRIMARY KEY, dt DATETIME(6), t TIME, ts TIMESTAMP(3) NULL)")
    finally:
        mariadb.sql("SET GLOBAL mysql56_temporal_format = ON")
    dialect = MySqlDialect(SourceConfig.parse(mariadb.uri()))
    try:
        with pytest.raises(UnsupportedTables) as refused:
            dialect.describe_table("edges.old")
        assert "edges.old.dt, edges.old.t, edges.old.ts" in str(refused.value)
        assert "ALTER TABLE ... FORCE" in str(refused.value) and "\n" not in str(refused.value)
        mariadb.sql("ALTER TABLE edges.old FORCE")  # the fix the line names
        assert [c.column_type for c in dialect.describe_table("edges.old").columns][1:] == [
            "datetime(6)", "time", "timestamp(3)"]
    finally:
        dialect.close()


def test_an_old_temporal_column_added_after_the_plan_stops_the_tail_in_one_line_naming_it(mariadb, tmp_path):
    """A column of the old temporal format added by ALTER under ``mysql56_temporal_format=OFF`` after the plan:
    the tail stops in the line that names the column and ALTER TABLE ... FORCE, before any of its read is written
    (before: the line blamed a COMPRESSED column). Its images already logged stay unreadable after the FORCE (the
    tail still stops, loud); the table captured again after the FORCE is followed."""
    from tests.support.cli import captured, dblog, one_error_line
    from tests.support.lakecheck import compare_rows
    from deltalake import DeltaTable

    mariadb.sql("CREATE DATABASE IF NOT EXISTS edges", "DROP TABLE IF EXISTS edges.later",
                "CREATE TABLE edges.later (id INT PRIMARY KEY, v INT)", "INSERT INTO edges.later VALUES (1, 1), (2, 2)")
    state, sink = captured(mariadb.uri(), "edges.later", tmp_path, 10)
    mariadb.sql("SET GLOBAL mysql56_temporal_format = OFF")
    try:
        mariadb.sql("ALTER TABLE edges.later ADD COLUMN dt DATETIME(6)")
    finally:
        mariadb.sql("SET GLOBAL mysql56_temporal_format = ON")
    mariadb.sql("INSERT INTO edges.later VALUES (3, 3, '2024-01-02 03:04:05.678901')")
    before = DeltaTable(f"{sink}/edges.later/current").to_pyarrow_table().to_pylist()
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")
    line = one_error_line(err)
    assert code != 0 and "edges.later.dt" in line and "ALTER TABLE ... FORCE" in line, line
    assert DeltaTable(f"{sink}/edges.later/current").to_pyarrow_table().to_pylist() == before
    assert "capture it again after the FORCE" in line, line
    mariadb.sql("ALTER TABLE edges.later FORCE", "UPDATE edges.later SET v = -v WHERE id = 1")
    code, _, err = dblog("tail", "--state", state, "--sink", sink, "--available-now")  # the old images are still there
    assert code != 0 and "capture it again" in one_error_line(err), err[-3000:]
    assert DeltaTable(f"{sink}/edges.later/current").to_pyarrow_table().to_pylist() == before
    state2, sink2 = captured(mariadb.uri(), "edges.later", tmp_path / "again", 10)  # the way the lines name
    mariadb.sql("UPDATE edges.later SET dt = '2001-01-01 00:00:00.5' WHERE id = 2")
    code, _, err = dblog("tail", "--state", state2, "--sink", sink2, "--available-now")
    assert code == 0, err[-3000:]
    assert compare_rows(DeltaTable(f"{sink2}/edges.later/current").to_pyarrow_table(), mariadb.port, "edges.later") == []
