"""One UPDATE of every row of TPC-H ``lineitem`` (6,001,215 rows at SF1) in one transaction, tailed with a
2 GB Spark driver (issue 25, bounded memory).

In a private MariaDB, after `dblog run` captured ``tpch.lineitem``:

1. ``UPDATE tpch.lineitem SET l_comment = ...`` (one transaction, every row);
2. ``dblog tail --available-now --driver-catch-up-mb 0`` with ``DBLOG_SPARK_DRIVER_MEMORY=2g`` and the
   default ``--batch-memory-mb 256`` (the product: the decoding tasks stage the transaction as files, one
   changelog commit adds them, ``current`` is rewritten chunk by chunk);
3. ``dblog verify`` (checksums): the lake equals the source;
4. with ``--baseline``: the same with ``--batch-memory-mb 100000`` (every change through the driver's
   memory, as before staging), on a second UPDATE.

Peak resident memory of the tail's process tree is sampled every 0.2 s: the Python driver, the Spark JVM
and the Python workers, each kind's peak and the peak of their sum. Results go to
docs/benchmark-runs/REV-huge-transaction-results.json.

    .venv/bin/python benchmarks/huge_transaction.py --scale 1 --baseline
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BENCH_DIR, DBLOG, ROOT, bench_env, code_version, dblog, dblog_run, generate, load_tpch, log, machine_info,
    scale_tag, start_server,
)

PAGE = 4096


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _kind(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "java" in cmd.split(" ")[0]:
        return "jvm"
    return "python_workers" if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd or "worker" in cmd else "other"


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


class TreeMemory(threading.Thread):
    """Peak RSS of a process and its descendants, by kind (the root is the Python driver)."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.peaks, self.total, self.stopped = root, {}, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            sizes: dict[str, int] = {"python_driver": _rss(self.root)}
            todo = _children(self.root)
            while todo:
                pid = todo.pop()
                kind = _kind(pid)
                sizes[kind] = sizes.get(kind, 0) + _rss(pid)
                todo += _children(pid)
            for kind, size in sizes.items():
                self.peaks[kind] = max(self.peaks.get(kind, 0), size)
            self.total = max(self.total, sum(sizes.values()))
            time.sleep(0.2)

    def result(self) -> dict:
        return {"peak_mb": {k: round(v / 2**20) for k, v in sorted(self.peaks.items())},
                "peak_sum_mb": round(self.total / 2**20)}


def tail(state: Path, sink: Path, memory_mb: float, log_path: Path, timeout: float) -> dict:
    env = bench_env({"DBLOG_SPARK_DRIVER_MEMORY": "2g"})
    cmd = [DBLOG, "tail", "--state", str(state), "--sink", str(sink), "--available-now", "--driver-catch-up-mb", "0",
           "--batch-memory-mb", str(memory_mb)]
    with open(log_path, "w") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True, cwd=BENCH_DIR)
        memory = TreeMemory(proc.pid)
        memory.start()
        try:
            out, _ = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, code = "", "timeout"
        seconds = time.perf_counter() - started
        memory.stopped.set()
        memory.join()
    lines = [line for line in log_path.read_text(errors="replace").splitlines()
             if "chunk by chunk" in line or "micro-batch" in line or "error" in line.lower()]
    return {"batch_memory_mb": memory_mb, "seconds": round(seconds, 1), "exit": code, **memory.result(),
            "log": lines[-6:], "summary": out.strip()[-500:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--baseline", action="store_true", help="also tail with every change in memory")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args(argv)
    work = BENCH_DIR / f"huge-transaction-{scale_tag(args.scale)}"
    work.mkdir(parents=True, exist_ok=True)
    server = start_server(work / "mariadb")
    results = {"scale": args.scale, "machine": machine_info(), "code": code_version(), "runs": []}
    try:
        loaded = load_tpch(server, generate(args.scale, tables=("lineitem",)))
        results["rows"] = loaded["lineitem"]["rows"]
        state, sink = work / "state", work / "lake"
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(sink, ignore_errors=True)
        captured = dblog_run(server, "tpch.lineitem", state, sink, 250_000)
        log(f"captured tpch.lineitem ({results['rows']} rows) in {captured.seconds:.1f}s")
        variants = [256.0] + ([100_000.0] if args.baseline else [])
        for i, memory_mb in enumerate(variants):
            started = time.perf_counter()
            server.sql(f"UPDATE tpch.lineitem SET l_comment = CONCAT('{i}', SUBSTRING(l_comment, 2))")
            update = time.perf_counter() - started
            log(f"UPDATE of every row in {update:.1f}s; tailing with --batch-memory-mb {memory_mb}")
            run = tail(state, sink, memory_mb, work / f"tail-{int(memory_mb)}.log", args.timeout)
            run["update_seconds"] = round(update, 1)
            if run["exit"] == 0:
                verify = dblog(["verify", "--state", str(state), "--sink", str(sink), "--table", "tpch.lineitem"],
                               work / f"verify-{int(memory_mb)}.log", check=False)
                run["verify"] = {"exit": verify.returncode, "seconds": round(verify.seconds, 1),
                                 "result": verify.stdout.strip()[-300:]}
            results["runs"].append(run)
            log(json.dumps(run))
            if run["exit"] != 0:
                break
    finally:
        server.stop()
    out = ROOT / "docs" / "benchmark-runs" / f"{results['code'].get('commit', 'local')}-huge-transaction-results.json"
    out.write_text(json.dumps(results, indent=1, default=str))
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
