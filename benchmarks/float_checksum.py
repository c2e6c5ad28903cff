"""The checksum of FLOAT/DOUBLE columns: their exact binary form in the row text (thirtieth session) against the
per-chunk sums it replaced (``SUM(c), SUM(ABS(c))`` beside the row text, compared within a tolerance).

A private MariaDB table of ``--rows`` rows ``(id INT, d1 DOUBLE, d2 DOUBLE, f FLOAT, note VARCHAR(20))``; the one
chunk's checksum query of each form, in MariaDB, best of ``--repeat`` runs alternating the order; and the lake's
side (``core.checksums.table_checksum`` against the sums over the same Arrow table). The figure that matters is
the ratio new / old on each side; results go to docs/benchmark-runs/REV-float-checksum-results.json.

    .venv/bin/python benchmarks/float_checksum.py --rows 1000000 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_DIR, ROOT, code_version, connect, log, machine_info, start_server  # noqa: E402

sys.path.insert(0, str(ROOT))
from airflow_provider_dblog.core.checksums import row_texts, table_checksum  # noqa: E402
from airflow_provider_dblog.source.mysql.checksum import float_sql  # noqa: E402

FLOATS = ("d1", "d2", "f")


def source_sql(exact: bool) -> str:
    """The chunk's checksum query: floats in the row text (``exact``), or summed beside it (the form before)."""
    values = [*(float_sql(f"`{c}`") for c in FLOATS if exact), "CAST(`id` AS CHAR)", "CONVERT(`note` USING utf8mb4)"]
    flags = "CONCAT(" + ", ".join(f"ISNULL(`{c}`)" for c in ("id", *FLOATS, "note")) + ")"
    sums = "" if exact else "".join(f", SUM(`{c}`), SUM(ABS(`{c}`))" for c in FLOATS)
    return (f"SELECT COUNT(*), SUM(CAST(CONV(LEFT(MD5(CONCAT_WS(CHAR(31), {', '.join([*values, flags])})), 16), 16, "
            f"10) AS UNSIGNED)){sums} FROM bench.floats")


def lake_old(table) -> None:
    """The lake's side before: the row text without floats, then two sums per float column."""
    import pyarrow.compute as pc

    from airflow_provider_dblog.core.checksums import exact_sum, row_hashes

    exact_sum(row_hashes(row_texts(table.drop_columns(list(FLOATS)), ["id", "note"])))
    for c in FLOATS:
        column = table.column(c).cast("float64")
        pc.sum(column), pc.sum(pc.abs(column))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    work = BENCH_DIR / "float-checksum"
    work.mkdir(parents=True, exist_ok=True)
    server = start_server(work / "mariadb")
    results = {"rows": args.rows, "machine": machine_info(), "code": code_version(), "source": {}, "lake": {}}
    try:
        conn = connect(server)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS bench")
            cur.execute("USE bench")
            cur.execute("DROP TABLE IF EXISTS bench.floats")
            cur.execute("CREATE TABLE bench.floats (id INT PRIMARY KEY, d1 DOUBLE, d2 DOUBLE, f FLOAT, note VARCHAR(20))")
            cur.execute(f"INSERT INTO bench.floats SELECT seq, seq / 7, RAND(seq) * 1e6, seq / 3, CONCAT('note ', seq) "
                        f"FROM seq_1_to_{args.rows}")
            conn.commit()
            times: dict[str, list[float]] = {"sums": [], "exact": []}
            for round_ in range(args.repeat):
                for form in (("sums", "exact") if round_ % 2 == 0 else ("exact", "sums")):
                    started = time.perf_counter()
                    cur.execute(source_sql(form == "exact"))
                    cur.fetchall()
                    times[form].append(time.perf_counter() - started)
            cur.execute("SELECT id, d1, d2, f, note FROM bench.floats")
            import pyarrow as pa

            rows = cur.fetchall()
        table = pa.table({"id": pa.array([r[0] for r in rows], pa.int32()),
                          "d1": pa.array([r[1] for r in rows], pa.float64()),
                          "d2": pa.array([r[2] for r in rows], pa.float64()),
                          "f": pa.array([r[3] for r in rows], pa.float32()),
                          "note": pa.array([r[4] for r in rows], pa.string())})
        results["source"] = {form: {"best_s": round(min(t), 3), "runs_s": [round(x, 3) for x in t]}
                             for form, t in times.items()}
        lake: dict[str, list[float]] = {"sums": [], "exact": []}
        for round_ in range(args.repeat):
            for form in (("sums", "exact") if round_ % 2 == 0 else ("exact", "sums")):
                started = time.perf_counter()
                if form == "exact":
                    table_checksum(table, ["id", *FLOATS, "note"])
                else:
                    lake_old(table)
                lake[form].append(time.perf_counter() - started)
        results["lake"] = {form: {"best_s": round(min(t), 3), "runs_s": [round(x, 3) for x in t]}
                           for form, t in lake.items()}
        for side in ("source", "lake"):
            results[side]["exact_over_sums"] = round(results[side]["exact"]["best_s"] / results[side]["sums"]["best_s"], 2)
            log(f"{side}: exact {results[side]['exact']['best_s']} s, sums {results[side]['sums']['best_s']} s "
                f"({results[side]['exact_over_sums']}x)")
    finally:
        server.stop()
    out = ROOT / "docs" / "benchmark-runs" / f"{results['code']['commit']}-float-checksum-results.json"
    out.write_text(json.dumps(results, indent=2))
    log(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
