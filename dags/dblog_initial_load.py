"""dblog_initial_load: plan -> one mapped Spark application per chunk batch -> report -> tail.

* ``plan`` (ChunkPlannerOperator) splits the tables into primary-key chunks and returns one kwargs
  dict per batch of chunks;
* ``snapshot`` (DblogSparkSubmitOperator mapped with ``expand_kwargs``) reads each batch's chunks in
  watermark windows on Spark executors; the UI names each mapped instance by table, chunk ids and
  key range (a batch packs chunks of several small tables: "12 tables, 14 chunks: shop.a, ...");
* ``report`` checks every chunk reported and builds the binlog-split offset map (XCom: a summary);
* ``follow_binlog`` skips the tail when the ``startup`` param is ``snapshot-only``; with ``latest``,
  ``position:...``, ``gtid:...`` or ``timestamp:...`` the plan returns no batch (``snapshot`` is skipped)
  and the tables stream from that position (docs/startup-modes.md);
* ``tail`` catches the lake up to the source's current binlog position (``--available-now``); the
  ``dblog_tail`` DAG keeps it current afterwards (or run a detached ``--continuous`` tail, see
  docs/airflow.md).

Repair: clear one mapped ``snapshot`` instance (UI, or ``POST /api/v2/dags/dblog_initial_load/
clearTaskInstances`` with ``"task_ids": [["snapshot", MAP_INDEX]], "dry_run": false,
"only_failed": false``): its next try re-reads exactly that batch's chunks with ``--force``.
Clearing the instance alone is enough; report and tail need not run again.

Configuration: params, else Variables ``dblog_*``, else ``$DBLOG_*`` (see dag_config).
"""
from __future__ import annotations

from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import DAG

from airflow_provider_dblog.airflow.dag_config import SPARK_CONN_ID, params, spark_conf, template
from airflow_provider_dblog.airflow.lake_events import lake_alias
from airflow_provider_dblog.airflow.operators import (
    ChunkPlannerOperator, DblogReportOperator, DblogSparkSubmitOperator, follows_binlog, tail_kwargs,
)

with DAG(
    dag_id="dblog_initial_load",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "cdc"],
    doc_md=__doc__,
    params=params("conn_id", "aws_conn_id", "state", "sink", "checkpoint", "tables", "exclude", "chunk_size",
                  "batch_size", "batch_rows", "startup", "schema_changes"),
) as dag:
    plan = ChunkPlannerOperator(
        task_id="plan",
        dblog_conn_id=template("conn_id"),
        aws_conn_id=template("aws_conn_id"),
        tables=template("tables"),
        exclude=template("exclude"),
        state_dir=template("state"),
        sink=template("sink"),
        chunk_size=template("chunk_size"),
        batch_size=template("batch_size"),
        batch_rows=template("batch_rows"),
        startup=template("startup"),
        checkpoint=template("checkpoint"),  # the tail's: an s3:// state without one fails here, not after the load
    )
    snapshot = DblogSparkSubmitOperator.partial(
        task_id="snapshot",
        conn_id=SPARK_CONN_ID,
        conf=spark_conf(),
        dblog_conn_id=template("conn_id"),
        aws_conn_id=template("aws_conn_id"),
        map_index_template="{{ task.batch_label }}",
        outlets=[lake_alias()],  # an asset event per lake table the batch advanced
    ).expand_kwargs(plan.output)
    # none_failed: a startup mode without a snapshot maps no batch, and the skipped snapshot must not skip this
    report = DblogReportOperator(task_id="report", state_dir=template("state"), aws_conn_id=template("aws_conn_id"),
                                 trigger_rule="none_failed")
    follow = ShortCircuitOperator(task_id="follow_binlog", python_callable=follows_binlog,
                                  op_args=[template("startup")])
    tail = DblogSparkSubmitOperator(
        task_id="tail",
        conn_id=SPARK_CONN_ID,
        conf=spark_conf(),
        dblog_conn_id=template("conn_id"),
        aws_conn_id=template("aws_conn_id"),
        outlets=[lake_alias()],  # an asset event per lake table the tail advanced
        **tail_kwargs(template("state"), template("sink"), checkpoint=template("checkpoint"),
                      schema_changes=template("schema_changes")),
    )
    plan >> snapshot >> report >> follow >> tail
