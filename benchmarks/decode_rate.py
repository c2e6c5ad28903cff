"""python-mysql-replication's own single-thread decode rate, a whole process.

    python benchmarks/decode_rate.py --port PORT --file mysql-bin.000002 --pos 1234 [--table bench.tail]

Reads with ``BinLogStreamReader`` directly (is_mariadb=False, resume_stream=True, blocking=False,
from the position before the changes) and touches every decoded row image, as any consumer must.
Prints {"rows", "events", "loop_s", "rows_per_s"}: ``loop_s`` runs from the first to the last event
(connection and import excluded; the harness also times the whole process).
"""
from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="")
    parser.add_argument("--file", required=True)
    parser.add_argument("--pos", type=int, required=True)
    parser.add_argument("--table", help="DB.TABLE: only this table's events (the tail filters the same way)")
    args = parser.parse_args()

    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    filters = {}
    if args.table:
        schema, table = args.table.split(".", 1)
        filters = {"only_schemas": [schema], "only_tables": [table]}
    stream = BinLogStreamReader(
        connection_settings={"host": args.host, "port": args.port, "user": args.user, "passwd": args.password},
        server_id=987_654, resume_stream=True, blocking=False, log_file=args.file, log_pos=args.pos,
        is_mariadb=False, only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], **filters)
    rows = events = 0
    first = None
    for event in stream:
        if first is None:
            first = time.perf_counter()
        events += 1
        rows += len(event.rows)  # ``rows`` decodes every row image of the event (lazily, on first access)
    stream.close()
    loop_s = time.perf_counter() - (first or time.perf_counter())
    print(json.dumps({"rows": rows, "events": events, "loop_s": round(loop_s, 3),
                      "rows_per_s": round(rows / loop_s, 1) if loop_s else None}))


if __name__ == "__main__":
    main()
