"""Many tables: the same rows and the same changes spread over N = 1, 10, 50, 200 tables (issue 14).

    python benchmarks/n_tables.py [--sizes 1,10,50,200] [--rows 200000] [--changes 20000] [--out FILE]

A private MariaDB; for each N a database ``nN`` of N synthetic tables (``common.create_synthetic_table``)
holding ``--rows`` rows in all, captured by pattern as a user would, one process per step:
``dblog plan --tables 'nN.*'`` (default chunk and batch sizes), one ``dblog snapshot --batch I`` per
batch (each a Spark application), ``dblog report``. Then ``--changes`` row changes spread evenly over
the N tables (UPDATEs of at most 100 rows each, the same number of statements whatever N), and
``dblog tail --available-now --driver-catch-up-mb 0`` (the streaming query, not the in-driver catch-up)
reads them. Measured per N: plan + snapshot + report wall time and the number of Spark applications
(batches); the tail's wall time, time per change, its peak process count and resident memory (the tail
process and its children, sampled every 0.25 s). A tail that passes ``--tail-timeout`` or
``--max-tail-rss-gb`` is stopped (its process group) and recorded as not finished.

Targets (issue 14): tail time at N = 50 <= 1.3x the N = 1 time; 200 tables of 1,000 rows snapshotted
in at most 4 Spark applications. Prints a table on stderr and JSON on stdout (also ``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

import common

TAIL_RATIO_TARGET = 1.3
SNAPSHOT_APPS_TARGET = 4
ROWS_PER_STATEMENT = 100


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak process count, Python process count and summed RSS of a process tree."""

    def __init__(self, pid: int, every: float = 0.25):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peak_rss = self.peak_procs = self.peak_python = 0
        self.rss = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            tree = process_tree(self.pid)
            self.rss = sum(rss_bytes(p) for p in tree)
            python = 0
            for p in tree:
                try:
                    python += "python" in Path(f"/proc/{p}/comm").read_text()
                except OSError:
                    pass
            self.peak_rss, self.peak_procs = max(self.peak_rss, self.rss), max(self.peak_procs, len(tree))
            self.peak_python = max(self.peak_python, python)
            self.halt.wait(self.every)


def startup_seconds(log_path: Path) -> float | None:
    """Seconds from the tail's first log line to the start of its first micro-batch's read (the micro-batch
    line's time less its read, changelog and current times): the start-up checks, the Spark session and the
    query's start. None without a micro-batch (the in-driver path)."""
    import datetime as dt
    import re

    first = batch = None
    for line in log_path.read_text(errors="replace").splitlines():
        stamp = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} dblog ", line)  # after Spark's progress bar
        if stamp is None:
            continue
        line = line[stamp.start():]
        at = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        first = at if first is None else first
        found = re.search(r"micro-batch 0 to .*read ([\d.]+)s(?: in \d+ pieces)?, changelog commits ([\d.]+)s, "
                          r"current ([\d.]+)s", line)
        if found:
            batch = at - sum(float(x) for x in found.groups())
            break
    return None if batch is None else round(batch - first, 2)


def timed_tail(cmd: list[str], log_path: Path, timeout: float, max_rss: float) -> dict:
    """One process (``dblog tail ...``), sampled; stopped (SIGTERM, then SIGKILL, to its own process group)
    past ``timeout`` seconds or ``max_rss`` bytes. ``rows``: the sum of the ``rows`` map it prints;
    ``startup_s``: ``startup_seconds``."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with open(log_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                env=common.bench_env(), cwd=common.BENCH_DIR, start_new_session=True)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        stopped = None
        out_chunks: list[str] = []
        reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True)
        reader.start()
        while proc.poll() is None:
            elapsed = time.perf_counter() - started
            if elapsed > timeout or sampler.rss > max_rss:
                stopped = (f"stopped after {elapsed:.0f} s: " + (f"over {timeout:.0f} s" if elapsed > timeout else
                                                                   f"RSS {sampler.rss / 2**30:.1f} GiB"))
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                break
            time.sleep(0.1)
        seconds = time.perf_counter() - started
        reader.join(30)
        sampler.halt.set()
        sampler.join(5)
    result = {"seconds": round(seconds, 2), "returncode": proc.returncode, "load1_before": round(load, 2),
              "peak_processes": sampler.peak_procs,
              "peak_python_processes": sampler.peak_python, "peak_rss_mb": round(sampler.peak_rss / 2**20)}
    if stopped:
        result["not_finished"] = stopped
    elif proc.returncode != 0:
        result["not_finished"] = log_path.read_text(errors="replace").strip().splitlines()[-1:]
    else:
        text = "".join(out_chunks).strip()
        result["rows"] = sum(json.loads(text[text.find("{"):])["rows"].values())
    result["startup_s"] = startup_seconds(log_path)
    return result


def write_changes(server, tables: list[str], rows_per_table: int, changes: int) -> dict:
    """``changes`` row changes spread evenly over ``tables``: UPDATEs of at most 100 consecutive rows,
    round-robin over the tables (each statement one transaction)."""
    per_table = [changes // len(tables) + (i < changes % len(tables)) for i in range(len(tables))]
    conn = common.connect(server)
    started, statements = time.time(), 0
    with conn.cursor() as cur:
        cursor = [0] * len(tables)
        while any(per_table):
            for i, table in enumerate(tables):
                n = min(ROWS_PER_STATEMENT, per_table[i])
                if not n:
                    continue
                lo = cursor[i] % rows_per_table
                n = min(n, rows_per_table - lo)
                cur.execute(f"UPDATE {table} SET a = a + 1 WHERE id > %s AND id <= %s", (lo, lo + n))
                cursor[i] += n
                per_table[i] -= n
                statements += 1
    conn.close()
    return {"statements": statements, "seconds": round(time.time() - started, 2)}


PATHS = {"spark": "0", "driver": "100000"}  # the tail's --driver-catch-up-mb: the streaming query, the catch-up


def synthetic_tables(server, db: str, n: int, per_table: int) -> list[str]:
    """Database ``db`` with ``n`` synthetic tables of ``per_table`` rows; their names."""
    server.sql(f"CREATE DATABASE {db}")
    tables = [f"{db}.t{i:03d}" for i in range(n)]
    for table in tables:
        common.create_synthetic_table(server, table, per_table)
    return tables


def capture(server, db: str, state, sink, logs: Path, extra_plan: Sequence[str] = ()) -> dict:
    """``db``'s tables captured by pattern as a user would, one process per step: ``dblog plan --tables
    'DB.*'``, one ``dblog snapshot --batch I`` per batch (each a Spark application), ``dblog report``;
    returns the steps' wall times, the Spark applications and the chunks."""
    logs.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    plan = common.dblog(["plan", "--source", server.uri(), "--tables", f"{db}.*", "--state", str(state),
                         *extra_plan], logs / "plan.log")
    batches = plan.json()["batches"]
    steps = [plan.seconds]
    for batch in batches:
        steps.append(common.dblog(["snapshot", "--state", str(state), "--batch", str(batch["batch"]), "--sink",
                                   str(sink)], logs / f"snapshot-{batch['batch']}.log").seconds)
    report = common.dblog(["report", "--state", str(state)], logs / "report.log")
    steps.append(report.seconds)
    return {"seconds": round(sum(steps), 2), "load1_before": round(load, 2), "plan_s": round(steps[0], 2),
            "snapshot_s": round(sum(steps[1:-1]), 2), "report_s": round(steps[-1], 2),
            "spark_applications": len(batches), "chunks": sum(len(g["chunks"]) for b in batches
                                                              for g in b["groups"])}


def measure(server, work: Path, n: int, rows: int, changes: int, extra_plan: list[str], tail_timeout: float,
            max_rss: float, paths: tuple[str, ...] = ("spark",), s3_bucket: str | None = None) -> dict:
    db = f"n{n}"  # N = 0: the warm-up, one table
    per_table = rows // max(n, 1)
    tables = synthetic_tables(server, db, max(n, 1), per_table)
    state, sink, logs = work / f"state-{n}", work / f"sink-{n}", work / f"logs-{n}"
    checkpoint: list[str] = []
    if s3_bucket:  # state and lake on the S3 server; the tail's Spark checkpoint on local disk (it must be)
        state, sink = f"s3://{s3_bucket}/state-{n}", f"s3://{s3_bucket}/sink-{n}"
        checkpoint = ["--checkpoint", str(work / f"checkpoint-{n}")]
    common.log(f"N={n}: {n} tables of {per_table:,} rows")
    snapshot = capture(server, db, state, sink, logs, [*extra_plan, *checkpoint])
    batches = snapshot["spark_applications"]
    common.log(f"N={n}: plan+snapshot+report {snapshot['seconds']:.1f}s in {batches} Spark application(s)")
    out = {"tables": n, "rows_per_table": per_table, "rows": per_table * n, "changes": changes,
           "snapshot": snapshot}
    for path in paths:  # each path tails its own ``changes`` new changes
        written = write_changes(server, tables, per_table, changes)
        tail = timed_tail([common.DBLOG, "tail", "--state", str(state), "--sink", str(sink), "--available-now",
                           "--driver-catch-up-mb", PATHS[path], *checkpoint], logs / f"tail-{path}.log", tail_timeout,
                          max_rss)
        tail["writer"] = written
        if "rows" in tail:
            tail["ms_per_change"] = round(1000 * tail["seconds"] / changes, 3)
            if tail["rows"] != changes:
                tail["warning"] = f"the tail wrote {tail['rows']} rows for {changes} changes"
        common.log(f"N={n}: tail ({path}) {tail}")
        out["tail" if path == "spark" else f"tail_{path}"] = tail
    return out


def targets(results: dict[int, dict]) -> dict:
    out: dict = {}
    one, fifty = results.get(1), results.get(50)
    if one and fifty and "rows" in one.get("tail", {}) and "tail" in fifty:
        ratio = round(fifty["tail"]["seconds"] / one["tail"]["seconds"], 2) if "rows" in fifty["tail"] else None
        out["tail_50_vs_1"] = {"ratio": ratio, "target": TAIL_RATIO_TARGET,
                               "met": ratio is not None and ratio <= TAIL_RATIO_TARGET}
    two_hundred = results.get(200)
    for key, name in (("tail", "tail_200_vs_1"), ("tail_driver", "tail_driver_200_vs_1")):
        if one and two_hundred and "rows" in one.get(key, {}) and "rows" in two_hundred.get(key, {}):
            ratio = round(two_hundred[key]["seconds"] / one[key]["seconds"], 2)
            out[name] = {"ratio": ratio, "target": TAIL_RATIO_TARGET, "met": ratio <= TAIL_RATIO_TARGET}
    big = results.get(200)
    if big:
        apps = big["snapshot"]["spark_applications"]
        out["snapshot_200_tables_apps"] = {"applications": apps, "rows_per_table": big["rows_per_table"],
                                           "target": SNAPSHOT_APPS_TARGET, "met": apps <= SNAPSHOT_APPS_TARGET}
    return out


def _tail_cell(t: dict | None) -> str:
    if t is None:
        return "-"
    return f"{t['seconds']:.1f} s" if "rows" in t else f"not finished ({t['not_finished']})"


def table_text(results: dict[int, dict], checks: dict) -> str:
    lines = ["| tables | rows/table | plan+snapshot+report | Spark apps | tail (Spark) | of it start-up | per change | "
             "tail (in driver) | tail peak procs (python) | tail peak RSS | load1 before snapshot / tail |",
             "|" + "---:|" * 11]
    for n, r in sorted(results.items()):
        s = r["snapshot"]
        t = r.get("tail") or r.get("tail_driver") or {}  # --paths driver: the peaks are the driver's tail's
        per = f"{t['ms_per_change']:.2f} ms" if "rows" in t else "-"
        startup = f"{t['startup_s']:.1f} s" if t.get("startup_s") is not None else "-"
        lines.append(f"| {n} | {r['rows_per_table']:,} | {s['seconds']:.1f} s | {s['spark_applications']} | "
                     f"{_tail_cell(r.get('tail'))} | {startup} | {per} | {_tail_cell(r.get('tail_driver'))} | "
                     f"{t['peak_processes']} ({t['peak_python_processes']}) | {t['peak_rss_mb']:,} MB | "
                     f"{s['load1_before']:.1f} / {t['load1_before']:.1f} |")
    for name, check in checks.items():
        lines.append(f"{name}: {json.dumps(check)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,10,50,200", help="numbers of tables (default 1,10,50,200)")
    parser.add_argument("--rows", type=int, default=200_000, help="rows in all tables together (default 200000)")
    parser.add_argument("--changes", type=int, default=20_000, help="row changes after the snapshot (default 20000)")
    parser.add_argument("--chunk-size", type=int, help="dblog plan --chunk-size (default: dblog's)")
    parser.add_argument("--batch-size", type=int, help="dblog plan --batch-size (default: dblog's)")
    parser.add_argument("--tail-timeout", type=float, default=900, help="stop a tail after this many seconds")
    parser.add_argument("--max-tail-rss-gb", type=float, default=8.0,
                        help="stop a tail whose processes hold more memory than this (GiB)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the unrecorded warm-up capture (1 table of 1,000 rows, 100 changes: bytecode "
                             "caches and Spark's class-data archive, so N = 1 is not the one that pays for them)")
    parser.add_argument("--paths", default="spark",
                        help="tail paths, each with its own changes: spark (the streaming query, --driver-catch-up-mb "
                             "0), driver (the in-driver catch-up); default spark")
    parser.add_argument("--s3", action="store_true",
                        help="state and lake on a private SeaweedFS S3 server (tests/support/seaweedfs.py)")
    parser.add_argument("--code-rev", help="measure this git revision of airflow_provider_dblog (a baseline beside "
                                           "the working tree, exported under .bench/)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.code_rev:
        common.export_revision(args.code_rev)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    extra = [*(["--chunk-size", str(args.chunk_size)] if args.chunk_size else []),
             *(["--batch-size", str(args.batch_size)] if args.batch_size else [])]
    work, server = common.fresh_server("n-tables")
    info = common.server_info(server)
    results: dict[int, dict] = {}
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    s3 = None
    try:
        if args.s3:
            from tests.support.seaweedfs import SeaweedS3

            s3 = SeaweedS3(work / "s3").start()
            os.environ.update(s3.env())  # the dblog processes inherit them (common.bench_env)
        bucket = s3.bucket if s3 else None
        if not args.no_warmup:
            common.log("warm-up (not recorded)")
            measure(server, work, 0, 1000, 100, extra, args.tail_timeout, args.max_tail_rss_gb * 2**30,
                    s3_bucket=bucket)
        for n in sizes:
            results[n] = measure(server, work, n, args.rows, args.changes, extra, args.tail_timeout,
                                 args.max_tail_rss_gb * 2**30, tuple(args.paths.split(",")), bucket)
    finally:
        server.stop()
        if s3 is not None:
            s3.stop()
    checks = targets(results)
    common.log("\n" + table_text(results, checks))
    command = "python benchmarks/n_tables.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out = {"date": started, "command": command,
           "rows": args.rows, "changes": args.changes, "storage": "s3 (SeaweedFS)" if args.s3 else "local",
           "results": {str(n): r for n, r in results.items()},
           "targets": checks, "machine": common.machine_info(), "server": info,
           "code": common.code_version()}
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return out


if __name__ == "__main__":
    main()
