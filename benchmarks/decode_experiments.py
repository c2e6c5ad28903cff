"""Ways past python-mysql-replication's single-thread decode rate, measured on one binlog range.

    python benchmarks/decode_experiments.py --port PORT --file mysql-bin.000001 --pos START --end-pos END \
        --table bench.tail [--parallel 2]

Each variant runs whole processes (benchmarks/decode_rate.py) over [START, END):
- ``single``: one reader decodes every rows event (the baseline);
- ``no_decode``: one reader receives and parses every event up to its header, decodes no row: the
  floor that every reader of a shared range pays;
- ``share``: N readers in parallel over the whole range, reader k decodes every N-th rows event (what
  the tail's ``decodeParallelism`` does);
- ``split``: N readers in parallel, each over its own transaction-aligned byte range (boundaries from
  ``SHOW BINLOG EVENTS``: Xid events), decoding everything in it: each reads only its bytes.
Rates are changes/s over the wall time of the slowest reader; ``cpu_s`` is the readers' CPU time
(what the variant costs whether or not free cores exist). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def reader_cmd(args, pos: int, end: int, share: str = "0/1", no_decode: bool = False, reader: int = 0) -> list[str]:
    cmd = [sys.executable, str(HERE / "decode_rate.py"), "--port", str(args.port), "--file", args.file,
           "--pos", str(pos), "--end-pos", str(end), "--table", args.table, "--share", share,
           "--server-id", str(987_000 + reader)]
    return cmd + (["--no-decode"] if no_decode else [])


def run_parallel(cmds: list[list[str]]) -> dict:
    started = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.perf_counter() - started
    rows = sum(o["rows"] for o in outs)
    return {"rows": rows, "wall_s": round(wall, 3), "rows_per_s": round(rows / wall, 1),
            "cpu_s": round(sum(o["cpu_s"] for o in outs), 3),
            "readers": [{"rows": o["rows"], "loop_s": o["loop_s"], "cpu_s": o["cpu_s"]} for o in outs]}


def transaction_boundaries(args, parts: int) -> list[int]:
    """``parts - 1`` Xid end positions that split [pos, end) into byte ranges of about equal size."""
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=args.port, user="root")
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(args.pos)}", (args.file,))
        xids = [int(r[4]) for r in cur.fetchall() if r[2] == "Xid" and int(r[4]) <= args.end_pos]
    conn.close()
    cuts = []
    for k in range(1, parts):
        target = args.pos + (args.end_pos - args.pos) * k / parts
        cuts.append(min(xids, key=lambda x: abs(x - target)))
    return [args.pos, *sorted(set(cuts)), args.end_pos]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--pos", type=int, required=True)
    parser.add_argument("--end-pos", type=int, required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    n = args.parallel
    out = {"parallel": n}
    out["single"] = run_parallel([reader_cmd(args, args.pos, args.end_pos)])
    out["no_decode"] = run_parallel([reader_cmd(args, args.pos, args.end_pos, no_decode=True)])
    out["share"] = run_parallel([reader_cmd(args, args.pos, args.end_pos, f"{k}/{n}", reader=k) for k in range(n)])
    bounds = transaction_boundaries(args, n)
    out["split"] = run_parallel([reader_cmd(args, a, b, reader=k) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))])
    out["split"]["bounds"] = bounds
    base = out["single"]["rows_per_s"]
    for key in ("share", "split"):
        out[key]["vs_single"] = round(out[key]["rows_per_s"] / base, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
