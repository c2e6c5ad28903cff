"""dblog_verify: is the lake equal to the source? Chunk checksums, on a schedule, while the tail runs.

* ``verify`` (DblogVerifyOperator) computes every chunk's checksum inside the database at an exact binlog
  position (no rows leave the server) and compares it with the lake's ``current`` brought to that same
  position (docs/verify.md). Equal: done. Different and ``repair`` off (the default): the task fails,
  naming the drifted chunks of each table. With ``repair`` on, it hands the drifted chunks to
* ``repair``: one Spark application per batch holding a drifted chunk re-reads exactly those chunks
  (``snapshot --force --chunks ...``, as ``dblog_resnapshot`` does), while the tail keeps running;
* ``verify_after_repair`` checks the tables again and fails if anything still differs.

``tables``: captured tables to check, names or globs (empty: all of them).
Configuration: params, else Variables ``dblog_*``, else ``$DBLOG_*`` (see dag_config).
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_dblog.airflow.dag_config import SPARK_CONN_ID, params, spark_conf, template
from airflow_provider_dblog.airflow.lake_events import lake_alias
from airflow_provider_dblog.airflow.operators import DblogSparkSubmitOperator, DblogVerifyOperator

with DAG(
    dag_id="dblog_verify",
    schedule=timedelta(hours=float(os.environ.get("DBLOG_VERIFY_EVERY_HOURS", "24"))),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["dblog", "cdc", "verify"],
    doc_md=__doc__,
    params=params("conn_id", "aws_conn_id", "state", "sink", "tables", "repair"),
) as dag:
    settings = dict(dblog_conn_id=template("conn_id"), aws_conn_id=template("aws_conn_id"),
                    state_dir=template("state"), sink=template("sink"), tables=template("tables"))
    verify = DblogVerifyOperator(task_id="verify", repair=template("repair"), **settings)
    repair = DblogSparkSubmitOperator.partial(
        task_id="repair",
        conn_id=SPARK_CONN_ID,
        conf=spark_conf(),
        dblog_conn_id=template("conn_id"),
        aws_conn_id=template("aws_conn_id"),
        map_index_template="{{ task.batch_label }}",
        outlets=[lake_alias()],  # an asset event per lake table the batch advanced
    ).expand_kwargs(verify.output)
    verify_after_repair = DblogVerifyOperator(task_id="verify_after_repair", repair=False,
                                              trigger_rule="none_failed", **settings)
    repair >> verify_after_repair
