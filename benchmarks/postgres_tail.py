"""PostgreSQL captures (issue 26, the bench part): tail rows/s into the lake against psycopg2 + ``test_decoding``,
commit -> lake latency under a paced writer, WAL held by an idle capture, and the snapshot against Spark JDBC.

In a private PostgreSQL 15 (``tests/support/local_postgres.LocalPostgres``, ``wal_level=logical``, fsync off) on
this machine, with an orders-like table ``public.orders`` (TPC-H ``orders``' columns plus text, timestamptz and
bool: bigint key, int, char(1), numeric(15,2), date, char(15), varchar(15), int, varchar(79), text, timestamptz,
bool), ``--rows`` rows captured by ``dblog run --source postgresql://... --tables public.orders``:

* ``tail``: a ``test_decoding`` slot is created, then ``--changes`` row changes are committed (transactions of
  ``--tx-rows`` rows: 70 % UPDATEs of random existing rows, 30 % INSERTs of new ones). Timed as whole processes,
  the order alternating between rounds: ``dblog tail --available-now`` (in the driver: ``--driver-catch-up-mb``
  large enough for the range; with ``--spark`` also ``--driver-catch-up-mb 0``, the streaming query), and the
  baseline "what a Python user writes first": psycopg2 reading ``pg_logical_slot_peek_changes`` of the
  ``test_decoding`` slot through a server-side cursor and parsing each row's text line into a dict of typed
  Python values (int, Decimal, date, datetime, bool, str), no lake; and beside it the consumer psycopg2's own
  documentation shows for logical replication (``LogicalReplicationConnection``, ``start_replication(decode=True)``,
  ``consume_stream``) with the same parse (``ratio_to_stream``). Each round has new changes; after a round
  the baseline's slot is advanced past them. ``--profile`` runs one more in-driver tail under cProfile.
* ``latency``: ``dblog tail --continuous --trigger-seconds T``; a writer commits ``--rate`` row changes/s (a
  transaction of rate/100 UPDATEs every 10 ms) for ``--latency-seconds``. Afterwards, per change in the
  changelog Delta table: the time its version became visible (the mtime of ``_delta_log/N.json``; also
  ``commitInfo.timestamp``) minus the source commit time (``_ts_ms``, pgoutput's commit timestamp); likewise
  the first version of ``current`` that holds the change.
* ``wal``: the same continuous tail while a writer changes only an uncaptured table (``public.noise``) for
  ``--idle-seconds``; every 3 s ``pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)`` and ``..., confirmed_flush_lsn)``
  of the capture's slot (``STATE/plan.json`` options.slot).
* ``tpch``: TPC-H ``orders`` and ``lineitem`` at ``--tpch-scale`` (tpchgen-cli) loaded with COPY, each read by
  ``dblog run --startup snapshot-only`` and by Spark's JDBC source (the snapshot target as for MySQL: ≥ 2× it).
* ``snapshot``: a ``--snapshot-rows`` copy of the table (``public.big``), read by ``dblog run --startup
  snapshot-only``, by Spark's JDBC source (Debian's ``libpostgresql-jdbc-java``, 4 partitions, local[2], Spark
  Parquet writer: benchmarks/spark_jdbc.py's method) and by a psycopg2 server-side cursor (Python rows only).

    .venv/bin/python benchmarks/postgres_tail.py --parts tail,latency,wal,snapshot --changes 500000

Results: docs/benchmark-runs/REV-postgres-tail-results.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import (  # noqa: E402
    BENCH_DIR, DBLOG, PYTHON, ROOT, SPARK_MASTER, PacedThread, bench_env, code_version, log, machine_info,
    percentile, run_timed, spark_conf,
)

TABLE = "public.orders"
TABLE_SQL = """CREATE TABLE {name} (
    o_orderkey bigint PRIMARY KEY, o_custkey int NOT NULL, o_orderstatus char(1) NOT NULL,
    o_totalprice numeric(15,2) NOT NULL, o_orderdate date NOT NULL, o_orderpriority char(15) NOT NULL,
    o_clerk varchar(15) NOT NULL, o_shippriority int NOT NULL, o_comment varchar(79) NOT NULL, o_note text,
    o_updated timestamptz NOT NULL, o_open bool NOT NULL)"""
ROWS_SQL = """SELECT g, (g * 7919) % 150000 + 1, (ARRAY['O','F','P'])[g % 3 + 1],
    ((g * 104729) % 50000000) / 100.0 + 900, date '1992-01-01' + (g % 2400)::int,
    (ARRAY['1-URGENT','2-HIGH','3-MEDIUM','4-NOT SPECIFIED','5-LOW'])[g % 5 + 1],
    'Clerk#' || lpad(((g * 31) % 1000)::text, 9, '0'), 0, left(md5(g::text) || ' carefully final deposits', 60),
    'note ' || g, {updated}, g % 2 = 0 FROM generate_series({lo}::bigint, {hi}::bigint) g"""
TD_SLOT = "bench_test_decoding"


# ---- the server -------------------------------------------------------------------------------------------
def start_server(work: Path):
    from tests.support.local_postgres import LocalPostgres

    server = LocalPostgres(work / "pg", settings=("shared_buffers=256MB", "max_wal_size=2GB",
                                                          # commits flushed as on a production server (fsync
                                                          # stays off): decoding reads flushed WAL only
                                                          "synchronous_commit=on")).start()
    server.sql("CREATE DATABASE bench")
    return server


def connect(server, autocommit: bool = True):
    import psycopg2

    conn = psycopg2.connect(server.dsn("bench"))
    conn.autocommit = autocommit
    return conn


def fill(server, name: str, rows: int) -> None:
    server.sql(TABLE_SQL.format(name=name),
               f"INSERT INTO {name} " + ROWS_SQL.format(
                   lo=1, hi=rows, updated="timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'"),
               f"VACUUM ANALYZE {name}", db="bench")


def lsn(server) -> str:
    return server.sql("SELECT pg_current_wal_lsn()::text", db="bench")[0][0]


def wal_bytes(server, lo: str, hi: str) -> int:
    return int(server.sql(f"SELECT pg_wal_lsn_diff('{hi}', '{lo}')::bigint", db="bench")[0][0])


def write_changes(server, n: int, tx_rows: int, next_key: int, keys_upto: int, seed: int) -> tuple[int, dict]:
    """``n`` row changes in transactions of ``tx_rows``: 70 % UPDATEs of random existing rows, 30 % INSERTs."""
    rnd = random.Random(seed)
    conn = connect(server, autocommit=False)
    started = time.perf_counter()
    done = txs = 0
    with conn.cursor() as cur:
        while done < n:
            rows = min(tx_rows, n - done)
            inserts = rows * 3 // 10
            updates = rows - inserts
            keys = rnd.sample(range(1, keys_upto + 1), updates)
            cur.execute("UPDATE public.orders SET o_totalprice = o_totalprice + 1, o_shippriority = o_shippriority + 1, "
                        "o_updated = clock_timestamp(), o_open = NOT o_open WHERE o_orderkey = ANY(%s)", (keys,))
            if inserts:
                cur.execute("INSERT INTO public.orders " + ROWS_SQL.format(
                    lo=next_key, hi=next_key + inserts - 1, updated="clock_timestamp()"))
                next_key += inserts
            conn.commit()
            done += rows
            txs += 1
    conn.close()
    return next_key, {"rows": done, "transactions": txs, "seconds": round(time.perf_counter() - started, 2)}


# ---- the baseline: psycopg2 + test_decoding ---------------------------------------------------------------
_COLUMN = re.compile(r"(\w+)\[([^\]]+)\]:('(?:[^']|'')*'|\S+)")


def _typed(kind: str, text: str):
    if text == "null":
        return None
    if text.startswith("'"):
        text = text[1:-1].replace("''", "'")
    if kind in ("integer", "bigint", "smallint"):
        return int(text)
    if kind.startswith("numeric"):
        return Decimal(text)
    if kind == "boolean":
        return text == "true"
    if kind == "date":
        return dt.date.fromisoformat(text)
    if kind.startswith("timestamp"):
        return dt.datetime.fromisoformat(text)
    return text


def _change_of(line: str) -> tuple[str, str, dict]:
    """A ``test_decoding`` change line as (table, operation, its columns as typed Python values)."""
    head, _, rest = line.partition(": ")
    op, _, columns = rest.partition(": ")
    return head[6:], op, {name: _typed(kind, value) for name, kind, value in _COLUMN.findall(columns)}


def child_test_decoding(dsn: str, slot: str, upto: str, parse: bool) -> dict:
    """What a Python user writes first: every change of the slot up to ``upto`` as a dict of typed values."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    started = time.perf_counter()
    cur = conn.cursor(name="changes")
    cur.itersize = 5000
    cur.execute("SELECT data FROM pg_logical_slot_peek_changes(%s, %s::pg_lsn, NULL)", (slot, upto))
    rows, ops, lines = 0, {}, 0
    last = None
    for (line,) in cur:
        lines += 1
        if not line.startswith("table "):
            continue
        rows += 1
        if not parse:
            continue
        last = _change_of(line)
        ops[last[1]] = ops.get(last[1], 0) + 1
    conn.rollback()
    conn.close()
    return {"rows": rows, "lines": lines, "ops": ops, "seconds": round(time.perf_counter() - started, 3),
            "last": repr(last)[:300]}


def child_test_decoding_stream(dsn: str, slot: str, expect: int) -> dict:
    """The other thing a Python user writes first, the consumer psycopg2's documentation shows for logical
    replication: a ``LogicalReplicationConnection``, ``start_replication(decode=True)`` on the ``test_decoding``
    slot and ``consume_stream``, each change parsed as ``child_test_decoding`` does; it stops at the commit after
    ``expect`` changes. No feedback is sent: the slot stays where it was for the other readers."""
    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    started = time.perf_counter()
    cur = conn.cursor()
    cur.start_replication(slot_name=slot, decode=True)
    seen = {"rows": 0, "lines": 0, "ops": {}, "last": None}

    def consume(msg) -> None:
        line = msg.payload
        seen["lines"] += 1
        if line.startswith("table "):
            seen["rows"] += 1
            seen["last"] = change = _change_of(line)
            seen["ops"][change[1]] = seen["ops"].get(change[1], 0) + 1
        elif seen["rows"] >= expect and line.startswith("COMMIT"):
            raise psycopg2.extras.StopReplication

    try:
        cur.consume_stream(consume)
    except psycopg2.extras.StopReplication:
        pass
    conn.close()
    return {**seen, "seconds": round(time.perf_counter() - started, 3), "last": repr(seen["last"])[:300]}


def child_pgoutput_fetch(dsn: str, slot: str, publication: str, upto: str) -> dict:
    """The floor of any reader of the capture's own ``pgoutput`` slot: a process that starts, peeks every message
    up to ``upto`` as ``bytes`` and counts them (no decoding, no lake). Whatever dblog does beyond this is decoding
    and committing; what the baseline does beyond its own fetch-only child is parsing."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    started = time.perf_counter()
    cur = conn.cursor(name="messages")
    cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, 'proto_version', '1', "
                "'publication_names', %s)", (slot, upto, publication))
    messages = rows = 0
    while batch := cur.fetchmany(5000):
        payloads = [bytes(data) for data, in batch]
        messages += len(payloads)
        rows += sum(1 for m in payloads if m[:1] in (b"I", b"U", b"D"))
    conn.rollback()
    conn.close()
    return {"rows": rows, "messages": messages, "seconds": round(time.perf_counter() - started, 3)}


def child_breakdown(state_dir: str, lo: str, hi: str) -> dict:
    """dblog's in-driver read of ``(lo, hi]`` stage by stage, each a separate peek of the capture's slot (nothing
    consumed): the slot's messages fetched, + decoded (pgoutput), + change events (typed values, positions), +
    lake rows (emit rule, chunk of each key, Arrow); no Delta commit."""
    from airflow_provider_dblog.core.positions import lsn_position
    from airflow_provider_dblog.readers.change_reader import ChangeReader, TableStream
    from airflow_provider_dblog.source import open_dialect
    from airflow_provider_dblog.source.postgres import pgoutput
    from airflow_provider_dblog.store.state import StateDir

    state = StateDir(state_dir)
    offsets = state.offsets()
    metas = {name: state.table(name).meta for name in offsets}
    start, end = lsn_position(pgoutput.parse_lsn(lo)), lsn_position(pgoutput.parse_lsn(hi))
    out = {}

    def timed(name, fn):
        dialect = open_dialect(state.source(), state.options())
        started = time.perf_counter()
        count = fn(dialect)
        out[name] = {"seconds": round(time.perf_counter() - started, 2), "items": count}
        dialect.close()

    timed("fetch", lambda d: sum(1 for _ in d.stream._messages(pgoutput.parse_lsn(hi))))
    timed("decode", lambda d: sum(1 for p in d.stream._messages(pgoutput.parse_lsn(hi)) if pgoutput.decode(p)))
    timed("events", lambda d: sum(1 for _ in d.stream.changes(start, end, list(metas.values()))))
    streams = {name: TableStream(metas[name], offsets[name], start) for name in metas}
    timed("rows", lambda d: sum(b.num_rows for _, b in ChangeReader(streams, d).batches(end)
                                if hasattr(b, "num_rows")))
    return out


def child_psycopg_scan(dsn: str, table: str) -> dict:
    """A psycopg2 server-side cursor reading every row as Python values (no Arrow, no lake)."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    started = time.perf_counter()
    cur = conn.cursor(name="scan")
    cur.itersize = 10_000
    cur.execute(f"SELECT * FROM {table}")
    rows = sum(1 for _ in cur)
    conn.close()
    return {"rows": rows, "seconds": round(time.perf_counter() - started, 3)}


def child_spark_jdbc(url: str, table: str, column: str, partitions: int, jar: str, out: str, conf: list[str]) -> dict:
    """Spark's JDBC source with partitionColumn -> Spark's Parquet writer (benchmarks/spark_jdbc.py's method,
    PostgreSQL's driver)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(SPARK_MASTER).appName("bench-pg-spark-jdbc")
               .config("spark.jars", jar).config("spark.sql.session.timeZone", "UTC"))
    for setting in conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    started = time.perf_counter()
    props = {"user": "postgres", "password": "", "driver": "org.postgresql.Driver", "fetchsize": "10000"}
    bounds = spark.read.jdbc(url, f"(SELECT MIN({column}) AS lo, MAX({column}) AS hi FROM {table}) b",
                             properties=props).first()
    frame = spark.read.jdbc(url, table, column=column, lowerBound=int(bounds["lo"]), upperBound=int(bounds["hi"]) + 1,
                            numPartitions=partitions, properties=props)
    frame.write.mode("overwrite").parquet(out)
    job_s = time.perf_counter() - started
    spark.stop()
    return {"job_s": round(job_s, 3)}


def run_child(args: list[str], log_path: Path) -> tuple[float, dict]:
    timed = run_timed([PYTHON, str(Path(__file__).resolve()), "child", *args], log_path)
    return timed.seconds, timed.json()


# ---- dblog processes -----------------------------------------------------------------------------------------
def dblog_tail(state: Path, sink: Path, catch_up_mb: float, log_path: Path, profile: Path | None = None) -> dict:
    args = ["tail", "--state", str(state), "--sink", str(sink), "--available-now", "--driver-catch-up-mb",
            str(catch_up_mb)]
    cmd = [PYTHON, "-m", "cProfile", "-o", str(profile), DBLOG, *args] if profile else [DBLOG, *args]
    timed = run_timed(cmd, log_path)
    out = timed.json()
    return {"seconds": round(timed.seconds, 2), "load1_before": round(timed.load_before, 2), "summary": out}


def slot_name(state: Path) -> str:
    return json.loads((state / "plan.json").read_text())["options"]["slot"]


def slot_figures(server, slot: str) -> tuple[int, int]:
    held, unconfirmed = server.sql(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, "
        "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots "
        f"WHERE slot_name = '{slot}'", db="bench")[0]
    return int(held), int(unconfirmed)


def bench_tail(server, work: Path, state: Path, sink: Path, args, results: dict, next_key: int) -> int:
    out = results.setdefault("tail", {"changes_per_round": args.changes, "tx_rows": args.tx_rows, "rounds": []})
    server.sql(f"SELECT pg_create_logical_replication_slot('{TD_SLOT}', 'test_decoding')", db="bench")
    variants = ["driver"] * args.rounds + (["spark"] if args.spark else [])
    for i, variant in enumerate(variants):
        lo = lsn(server)
        next_key, wrote = write_changes(server, args.changes, args.tx_rows, next_key, args.rows, seed=100 + i)
        server.sql("CHECKPOINT", db="bench")
        hi = lsn(server)
        wal = wal_bytes(server, lo, hi)
        log(f"round {i} ({variant}): {wrote['rows']} changes in {wrote['transactions']} transactions, "
            f"{wal / 2**20:.0f} MB of WAL, in {wrote['seconds']}s")
        rnd = {"variant": variant, "writer": wrote, "wal_bytes": wal}

        def baseline() -> None:
            seconds, got = run_child(["test-decoding", server.dsn("bench"), TD_SLOT, hi, "parse"],
                                     work / "logs" / f"td-{i}.log")
            rnd["test_decoding"] = {"seconds": round(seconds, 2), "rows_per_s": round(got["rows"] / seconds), **got}
            log(f"  test_decoding + parse: {got['rows']} rows in {seconds:.1f}s = {got['rows'] / seconds:,.0f} rows/s")

        def tail() -> None:
            mb = 0 if variant == "spark" else max(64, wal / 2**20 * 2)
            got = dblog_tail(state, sink, mb, work / "logs" / f"tail-{i}.log")
            rows = sum(got["summary"].get("rows", {}).values())
            got["rows_per_s"] = round(rows / got["seconds"])
            rnd["dblog_tail"] = {"driver_catch_up_mb": mb, **got}
            log(f"  dblog tail ({variant}): {rows} rows in {got['seconds']:.1f}s = {got['rows_per_s']:,} rows/s")

        def streamed() -> None:  # the slot's changes through psycopg2's documented replication consumer
            seconds, got = run_child(["test-decoding-stream", server.dsn("bench"), TD_SLOT, str(wrote["rows"])],
                                     work / "logs" / f"td-stream-{i}.log")
            rnd["test_decoding_stream"] = {"seconds": round(seconds, 2), "rows_per_s": round(got["rows"] / seconds),
                                           **got}
            log(f"  test_decoding through consume_stream + parse: {got['rows']} rows in {seconds:.1f}s = "
                f"{got['rows'] / seconds:,.0f} rows/s")

        steps = (baseline, tail) if i % 2 == 0 else (tail, baseline)
        steps[0]()
        streamed()
        if i == 0:  # the floor of a reader of dblog's own slot: fetching its pgoutput messages, nothing else
            options = json.loads((state / "plan.json").read_text())["options"]
            seconds, got = run_child(["pgoutput-fetch", server.dsn("bench"), options["slot"], options["publication"],
                                      hi], work / "logs" / "pgoutput-fetch.log")
            rnd["pgoutput_fetch_only"] = {"seconds": round(seconds, 2), "rows_per_s": round(got["rows"] / seconds),
                                          **got}
            log(f"  pgoutput (dblog's slot), fetch only: {seconds:.1f}s = {got['rows'] / seconds:,.0f} rows/s")
        if i == 0 and args.breakdown:  # dblog's read stage by stage (before the tail consumes the range)
            seconds, got = run_child(["breakdown", str(state), lo, hi], work / "logs" / "breakdown.log")
            rnd["dblog_breakdown"] = got
            log(f"  dblog read stage by stage: {got}")
        steps[1]()
        if i == 0:  # what the server's decoding alone costs the baseline (rows counted, not parsed)
            seconds, got = run_child(["test-decoding", server.dsn("bench"), TD_SLOT, hi, "count"],
                                     work / "logs" / f"td-count-{i}.log")
            rnd["test_decoding_fetch_only"] = {"seconds": round(seconds, 2), "rows_per_s": round(got["rows"] / seconds)}
            log(f"  test_decoding, fetch only: {seconds:.1f}s = {got['rows'] / seconds:,.0f} rows/s")
        rnd["ratio"] = round(rnd["dblog_tail"]["rows_per_s"] / rnd["test_decoding"]["rows_per_s"], 2)
        rnd["ratio_to_stream"] = round(rnd["dblog_tail"]["rows_per_s"] / rnd["test_decoding_stream"]["rows_per_s"], 2)
        if "pgoutput_fetch_only" in rnd:  # the best ratio a reader of the slot into the lake could reach (decoding
            # and committing free): what is left for them under the target is its ratio to ``ratio``
            rnd["ratio_ceiling"] = round(rnd["test_decoding"]["seconds"] / rnd["pgoutput_fetch_only"]["seconds"], 2)
        server.sql(f"SELECT pg_replication_slot_advance('{TD_SLOT}', '{hi}')", db="bench")
        out["rounds"].append(rnd)
        save(results)
    if args.profile:
        next_key, wrote = write_changes(server, args.changes, args.tx_rows, next_key, args.rows, seed=999)
        prof = work / "tail.prof"
        got = dblog_tail(state, sink, 100_000, work / "logs" / "tail-profile.log", profile=prof)
        out["profile"] = {"seconds_under_cprofile": got["seconds"], "summary": got["summary"],
                          "top": profile_summary(prof)}
        server.sql(f"SELECT pg_replication_slot_advance('{TD_SLOT}', pg_current_wal_lsn())", db="bench")
        log(f"  profiled tail: {got['seconds']}s")
    server.sql(f"SELECT pg_drop_replication_slot('{TD_SLOT}')", db="bench")
    return next_key


def profile_summary(path: Path, n: int = 40) -> dict:
    import pstats

    stats = pstats.Stats(str(path))
    rows = []
    for (file, line, func), (cc, nc, tt, ct, _) in stats.stats.items():
        rows.append({"function": f"{Path(file).name}:{line}({func})", "calls": nc, "tottime": round(tt, 2),
                     "cumtime": round(ct, 2), "where": file})
    by_cum = sorted(rows, key=lambda r: -r["cumtime"])[:n]
    by_tot = sorted(rows, key=lambda r: -r["tottime"])[:n]
    return {"by_cumtime": by_cum, "by_tottime": by_tot}


# ---- continuous tail: latency and WAL held while idle ------------------------------------------------------
def start_continuous(state: Path, sink: Path, trigger: float, merge_interval: float, log_path: Path
                     ) -> subprocess.Popen:
    err = open(log_path, "w")
    proc = subprocess.Popen([DBLOG, "tail", "--state", str(state), "--sink", str(sink), "--continuous",
                             "--trigger-seconds", str(trigger), "--merge-interval", str(merge_interval)],
                            env=bench_env(), stdout=err, stderr=err,
                            cwd=BENCH_DIR, start_new_session=True)
    err.close()
    return proc


def stop_process(proc: subprocess.Popen) -> int | None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def delta_versions(table_dir: Path) -> list[dict]:
    """Each version of a Delta table: its number, the mtime of its log entry, commitInfo.timestamp, added files."""
    log_dir = table_dir / "_delta_log"
    out = []
    for name in sorted(os.listdir(log_dir)):
        if not re.fullmatch(r"\d{20}\.json", name):
            continue
        path = log_dir / name
        adds, stamp = [], None
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                adds.append(table_dir / urllib.parse.unquote(action["add"]["path"]))
            elif "commitInfo" in action:
                stamp = action["commitInfo"].get("timestamp")
        out.append({"version": int(name[:20]), "mtime": path.stat().st_mtime, "commit_ts": stamp, "adds": adds})
    return out


def lake_delays(table_dir: Path, since: float, until: float) -> dict:
    """Per change whose source commit (``_ts_ms``) is in [since, until]: the time the first version holding it
    became visible minus that commit time (a change = its key and ``o_updated``, so ``current``'s rewrites of
    unchanged rows do not count again)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parts = []
    for version in delta_versions(table_dir):
        for path in version["adds"]:
            if not path.exists():
                continue
            t = pq.read_table(path, columns=["o_orderkey", "_ts_ms", "o_updated"])
            t = t.filter(pc.and_(pc.greater_equal(t["_ts_ms"], int(since * 1000)),
                                 pc.less_equal(t["_ts_ms"], int(until * 1000))))
            if t.num_rows:
                parts.append(t.append_column("mtime", pa.array([version["mtime"]] * t.num_rows, pa.float64()))
                             .append_column("commit_ts", pa.array([(version["commit_ts"] or 0) / 1000] * t.num_rows,
                                                                  pa.float64())))
    if not parts:
        return {"changes": 0}
    table = pa.concat_tables(parts).cast(pa.schema([("o_orderkey", pa.int64()), ("_ts_ms", pa.int64()),
                                                    ("o_updated", pa.timestamp("us", "UTC")),
                                                    ("mtime", pa.float64()), ("commit_ts", pa.float64())]))
    first = table.group_by(["o_orderkey", "o_updated"]).aggregate(
        [("mtime", "min"), ("commit_ts", "min"), ("_ts_ms", "min")])
    source = first["_ts_ms_min"].to_numpy() / 1000
    by_mtime = list(first["mtime_min"].to_numpy() - source)
    by_commit = list(first["commit_ts_min"].to_numpy() - source)
    updated = pc.divide(pc.cast(pc.cast(first["o_updated"], pa.timestamp("us")), pa.int64()), 1_000_000.0)
    by_updated = list(first["mtime_min"].to_numpy() - updated.to_numpy())
    return {"changes": first.num_rows,
            **{f"p{int(q * 100)}_s": round(percentile(by_mtime, q), 3) for q in (0.5, 0.9, 0.99)},
            "max_s": round(max(by_mtime), 3),
            "p99_s_commitinfo_timestamp": round(percentile(by_commit, 0.99), 3),
            "p99_s_from_clock_timestamp": round(percentile(by_updated, 0.99), 3)}


class Paced(PacedThread):
    """``rate`` row changes/s: every 10 ms one transaction of rate/100 rows (UPDATEs of random rows of
    ``public.orders``, or INSERTs into the noise table)."""

    def __init__(self, server, rate: int, keys_upto: int, noise: bool = False):
        super().__init__(rate, 0.01)
        self.server, self.keys_upto, self.noise = server, keys_upto, noise
        self.random = random.Random(5)

    def open(self):
        return connect(self.server)

    def write(self, cur) -> None:
        if self.noise:
            cur.execute("INSERT INTO public.noise (v) SELECT repeat('z', 100) FROM generate_series(1, %s)",
                        (self.per_tick,))
        else:
            cur.execute("UPDATE public.orders SET o_shippriority = o_shippriority + 1, o_updated = "
                        "clock_timestamp() WHERE o_orderkey = ANY(%s)",
                        (self.random.sample(range(1, self.keys_upto + 1), self.per_tick),))


def wait_for(predicate, timeout: float, poll: float = 0.5) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return False


def bench_continuous(server, work: Path, state: Path, sink: Path, args, results: dict) -> None:
    intervals = args.merge_intervals if "latency" in args.parts else args.merge_intervals[:1]
    for n, merge_interval in enumerate(intervals):
        parts = set(args.parts) - ({"wal"} if n < len(intervals) - 1 else set())
        continuous(server, work, state, sink, args, results, merge_interval, parts)


def continuous(server, work: Path, state: Path, sink: Path, args, results: dict, merge_interval: float,
               parts: set[str]) -> None:
    slot = slot_name(state)
    proc = start_continuous(state, sink, args.trigger_seconds, merge_interval,
                            work / "logs" / f"continuous-merge{merge_interval:g}.log")
    changelog = sink / TABLE / "changelog"
    try:
        # warm-up: one change until it is in the changelog (the query and its first micro-batch are up)
        before = len(delta_versions(changelog))
        started = time.time()
        server.sql("UPDATE public.orders SET o_shippriority = o_shippriority + 1 WHERE o_orderkey = 1", db="bench")
        if not wait_for(lambda: len(delta_versions(changelog)) > before or proc.poll() is not None, 180):
            raise RuntimeError("the continuous tail committed nothing within 180 s")
        if proc.poll() is not None:
            raise RuntimeError(f"the continuous tail exited with {proc.returncode}: see logs/continuous.log")
        log(f"continuous tail up: first change in the lake {time.time() - started:.1f}s after its commit")
        if "latency" in parts:
            time.sleep(3)
            writer = Paced(server, args.rate, args.rows)
            writer.start()
            time.sleep(args.latency_seconds)
            wrote = writer.stop()
            seen = [len(delta_versions(changelog)), time.time()]

            def settled() -> bool:  # no new changelog version for 5 s: the tail has committed what it read
                now = len(delta_versions(changelog))
                if now != seen[0]:
                    seen[:] = [now, time.time()]
                return time.time() - seen[1] >= 5

            caught = wait_for(settled, 90)
            lat = {"trigger_seconds": args.trigger_seconds, "merge_interval": merge_interval, "writer": wrote,
                   "caught_up": caught,
                   "changelog": lake_delays(changelog, writer.started_at - 0.5, writer.ended_at + 0.5),
                   "current": lake_delays(sink / TABLE / "current", writer.started_at - 0.5, writer.ended_at + 0.5)}
            lat["missing"] = wrote["rows"] - lat["changelog"]["changes"]
            results.setdefault("latency", []).append(lat)
            log(f"latency (--merge-interval {merge_interval:g}) at {wrote['achieved_rate']}/s: changelog {lat['changelog']}, current {lat['current']}")
            save(results)
        if "wal" in parts:
            samples = []
            writer = Paced(server, args.noise_rate, args.rows, noise=True)
            lo = lsn(server)
            writer.start()
            end = time.time() + args.idle_seconds
            while time.time() < end:
                held, unconfirmed = slot_figures(server, slot)
                samples.append({"t": round(time.time() - writer.started_at, 1), "held": held,
                                "unconfirmed": unconfirmed})
                time.sleep(3)
            wrote = writer.stop()
            written = wal_bytes(server, lo, lsn(server))
            time.sleep(5)
            held, unconfirmed = slot_figures(server, slot)
            results["wal"] = {"merge_interval": merge_interval, "writer": wrote, "wal_written_bytes": written, "samples": samples,
                              "max_held_bytes": max(s["held"] for s in samples),
                              "max_unconfirmed_bytes": max(s["unconfirmed"] for s in samples),
                              "after_5s": {"held": held, "unconfirmed": unconfirmed}}
            log(f"idle capture: {written / 2**20:.0f} MB of WAL written; slot held at most "
                f"{results['wal']['max_held_bytes'] / 2**20:.1f} MB (unconfirmed at most "
                f"{results['wal']['max_unconfirmed_bytes'] / 2**20:.1f} MB)")
            save(results)
    finally:
        code = stop_process(proc)
        results.setdefault("continuous_exit", []).append(code)


# ---- snapshot --------------------------------------------------------------------------------------------------
def jdbc_jar() -> str | None:
    """PostgreSQL's JDBC driver from Debian (``libpostgresql-jdbc-java``), installed when missing."""
    jar = "/usr/share/java/postgresql.jar"
    if not Path(jar).exists():
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "libpostgresql-jdbc-java"],
                       check=False, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return jar if Path(jar).exists() else None


def bench_snapshot(server, work: Path, args, results: dict) -> None:
    out = results.setdefault("snapshot", {"rows": args.snapshot_rows, "runs": []})
    started = time.perf_counter()
    fill(server, "public.big", args.snapshot_rows)
    log(f"public.big: {args.snapshot_rows} rows in {time.perf_counter() - started:.1f}s")
    jar = jdbc_jar()
    out["jdbc_jar"] = jar and os.path.realpath(jar)
    for r in range(args.repeat):
        run = {}
        state, sink = work / "snap-state", work / "snap-lake"
        for path in (state, sink):
            shutil.rmtree(path, ignore_errors=True)
        t = run_timed([DBLOG, "run", "--source", server.uri("bench"), "--tables", "public.big", "--startup",
                       "snapshot-only", "--state", str(state), "--sink", str(sink)], work / "logs" / f"snap-{r}.log")
        run["dblog_run"] = {"seconds": round(t.seconds, 2), "rows_per_s": round(args.snapshot_rows / t.seconds)}
        seconds, got = run_child(["psycopg-scan", server.dsn("bench"), "public.big"], work / "logs" / f"scan-{r}.log")
        run["psycopg2_scan"] = {"seconds": round(seconds, 2), "rows_per_s": round(got["rows"] / seconds)}
        if jar:
            target = work / "spark-jdbc.parquet"
            shutil.rmtree(target, ignore_errors=True)
            url = f"jdbc:postgresql://127.0.0.1:{server.port}/bench"
            seconds, got = run_child(["spark-jdbc", url, "public.big", "o_orderkey", "4", jar, str(target),
                                      *spark_conf()], work / "logs" / f"spark-jdbc-{r}.log")
            import pyarrow.parquet as pq

            rows = sum(pq.ParquetFile(p).metadata.num_rows for p in target.glob("*.parquet"))
            run["spark_jdbc"] = {"seconds": round(seconds, 2), "rows": rows, "rows_per_s": round(rows / seconds),
                                 **got}
        out["runs"].append(run)
        log(f"snapshot round {r}: {json.dumps(run)}")
        save(results)


# ---- TPC-H snapshot -------------------------------------------------------------------------------------------
class _TblLines:
    """A ``.tbl`` file as COPY text: each line without the trailing ``|`` TPC-H ends it with."""

    def __init__(self, path: Path):
        self.lines = (line[:-2] + b"\n" if line.endswith(b"|\n") else line for line in path.open("rb"))
        self.buffer = b""

    def read(self, size: int = 1 << 16) -> bytes:
        while len(self.buffer) < size:
            chunk = b"".join(next(self.lines, b"") for _ in range(2000))
            if not chunk:
                break
            self.buffer += chunk
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out


def bench_tpch(server, work: Path, args, results: dict) -> None:
    """TPC-H ``orders`` and ``lineitem`` (tpchgen-cli, ``--tpch-scale``) loaded into PostgreSQL with COPY, then
    per table ``dblog run --startup snapshot-only`` against Spark's JDBC source (partitioned on the first key
    column, 4 partitions, local[2], Parquet writer), whole processes timed, ``--repeat`` rounds."""
    from common import KEYS, SCHEMA, generate

    files = generate(args.tpch_scale)
    out = results.setdefault("tpch", {"scale": args.tpch_scale, "tables": {}})
    jar = jdbc_jar()
    out["jdbc_jar"] = jar and os.path.realpath(jar)
    server.sql("CREATE SCHEMA IF NOT EXISTS tpch", db="bench")
    for table in ("orders", "lineitem"):
        server.sql(SCHEMA[table].replace(" ENGINE=InnoDB", ""), db="bench")
        started = time.perf_counter()
        conn = connect(server)
        with conn.cursor() as cur:
            for path in files[table]:
                cur.copy_expert(f"COPY tpch.{table} FROM STDIN (FORMAT text, DELIMITER '|')", _TblLines(path))
        conn.close()
        server.sql(f"VACUUM ANALYZE tpch.{table}", db="bench")
        rows = int(server.sql(f"SELECT count(*) FROM tpch.{table}", db="bench")[0][0])
        entry = out["tables"].setdefault(table, {"rows": rows, "load_s": round(time.perf_counter() - started, 1),
                                                 "runs": []})
        log(f"tpch.{table}: {rows} rows loaded in {entry['load_s']}s")
        for r in range(args.repeat):
            run = {}
            state, sink = work / "tpch-state", work / "tpch-lake"
            for path in (state, sink):
                shutil.rmtree(path, ignore_errors=True)
            t = run_timed([DBLOG, "run", "--source", server.uri("bench"), "--tables", f"tpch.{table}", "--startup",
                           "snapshot-only", "--state", str(state), "--sink", str(sink)],
                          work / "logs" / f"tpch-{table}-{r}.log")
            run["dblog_run"] = {"seconds": round(t.seconds, 2), "rows_per_s": round(rows / t.seconds)}
            if jar:
                target = work / "tpch-spark-jdbc.parquet"
                shutil.rmtree(target, ignore_errors=True)
                url = f"jdbc:postgresql://127.0.0.1:{server.port}/bench"
                seconds, got = run_child(["spark-jdbc", url, f"tpch.{table}", KEYS[table][0], "4", jar, str(target),
                                          *spark_conf()], work / "logs" / f"tpch-spark-jdbc-{table}-{r}.log")
                import pyarrow.parquet as pq

                got_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in target.glob("*.parquet"))
                run["spark_jdbc"] = {"seconds": round(seconds, 2), "rows": got_rows,
                                     "rows_per_s": round(got_rows / seconds), **got}
                run["ratio"] = round(seconds / t.seconds, 2)
            entry["runs"].append(run)
            log(f"tpch.{table} round {r}: {json.dumps(run)}")
            save(results)


# ---- main --------------------------------------------------------------------------------------------------------
RESULTS: dict = {}


def save(results: dict) -> None:
    path = BENCH_DIR / "postgres-tail-results.json"
    path.write_text(json.dumps(results, indent=1, default=str))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="tail,latency,wal,snapshot")
    p.add_argument("--rows", type=int, default=200_000, help="rows of public.orders before the changes")
    p.add_argument("--changes", type=int, default=500_000, help="row changes per tail round")
    p.add_argument("--tx-rows", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2, help="in-driver tail rounds (the order alternates)")
    p.add_argument("--spark", action="store_true", help="one more round through the streaming query")
    p.add_argument("--profile", action="store_true", help="one more in-driver tail under cProfile")
    p.add_argument("--breakdown", action="store_true", help="time dblog's read stage by stage in round 0")
    p.add_argument("--trigger-seconds", type=float, default=0.5)
    p.add_argument("--rate", type=int, default=2000)
    p.add_argument("--merge-intervals", type=lambda v: [float(x) for x in v.split(",")], default=[0.0, 5.0],
                   help="a latency run per --merge-interval of the continuous tail (the last one also runs wal)")
    p.add_argument("--latency-seconds", type=float, default=60)
    p.add_argument("--noise-rate", type=int, default=2000, help="rows/s into the uncaptured table (wal)")
    p.add_argument("--idle-seconds", type=float, default=180)
    p.add_argument("--snapshot-rows", type=int, default=1_500_000)
    p.add_argument("--repeat", type=int, default=2, help="snapshot rounds")
    p.add_argument("--tpch-scale", type=float, default=1.0, help="TPC-H scale factor of the tpch part")
    p.add_argument("--code-rev", help="measure this git revision of airflow_provider_dblog (a baseline beside the "
                                      "working tree, exported under .bench/)")
    p.add_argument("--out", help="results JSON (default docs/benchmark-runs/REV-postgres-tail-results.json)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        kind, rest = argv[1], argv[2:]
        if kind == "test-decoding":
            got = child_test_decoding(rest[0], rest[1], rest[2], rest[3] == "parse")
        elif kind == "test-decoding-stream":
            got = child_test_decoding_stream(rest[0], rest[1], int(rest[2]))
        elif kind == "pgoutput-fetch":
            got = child_pgoutput_fetch(rest[0], rest[1], rest[2], rest[3])
        elif kind == "breakdown":
            got = child_breakdown(rest[0], rest[1], rest[2])
        elif kind == "psycopg-scan":
            got = child_psycopg_scan(rest[0], rest[1])
        else:
            got = child_spark_jdbc(rest[0], rest[1], rest[2], int(rest[3]), rest[4], rest[5],
                                   [c for c in rest[6:] if c != "--conf"])
        print(json.dumps(got))
        return 0
    args = parse_args(argv)
    if args.code_rev:
        common.export_revision(args.code_rev)
    args.parts = set(args.parts.split(","))
    work = BENCH_DIR / "postgres-tail"
    shutil.rmtree(work, ignore_errors=True)
    (work / "logs").mkdir(parents=True)
    results = RESULTS
    results.update({"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "machine": machine_info(), "code": code_version(), "args": {k: (sorted(v) if isinstance(v, set)
                                                                                   else v) for k, v in vars(args).items()}})
    server = start_server(work)
    try:
        results["server"] = server.sql("SHOW server_version", db="bench")[0][0]
        if args.parts & {"tail", "latency", "wal"}:
            started = time.perf_counter()
            fill(server, TABLE, args.rows)
            server.sql("CREATE TABLE public.noise (id bigserial PRIMARY KEY, v text)", db="bench")
            log(f"{TABLE}: {args.rows} rows in {time.perf_counter() - started:.1f}s")
            state, sink = work / "state", work / "lake"
            t = run_timed([DBLOG, "run", "--source", server.uri("bench"), "--tables", TABLE, "--state", str(state),
                           "--sink", str(sink)], work / "logs" / "run.log")
            results["capture"] = {"seconds": round(t.seconds, 2), "rows": args.rows, "slot": slot_name(state)}
            log(f"dblog run (snapshot + slot): {t.seconds:.1f}s")
            next_key = args.rows + 1
            if "tail" in args.parts:
                next_key = bench_tail(server, work, state, sink, args, results, next_key)
            if args.parts & {"latency", "wal"}:
                bench_continuous(server, work, state, sink, args, results)
        if "snapshot" in args.parts:
            bench_snapshot(server, work, args, results)
        if "tpch" in args.parts:
            bench_tpch(server, work, args, results)
    finally:
        results["ended"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        save(results)
        server.stop()
    out = Path(args.out) if args.out else (ROOT / "docs" / "benchmark-runs" /
                                           f"{results['code'].get('commit', 'local')}-postgres-tail-results.json")
    out.write_text(json.dumps(results, indent=1, default=str))
    log(f"wrote {out}")
    print(json.dumps({k: v for k, v in results.items() if k not in ("machine",)}, default=str)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
