"""`dblog run` of one table, two sides alternating: code at a git revision (A) against the working
tree (B), or without (A) and with (B) a paced writer in its own process (what (d)/(c) measures).

    python benchmarks/ab_run.py --table tpch.lineitem --chunk-size 375076 --rev 52bfdbe --pairs 3
    python benchmarks/ab_run.py --table tpch.orders --chunk-size 187500 --writer-rate 500 --pairs 3

Uses the benchmark's private MariaDB (`make bench` or `benchmarks/run.py --prepare-only` loads it).
Alternating A and B in one script cancels most of this machine's drift between runs; prints each
run's whole-process seconds and phases, then min and mean per side and B's rows/s relative to A's.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

import common

WRITER = """
import signal, sys, types
sys.path.insert(0, {here!r})
import common, pymysql
port, table, rate = {port}, {table!r}, {rate}
def sql(q):
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root")
    try:
        with conn.cursor() as cur:
            cur.execute(q)
            return cur.fetchall()
    finally:
        conn.close()
server = types.SimpleNamespace(port=port, sql=sql)
column = common.WRITER_COLUMN[table]
writer = common.PacedWriter(server, "tpch." + table, rate, common.sample_keys(server, table, 50_000),
                            common.KEYS[table], column + " = " + column + " + 1")
def stop(*_):
    raise KeyboardInterrupt
signal.signal(signal.SIGTERM, stop)
writer.start()
print("started", flush=True)
try:
    signal.pause()
except KeyboardInterrupt:
    print(writer.stop(), flush=True)
"""


def start_writer(server, table: str, rate: float) -> subprocess.Popen:
    """A ``PacedWriter`` in its own process, as a user's application would write: it takes no CPU
    from this script, and it is running when this returns."""
    code = WRITER.format(here=str(common.HERE), port=server.port, table=table.split(".")[-1], rate=rate)
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    writer.stdout.readline()
    return writer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--chunk-size", type=int, required=True)
    sides = parser.add_mutually_exclusive_group(required=True)
    sides.add_argument("--rev", help="A: the code at this git revision, B: the working tree")
    sides.add_argument("--writer-rate", type=float, help="A: no writer, B: a writer changing this many rows/s")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--watermark", default="consistent_snapshot")
    parser.add_argument("--scale-tag", default="sf1")
    args = parser.parse_args()

    server = common.start_server(common.BENCH_DIR / f"mariadb-{args.scale_tag}")
    work = common.BENCH_DIR / "ab"
    shutil.rmtree(work, ignore_errors=True)
    revision_dir = common.export_revision(args.rev)[1] if args.rev else None
    seconds: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for i in range(args.pairs):
            for side in ("A", "B"):
                common.CODE["pythonpath"] = str(revision_dir) if side == "A" and revision_dir else None
                writer = start_writer(server, args.table, args.writer_rate) if side == "B" and args.writer_rate else None
                run_dir = work / f"{side}{i}"
                try:
                    run = common.dblog_run(server, args.table, run_dir / "state", run_dir / "sink", args.chunk_size,
                                           args.watermark, log_path=run_dir / "log")
                finally:
                    written = ""
                    if writer:
                        writer.terminate()
                        written = writer.communicate(timeout=60)[0].strip()
                if run.returncode != 0:
                    raise SystemExit(f"{side} run {i} failed: see {run_dir / 'log'}")
                seconds[side].append(run.seconds)
                common.log(f"{side} {i}: {run.seconds:.2f}s {run.extra.get('phases')} {written}")
                shutil.rmtree(run_dir / "sink")
    finally:
        server.stop()
    for side, values in seconds.items():
        common.log(f"{side}: min {min(values):.2f}s, mean {sum(values) / len(values):.2f}s")
    a, b = seconds["A"], seconds["B"]
    common.log(f"B/A rows/s: {sum(a) / sum(b):.2f} by the means, {min(a) / min(b):.2f} by the best runs")


if __name__ == "__main__":
    main()
