"""Where the example DAGs get their configuration, most specific first:

1. the DAG run's params (trigger form / ``conf`` of ``POST /api/v2/dags/{dag_id}/dagRuns``);
2. Airflow Variables ``dblog_conn_id``, ``dblog_aws_conn_id``, ``dblog_state``, ``dblog_sink``, ``dblog_tables``, ... (also
   settable as ``AIRFLOW_VAR_DBLOG_STATE`` etc.);
3. environment variables of the DAG processor ``DBLOG_CONN_ID``, ``DBLOG_STATE``, ``DBLOG_SINK``,
   ``DBLOG_TABLES``, ... (read when the DAG file is parsed);
4. built-in defaults (below).

The resolution happens in Jinja at run time (a param left empty falls through; false and 0 do not),
so parsing a DAG file never queries Variables.
"""
from __future__ import annotations

import json
import os

from airflow.sdk import Param

# name -> (environment variable, built-in default, param JSON type, description)
SETTINGS = {
    "conn_id": ("DBLOG_CONN_ID", "dblog_source", "string", "Airflow connection (type mysql) of the source"),
    "aws_conn_id": ("DBLOG_AWS_CONN_ID", "", "string", "Airflow connection (type aws: key, secret, extras endpoint_url "
                    "and region_name) for an s3:// state and sink (empty: the workers' AWS_* variables)"),
    "state": ("DBLOG_STATE", "/var/lib/dblog/state", "string", "state: a directory or s3://BUCKET/PREFIX (plan, reports, offsets)"),
    "sink": ("DBLOG_SINK", "/var/lib/dblog/lake", "string", "the lake: a directory or s3://BUCKET/PREFIX"),
    "checkpoint": ("DBLOG_CHECKPOINT", "", "string", "directory of the tail's Spark checkpoints on the worker's "
                   "disk or a cluster filesystem (empty: STATE/checkpoints; required for an s3:// state)"),
    "tables": ("DBLOG_TABLES", "", "string", "tables to load: DB.TABLE names or globs, comma-separated (shop.*,crm.customers)"),
    "exclude": ("DBLOG_EXCLUDE", "", "string", "tables to leave out: DB.TABLE names or globs (shop.tmp_*)"),
    "chunk_size": ("DBLOG_CHUNK_SIZE", "100000", "integer", "rows per chunk"),
    "batch_size": ("DBLOG_BATCH_SIZE", "8", "integer", "chunks per Spark application (mapped task)"),
    "batch_rows": ("DBLOG_BATCH_ROWS", "", "integer",
                   "estimated rows per Spark application (empty: batch_size x chunk_size); small tables share one"),
    "schema_changes": ("DBLOG_SCHEMA_CHANGES", "evolve", "string",
                       "a DDL statement of a captured table: evolve (follow it), fail (stop before it), freeze "
                       "(keep the lake's columns); docs/schema-changes.md"),
    "startup": ("DBLOG_STARTUP", "initial", "string",
                "startup mode: initial | snapshot-only | latest | position:FILE:POS | gtid:SET | timestamp:EPOCH_MS"),
    "repair": ("DBLOG_VERIFY_REPAIR", "false", "boolean",
               "verify: re-read the chunks whose checksum differs from the source (false: fail naming them)"),
    "max_stall_seconds": ("DBLOG_MAX_STALL_SECONDS", "1800", "integer",
                          "health check: fail when the source moved but the tail made no progress for this long"),
    "purge_warning_seconds": ("DBLOG_PURGE_WARNING_SECONDS", "", "integer",
                              "health check: warn when the binlog file a table still needs may be purged by age "
                              "within this many seconds (empty: 20% of the server's expiry period)"),
    "purge_warning_bytes": ("DBLOG_PURGE_WARNING_BYTES", "", "integer",
                            "health check: warn when it would be purged by max_binlog_total_size after this many "
                            "more binlog bytes (empty: 20% of the limit)"),
}
SPARK_CONN_ID = os.environ.get("DBLOG_SPARK_CONN_ID", "spark_default")


def spark_conf() -> dict | None:
    """Extra Spark properties for every dblog application: ``$DBLOG_SPARK_CONF`` as a JSON object, e.g.
    ``{"spark.executor.memory": "4g"}`` (read when the DAG file is parsed)."""
    raw = os.environ.get("DBLOG_SPARK_CONF", "").strip()
    if not raw:
        return None
    conf = json.loads(raw)
    if not isinstance(conf, dict):
        raise ValueError("$DBLOG_SPARK_CONF must be a JSON object of Spark properties")
    return {str(k): str(v) for k, v in conf.items()}


def default(name: str) -> str:
    env, fallback, _, _ = SETTINGS[name]
    return os.environ.get(env, fallback)


def template(name: str) -> str:
    """A Jinja template resolving setting ``name``: param, then Variable ``dblog_<name>``, then env/default. A param
    left empty (None, "" or blanks) falls through; any other value wins, false and 0 too (an unticked ``repair``
    must not turn into the Variable's true, nor ``chunk_size`` 0 into the default instead of an error)."""
    param = "params.get(%s)" % json.dumps(name)
    return ("{{ %s if %s is not none and (%s is not string or %s | trim) else var.value.get(%s, %s) }}"
            % (param, param, param, param, json.dumps(f"dblog_{name}"), json.dumps(default(name))))


def params(*names: str) -> dict[str, Param]:
    """Optional params (None: use the Variable or the default) for the trigger form."""
    out = {}
    for name in names:
        env, _, kind, description = SETTINGS[name]
        out[name] = Param(None, type=["null", kind], title=name,
                          description=f"{description}. Empty: Variable dblog_{name}, else ${env} "
                                      f"(here: {default(name)!r})")
    return out
