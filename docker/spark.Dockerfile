# Spark master and worker for docker-compose.yaml: the official apache/spark image plus the Python the
# executors' Python workers run. The image's own python3 is Ubuntu's (3.10), but PySpark needs the
# driver's minor version (the Airflow image's 3.11) on the executors, so uv installs a standalone
# Python 3.11 into /opt/dblog -- the path dblog's applications name in spark.pyspark.python -- with
# this package and its runtime libraries (the base install: not Airflow, not pyodbc, which are extras;
# pyspark comes from $SPARK_HOME).
ARG SPARK_IMAGE=apache/spark:4.3.0-scala2.13-java17-python3-ubuntu
FROM ${SPARK_IMAGE}
ARG PYTHON_VERSION=3.11

USER root
ENV UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_NO_CACHE=1
COPY pyproject.toml README.md /opt/dblog-src/
COPY airflow_provider_dblog /opt/dblog-src/airflow_provider_dblog
RUN (python3 -m pip install --no-cache-dir --break-system-packages uv || python3 -m pip install --no-cache-dir uv) \
 && uv venv --python "${PYTHON_VERSION}" --python-preference only-managed /opt/dblog \
 && /opt/dblog/bin/python -c "import tomllib; \
deps = tomllib.load(open('/opt/dblog-src/pyproject.toml', 'rb'))['project']['dependencies']; \
print('\n'.join(d for d in deps if not d.startswith(('apache-airflow', 'pyspark', 'pyodbc'))))" \
    > /tmp/requirements.txt \
 && uv pip install --python /opt/dblog/bin/python -r /tmp/requirements.txt pandas cryptography \
 && uv pip install --python /opt/dblog/bin/python --no-deps /opt/dblog-src \
 && useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home airflow \
 && mkdir -p /var/lib/dblog/state /var/lib/dblog/lake /opt/spark/work-dir/worker \
 && chown -R 50000:0 /var/lib/dblog /opt/spark/work-dir \
 && chmod -R g+rwX /var/lib/dblog /opt/spark/work-dir

# Same uid/gid as Airflow's user: the executors write chunk files, chunk reports and the tail's
# output into the shared /var/lib/dblog volume that the Airflow container (driver) reads and writes.
USER 50000:0
ENV PYSPARK_PYTHON=/opt/dblog/bin/python \
    SPARK_WORKER_DIR=/opt/spark/work-dir/worker
