"""dblog_tail: scheduled catch-up of the lake from the binlog, plus DBLog's health check.

* ``tail`` runs the Structured Streaming tail with ``--available-now``: it reads from its checkpoint
  to the source's current position and stops. ``max_active_runs=1`` (and a lock on the state
  directory taken by the application) keep a single writer appending at any time.
* ``maintain`` compacts, checkpoints and vacuums the lake's Delta tables after the tail.
* ``health_check`` fails the run when the source moved but no tail micro-batch committed for
  ``max_stall_seconds`` (default 30 min; keep it a few schedule intervals long). It runs beside the
  tail and judges the progress made up to now, so a tail that keeps failing or hangs is reported.
  It also logs a warning for a table whose binlog file the server may soon purge
  (``purge_warning_seconds`` / ``purge_warning_bytes``; docs/airflow.md), without failing.

With a detached ``--continuous`` tail instead (lower latency, see docs/airflow.md) set
``$DBLOG_TAIL_MODE=continuous`` for the DAG processor: this DAG then keeps only ``health_check``,
which watches the detached job.
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_dblog.airflow.dag_config import SPARK_CONN_ID, params, spark_conf, template
from airflow_provider_dblog.airflow.lake_events import lake_alias
from airflow_provider_dblog.airflow.operators import DblogMaintainOperator, DblogSparkSubmitOperator, tail_kwargs
from airflow_provider_dblog.airflow.sensors import DblogTailHealthSensor

with DAG(
    dag_id="dblog_tail",
    schedule=timedelta(minutes=int(os.environ.get("DBLOG_TAIL_EVERY_MINUTES", "10"))),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "cdc"],
    doc_md=__doc__,
    params=params("conn_id", "aws_conn_id", "state", "sink", "checkpoint", "schema_changes", "max_stall_seconds",
                  "purge_warning_seconds", "purge_warning_bytes"),
) as dag:
    maintain = DblogMaintainOperator(task_id="maintain", state_dir=template("state"), sink=template("sink"),
                                     aws_conn_id=template("aws_conn_id"))
    if os.environ.get("DBLOG_TAIL_MODE", "available_now") != "continuous":
        tail = DblogSparkSubmitOperator(
            task_id="tail",
            conn_id=SPARK_CONN_ID,
            conf=spark_conf(),
            dblog_conn_id=template("conn_id"),
        aws_conn_id=template("aws_conn_id"),
            execution_timeout=timedelta(hours=1),
            outlets=[lake_alias()],  # an asset event per lake table the tail advanced
            **tail_kwargs(template("state"), template("sink"), checkpoint=template("checkpoint"),
                          schema_changes=template("schema_changes")),
        )
        tail >> maintain
    DblogTailHealthSensor(
        task_id="health_check",
        dblog_conn_id=template("conn_id"),
        aws_conn_id=template("aws_conn_id"),
        state_dir=template("state"),
        checkpoint=template("checkpoint"),
        max_stall_seconds=template("max_stall_seconds"),
        purge_warning_seconds=template("purge_warning_seconds"),
        purge_warning_bytes=template("purge_warning_bytes"),
        poke_interval=30,
        timeout=600,
    )
