"""dblog's binlog dump loop (``source/mysql/event_stream.py``) on a real private MariaDB: a table map whose
bytes were seen before in the read is taken from its cache (the same parsed table, at its own position); a map
that changed (ALTER TABLE) is parsed again, and the rows after it decode with its columns. The GTID and XID
events it reads itself say what the server lists for them."""
from __future__ import annotations

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import TableMapEvent, WriteRowsEvent

from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.source.mysql.binlog import current_position
from airflow_provider_dblog.source.mysql.connection import MySqlClient
from airflow_provider_dblog.source.mysql.event_stream import MappedAgain
from airflow_provider_dblog.source.mysql.replication import binlog_events


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
