"""Where the Spark session start of a dblog process goes, and what JVM options change it.

    .venv/bin/python benchmarks/session_start.py [--repeat 5] [--variant NAME=JAVA_OPTS ...]

Each sample is a fresh Python process (as `dblog run` is) that times: importing pyspark, the
spark-submit launcher + driver JVM start up to the Py4J gateway (``SparkContext._ensure_initialized``),
the JVM SparkContext / SparkSession (``local_session``'s settings), registering the binlog data source,
a first job with Python workers, ``spark.stop()``, and (measured from outside) the interpreter's exit.
Variants differ only in ``spark.driver.extraJavaOptions``; they run interleaved, and the table shows
medians and the ratio against the baseline of the same run (timings here are noisy).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, time
t0 = time.time()
out = {}
import pyspark.sql  # noqa
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession
out["import_pyspark"] = time.time() - t0
opts, stop, register = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
t = time.time()
conf = SparkConf().setMaster("local[2]").setAppName("session-start")
for k, v in [("spark.sql.session.timeZone", "UTC"), ("spark.sql.execution.arrow.pyspark.enabled", "true"),
             ("spark.sql.shuffle.partitions", "4"), ("spark.ui.enabled", "false"), ("spark.driver.memory", "2g"),
             ("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")]:
    conf.set(k, v)
if opts:
    conf.set("spark.driver.extraJavaOptions", opts)
SparkContext._ensure_initialized(conf=conf)
out["jvm_gateway"] = time.time() - t
t = time.time()
spark = SparkSession.builder.config(conf=conf).getOrCreate()
spark.sparkContext.setLogLevel("WARN")
out["spark_context"] = time.time() - t
if register:
    t = time.time()
    from airflow_provider_dblog.spark.change_source import ChangeDataSource
    spark.dataSource.register(ChangeDataSource)
    out["register_source"] = time.time() - t
t = time.time()
spark.sparkContext.parallelize(range(4), 2).map(lambda x: x + 1).collect()
out["first_python_job"] = time.time() - t
t = time.time()
spark.range(200000).selectExpr("sum(id * 2)").collect()
out["first_sql_job"] = time.time() - t
if stop:
    t = time.time()
    spark.stop()
    out["stop"] = time.time() - t
out["total_in_process"] = time.time() - t0
print("RESULT " + json.dumps(out), flush=True)
"""


def sample(opts: str, stop: bool, register: bool) -> dict:
    started = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, opts, "1" if stop else "0", "1" if register else "0"],
                          capture_output=True, text=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    ended = time.time()
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(proc.stderr[-2000:])
    out = json.loads(line[7:])
    out["whole_process"] = ended - started
    out["exit"] = out["whole_process"] - out["total_in_process"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=JAVA_OPTS (spark.driver.extraJavaOptions); the baseline has none")
    parser.add_argument("--no-stop", action="store_true", help="leave the session to the interpreter's exit")
    parser.add_argument("--register", action="store_true", help="also time registering the binlog data source")
    args = parser.parse_args()
    variants = [("baseline", "")] + [tuple(v.split("=", 1)) for v in args.variant]
    runs: dict[str, list[dict]] = {name: [] for name, _ in variants}
    for i in range(args.repeat):
        for name, opts in variants:
            runs[name].append(sample(opts, not args.no_stop, args.register))
            print(f"[{i + 1}/{args.repeat}] {name}: " + ", ".join(
                f"{k} {v:.2f}" for k, v in runs[name][-1].items()), file=sys.stderr, flush=True)
    keys = list(runs["baseline"][0])
    base = {k: statistics.median(r[k] for r in runs["baseline"]) for k in keys}
    print(f"median of {args.repeat} runs (seconds; ratio to baseline)")
    print("phase".ljust(18) + "".join(name.rjust(22) for name, _ in variants))
    for k in keys:
        cells = []
        for name, _ in variants:
            med = statistics.median(r[k] for r in runs[name])
            cells.append(f"{med:.2f}" + (f" ({med / base[k]:.2f}x)" if name != "baseline" and base[k] else ""))
        print(k.ljust(18) + "".join(c.rjust(22) for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
