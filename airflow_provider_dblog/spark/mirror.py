"""The table's current state from its changelog, computed by Spark (see ``store.lake`` for the rule)."""
from __future__ import annotations

import logging
from pathlib import Path

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.spark.session import spark_session
from airflow_provider_dblog.store.lake import stream_dir, table_dir
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


def changelog(spark, sink: str, table: str):
    """Every changelog row of ``table``: snapshot chunks, committed stream output and driver catch-ups."""
    frames = []
    snap = table_dir(sink, table) / "snapshot"
    if snap.exists() and any(snap.glob("chunk-*.parquet")):
        frames.append(spark.read.parquet(str(snap)))
    stream = stream_dir(sink, table)
    if (stream / "_spark_metadata").exists():
        from pyspark.errors import AnalysisException

        try:
            frames.append(spark.read.parquet(str(stream)))
        except AnalysisException as exc:  # a query started but committed no file yet: nothing to add
            if "UNABLE_TO_INFER_SCHEMA" not in str(exc):
                raise
    catchup = table_dir(sink, table) / "catchup"
    if catchup.exists() and any(catchup.glob("*.parquet")):
        frames.append(spark.read.parquet(str(catchup)))
    if not frames:
        raise DblogError(f"no changelog for {table} under {sink}: run the snapshot first")
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame, allowMissingColumns=True)
    return result


def write_mirror(state_dir: str, sink: str, table: str, out: str, spark=None) -> dict:
    """The table's current state (see ``lake``): stream rows a later chunk snapshot supersedes are
    dropped, then per key the row with the greatest ``_pos`` wins; deletes drop the key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    state = StateDir(state_dir)
    meta = state.table(table).meta
    spark = spark_session("dblog-mirror", spark)
    hws = spark.createDataFrame([(int(c), r["hw_encoded"]) for c, r in state.reports(table).items()],
                                "_chunk int, _snapshot_hw string")
    rows = (changelog(spark, sink, table).join(F.broadcast(hws), "_chunk", "left")
            .where((F.col("_op") == "r") | F.col("_snapshot_hw").isNull() | (F.col("_pos") > F.col("_snapshot_hw"))))
    latest = Window.partitionBy(*[F.col(f"`{k}`") for k in meta.key_columns]).orderBy(F.col("_pos").desc())
    current = (rows.withColumn("_rank", F.row_number().over(latest)).where("_rank = 1")
               .where(F.col("_op") != "d"))
    columns = [F.col(f"`{c}`") for c in meta.column_names] + [F.col("_pos"), F.col("_op"), F.col("_ts_ms")]
    current.select(*columns).write.mode("overwrite").parquet(str(out))
    count = spark.read.parquet(str(out)).count()
    log.info("mirror of %s: %d rows in %s", table, count, out)
    return {"table": table, "rows": count, "out": str(Path(out))}

