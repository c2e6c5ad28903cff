"""Helpers of the benchmark harness: TPC-H data, the private server, timed whole processes,
paced writers and the lake watcher used for commit->lake latency.

Everything here is plain Python (no Spark import) so that tests/test_bench_smoke.py can run it
at a tiny scale in seconds.
"""
from __future__ import annotations

import json
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/support: the private MariaDB the benchmarks load
BENCH_DIR = Path(os.environ.get("DBLOG_BENCH_DIR", ROOT / ".bench"))
VENV_BIN = Path(sys.executable).parent
PYTHON = sys.executable
DBLOG = str(VENV_BIN / "dblog")
TPCHGEN = str(VENV_BIN / "tpchgen-cli")
HERE = Path(__file__).resolve().parent
JDBC_JARS = ("/usr/share/java/mariadb-java-client.jar",)
SPARK_MASTER = "local[2]"
# the Spark settings both Spark sides run with: (b) sets them in its session, the Airflow path passes them
# to spark-submit as a deployment would (SparkSubmitOperator's conf); nothing else differs
SPARK_SETTINGS = {"spark.driver.memory": "2g", "spark.ui.enabled": "false"}

# ---- TPC-H schema (primary keys as in the spec: orders by o_orderkey, lineitem by (l_orderkey, l_linenumber)) ----
SCHEMA = {
    "orders": """CREATE TABLE IF NOT EXISTS tpch.orders (
        o_orderkey BIGINT NOT NULL, o_custkey INT NOT NULL, o_orderstatus CHAR(1) NOT NULL,
        o_totalprice DECIMAL(15,2) NOT NULL, o_orderdate DATE NOT NULL, o_orderpriority CHAR(15) NOT NULL,
        o_clerk CHAR(15) NOT NULL, o_shippriority INT NOT NULL, o_comment VARCHAR(79) NOT NULL,
        PRIMARY KEY (o_orderkey)) ENGINE=InnoDB""",
    "lineitem": """CREATE TABLE IF NOT EXISTS tpch.lineitem (
        l_orderkey BIGINT NOT NULL, l_partkey INT NOT NULL, l_suppkey INT NOT NULL, l_linenumber INT NOT NULL,
        l_quantity DECIMAL(15,2) NOT NULL, l_extendedprice DECIMAL(15,2) NOT NULL, l_discount DECIMAL(15,2) NOT NULL,
        l_tax DECIMAL(15,2) NOT NULL, l_returnflag CHAR(1) NOT NULL, l_linestatus CHAR(1) NOT NULL,
        l_shipdate DATE NOT NULL, l_commitdate DATE NOT NULL, l_receiptdate DATE NOT NULL,
        l_shipinstruct CHAR(25) NOT NULL, l_shipmode CHAR(10) NOT NULL, l_comment VARCHAR(44) NOT NULL,
        PRIMARY KEY (l_orderkey, l_linenumber)) ENGINE=InnoDB""",
}
KEYS = {"orders": ("o_orderkey",), "lineitem": ("l_orderkey", "l_linenumber")}
# the column a writer changes (a numeric increment: a no-op update would write no binlog row)
WRITER_COLUMN = {"orders": "o_shippriority", "lineitem": "l_suppkey"}
EXPECTED_ROWS = {"orders": 1_500_000, "lineitem": 6_001_215}  # at SF1 (lineitem varies slightly with SF)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def scale_tag(scale: float) -> str:
    return f"sf{scale:g}".replace(".", "_")


# ---- data generation ------------------------------------------------------------------------
def generate(scale: float, out_dir: Path | None = None, tables=("orders", "lineitem")) -> dict[str, list[Path]]:
    """TPC-H .tbl files from tpchgen-cli, cached: lineitem in parts of ~750k rows (moderate load transactions)."""
    out_dir = out_dir or BENCH_DIR / f"tpch-{scale_tag(scale)}"
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[Path]] = {}
    for table in tables:
        parts = max(1, math.ceil(scale * (8 if table == "lineitem" else 2)))
        target = out_dir / table
        done = target / "_done"
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            started = time.time()
            cmd = [TPCHGEN, "tbl", "-s", f"{scale:g}", "-T", table, "-o", str(out_dir), "--parts", str(parts)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if not target.is_dir():  # some versions write a single file when parts == 1
                target.mkdir(parents=True, exist_ok=True)
                single = out_dir / f"{table}.tbl"
                if single.exists():
                    single.rename(target / f"{table}.1.tbl")
            done.write_text(json.dumps({"seconds": round(time.time() - started, 1)}))
            log(f"generated {table} at SF {scale:g} in {time.time() - started:.1f}s")
        files[table] = sorted(target.glob("*.tbl"), key=lambda p: int(re.findall(r"\d+", p.name)[-1]))
    return files


# ---- the private server ---------------------------------------------------------------------
SERVER_FLAGS = ("--local-infile=1", "--innodb-buffer-pool-size=2G", "--max-binlog-size=1G",
                "--binlog-cache-size=4M", "--max-allowed-packet=256M")


def start_server(datadir: Path, flags: tuple[str, ...] = SERVER_FLAGS):
    from tests.support.local_mariadb import LocalMariaDB

    return LocalMariaDB(datadir, extra_flags=flags).start(timeout=180)


def fresh_server(name: str):
    """A new private MariaDB under ``BENCH_DIR/name`` (emptied first) with a ``bench`` database; returns
    (its directory, the server)."""
    work = BENCH_DIR / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = start_server(work / "mariadb")
    server.sql("CREATE DATABASE bench")
    return work, server


def create_synthetic_table(server, table: str, rows: int) -> None:
    """``table`` (id, a, b, c, d: INT, INT, VARCHAR, DECIMAL, DATETIME) with ``rows`` rows."""
    server.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY, a INT, b VARCHAR(40), c DECIMAL(12,2), d DATETIME)")
    server.sql(f"INSERT INTO {table} SELECT seq, seq, CONCAT('row ', seq), seq / 7, "
               f"'2024-01-01' + INTERVAL seq SECOND FROM bench.seq_1_to_{rows}")


def connect(server, db: str | None = None, **kw):
    import pymysql

    return pymysql.connect(host="127.0.0.1", port=server.port, user="root", database=db, autocommit=True,
                           local_infile=True, **kw)


def empty_copy(cur, table: str, source: str) -> None:
    """``table`` (database.name) created empty LIKE ``source``; the session stops binlogging, so the rows
    the caller copies in next stay out of the binlog the benchmarks read."""
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {table.split('.')[0]}")
    cur.execute(f"DROP TABLE IF EXISTS {table}")
    cur.execute(f"CREATE TABLE {table} LIKE {source}")
    cur.execute("SET SESSION sql_log_bin = 0")


def load_tpch(server, files: dict[str, list[Path]]) -> dict[str, dict]:
    """LOAD DATA LOCAL INFILE without binlogging (the snapshot reads the tables; the binlog stays small).
    Tables load in parallel threads; a table already holding its rows (cached datadir) is skipped."""
    server.sql("CREATE DATABASE IF NOT EXISTS tpch")
    stats: dict[str, dict] = {}

    def load(table: str) -> None:
        conn = connect(server, "tpch")
        try:
            with conn.cursor() as cur:
                cur.execute(SCHEMA[table])
                marker = f"loaded {sum(p.stat().st_size for p in files[table])} bytes"
                cur.execute("SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA='tpch' "
                            "AND TABLE_NAME=%s", (table,))
                if cur.fetchone()[0] == marker:
                    cur.execute(f"SELECT COUNT(*) FROM tpch.{table}")
                    stats[table] = {"rows": cur.fetchone()[0], "seconds": 0.0, "cached": True}
                    return
                started = time.time()
                cur.execute(f"TRUNCATE TABLE tpch.{table}")
                cur.execute("SET SESSION sql_log_bin = 0, unique_checks = 0, foreign_key_checks = 0")
                for path in files[table]:
                    cur.execute("BEGIN")
                    cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE tpch.{table} FIELDS TERMINATED BY '|' "
                                f"LINES TERMINATED BY '|\\n'", (str(path),))
                    cur.execute("COMMIT")
                cur.execute(f"ANALYZE TABLE tpch.{table}")
                cur.fetchall()
                cur.execute(f"ALTER TABLE tpch.{table} COMMENT = %s", (marker,))
                cur.execute(f"SELECT COUNT(*) FROM tpch.{table}")
                stats[table] = {"rows": cur.fetchone()[0], "seconds": round(time.time() - started, 1),
                                "cached": False}
                log(f"loaded {stats[table]['rows']} rows into tpch.{table} in {stats[table]['seconds']}s")
        finally:
            conn.close()

    errors: list[BaseException] = []

    def guarded(table: str) -> None:
        try:
            load(table)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return stats


def server_info(server) -> dict:
    rows = dict(server.sql("SHOW VARIABLES WHERE Variable_name IN ('version', 'innodb_buffer_pool_size')"))
    return {"version": rows.get("version"), "innodb_buffer_pool_size": rows.get("innodb_buffer_pool_size")}


def binlog_position(server) -> tuple[str, int]:
    file, pos = server.sql("SHOW MASTER STATUS")[0][:2]
    return file, int(pos)


# ---- timed whole processes ------------------------------------------------------------------
# Byte-compiled modules, as after any normal `pip install`: this venv was installed without .pyc files and
# the environment may set PYTHONDONTWRITEBYTECODE=1, which makes every Python process (the dblog driver,
# each Spark Python worker and data source worker) compile pandas, pyspark, ... from source again
# (~3 s of CPU each on this machine). The cache lives under .bench/, the venv is not touched.
BYTECODE = {"enabled": True}
# With --code-rev the package is exported from that git revision and put first on PYTHONPATH, so the
# figures belong to one commit even while the working tree changes under a long run.
CODE = {"pythonpath": None}


def export_revision(rev: str) -> tuple[str, Path]:
    """``git archive REV airflow_provider_dblog`` under .bench/src-COMMIT; returns (commit, dir)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], check=True, capture_output=True,
                            text=True).stdout.strip()
    target = BENCH_DIR / f"src-{commit[:12]}"
    if not (target / "airflow_provider_dblog").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "airflow_provider_dblog"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    CODE["pythonpath"] = str(target)
    sys.path.insert(0, str(target))
    return commit, target


def code_version() -> dict:
    def git(*a):
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()

    if CODE["pythonpath"]:
        return {"commit": Path(CODE["pythonpath"]).name.removeprefix("src-"), "source": "git archive (--code-rev)"}
    dirty = bool(git("status", "--porcelain", "--", "airflow_provider_dblog"))
    return {"commit": git("rev-parse", "--short=12", "HEAD"), "source": "working tree" + (" (modified)" if dirty else "")}


def bench_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    if BYTECODE["enabled"]:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(BENCH_DIR / "pycache")
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    if CODE["pythonpath"]:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (CODE["pythonpath"], env.get("PYTHONPATH")) if p)
    env.update({"PYSPARK_PYTHON": PYTHON, "PYSPARK_DRIVER_PYTHON": PYTHON, "DBLOG_SPARK_MASTER": SPARK_MASTER,
                "DBLOG_CREDENTIALS": str(BENCH_DIR / "credentials.json"), "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


@dataclass
class Timed:
    seconds: float
    returncode: int
    stdout: str
    stderr_path: Path | None
    load_before: float = 0.0
    load_after: float = 0.0
    extra: dict = field(default_factory=dict)
    started_at: float = 0.0  # epoch seconds at fork

    def json(self):
        """The last JSON object printed on stdout (our helper scripts and dblog print one)."""
        text = self.stdout.strip()
        start = text.rfind("\n{")
        return json.loads(text[start + 1:] if start >= 0 else text)


def run_timed(cmd: list[str] | str, log_path: Path | None = None, stdout_devnull: bool = False,
              env: dict | None = None, shell: bool = False, check: bool = True, timeout: float | None = None) -> Timed:
    """Run one whole process; wall-clock seconds from fork to exit."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    err = open(log_path, "w") if log_path else subprocess.DEVNULL
    load_before = os.getloadavg()[0]
    try:
        started, started_at = time.perf_counter(), time.time()
        # cwd outside the repo: `python -m pyspark.daemon` puts its cwd first on sys.path, which would
        # shadow --code-rev with the working tree
        proc = subprocess.run(cmd, shell=shell, env=env or bench_env(), stderr=err, timeout=timeout, cwd=BENCH_DIR,
                              stdout=subprocess.DEVNULL if stdout_devnull else subprocess.PIPE, text=True)
        seconds = time.perf_counter() - started
    finally:
        if log_path:
            err.close()
    result = Timed(seconds, proc.returncode, proc.stdout or "", log_path, load_before, os.getloadavg()[0],
                   started_at=started_at)
    if check and proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:] if log_path else ""
        raise RuntimeError(f"{cmd if isinstance(cmd, str) else ' '.join(map(str, cmd))} failed with "
                           f"{proc.returncode}:\n{tail}")
    return result


def parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    files = [path] if path.is_file() else [p for p in path.rglob("*.parquet") if not p.name.startswith((".", "_"))]
    return sum(pq.ParquetFile(p).metadata.num_rows for p in files)


# ---- the measured processes -----------------------------------------------------------------
def mariadb_quick(server, table: str, log_path: Path | None = None) -> Timed:
    """`mariadb --quick -e 'SELECT * ...' > /dev/null`: the server + protocol + a C client, no conversion."""
    cmd = ["mariadb", "--quick", "--batch", "-h", "127.0.0.1", "-P", str(server.port), "-u", "root",
           "-e", f"SELECT * FROM tpch.{table}"]
    return run_timed(cmd, log_path, stdout_devnull=True)


def cx_scan(server, table: str, out: Path, partitions: int, log_path: Path | None = None) -> Timed:
    """connectorx -> Arrow -> pyarrow Parquet, one process (benchmarks/cx_scan.py)."""
    cmd = [PYTHON, str(HERE / "cx_scan.py"), "--uri", f"mysql://root@127.0.0.1:{server.port}/tpch",
           "--table", table, "--key", KEYS[table][0], "--partitions", str(partitions), "--out", str(out)]
    return run_timed(cmd, log_path)


def jdbc_jar() -> str:
    for jar in JDBC_JARS:
        if Path(jar).exists():
            return jar
    subprocess.run(["bash", str(ROOT / "scripts" / "bench-deps.sh")], check=True)
    for jar in JDBC_JARS:
        if Path(jar).exists():
            return jar
    raise RuntimeError("no MariaDB JDBC driver: apt-get install libmariadb-java")


def spark_conf() -> list[str]:
    """``SPARK_SETTINGS`` as ``--conf KEY=VALUE`` arguments (spark-submit's and spark_jdbc.py's)."""
    return [arg for key, value in SPARK_SETTINGS.items() for arg in ("--conf", f"{key}={value}")]


def spark_jdbc(server, table: str, out: Path, partitions: int = 4, fetchsize: int = 10_000,
               log_path: Path | None = None, database: str = "tpch") -> Timed:
    """Spark's JDBC source with partitionColumn -> Spark's Parquet writer, local[2] (benchmarks/spark_jdbc.py)."""
    cmd = [PYTHON, str(HERE / "spark_jdbc.py"), "--url", f"jdbc:mysql://127.0.0.1:{server.port}/{database}",
           "--user", "root", "--table", table, "--partition-column", KEYS[table][0],
           "--partitions", str(partitions), "--fetchsize", str(fetchsize), "--jar", jdbc_jar(),
           "--master", SPARK_MASTER, "--out", str(out), *spark_conf()]
    return run_timed(cmd, log_path)


def dblog_run(server, table: str, state: Path, sink: Path, chunk_size: int, watermark: str = "auto",
              batch_size: int = 10_000, log_path: Path | None = None, extra_args: Sequence[str] = ()) -> Timed:
    cmd = [DBLOG, "run", "--source", server.uri(), "--table", table, "--state", str(state), "--sink", str(sink),
           "--chunk-size", str(chunk_size), "--batch-size", str(batch_size), "--watermark", watermark, *extra_args]
    result = run_timed(cmd, log_path)
    if log_path:
        result.extra = parse_dblog_log(log_path.read_text(errors="replace"), result.started_at,
                                       result.started_at + result.seconds)
    return result


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) dblog INFO (.*)$", re.M)


def parse_dblog_log(text: str, started_at: float = 0.0, ended_at: float = 0.0) -> dict:
    """Phase timings from dblog's own log lines: planning, the Spark snapshot job, chunk reads; with
    the process's start/end, the wall-clock phases of `dblog run` (log times are local time)."""
    out: dict = {}
    stamps = []
    for stamp, message in _STAMP.findall(text):
        epoch = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:]) / 1000
        stamps.append((epoch, message))

    def first(prefix: str):
        return next((t for t, m in stamps if m.startswith(prefix)), None)

    if started_at and stamps:
        planned, batch = first("planned "), first("run: batch 1/")
        report = first("report: ")
        snap_end = max((t for t, m in stamps if m.startswith("snapshot ") and " rows in " in m), default=None)
        tail_end = next((t for t, m in stamps if m.startswith("tail: ") and " rows in " in m), None)
        marks = [("start_and_plan_s", started_at, planned), ("spark_start_s", planned, batch),
                 ("snapshot_job_s", batch, snap_end), ("report_s", snap_end, report),
                 ("tail_s_total", report, tail_end), ("exit_s", tail_end, ended_at)]
        out["phases"] = {name: round(b - a, 2) for name, a, b in marks if a and b}
    m = re.search(r"planned \S+: (\d+) chunks .* in ([\d.]+)s", text)
    if m:
        out["chunks"], out["plan_s"] = int(m.group(1)), float(m.group(2))
    snaps = re.findall(r"snapshot \S+: \d+/\d+ chunks, (\d+) rows in ([\d.]+)s", text)
    if snaps:
        out["snapshot_rows"] = sum(int(r) for r, _ in snaps)
        out["snapshot_s"] = sum(float(s) for _, s in snaps)
    chunk_s = [float(s) for s in re.findall(r"chunk \S+/\d+ .* with \d+ events, ([\d.]+)s", text)]
    if chunk_s:
        out["chunk_s_sum"], out["chunk_s_max"] = round(sum(chunk_s), 2), max(chunk_s)
    events = [int(e) for e in re.findall(r"with (\d+) events, [\d.]+s", text)]
    if events:
        out["window_events"] = sum(events)
    m = re.search(r": (\d+) chunks read in the driver", text)
    if m:
        out["driver_chunks"] = int(m.group(1))
    m = re.search(r"tail: \{[^}]*\} rows in ([\d.]+)s", text)
    if m:
        out["tail_s"] = float(m.group(1))
    return out


def airflow_path(server, table: str, state: Path, sink: Path, chunk_size: int, watermark: str = "auto",
                 batch_size: int = 10_000, log_dir: Path | None = None) -> Timed:
    """The path Airflow runs, as whole processes one after another: `dblog plan` (the planner task),
    one `spark-submit cli/spark_app.py snapshot --batch I` per batch (the mapped tasks; the stock Spark
    session with ``SPARK_SETTINGS``, none of dblog's local start-up tuning), `dblog report`. ``seconds`` is their sum."""
    code = Path(CODE["pythonpath"]) if CODE["pythonpath"] else ROOT
    app = code / "airflow_provider_dblog" / "cli" / "spark_app.py"
    submit = str(Path(PYTHON).parent / "spark-submit")
    logs = (lambda name: log_dir / name) if log_dir else (lambda name: None)
    plan = dblog(["plan", "--source", server.uri(), "--table", table, "--state", str(state), "--chunk-size",
                  str(chunk_size), "--batch-size", str(batch_size), "--watermark", watermark], logs("plan.log"))
    steps = [plan]
    for batch in plan.json()["batches"]:
        steps.append(run_timed([submit, "--master", SPARK_MASTER, *spark_conf(), str(app), "snapshot", "--state", str(state),
                                "--batch", str(batch["batch"]), "--sink", str(sink)], logs(f"batch-{batch['batch']}.log")))
    report = dblog(["report", "--state", str(state)], logs("report.log"))
    steps.append(report)
    return Timed(sum(t.seconds for t in steps), 0, report.stdout, None, steps[0].load_before, report.load_after,
                 extra={"processes": len(steps), "batches": len(steps) - 2,
                        "snapshot_s": round(sum(t.seconds for t in steps[1:-1]), 2)},
                 started_at=steps[0].started_at)


def dblog(args: list[str], log_path: Path | None = None, check: bool = True) -> Timed:
    return run_timed([DBLOG, *args], log_path, check=check)


# ---- writers --------------------------------------------------------------------------------
class PacedThread(threading.Thread):
    """Runs one transaction (``write``) every ``tick`` seconds until ``stop()``. Catches up after a late tick
    instead of drifting, so the achieved rate is the asked one unless the server cannot keep up
    (``achieved_rate`` tells). Subclasses say how to connect (``open``) and what a transaction writes."""

    def __init__(self, rate: float, tick: float):
        super().__init__(daemon=True)
        self.rate, self.tick = rate, tick
        self.per_tick = max(1, round(rate * tick))
        self.stop_event = threading.Event()
        self.rows = 0
        self.transactions = 0
        self.started_at = self.ended_at = 0.0
        self.error: BaseException | None = None

    def open(self):
        raise NotImplementedError

    def write(self, cur) -> None:
        """One transaction of ``per_tick`` rows."""
        raise NotImplementedError

    def run(self) -> None:
        try:
            conn = self.open()
            cur = conn.cursor()
            self.started_at = next_tick = time.time()
            while not self.stop_event.is_set():
                self.write(cur)
                self.transactions += 1
                self.rows += self.per_tick
                next_tick += self.tick
                delay = next_tick - time.time()
                if delay > 0:
                    time.sleep(delay)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            self.ended_at = time.time()

    def stop(self) -> dict:
        self.stop_event.set()
        self.join(30)
        if self.error:
            raise RuntimeError(f"writer failed: {self.error!r}")
        elapsed = max(self.ended_at - self.started_at, 1e-6)
        return {"rows": self.rows, "transactions": self.transactions, "seconds": round(elapsed, 2),
                "achieved_rate": round(self.rows / elapsed, 1), "asked_rate": self.rate}


class PacedWriter(PacedThread):
    """Changes ``rate`` rows per second of a MariaDB table: every ``tick`` seconds one transaction updating
    ``rate * tick`` rows (an UPDATE ... WHERE key IN (...)); ``on_commit(token, time, rows)`` after each."""

    def __init__(self, server, table: str, rate: float, keys: list, key_columns: tuple[str, ...],
                 set_sql: str, tick: float = 0.01, token_start: int = 1, on_commit=None, seed: int = 7):
        super().__init__(rate, tick)
        self.server, self.table, self.keys = server, table, keys
        self.key_columns, self.set_sql = key_columns, set_sql
        self.token = token_start
        self.on_commit = on_commit
        self.random = random.Random(seed)
        cols = ", ".join(key_columns)
        one = "(" + ", ".join(["%s"] * len(key_columns)) + ")"
        where = f"({cols}) IN ({', '.join([one] * self.per_tick)})" if len(key_columns) > 1 else \
            f"{cols} IN ({', '.join(['%s'] * self.per_tick)})"
        self.sql = f"UPDATE {table} SET {set_sql} WHERE {where}"

    def open(self):
        return connect(self.server)

    def write(self, cur) -> None:
        picked = self.random.sample(self.keys, self.per_tick)
        args = [self.token] if "%s" in self.set_sql else []
        for key in picked:
            args.extend(key if isinstance(key, (tuple, list)) else (key,))
        cur.execute(self.sql, args)  # autocommit: one transaction
        committed = time.time()
        if self.on_commit:
            self.on_commit(self.token, committed, self.per_tick)
        self.token += 1


def sample_keys(server, table: str, n: int, seed: int = 11) -> list:
    cols = ", ".join(KEYS[table])
    rows = server.sql(f"SELECT {cols} FROM tpch.{table} WHERE RAND({seed}) < 0.2 LIMIT {int(n)}")
    return [r[0] if len(r) == 1 else tuple(r) for r in rows]


# ---- lake watcher (commit -> lake latency) --------------------------------------------------
class LakeWatcher(threading.Thread):
    """Polls a Delta table's log (the lake's changelog): a row counts as *in the lake* only once a
    committed version adds its file (what any Delta reader sees; files written but not committed are
    invisible). For every newly added file it reads the ``token`` column and records the first time
    each token was seen."""

    def __init__(self, table_dir: Path, poll: float = 0.02, column: str = "token"):
        super().__init__(daemon=True)
        self.table_dir, self.poll, self.column = Path(table_dir), poll, column
        self.seen_logs: set[str] = set()
        self.visible: dict[int, float] = {}
        self.batches = 0
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def scan(self) -> None:
        import urllib.parse

        import pyarrow.parquet as pq

        log_dir = self.table_dir / "_delta_log"
        if not log_dir.exists():
            return
        names = [n for n in os.listdir(log_dir) if re.fullmatch(r"\d{20}\.json", n) and n not in self.seen_logs]
        for name in sorted(names):
            now = time.time()
            self.seen_logs.add(name)
            adds = [json.loads(line)["add"] for line in (log_dir / name).read_text().splitlines()
                    if line.startswith('{"add"')]
            if not adds:
                continue
            self.batches += 1
            for add in adds:
                path = self.table_dir / urllib.parse.unquote(add["path"])
                tokens = pq.read_table(path, columns=[self.column]).column(0).to_pylist()
                for token in tokens:
                    if token is not None and token not in self.visible:
                        self.visible[token] = now

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.scan()
                time.sleep(self.poll)
            self.scan()
        except BaseException as exc:  # noqa: BLE001
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        if self.error:
            raise RuntimeError(f"lake watcher failed: {self.error!r}")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


# ---- machine --------------------------------------------------------------------------------
def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    try:
        import pyspark

        spark_version = pyspark.__version__
    except Exception:  # noqa: BLE001
        spark_version = None
    versions = {}
    for pkg in ("connectorx", "pyarrow", "mysql-replication", "pymysql"):
        try:
            from importlib.metadata import version

            versions[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            versions[pkg] = None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb, "os": platform.platform(),
            "python": platform.python_version(), "java": java[0] if java else None, "pyspark": spark_version,
            **versions}
