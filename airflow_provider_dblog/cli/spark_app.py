"""The spark-submit application shipped in the package: ``spark-submit .../spark_app.py COMMAND ARGS``
runs ``dblog COMMAND ARGS`` inside the Spark driver with the stock session (what the user configured
for the cluster; none of the local start-up tuning) and exits with its code.

    spark-submit --master local[2] $(python -c 'import airflow_provider_dblog.cli.spark_app as s; print(s.__file__)') \\
        snapshot --state STATE --batch 3 --sink LAKE

The password never appears here: the driver reads ``$DBLOG_SOURCE_PASSWORD`` (set by
``DblogSparkSubmitOperator`` in the child's environment) or the credentials file, and ships it to
executors inside Spark's serialized tasks (never in options, arguments or logs).
"""
from __future__ import annotations

import os
import sys

APPLICATION = os.path.abspath(__file__)


def main(argv: list[str]) -> int:
    here = os.path.dirname(APPLICATION)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # no shadowing by this folder
    from airflow_provider_dblog.cli.main import main as dblog

    return dblog(argv, spark_submit=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
