"""Staleness of ``current`` on a large table: the key-range update against the old full MERGE (issue 27).

    python benchmarks/current_at_scale.py --rows 1000000,6000000 --seconds 60

No database and no Spark: the lake's own code on a local path. For each size a table of lineitem-like rows
(an int64 key and 10 columns, ~90 bytes of Arrow per row) is snapshotted into a lake by the chunk commits
a snapshot makes (``LakeTables.commit_chunk``: the first read of each chunk, ``--chunk-size`` rows, as
``dblog run`` writes it). The lake is then copied, one copy per variant, and a paced source of changes
runs against each copy in turn for ``--seconds``:

* ``skewed``: changes on recent keys (the common OLTP case): ``--insert-share`` of them insert new keys
  after the greatest one, the rest update a key ``Exp(--hot-mean)`` keys below the greatest (most updates
  hit the newest ~100k rows, a few reach far back);
* ``uniform``: updates of keys drawn uniformly from the whole table.

Changes arrive at ``--rate`` per second (wall clock). Like ``dblog tail --continuous --trigger-seconds 1``,
a micro-batch takes every change that arrived since the previous one, at most once a second; each batch is
appended to the changelog (``commit_stream(update_current=False)``) and ``current`` is brought up to date
(``update_current``), timed separately. A batch that takes longer than a second makes the next one bigger,
as in the tail. Staleness at a sample (every 0.5 s after ``--warmup`` seconds) = how long ago the newest
change ``current`` held at that moment arrived, as ``benchmarks/current_staleness.py`` defines it.

Variants: ``merge`` (``LakeTables.apply_mode = "merge"``: one delta-rs MERGE per update, the old path) and
``files`` (the key-range path: only files whose key range holds a changed key are read and rewritten).
Results as JSON lines on stdout and in ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from airflow_provider_dblog.core.positions import SourcePosition  # noqa: E402
from airflow_provider_dblog.store.lake import changelog_schema, snapshot_rows  # noqa: E402
from airflow_provider_dblog.store.lake_tables import LakeTables  # noqa: E402

SOURCE = pa.schema([
    pa.field("id", pa.int64(), False), pa.field("partkey", pa.int64()), pa.field("suppkey", pa.int32()),
    pa.field("quantity", pa.float64()), pa.field("price", pa.float64()), pa.field("flag", pa.string()),
    pa.field("status", pa.string()), pa.field("shipdate", pa.date32()), pa.field("mode", pa.string()),
    pa.field("version", pa.int64()), pa.field("comment", pa.string())])
TABLE = "bench.items"
MODES = ("skewed", "uniform")


def _pos(offset: int) -> SourcePosition:
    return SourcePosition.at("mysql-bin.000001", offset)


def _rows(ids: np.ndarray, version: int, rnd: np.random.Generator) -> pa.Table:
    n = len(ids)
    words = np.array(["quickly", "final", "deposits", "regular", "ironic", "furiously", "pending", "blithely"])
    comment = [" ".join(w) for w in words[rnd.integers(0, len(words), (n, 4))]] if n < 100_000 else \
        np.char.add(np.char.add(words[rnd.integers(0, 8, n)], " accounts "), words[rnd.integers(0, 8, n)]).tolist()
    return pa.table({
        "id": pa.array(ids, pa.int64()), "partkey": pa.array(rnd.integers(1, 200_000, n), pa.int64()),
        "suppkey": pa.array(rnd.integers(1, 10_000, n, dtype=np.int32), pa.int32()),
        "quantity": pa.array(rnd.integers(1, 50, n).astype(np.float64)),
        "price": pa.array(rnd.integers(100, 10_000_000, n) / 100.0),
        "flag": pa.array(np.array(["A", "N", "R"])[rnd.integers(0, 3, n)]),
        "status": pa.array(np.array(["O", "F"])[rnd.integers(0, 2, n)]),
        "shipdate": pa.array(rnd.integers(8000, 10500, n, dtype=np.int32), pa.int32()).cast(pa.date32()),
        "mode": pa.array(np.array(["AIR", "RAIL", "SHIP", "TRUCK", "MAIL"])[rnd.integers(0, 5, n)]),
        "version": pa.array(np.full(n, version), pa.int64()), "comment": pa.array(comment, pa.string())},
        schema=SOURCE)


def build(sink: Path, rows: int, chunk_size: int) -> int:
    """Snapshot ``rows`` rows in chunks of ``chunk_size`` (HW of chunk i at offset 1000 + i); returns the
    chunk count."""
    lake = LakeTables(str(sink), TABLE, SOURCE, ["id"])
    rnd = np.random.default_rng(1)
    chunks = -(-rows // chunk_size)
    for c in range(chunks):
        ids = np.arange(c * chunk_size, min(rows, (c + 1) * chunk_size), dtype=np.int64)
        hw = _pos(1000 + c)
        lake.commit_chunk(c, hw, snapshot_rows(_rows(ids, 0, rnd), hw.as_snapshot().encode(), c, 0, SOURCE))
    lake.mark_current(_pos(1000 + chunks))  # the tail starts after the last chunk's HW
    return chunks


def change_rows(ids: np.ndarray, inserts: np.ndarray, first: int, chunk_size: int, chunks: int,
                rnd: np.random.Generator) -> pa.Table:
    """Changelog rows: updates of ``ids`` then inserts of ``inserts``, positions from ``first`` on."""
    keys = np.concatenate([ids, inserts]).astype(np.int64)
    data = _rows(keys, first, rnd)
    n = len(keys)
    schema = changelog_schema(SOURCE)
    ops = np.array(["u"] * len(ids) + ["c"] * len(inserts))
    return pa.Table.from_arrays([*data.columns,
                                 pa.array(ops), pa.array([_pos(first + i).encode() for i in range(n)], pa.string()),
                                 pa.array(np.full(n, int(time.time() * 1000)), pa.int64()),
                                 pa.array(np.where(ops == "c", "+I", "+U")),
                                 pa.array(np.minimum(keys // chunk_size, chunks - 1), pa.int32()),
                                 pa.nulls(n, schema.field("_before").type)], schema=schema)


def run(sink: Path, mode: str, apply_mode: str, rows: int, chunks: int, chunk_size: int, rate: float,
        seconds: float, warmup: float, hot_mean: float, insert_share: float) -> dict:
    lake = LakeTables(str(sink), TABLE, SOURCE, ["id"])
    lake.apply_mode = apply_mode
    lake.memory_bytes = 1 << 40  # the in-memory path in both variants (a micro-batch of a few thousand changes)
    rnd = np.random.default_rng(7)
    top, offset = rows, 1000 + chunks + 1
    commits: list[tuple[float, float]] = []  # (when current held it, arrival of the newest change it holds)
    batches = []
    started = time.time()
    emitted = 0
    next_trigger = started
    while True:
        now = time.time()
        if now < next_trigger:
            time.sleep(next_trigger - now)
            now = time.time()
        if now - started >= seconds:
            break
        due = int((now - started) * rate) - emitted
        if due <= 0:
            next_trigger = now + 0.05
            continue
        arrival = started + (emitted + due) / rate
        inserts = int(round(due * insert_share)) if mode == "skewed" else 0
        if mode == "skewed":
            back = np.minimum(rnd.exponential(hot_mean, due - inserts).astype(np.int64), top - 1)
            ids = top - 1 - back
        else:
            ids = rnd.integers(0, top, due - inserts)
        new = np.arange(top, top + inserts)
        top += inserts
        batch = change_rows(ids, new, offset, chunk_size, chunks, rnd)
        offset += due
        end = _pos(offset)
        offset += 1
        t0 = time.time()
        lake.commit_stream(batch, end, update_current=False)
        t1 = time.time()
        lake.update_current(end)
        t2 = time.time()
        emitted += due
        commits.append((t2, arrival))
        batches.append({"changes": due, "changelog_s": round(t1 - t0, 3), "current_s": round(t2 - t1, 3),
                        "files_rewritten": lake.rewritten[0] if apply_mode == "files" else None,
                        "rows_written": lake.rewritten[1] if apply_mode == "files" else None})
        next_trigger = t0 + 1.0
    staleness = []
    t = started + warmup
    while t <= started + seconds:
        held = [a for done, a in commits if done <= t]
        staleness.append(t - held[-1] if held else t - started)
        t += 0.5
    staleness.sort()
    current_s = sorted(b["current_s"] for b in batches[1:] or batches)

    def pct(values, q):
        return round(float(np.percentile(values, q * 100)), 2) if values else None
    return {"rows": rows, "chunks": chunks, "workload": mode, "variant": apply_mode, "rate": rate,
            "seconds": seconds, "changes": emitted, "batches": len(batches),
            "changes_per_batch_mean": round(emitted / max(1, len(batches)), 1),
            "staleness_p50_s": pct(staleness, 0.5), "staleness_p99_s": pct(staleness, 0.99),
            "staleness_max_s": round(max(staleness), 2) if staleness else None,
            "current_update_p50_s": pct(current_s, 0.5), "current_update_p99_s": pct(current_s, 0.99),
            "changelog_p50_s": pct(sorted(b["changelog_s"] for b in batches), 0.5),
            "files_rewritten_mean": (round(float(np.mean([b["files_rewritten"] for b in batches[1:]])), 1)
                                     if apply_mode == "files" and len(batches) > 1 else None),
            "rows_written_mean": (int(np.mean([b["rows_written"] for b in batches[1:]]))
                                  if apply_mode == "files" and len(batches) > 1 else None),
            "files_in_current": len(lake.current().file_uris()),
            "first_batch": batches[0] if batches else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1000000,6000000")
    parser.add_argument("--chunk-size", type=int, default=375_076)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--uniform-seconds", type=float, default=None,
                        help="how long the uniform workload runs (default --seconds): a batch of it may take a minute")
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--hot-mean", type=float, default=50_000)
    parser.add_argument("--insert-share", type=float, default=0.25)
    parser.add_argument("--workloads", default=",".join(MODES))
    parser.add_argument("--variants", default="merge,files")
    parser.add_argument("--work", default=os.environ.get("DBLOG_BENCH_DIR", str(HERE.parent / ".bench")) + "/current-at-scale")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    work = Path(args.work)
    results = []
    for rows in (int(r) for r in args.rows.split(",")):
        base = work / f"base-{rows}"
        shutil.rmtree(work, ignore_errors=True)
        t0 = time.time()
        chunks = build(base, rows, args.chunk_size)
        print(f"built {rows} rows in {chunks} chunks in {time.time() - t0:.1f}s", file=sys.stderr, flush=True)
        for workload in args.workloads.split(","):
            for variant in args.variants.split(","):
                sink = work / f"{rows}-{workload}-{variant}"  # a new path: LakeTables caches tables by URI
                shutil.rmtree(sink, ignore_errors=True)
                shutil.copytree(base, sink)
                seconds = args.uniform_seconds if workload == "uniform" and args.uniform_seconds else args.seconds
                result = run(sink, workload, variant, rows, chunks, args.chunk_size, args.rate, seconds,
                             args.warmup, args.hot_mean, args.insert_share)
                results.append(result)
                print(json.dumps(result), flush=True)
                shutil.rmtree(sink, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
