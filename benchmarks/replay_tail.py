"""The same whole-database tail replayed from a saved copy: this code against another revision (issue 27).

    python benchmarks/replay_tail.py [--tables 200] [--rows 200000] [--changes 20000] [--rounds 3]
                                     [--paths driver,spark] [--rev 6e16a99] [--out FILE]

Fresh-table runs (``n_tables.py``) vary by 1-3 s on this machine, more than a change to the per-table commit
work. Here both sides tail exactly the same binlog range into exactly the same lake: a private MariaDB, N
synthetic tables holding ``--rows`` rows in all, captured by pattern as ``n_tables.py`` does (``dblog plan`` /
``snapshot`` / ``report``), then ``--changes`` row changes spread over them (``n_tables.write_changes``);
state and lake are copied. Each round restores the copies and runs ``dblog tail --available-now`` once per side and path,
alternating sides: ``--driver-catch-up-mb 100000`` (in the driver) and ``0`` (the streaming query). The other
side runs ``--rev`` exported under .bench/ and put first on PYTHONPATH (``common.export_revision``).
Recorded per run: the whole process's wall time, and from the tail's own log the commit phases (in the driver
"commits Xs"; on Spark the micro-batch's read, changelog commits and ``current``). Prints JSON (also ``--out``).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

import common
import n_tables

PATHS = {"driver": "100000", "spark": "0"}
DRIVER = re.compile(r"caught up in the driver: .* in ([\d.]+)s \(read ([\d.]+)s, commits ([\d.]+)s")
SPARK = re.compile(r"micro-batch 0 to .*; read ([\d.]+)s.*, changelog commits ([\d.]+)s, current ([\d.]+)s")


def phases(path: str, log_text: str) -> dict:
    """The commit phases the tail logged (empty when the line is missing)."""
    if path == "driver":
        m = DRIVER.search(log_text)
        return {"caught_up_s": float(m.group(1)), "read_s": float(m.group(2)), "commits_s": float(m.group(3))} if m else {}
    m = SPARK.search(log_text)
    return {"read_s": float(m.group(1)), "changelog_s": float(m.group(2)), "current_s": float(m.group(3))} if m else {}


def capture(server, work: Path, tables: int, rows: int, changes: int) -> tuple[Path, Path]:
    """N tables captured (``n_tables.capture``) and changed; returns the saved copies of state and lake."""
    db, per_table = f"r{tables}", rows // tables
    names = n_tables.synthetic_tables(server, db, tables, per_table)
    state, sink = work / "state", work / "sink"
    n_tables.capture(server, db, state, sink, work / "logs")
    common.log(f"{tables} tables captured; writing {changes:,} changes")
    n_tables.write_changes(server, names, per_table, changes)
    saved_state, saved_sink = work / "saved-state", work / "saved-sink"
    shutil.copytree(state, saved_state)
    shutil.copytree(sink, saved_sink)
    return saved_state, saved_sink


def replay(work: Path, saved: tuple[Path, Path], path: str, pythonpath: str | None, tag: str) -> dict:
    state, sink = work / "state", work / "sink"
    for target, source in ((state, saved[0]), (sink, saved[1])):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
    common.CODE["pythonpath"] = pythonpath
    log_path = work / "logs" / f"tail-{path}-{tag}.log"
    run = common.dblog(["tail", "--state", str(state), "--sink", str(sink), "--available-now",
                        "--driver-catch-up-mb", PATHS[path]], log_path)
    return {"wall_s": round(run.seconds, 2), "load1_before": round(run.load_before, 2),
            **phases(path, log_path.read_text(errors="replace"))}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--rows", type=int, default=200_000, help="rows in all tables together")
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paths", default="driver,spark", help="driver, spark or both")
    parser.add_argument("--rev", default="HEAD~1", help="the revision to compare with (default HEAD~1)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    this = common.code_version()  # before the export, which points code_version at the other side
    commit, target = common.export_revision(args.rev)
    sides = {"this": None, commit[:12]: str(target)}
    work, server = common.fresh_server("replay-tail")
    results: dict = {path: {side: [] for side in sides} for path in args.paths.split(",")}
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    try:
        common.CODE["pythonpath"] = None  # the capture is made by this code
        saved = capture(server, work, args.tables, args.rows, args.changes)
        for k in range(args.rounds):
            order = list(sides.items()) if k % 2 == 0 else list(reversed(sides.items()))
            for path in results:
                for side, pythonpath in order:
                    run = replay(work, saved, path, pythonpath, f"{side}-{k}")
                    results[path][side].append(run)
                    common.log(f"round {k + 1}, {path}, {side}: {run}")
    finally:
        server.stop()
    summary = {path: {side: {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "load1_before"}
                      for side, runs in by_side.items() if runs}
               for path, by_side in results.items()}
    out = {"date": started, "command": "python benchmarks/replay_tail.py " + " ".join(sys.argv[1:] if argv is None
                                                                                      else argv),
           "tables": args.tables, "rows": args.rows, "changes": args.changes, "this": this, "baseline": commit[:12],
           "medians": summary, "runs": results, "machine": common.machine_info()}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return out


if __name__ == "__main__":
    main()
