"""A tail's commit cost over its life: does it grow with the table's Delta log? (issue 27)

    python benchmarks/commit_cost.py [--batches 400] [--rounds 2] [--out FILE]

No database and no Spark: the lake's own code on a local path, driven as a continuous tail drives it. A
table of 1,000 rows (one chunk, ``LakeTables.commit_chunk``) takes ``--batches`` micro-batches of 100
updates each (``commit_stream``: the changelog append, then ``current`` brought up to date), each timed
(wall clock). Every micro-batch adds a version to both Delta tables, so a tail that runs for a day with a
one-second trigger adds 86,400 to each table it changes.

Two variants, each on its own lake, the same batches:

* ``interval-100``: both tables created with Delta's default checkpoint interval of 100 commits (what dblog
  created before; ``delta.checkpointInterval`` = 100);
* ``interval-10``: as dblog creates them now (``lake_tables.CHECKPOINT_INTERVAL``).

Per variant: the mean and p95 micro-batch commit over the first 20 batches and over the last 100, their
ratio (the growth), and the cost of opening both tables at the end (what a scheduled ``--available-now``
tail pays per table at its start). The baseline sits beside the change in the same run; the order of the
variants alternates between rounds and the best round counts. JSON on stdout (and ``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from airflow_provider_dblog.core.events import ChangeEvent  # noqa: E402
from airflow_provider_dblog.core.positions import SourcePosition  # noqa: E402
from airflow_provider_dblog.store import lake_tables  # noqa: E402
from airflow_provider_dblog.store.lake import changelog_schema, current_schema, event_rows, snapshot_rows  # noqa: E402

SOURCE = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.int64()), pa.field("note", pa.string())])
ROWS, CHANGES = 1000, 100
VARIANTS = {"interval-100": 100, "interval-10": lake_tables.CHECKPOINT_INTERVAL}


def _pos(offset: int) -> SourcePosition:
    return SourcePosition.at("mysql-bin.000001", offset)


def _batch(index: int) -> tuple[pa.Table, SourcePosition]:
    """Micro-batch ``index``: 100 updates of consecutive keys, at positions after the previous batch."""
    base = 10_000 + index * 1000
    events = []
    for j in range(CHANGES):
        key = (index * CHANGES + j) % ROWS
        row = {"id": key, "v": index, "note": f"batch {index}"}
        events.append(ChangeEvent("db.t", "u", _pos(base + j * 5), (key,), row, {**row, "v": index - 1}))
    return event_rows(events, [0] * len(events), SOURCE), _pos(base + 999)


def _create(sink: Path, interval: int) -> lake_tables.LakeTables:
    """The table's lake, both Delta tables created with ``interval``, its chunk read."""
    from deltalake import DeltaTable

    properties = {"delta.checkpointInterval": str(interval)}
    DeltaTable.create(str(sink / "db.t" / "changelog"), changelog_schema(SOURCE), configuration=properties)
    DeltaTable.create(str(sink / "db.t" / "current"), current_schema(SOURCE), partition_by=["_chunk"],
                      configuration=properties)
    lake = lake_tables.LakeTables(str(sink), "db.t", SOURCE, ["id"])
    keys = pa.table({"id": pa.array(range(ROWS), pa.int64()), "v": pa.array([0] * ROWS, pa.int64()),
                     "note": pa.array(["snapshot"] * ROWS)})
    lake.commit_chunk(0, _pos(100), snapshot_rows(keys, _pos(100).as_snapshot().encode(), 0, 0, SOURCE))
    return lake


def _summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"mean_ms": round(1000 * sum(values) / len(values), 2),
            "p95_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2)}


def run(work: Path, variant: str, batches: int) -> dict:
    from deltalake import DeltaTable

    sink = work / variant
    shutil.rmtree(sink, ignore_errors=True)
    lake = _create(sink, VARIANTS[variant])
    times = []
    for index in range(batches):
        rows, end = _batch(index)
        started = time.perf_counter()
        lake.commit_stream(rows, end)
        times.append(time.perf_counter() - started)
    current = {r["id"]: r["v"] for r in lake.read_current(["id", "v"]).to_pylist()}
    last = {(i * CHANGES + j) % ROWS: i for i in range(batches) for j in range(CHANGES)}
    assert current == {k: last.get(k, 0) for k in range(ROWS)}, "current differs from the changes"
    started = time.perf_counter()
    for _ in range(20):
        DeltaTable(lake.changelog_uri), DeltaTable(lake.current_uri)
    opening = (time.perf_counter() - started) / 20
    first, tail = _summary(times[:20]), _summary(times[-100:])
    log_files = len(os.listdir(Path(lake.changelog_uri) / "_delta_log"))
    return {"variant": variant, "batches": batches, "first_20": first, "last_100": tail,
            "growth": round(tail["mean_ms"] / first["mean_ms"], 2), "open_both_ms": round(1000 * opening, 2),
            "changelog_log_files": log_files}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", default=os.environ.get("DBLOG_BENCH_DIR", str(HERE.parent / ".bench")) + "/commit-cost")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    work = Path(args.work)
    rounds = []
    for r in range(args.rounds):
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
        rounds.append({v: run(work / f"round-{r}", v, args.batches) for v in order})
        print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    best = {v: min((r[v] for r in rounds), key=lambda x: x["last_100"]["mean_ms"]) for v in VARIANTS}
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
           "command": "python benchmarks/commit_cost.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "best": best, "rounds": rounds,
           "last_100_vs_baseline": round(best["interval-10"]["last_100"]["mean_ms"]
                                         / best["interval-100"]["last_100"]["mean_ms"], 2)}
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    main()
