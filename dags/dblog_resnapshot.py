"""dblog_resnapshot: re-read part of a table while the tail keeps running; the lake still converges.

Trigger with a form or ``POST /api/v2/dags/dblog_resnapshot/dagRuns``, e.g.
``{"logical_date": null, "conf": {"table": "shop.orders", "key_lo": 1000, "key_hi": 1999}}``.

Params (all but ``table`` optional; they combine with AND):

* ``table``: DB.TABLE, planned by ``dblog_initial_load`` in the same state directory;
* ``key_lo`` / ``key_hi``: an inclusive key range (a JSON list for a composite key); every chunk whose
  bounds overlap it, in the database's key order, is re-read;
* ``chunk_ids``: ``[3, 5]`` or ``"3,5-7"``;
* ``filter``: a condition on the table's columns (``status = 'late' AND amount > 100``): only chunks
  that hold a matching row are re-read. It is validated token by token and rebuilt with quoted
  identifiers; statement separators, comments, functions and sub-queries are rejected.

Chunks are always re-read whole, with ``--force``: their rows carry the new high watermark, so they
replace the older snapshot rows, supersede the chunks' older stream rows in the mirror, and lose to
later binlog events the tail appends. The offset map is left alone: the tail carries on from its
checkpoint.
"""
from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_provider_dblog.airflow.dag_config import SPARK_CONN_ID, params, spark_conf, template
from airflow_provider_dblog.airflow.lake_events import lake_alias
from airflow_provider_dblog.airflow.operators import DblogSparkSubmitOperator, ResnapshotPlannerOperator
from airflow_provider_dblog.steps.resnapshot import FILTER_PARAM_PATTERN, MAX_FILTER_LENGTH

KEY_TYPES = ["null", "integer", "number", "string", "array"]

with DAG(
    dag_id="dblog_resnapshot",
    schedule=None,
    catchup=False,
    tags=["dblog", "cdc", "repair"],
    doc_md=__doc__,
    params={
        # a name as the capture holds it: spaces, quotes, ';' and later dots may be part of it ("Mixed Case.Order
        # Items"); it is only looked up among the planned tables, never put into SQL or a shell
        "table": Param(type="string", minLength=3, pattern=r"^[^.\s][^.]*\.\S.*$", title="table",
                       description="DB.TABLE to re-snapshot (planned by dblog_initial_load), as written: "
                                   "Mixed Case.Order Items"),
        "key_lo": Param(None, type=KEY_TYPES, title="key from",
                        description="smallest key to re-read (inclusive); a JSON list for composite keys"),
        "key_hi": Param(None, type=KEY_TYPES, title="key to",
                        description="largest key to re-read (inclusive); a JSON list for composite keys"),
        "chunk_ids": Param(None, type=["null", "string", "array"], title="chunk ids",
                           description="only these chunks, e.g. 3,5-7"),
        "filter": Param(None, type=["null", "string"], pattern=FILTER_PARAM_PATTERN, maxLength=MAX_FILTER_LENGTH,
                        title="row filter",
                        description="only chunks holding a row matching this condition on the table's columns, "
                                    "e.g. status = 'late' AND amount > 100 (no ';', comments or functions)"),
        **params("conn_id", "aws_conn_id", "state", "sink"),
    },
) as dag:
    select = ResnapshotPlannerOperator(
        task_id="select_chunks",
        dblog_conn_id=template("conn_id"),
        aws_conn_id=template("aws_conn_id"),
        state_dir=template("state"),
        sink=template("sink"),
    )
    resnapshot = DblogSparkSubmitOperator.partial(
        task_id="resnapshot",
        conn_id=SPARK_CONN_ID,
        conf=spark_conf(),
        dblog_conn_id=template("conn_id"),
        aws_conn_id=template("aws_conn_id"),
        map_index_template="{{ task.batch_label }}",
        outlets=[lake_alias()],  # an asset event per lake table the batch advanced
    ).expand_kwargs(select.output)
