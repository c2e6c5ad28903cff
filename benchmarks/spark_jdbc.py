"""(b) what a Spark user writes: Spark's JDBC source with partitionColumn -> Spark's Parquet writer.

    python benchmarks/spark_jdbc.py --url jdbc:mysql://127.0.0.1:PORT/tpch --user root --table orders \
        --partition-column o_orderkey --partitions 4 --jar /usr/share/java/mariadb-java-client.jar --out DIR

The bounds come from a MIN/MAX query over JDBC (as a user would do it), inside the timed process.
Spark settings: ``--conf`` (the harness passes ``common.SPARK_SETTINGS``, as to the Airflow path's
spark-submit), local[2], UTC. Prints {"job_s"} as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="")
    parser.add_argument("--table", required=True)
    parser.add_argument("--partition-column", required=True)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--fetchsize", type=int, default=10_000)
    parser.add_argument("--jar", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", required=True)
    parser.add_argument("--conf", action="append", default=[], help="KEY=VALUE, a Spark setting")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(args.master).appName("bench-spark-jdbc")
               .config("spark.jars", args.jar).config("spark.sql.session.timeZone", "UTC"))
    for setting in args.conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    started = time.perf_counter()
    props = {"user": args.user, "password": args.password, "driver": "org.mariadb.jdbc.Driver"}
    if args.fetchsize:
        props["fetchsize"] = str(args.fetchsize)
    col = args.partition_column
    bounds = spark.read.jdbc(args.url, f"(SELECT MIN({col}) AS lo, MAX({col}) AS hi FROM {args.table}) b",
                             properties=props).first()
    frame = spark.read.jdbc(args.url, args.table, column=col, lowerBound=int(bounds["lo"]),
                            upperBound=int(bounds["hi"]) + 1, numPartitions=args.partitions, properties=props)
    frame.write.mode("overwrite").parquet(args.out)
    job_s = time.perf_counter() - started
    spark.stop()
    print(json.dumps({"job_s": round(job_s, 3)}))  # the harness counts the rows in the Parquet footers


if __name__ == "__main__":
    main()
