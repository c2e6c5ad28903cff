"""docker-compose.yaml agrees with the code (no Docker engine needed: the files are parsed).

* MySQL's command line sets exactly the binlog settings ``MySqlDialect.check_source()`` requires
  (``REQUIRED_SETTINGS``), plus a server id and GTID;
* the init SQL creates the CDC user the Airflow connection logs in with, with the grants the
  privilege check and the watermark table need;
* the Airflow image and its pinned ``apache-airflow``, the Spark image, and the executors' Python
  match ``pyproject.toml``;
* the DAG folder is mounted where Airflow reads DAGs; the connections point at the services; state
  and lake live on a volume every Spark process shares.
"""
from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from airflow_provider_dblog.source.mysql.schema import REQUIRED_SETTINGS
from airflow_provider_dblog.source.mysql.watermarks import WATERMARK_TABLE

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pin(pyproject: dict, name: str) -> SpecifierSet:
    extras = pyproject["project"].get("optional-dependencies", {})
    for dep in [*pyproject["project"]["dependencies"], *extras.get("airflow", [])]:
        req = Requirement(dep)
        if req.name == name:
            return req.specifier
    raise AssertionError(f"{name} is not a dependency in pyproject.toml")


def lower_bound(spec: SpecifierSet) -> Version:
    return Version(next(s.version for s in spec if s.operator in (">=", "==", "~=")))


def command_flags(service: dict) -> dict[str, str | None]:
    """``--binlog_format=ROW`` / ``--binlog-format=ROW`` / ``--log-bin`` -> {"binlog-format": "ROW", ...}."""
    command = service["command"]
    args = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    flags = {}
    for arg in args:
        assert arg.startswith("--"), f"unexpected argument {arg!r} in the mysql command"
        name, _, value = arg[2:].partition("=")
        name = name.replace("_", "-")
        assert name not in flags, f"--{name} given twice"
        flags[name] = value if value else None
    return flags


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def volumes(service: dict) -> dict[str, str]:
    """target -> source"""
    out = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            out[volume["target"]] = str(volume["source"])
        else:
            source, target = volume.split(":")[:2]
            out[target] = source
    return out


def build_arg(service: dict, name: str) -> str:
    return str(service["build"]["args"][name])


def dockerfile(service: dict) -> tuple[Path, str]:
    build = service["build"]
    path = (ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).resolve()
    return path, path.read_text()


def dockerfile_arg_default(text: str, name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", text, re.M)
    assert match, f"no ARG {name}=... default"
    return match.group(1)


# ---- MySQL ------------------------------------------------------------------------------------
def test_mysql_is_84(compose):
    assert compose["services"]["mysql"]["image"] == "mysql:8.4"


def test_mysql_flags_are_exactly_what_the_dialect_requires_plus_server_id_and_gtid(compose):
    flags = command_flags(compose["services"]["mysql"])
    required = {name.replace("_", "-"): value for name, value in REQUIRED_SETTINGS.items()}
    assert set(flags) == set(required) | {"server-id", "gtid-mode", "enforce-gtid-consistency"}
    for name, value in required.items():
        if name == "log-bin":  # a bare --log-bin or --log-bin=BASENAME turns it ON
            assert value == "ON"
            assert flags[name] is None or flags[name].upper() not in ("0", "OFF"), flags[name]
        else:
            assert (flags[name] or "").upper() == value, (name, flags[name], value)
    assert int(flags["server-id"]) > 0
    assert flags["gtid-mode"].upper() == "ON"
    assert flags["enforce-gtid-consistency"].upper() == "ON"


def test_init_sql_creates_the_connections_user_with_cdc_and_watermark_grants(compose):
    mysql = compose["services"]["mysql"]
    mounted = {t: s for t, s in volumes(mysql).items() if t.startswith("/docker-entrypoint-initdb.d/")}
    assert len(mounted) == 1, mounted
    sql = (ROOT / next(iter(mounted.values()))).read_text()
    user = re.search(r"CREATE USER '([^']+)'@'%' IDENTIFIED BY '([^']+)'", sql)
    assert user, "the init SQL creates no user"
    login, password = user.groups()
    grants = re.findall(r"GRANT (.+?) ON (\S+) TO '([^']+)'@'%'", sql)
    global_grants = {p.strip() for privs, on, who in grants if on == "*.*" and who == login for p in privs.split(",")}
    assert {"SELECT", "REPLICATION SLAVE", "REPLICATION CLIENT"} <= global_grants

    conn = json.loads(environment(compose["services"]["airflow"])["AIRFLOW_CONN_DBLOG_SOURCE"])
    assert conn["conn_type"] == "mysql" and conn["host"] == "mysql" and int(conn["port"]) == 3306
    assert (conn["login"], conn["password"]) == (login, password)
    watermark_table = conn["extra"]["watermark_table"]
    assert conn["extra"]["watermark"] == "watermark_table"
    assert watermark_table.split(".", 1)[1] == WATERMARK_TABLE
    table_grants = {p.strip() for privs, on, who in grants if on == watermark_table and who == login
                    for p in privs.split(",")}
    assert {"CREATE", "INSERT", "UPDATE"} <= table_grants  # CREATE TABLE IF NOT EXISTS, INSERT IGNORE, UPDATE
    assert f"CREATE TABLE {watermark_table}" in sql


# ---- Airflow ----------------------------------------------------------------------------------
def test_airflow_image_and_pip_pin_match_pyproject(compose, pyproject):
    airflow = compose["services"]["airflow"]
    image = build_arg(airflow, "AIRFLOW_IMAGE")
    match = re.fullmatch(r"apache/airflow:(\d+\.\d+\.\d+)-python(\d+\.\d+)", image)
    assert match, image
    version, python = match.groups()
    assert Version(version) in pin(pyproject, "apache-airflow"), (version, pin(pyproject, "apache-airflow"))
    assert Version(f"{python}.0") in SpecifierSet(pyproject["project"]["requires-python"])
    assert build_arg(airflow, "AIRFLOW_VERSION") == version

    path, text = dockerfile(airflow)
    assert dockerfile_arg_default(text, "AIRFLOW_IMAGE") == image, path
    assert dockerfile_arg_default(text, "AIRFLOW_VERSION") == version, path
    assert re.search(r'pip install [^\n]*"apache-airflow==\$\{AIRFLOW_VERSION\}" "/opt/dblog-src\[airflow\]"', text)
    assert airflow["build"]["context"] == "."  # the repository, so COPY sees the package
    for src in ("pyproject.toml", "README.md", "airflow_provider_dblog"):
        assert re.search(rf"^COPY [^\n]*\b{src}\b[^\n]* /opt/dblog-src/", text, re.M), src


def test_dag_folder_is_mounted_where_airflow_reads_dags(compose):
    airflow = compose["services"]["airflow"]
    dags_folder = environment(airflow).get("AIRFLOW__CORE__DAGS_FOLDER", "/opt/airflow/dags")
    mounts = volumes(airflow)
    assert dags_folder in mounts, mounts
    assert (ROOT / mounts[dags_folder]).resolve() == ROOT / "dags"


def test_connections_point_at_the_services(compose):
    services = compose["services"]
    env = environment(services["airflow"])
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["conn_type"] == "spark"
    master = f"{spark['host']}:{spark['port']}" if spark.get("port") else spark["host"]
    assert master == "spark://spark-master:7077"
    assert "spark-master" in services and "spark-worker" in services
    assert "7077" in services["spark-master"]["command"]
    assert "spark://spark-master:7077" in services["spark-worker"]["command"]
    assert env["DBLOG_CONN_ID"] == "dblog_source"  # -> AIRFLOW_CONN_DBLOG_SOURCE
    assert re.fullmatch(r"\w+\.\w+(,\w+\.\w+)*", env["DBLOG_TABLES"])
    assert "service_healthy" == services["airflow"]["depends_on"]["mysql"]["condition"]


# ---- Spark ------------------------------------------------------------------------------------
def test_spark_image_matches_the_pyspark_pin(compose, pyproject):
    spec = pin(pyproject, "pyspark")
    for name in ("spark-master", "spark-worker"):
        service = compose["services"][name]
        image = build_arg(service, "SPARK_IMAGE")
        match = re.fullmatch(r"apache/spark:(\d+\.\d+\.\d+)(-[\w.-]*python3[\w.-]*)?", image)
        assert match and match.group(2), f"{name}: {image} (an apache/spark image with Python)"
        version = Version(match.group(1))
        assert version in spec, (version, spec)
        assert version.release[:2] == lower_bound(spec).release[:2]
        path, text = dockerfile(service)
        assert dockerfile_arg_default(text, "SPARK_IMAGE") == image, path


def test_executors_run_the_drivers_python_version_at_the_same_path(compose):
    airflow, worker = compose["services"]["airflow"], compose["services"]["spark-worker"]
    driver_python = re.search(r"-python(\d+\.\d+)$", build_arg(airflow, "AIRFLOW_IMAGE")).group(1)
    assert build_arg(worker, "PYTHON_VERSION") == driver_python  # PySpark refuses mixed minor versions
    _, text = dockerfile(worker)
    assert dockerfile_arg_default(text, "PYTHON_VERSION") == driver_python
    conf = json.loads(environment(airflow)["DBLOG_SPARK_CONF"])
    python = conf["spark.pyspark.python"]
    assert conf["spark.pyspark.driver.python"] == python
    assert 'uv venv --python "${PYTHON_VERSION}"' in text and f" {Path(python).parents[2]}" in text
    _, airflow_text = dockerfile(airflow)
    assert f"> {python}" in airflow_text  # the Airflow image's wrapper at the same path
    assert conf["spark.driver.host"] == airflow["hostname"]


def test_state_and_lake_are_on_a_volume_shared_by_driver_and_executors(compose):
    services = compose["services"]
    env = environment(services["airflow"])
    shared = [t for t, s in volumes(services["airflow"]).items() if s in (compose.get("volumes") or {})
              and env["DBLOG_STATE"].startswith(t) and env["DBLOG_SINK"].startswith(t)]
    assert shared, "DBLOG_STATE and DBLOG_SINK are not on a named volume"
    target = shared[0]
    source = volumes(services["airflow"])[target]
    for name in ("spark-master", "spark-worker"):
        assert volumes(services[name]).get(target) == source, name
