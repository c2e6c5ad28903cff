"""python-mysql-replication's own single-thread decode rate, a whole process.

    python benchmarks/decode_rate.py --port PORT --file mysql-bin.000002 --pos 1234 [--table bench.tail]
        [--end-pos N] [--share K/N] [--no-decode]

Reads with ``BinLogStreamReader`` directly (is_mariadb=False, resume_stream=True, blocking=False,
from the position before the changes) and touches every decoded row image, as any consumer must.
Prints {"rows", "events", "loop_s", "rows_per_s"}: ``loop_s`` runs from the first to the last event
(connection and import excluded; the harness also times the whole process).

For benchmarks/decode_experiments.py: ``--end-pos`` stops at that offset of the same file (a
transaction boundary), ``--share K/N`` decodes only every N-th rows event from the K-th on (the
others are received and parsed up to their header only), ``--no-decode`` decodes none.
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
    parser.add_argument("--end-pos", type=int, default=0)
    parser.add_argument("--table", help="DB.TABLE: only this table's events (the tail filters the same way)")
    parser.add_argument("--share", default="0/1")
    parser.add_argument("--no-decode", action="store_true")
    parser.add_argument("--server-id", type=int, default=987_654, help="unique per concurrent reader")
    args = parser.parse_args()
    part, parts = (int(x) for x in args.share.split("/"))

    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    filters = {}
    if args.table:
        schema, table = args.table.split(".", 1)
        filters = {"only_schemas": [schema], "only_tables": [table]}
    if args.end_pos:
        filters["end_log_pos"] = args.end_pos
    stream = BinLogStreamReader(
        connection_settings={"host": args.host, "port": args.port, "user": args.user, "passwd": args.password},
        server_id=args.server_id, resume_stream=True, blocking=False, log_file=args.file, log_pos=args.pos,
        is_mariadb=False, only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], **filters)
    rows = events = 0
    first = None
    cpu_start = time.process_time()
    for event in stream:
        if first is None:
            first = time.perf_counter()
        events += 1
        if args.no_decode or (events - 1) % parts != part:
            continue
        rows += len(event.rows)  # ``rows`` decodes every row image of the event (lazily, on first access)
    stream.close()
    loop_s = time.perf_counter() - (first or time.perf_counter())
    print(json.dumps({"rows": rows, "events": events, "loop_s": round(loop_s, 3),
                      "cpu_s": round(time.process_time() - cpu_start, 3),
                      "rows_per_s": round(rows / loop_s, 1) if loop_s else None}))


if __name__ == "__main__":
    main()
