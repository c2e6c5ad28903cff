# Airflow for docker-compose.yaml: the official image plus
#   * a Java runtime: the dblog Spark applications run their driver here (spark-submit, client mode);
#   * this provider, pip-installed from the repository (build context: the repository root);
#   * /opt/dblog/bin/python, the interpreter path dblog's Spark applications are told to use
#     (spark.pyspark.python): here it runs Airflow's Python, in the Spark image a Python 3.11 venv
#     with the same package, so the driver and the executors agree on one path.
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}
ARG AIRFLOW_VERSION=3.3.2

USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /opt/dblog/bin /opt/dblog-src /var/lib/dblog/state /var/lib/dblog/lake \
 && chown -R airflow:0 /opt/dblog /opt/dblog-src /var/lib/dblog \
 && chmod -R g+rwX /var/lib/dblog
USER airflow

COPY --chown=airflow:0 pyproject.toml README.md /opt/dblog-src/
COPY --chown=airflow:0 airflow_provider_dblog /opt/dblog-src/airflow_provider_dblog
# Pin Airflow to the image's version (the documented way to extend the image). The Spark provider
# also pulls pyspark-client, which ships files of the same `pyspark` package: reinstall pyspark
# last so that the pinned pyspark's files win (as `make install` does).
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" "/opt/dblog-src[airflow]" \
 && pip install --no-cache-dir --force-reinstall --no-deps "$(python -c "import tomllib; \
print(next(d for d in tomllib.load(open('/opt/dblog-src/pyproject.toml', 'rb'))['project']['dependencies'] \
if d.startswith('pyspark')))")" \
 && printf '#!/bin/sh\nexec %s "$@"\n' "$(python -c 'import sys; print(sys.executable)')" > /opt/dblog/bin/python \
 && chmod 0755 /opt/dblog/bin/python \
 && /opt/dblog/bin/python -c "import airflow_provider_dblog.airflow.operators, pyspark; print('pyspark', pyspark.__version__)"

ENV PYSPARK_PYTHON=/opt/dblog/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/dblog/bin/python
