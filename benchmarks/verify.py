"""Checksum verify against the row-by-row compare and against reading the table once (issue 25).

On TPC-H (orders, lineitem) in a private MariaDB, after `dblog run` captured each table:

* `dblog verify --table T`          chunk checksums inside the database vs `current` (the product);
* `dblog verify --table T --rows`   the row-by-row, column-by-column compare (the baseline);
* `mariadb --quick` and connectorx  reading the table once with the fastest clients here (what any
                                    compare that moves rows pays at least, on the source side alone).

Best of ``--repeat`` runs of each whole process, in the same script, alternating the order. The target:
checksum verify >= 3x the row compare. Results go to docs/benchmark-runs/REV-verify-results.json.

    .venv/bin/python benchmarks/verify.py --scale 1 --repeat 2
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BENCH_DIR, ROOT, code_version, cx_scan, dblog, dblog_run, generate, load_tpch, log, machine_info, mariadb_quick,
    scale_tag, start_server,
)

CHUNK_SIZE = {"orders": 100_000, "lineitem": 250_000}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tables", default="orders,lineitem")
    parser.add_argument("--skip-rows", action="store_true", help="leave out the row compare (memory-bound)")
    args = parser.parse_args(argv)
    tables = args.tables.split(",")
    work = BENCH_DIR / f"verify-{scale_tag(args.scale)}"
    work.mkdir(parents=True, exist_ok=True)
    server = start_server(work / "mariadb")
    results = {"scale": args.scale, "machine": machine_info(), "code": code_version(), "tables": {}}
    try:
        loaded = load_tpch(server, generate(args.scale, tables=tables))
        for table in tables:
            state, sink = work / f"{table}-state", work / f"{table}-lake"
            shutil.rmtree(state, ignore_errors=True)
            shutil.rmtree(sink, ignore_errors=True)
            captured = dblog_run(server, f"tpch.{table}", state, sink, CHUNK_SIZE[table])
            log(f"captured tpch.{table} ({loaded[table]['rows']} rows) in {captured.seconds:.1f}s")
            runs: dict[str, list[float]] = {"checksum": [], "rows": [], "mariadb_quick": [], "connectorx": []}
            verify = ["verify", "--state", str(state), "--sink", str(sink), "--table", f"tpch.{table}"]
            for round_ in range(args.repeat):
                order = ["checksum", "rows", "read"] if round_ % 2 == 0 else ["read", "rows", "checksum"]
                for what in order:
                    if what == "checksum":
                        timed = dblog(verify, work / f"{table}-checksum.log")
                        runs["checksum"].append(timed.seconds)
                    elif what == "rows" and not args.skip_rows:
                        timed = dblog([*verify, "--rows"], work / f"{table}-rows.log", check=False)
                        runs["rows"].append(timed.seconds if timed.returncode == 0 else float("nan"))
                    elif what == "read":
                        runs["mariadb_quick"].append(mariadb_quick(server, table).seconds)
                        runs["connectorx"].append(cx_scan(server, table, work / f"{table}-cx.parquet", 2).seconds)
                    log(f"{table} round {round_ + 1}: {what} done")
            best = {k: min(v) for k, v in runs.items() if v}
            ratios = {f"checksum_vs_{k}": round(best[k] / best["checksum"], 2) for k in best if k != "checksum"}
            results["tables"][table] = {"rows": loaded[table]["rows"], "runs": runs, "best": best,
                                        "ratios": ratios}
            log(f"{table}: best {best}; ratios {ratios}")
    finally:
        server.stop()
    out = ROOT / "docs" / "benchmark-runs" / f"{results['code'].get('commit', 'local')}-verify-results.json"
    out.write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps({t: r["ratios"] | {"best": r["best"]} for t, r in results["tables"].items()}, indent=1))
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
