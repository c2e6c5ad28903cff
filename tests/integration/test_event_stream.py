"""dblog's binlog dump loop (``source/mysql/event_stream.py``) on a real private MariaDB: a table map whose
bytes were seen before in the read is taken from its cache (the same parsed table, at its own position); a map
that changed (ALTER TABLE) is parsed again, and the rows after it decode with its columns. The GTID and XID
events it reads itself say what the server lists for them."""
from __future__ import annotations

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.source.mysql.binlog import current_position
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.event_stream import DeletedRows, MappedAgain, UpdatedRows, WrittenRows
from airflow_provider_dblog.source.mysql.replication import binlog_events
from airflow_provider_dblog.source.mysql.rows import body_of, full_image


def test_a_table_map_seen_before_is_taken_from_the_cache_and_a_changed_one_is_parsed_again(mariadb, db):
    client = MySqlClient(SourceConfig.parse(mariadb.uri()))
    mariadb.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10))")
    start = current_position(client)
    mariadb.sql(*(f"INSERT INTO {db}.t VALUES ({i}, 'a{i}')" for i in range(3)),
                f"ALTER TABLE {db}.t ADD COLUMN w INT DEFAULT 7",
                *(f"INSERT INTO {db}.t VALUES ({i}, 'b{i}', {i * 10})" for i in range(3, 5)))
    # where the server says each table map ends: a cached map must carry its own position, not the first one's
    events = mariadb.sql(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.offset}")
    listed = [int(row[4]) for row in events if row[2] == "Table_map" and row[5].endswith(f"({db}.t)")]
    listed_gtids = [(int(row[4]), row[5].split()[-1]) for row in events if row[2] == "Gtid"]
    listed_xids = [(int(row[4]), int(row[5].split("xid=")[1].split()[0])) for row in events if row[2] == "Xid"]
    maps, rows, gtids, xids = [], [], [], []
    for stream, event in binlog_events(client, (900, 999), start,
                                       [TableMapEvent, WriteRowsEvent, QueryEvent, XidEvent, MariadbGtidEvent],
                                       [db], ["t"]):
        if isinstance(event, MariadbGtidEvent):
            gtids.append((event.packet.log_pos, event.gtid, event.domain_id, event.gtid_seq_no, event.flags))
        elif isinstance(event, XidEvent):
            xids.append((event.packet.log_pos, event.xid))
        elif isinstance(event, TableMapEvent):
            maps.append((event, event.packet.log_pos, stream.table_map[event.table_id]))
        elif isinstance(event, WriteRowsEvent):
            rows.extend(r["values"] for r in event.rows)
    client.close()
    library = BinLogStreamReader(  # what the library's own reader makes of the same GTID events
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": "root", "passwd": ""}, server_id=998,
        resume_stream=True, blocking=False, log_file=start.file, log_pos=start.offset, enable_logging=False,
        only_events=[MariadbGtidEvent])
    try:
        assert gtids == [(e.packet.log_pos, e.gtid, e.domain_id, e.gtid_seq_no, e.flags) for e in library]
    finally:
        library.close()
    assert [g[:2] for g in gtids] == listed_gtids and len(gtids) == 6
    assert xids == listed_xids and len(xids) == 5
    assert [pos for _, pos, _ in maps] == listed and len(listed) == 5
    assert [type(e) for e, _, _ in maps] == [TableMapEvent, MappedAgain, MappedAgain, TableMapEvent, MappedAgain]
    first, after_alter = maps[0][2], maps[3][2]
    assert maps[1][2] is first and maps[2][2] is first and maps[4][2] is after_alter  # parsed once each
    assert [c.name for c in first.columns] == ["id", "v"]
    assert [c.name for c in after_alter.columns] == ["id", "v", "w"]
    assert all(e.schema == db and e.table == "t" for e, _, _ in maps)
    assert rows == [{"id": i, "v": f"a{i}"} for i in range(3)] + [{"id": i, "v": f"b{i}", "w": i * 10}
                                                                  for i in range(3, 5)]


def test_rows_events_whose_header_dblog_reads_say_what_the_library_says(mariadb, db):
    """Full row images of a mapped table come as dblog's rows events (their header read by the loop): the same
    kind, position, table, row images (the bytes dblog decodes) and rows (the library's decoding, asked lazily)
    as the library's own reader gives, and a table the read leaves out is left out alike. A MINIMAL image stays
    the library's event (the reader refuses it)."""
    client = MySqlClient(SourceConfig.parse(mariadb.uri()))
    mariadb.sql(f"CREATE TABLE {db}.r (id INT PRIMARY KEY, v VARCHAR(10), n DECIMAL(9,2), b BLOB)",
                f"CREATE TABLE {db}.other (id INT PRIMARY KEY, v INT)")
    start = current_position(client)
    mariadb.sql(f"INSERT INTO {db}.other VALUES (1, 1)",  # a table the read leaves out, between the read's
                f"INSERT INTO {db}.r SELECT seq, CONCAT('v', seq), seq / 3, REPEAT('x', seq) FROM seq_1_to_40",
                f"UPDATE {db}.other SET v = 2",
                f"BEGIN", f"UPDATE {db}.r SET v = 'changed', n = NULL WHERE id BETWEEN 5 AND 15",
                f"INSERT INTO {db}.other VALUES (2, 2)", "COMMIT",
                f"DELETE FROM {db}.r WHERE id > 30", f"DELETE FROM {db}.other", db=db)
    mariadb.sql("SET SESSION binlog_row_image = 'MINIMAL'", f"UPDATE {db}.r SET v = 'minimal' WHERE id = 1", db=db)
    kinds = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]

    def described(event):
        images = body_of(event)
        span = None if images is None else bytes(images[0][images[1]:images[2]])
        return (type(event).__mro__[0 if type(event) in kinds else 2], event.packet.log_pos, event.schema, event.table,
                span, event.rows)

    ours = [described(e) for _, e in binlog_events(client, (900, 999), start, [TableMapEvent, *kinds], [db], ["r"])
            if not isinstance(e, TableMapEvent)]
    client.close()
    library = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": "root", "passwd": ""}, server_id=997,
        resume_stream=True, blocking=False, log_file=start.file, log_pos=start.offset, enable_logging=False,
        only_events=kinds, only_schemas=[db], only_tables=["r"])
    try:
        theirs = [described(e) for e in library]
    finally:
        library.close()
    assert ours == theirs and len(ours) >= 4
    dblog_read = [e for _, e in binlog_events(MySqlClient(SourceConfig.parse(mariadb.uri())), (900, 999), start,
                                              [TableMapEvent, *kinds], [db], ["r"]) if not isinstance(e, TableMapEvent)]
    assert [type(e) for e in dblog_read] == [WrittenRows, UpdatedRows, DeletedRows, UpdateRowsEvent]
    assert not full_image(dblog_read[-1]) and all(full_image(e) for e in dblog_read[:-1])
