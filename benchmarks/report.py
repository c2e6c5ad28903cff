"""Ratios, the console table, docs/benchmarks.md and docs/benchmarks.png from a results dict."""
from __future__ import annotations

import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = {"c_vs_b": 2.0, "c_vs_a": 0.5, "d_vs_c": 0.8, "tail_vs_decode": 1.0, "p99_500_s": 2.0}


def _rate(entry: dict | None) -> float | None:
    return entry.get("rows_per_s") if entry else None


def _div(a, b):
    return round(a / b, 2) if a is not None and b else None


def snapshot_ratios(t: dict) -> dict:
    cx = max((t[k] for k in ("a_cx_parquet_1", "a_cx_parquet_2") if k in t), key=_rate, default=None)
    quick = t.get("a_mariadb_quick")
    limit = max((e for e in (cx, quick) if e), key=_rate, default=None)
    c, b, d = t.get("c_dblog"), t.get("b_spark_jdbc"), t.get("d_dblog_writer")
    return {"a_cx": _rate(cx), "a_quick": _rate(quick), "a_limit": _rate(limit), "b": _rate(b), "c": _rate(c),
            "d": _rate(d), "c_vs_b": _div(_rate(c), _rate(b)), "c_vs_a_cx": _div(_rate(c), _rate(cx)),
            "c_vs_a": _div(_rate(c), _rate(limit)), "d_vs_c": _div(_rate(d), _rate(c))}


def job_rates(t: dict) -> dict:
    """Rows/s of the Spark job alone (JVM start and, for dblog, the catch-up tail excluded): of the
    run where Spark read every chunk if there is one, else of (c)."""
    b, c = t.get("b_spark_jdbc"), t.get("c_spark_only") or t.get("c_dblog")
    b_job = (b or {}).get("details", {}).get("job_s")
    # the job's own timer (the "snapshot DB.TABLE: n/m chunks, ... rows in Ts" lines): from the session
    # in hand to the last chunk, as JDBC's job_s
    c_job = (c or {}).get("details", {}).get("snapshot_s")
    rows = t.get("rows")
    c_rows = (c or {}).get("details", {}).get("snapshot_rows") or rows  # the chunks the dblog process left to Spark
    return {"b_job": round(rows / b_job, 1) if b_job else None, "c_job": round(c_rows / c_job, 1) if c_job else None,
            "c_vs_b_job": _div(c_job and c_rows / c_job, b_job and rows / b_job)}


def tail_ratios(tail: dict) -> dict:
    decode = tail.get("decode_pymysqlreplication", {})
    ours = tail.get("dblog_tail", {})
    spark = tail.get("dblog_tail_spark", {})
    return {"decode": decode.get("loop_rows_per_s"), "decode_process": decode.get("rows_per_s"),
            "mariadb_binlog": _rate(tail.get("decode_mariadb_binlog")), "tail": ours.get("rows_per_s"),
            "tail_query": ours.get("query_rows_per_s"), "tail_in_driver": ours.get("in_driver"),
            "tail_spark": spark.get("rows_per_s"), "tail_spark_query": spark.get("query_rows_per_s"),
            "tail_vs_decode": _div(ours.get("rows_per_s"), decode.get("loop_rows_per_s")),
            "tail_spark_vs_decode": _div(spark.get("rows_per_s"), decode.get("loop_rows_per_s")),
            "tail_query_vs_decode": _div((spark or ours).get("query_rows_per_s"), decode.get("loop_rows_per_s"))}


def _mark(value, target, higher_is_better=True) -> str:
    if value is None:
        return "n/a"
    ok = value >= target if higher_is_better else value <= target
    return "met" if ok else "MISSED"


def _fmt(v, unit="") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float) and v < 100:
        return f"{v:.2f}{unit}"
    return f"{v:,.0f}{unit}"


def summary_rows(results: dict) -> list[tuple[str, str, str, str]]:
    """(what, measured, target, verdict)"""
    rows = []
    for table, t in results.get("snapshot", {}).items():
        r = snapshot_ratios(t)
        airflow = t.get("c_airflow_path")
        if airflow:
            ratio = _div(_rate(airflow), r["b"])
            rows.append((f"{table}: **the Airflow path** (plan + one spark-submit per batch + report, whole processes) "
                         f"/ (b) Spark JDBC", _fmt(ratio, "×"), "≥ 2.0×", _mark(ratio, TARGETS["c_vs_b"])))
        rows.append((f"{table}: (c) `dblog run`, the local single-machine path / (b) Spark JDBC", _fmt(r["c_vs_b"], "×"), "≥ 2.0×",
                     _mark(r["c_vs_b"], TARGETS["c_vs_b"])))
        rows.append((f"{table}: (c) dblog / (a) limit (faster of connectorx→Parquet, mariadb --quick)",
                     _fmt(r["c_vs_a"], "×"), "≥ 0.5×", _mark(r["c_vs_a"], TARGETS["c_vs_a"])))
        rows.append((f"{table}: (c) dblog / (a) connectorx→Parquet only", _fmt(r["c_vs_a_cx"], "×"), "(≥ 0.5×)",
                     _mark(r["c_vs_a_cx"], TARGETS["c_vs_a"])))
        rows.append((f"{table}: (d) with writer / (c)", _fmt(r["d_vs_c"], "×"), "≥ 0.8×",
                     _mark(r["d_vs_c"], TARGETS["d_vs_c"])))
        spark_only = t.get("c_spark_only")
        if spark_only:
            ratio = _div(_rate(spark_only), r["b"])
            rows.append((f"{table}: `dblog run --driver-threads 0` (Spark's executors read every chunk, as "
                         f"`dblog snapshot` and the Airflow operators do) / (b)", _fmt(ratio, "×"), "(≥ 2.0×)",
                         _mark(ratio, TARGETS["c_vs_b"])))
        j = job_rates(t)
        if j["c_vs_b_job"]:
            which = ("the run where Spark read every chunk" if spark_only else
                     "dblog's job reads the chunks its process did not read while Spark started")
            rows.append((f"{table}: dblog / (b), rows/s of the Spark jobs only (JVM start and dblog's catch-up tail "
                         f"excluded; {which})",
                         _fmt(j["c_vs_b_job"], "×"), "(≥ 2.0×)", _mark(j["c_vs_b_job"], TARGETS["c_vs_b"])))
    if results.get("tail"):
        r = tail_ratios(results["tail"])
        where = " (read in the driver: a cold range under 64 MB)" if r["tail_in_driver"] else ""
        rows.append((f"tail: dblog tail (whole process){where} / python-mysql-replication decode",
                     _fmt(r["tail_vs_decode"], "×"), "≥ 1×", _mark(r["tail_vs_decode"], TARGETS["tail_vs_decode"])))
        if r["tail_spark"]:
            rows.append(("tail: dblog tail forced onto Spark's streaming query (whole process) / decode",
                         _fmt(r["tail_spark_vs_decode"], "×"), "(≥ 1×)",
                         _mark(r["tail_spark_vs_decode"], TARGETS["tail_vs_decode"])))
        rows.append(("tail: dblog streaming query only / decode", _fmt(r["tail_query_vs_decode"], "×"), "(≥ 1×)",
                     _mark(r["tail_query_vs_decode"], TARGETS["tail_vs_decode"])))
    b = results.get("latency", {}).get("burst")
    if b and results.get("tail"):
        decode = tail_ratios(results["tail"])["decode"]
        ratio = _div(b["rows_per_s"], decode)
        rows.append(("tail: running `tail --continuous`, catch-up of a burst / decode", _fmt(ratio, "×"), "(≥ 1×)",
                     _mark(ratio, TARGETS["tail_vs_decode"])))
    for rate, run in results.get("latency", {}).get("runs", {}).items():
        target = "≤ 2 s" if rate == "500" else "(none)"
        verdict = _mark(run["p99_s"], TARGETS["p99_500_s"], higher_is_better=False) if rate == "500" else "-"
        rows.append((f"latency p99 at {rate} changes/s", _fmt(run["p99_s"], " s"), target, verdict))
    return _informational(rows)


def _informational(rows: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
    """Rows whose target is in parentheses are context, not targets: their verdict is too."""
    return [(a, b, c, f"({d.lower()})" if c.startswith("(") and d not in ("-", "n/a") else d) for a, b, c, d in rows]


def table_text(results: dict) -> str:
    lines = []
    for table, t in results.get("snapshot", {}).items():
        r = snapshot_ratios(t)
        lines.append(f"{table} ({t['rows']:,} rows), rows/s: a mariadb --quick {_fmt(r['a_quick'])} | a connectorx→Parquet "
                     f"{_fmt(r['a_cx'])} | b Spark JDBC {_fmt(r['b'])} | c dblog {_fmt(r['c'])} | d dblog+writer "
                     f"{_fmt(r['d'])}")
    if results.get("tail"):
        r = tail_ratios(results["tail"])
        lines.append(f"tail ({results['tail']['changes']:,} changes), rows/s: python-mysql-replication "
                     f"{_fmt(r['decode'])} | mariadb-binlog -v {_fmt(r['mariadb_binlog'])} | dblog tail "
                     f"{_fmt(r['tail'])}" + (f" | on Spark {_fmt(r['tail_spark'])} (query only "
                                             f"{_fmt(r['tail_spark_query'])})" if r["tail_spark"] else
                                             f" (query only {_fmt(r['tail_query'])})"))
    rows = summary_rows(results)
    width = max((len(r[0]) for r in rows), default=10)
    lines.append("")
    lines.append(f"{'ratio':<{width}}  {'measured':>9}  {'target':>8}  verdict")
    for what, measured, target, verdict in rows:
        lines.append(f"{what:<{width}}  {measured:>9}  {target:>8}  {verdict}")
    return "\n".join(lines)


# ---- docs ---------------------------------------------------------------------------------------
def write_chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    snaps = results.get("snapshot", {})
    panels = len(snaps) + (1 if results.get("tail") else 0) + (1 if results.get("latency", {}).get("runs") else 0)
    cols_n = 2 if panels > 1 else 1
    rows_n = math.ceil(max(panels, 1) / cols_n)
    fig, grid = plt.subplots(rows_n, cols_n, figsize=(6.4 * cols_n, 4.4 * rows_n), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[panels:]:
        ax.axis("off")
    i = 0
    colors = {"a": "#7f7f7f", "b": "#d62728", "c": "#1f77b4", "d": "#6baed6"}
    for table, t in snaps.items():
        r = snapshot_ratios(t)
        jobs = job_rates(t)
        labels = ["(a) mariadb\n--quick", "(a) connectorx\n→Parquet", "(b) Spark\nJDBC", "(c) dblog\nrun",
                  "(d) dblog run\n+500 rows/s", "(b) job\nonly", "(c) job\nonly"]
        values = [r["a_quick"], r["a_cx"], r["b"], r["c"], r["d"], jobs["b_job"], jobs["c_job"]]
        cols = [colors["a"], colors["a"], colors["b"], colors["c"], colors["d"], "white", "white"]
        edges = ["none"] * 5 + [colors["b"], colors["c"]]
        ax = axes[i]
        ax.bar(labels, [(v or 0) / 1000 for v in values], color=cols, edgecolor=edges,
               hatch=[None] * 5 + ["//", "//"])
        for x, v in enumerate(values):
            if v:
                ax.text(x, v / 1000, f"{v / 1000:,.0f}k", ha="center", va="bottom", fontsize=8)
        ax.axvline(4.5, color="#cccccc", linewidth=0.8)
        ax.set_title(f"snapshot tpch.{table} ({t['rows'] / 1e6:.2f}M rows)")
        ax.set_ylabel("rows/s (thousands); hatched: Spark job only")
        ax.tick_params(axis="x", labelsize=7)
        i += 1
    if results.get("tail"):
        r = tail_ratios(results["tail"])
        ax = axes[i]
        if r["tail_spark"]:
            labels = ["python-mysql-\nreplication\ndecode", "available-now:\nwhole process\n(driver)",
                      "available-now\non Spark:\nwhole process", "on Spark:\nquery only"]
            values = [r["decode"], r["tail"], r["tail_spark"], r["tail_spark_query"]]
            colors_t = ["#7f7f7f", "#1f77b4", "#3182bd", "#6baed6"]
        else:
            labels = ["python-mysql-\nreplication\ndecode", "available-now:\nwhole process", "available-now:\nquery only"]
            values = [r["decode"], r["tail"], r["tail_query"]]
            colors_t = ["#7f7f7f", "#1f77b4", "#6baed6"]
        burst_ = results.get("latency", {}).get("burst")
        if burst_:
            labels.append("running\n--continuous:\nburst catch-up")
            values.append(burst_["rows_per_s"])
            colors_t.append("#08519c")
        ax.bar(labels, [(v or 0) / 1000 for v in values], color=colors_t)
        ax.axhline((r["decode"] or 0) / 1000, color="#7f7f7f", linestyle=":", linewidth=1)
        for x, v in enumerate(values):
            if v:
                ax.text(x, v / 1000, f"{v / 1000:,.1f}k", ha="center", va="bottom", fontsize=8)
        ax.set_title(f"dblog tail, {results['tail']['changes'] / 1000:.0f}k row changes\n"
                     f"(mariadb-binlog -v: {(r['mariadb_binlog'] or 0) / 1000:,.0f}k rows/s)", fontsize=10)
        ax.set_ylabel("row changes/s (thousands)")
        ax.tick_params(axis="x", labelsize=7)
        i += 1
    runs = results.get("latency", {}).get("runs", {})
    if runs:
        ax = axes[i]
        rates = list(runs)
        x = range(len(rates))
        ax.bar([j - 0.2 for j in x], [runs[r]["p50_s"] for r in rates], width=0.4, label="p50", color="#6baed6")
        ax.bar([j + 0.2 for j in x], [runs[r]["p99_s"] for r in rates], width=0.4, label="p99", color="#1f77b4")
        ax.axhline(2.0, color="#d62728", linestyle="--", linewidth=1, label="p99 target at 500/s")
        ax.set_xticks(list(x), [f"{r} changes/s" for r in rates])
        ax.set_ylabel("commit → lake latency (s)")
        ax.set_title(f"tail --continuous (trigger {results['latency']['trigger_seconds']} s)")
        ax.legend(fontsize=8)
    fig.suptitle(f"dblog benchmarks, TPC-H SF {results['meta']['scale']:g}, {results['meta']['date']}, "
                 f"{results['meta']['machine']['cores']} cores, Spark {results['meta']['spark_master']}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


PHASE_NAMES = {"start_and_plan_s": "start+plan", "spark_start_s": "Spark session", "snapshot_job_s": "snapshot job",
               "report_s": "report", "tail_s_total": "available-now tail", "exit_s": "exit"}


def _details(e: dict, keys: tuple[str, ...]) -> str:
    d = e.get("details", {})
    text = ", ".join(f"{k} {d[k]}" for k in keys if k in d)
    if "phases" in d:
        text += "; phases: " + ", ".join(f"{PHASE_NAMES.get(k, k)} {v} s" for k, v in d["phases"].items())
    return text


def markdown(results: dict) -> str:
    m = results["meta"]
    mach = m["machine"]
    out = ["# Benchmarks", "",
           "Generated by `benchmarks/run.py` (`make bench`); every figure comes from the one run described "
           "below. Ratios compare measurements taken minutes apart on the same machine with the same "
           "parallelism, never timings from elsewhere.", "",
           "![benchmarks](benchmarks.png)", "",
           "## Run", "",
           f"- date: {m['date']}; total run time {m.get('seconds', 0) // 60} min",
           f"- command: `{m['command']}` (TPC-H scale factor {m['scale']:g})",
           f"- code measured: airflow_provider_dblog at commit {m.get('code', {}).get('commit', '?')} "
           f"({m.get('code', {}).get('source', '?')})"
           + (f"; (a), (b), the chosen (c) setting and (d) ran {m['repeat']} times each, the best counts "
              f"(all runs are listed)" if m.get("repeat", 1) > 1 else ""),
           f"- machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory_gb']} GB RAM, {mach['os']}",
           f"- software: MariaDB {m.get('server', {}).get('version')} (private instance on the same machine, "
           f"innodb_buffer_pool_size {int(m.get('server', {}).get('innodb_buffer_pool_size') or 0) >> 20} MB), "
           f"{mach['java']}, pyspark {mach['pyspark']} `{m['spark_master']}`, Python {mach['python']}, "
           f"connectorx {mach['connectorx']}, pyarrow {mach['pyarrow']}, mysql-replication "
           f"{mach['mysql-replication']}",
           f"- machine load (1-minute average) at the start {m.get('load1_start')}, at the end "
           f"{m.get('load1_end')}; per-measurement values are in the tables below.",
           ]
    if m.get("note"):
        out.append(f"- note: {m['note']}")
    out += ["", "## Targets", "", "| ratio | measured | target | verdict |", "|---|---:|---:|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in summary_rows(results)]

    out += ["", "## Snapshot", "",
            "Each row is one whole process timed from fork to exit (JVM and Python start-up included), "
            "rows/s = table rows / wall seconds. `load1` is the machine's 1-minute load average when the "
            "process started.", ""]
    for table, t in results.get("snapshot", {}).items():
        out += [f"### tpch.{table} ({t['rows']:,} rows)", "",
                "| measurement | seconds | rows/s | load1 | details |", "|---|---:|---:|---:|---|"]

        def row(label, e, keys=()):
            if e:
                out.append(f"| {label} | {e['seconds']} | {e['rows_per_s']:,.0f} | {e['load1_before']} | "
                           f"{_details(e, keys)} |")

        c_keys = ("chunk_size", "watermark", "chunks", "snapshot_s", "chunk_s_sum", "chunk_s_max")
        row("(a) `mariadb --quick -e 'SELECT *' > /dev/null`", t.get("a_mariadb_quick"))
        row("(a) connectorx → Arrow → pyarrow Parquet, 1 thread", t.get("a_cx_parquet_1"), ("read_s", "write_s"))
        row("(a) connectorx → Arrow → pyarrow Parquet, 2 partitions", t.get("a_cx_parquet_2"), ("read_s", "write_s"))
        for e in t.get("b_jdbc_runs", []):
            row("(b) Spark JDBC source (partitionColumn) → Spark Parquet", e, ("partitions", "fetchsize", "job_s"))
        for e in t.get("c_runs", []):
            mark = " **(c)**" if e is t.get("c_dblog") or e == t.get("c_dblog") else ""
            row(f"(c) `dblog run`{mark}", e, c_keys)
        row("**Airflow path**: `dblog plan` + `spark-submit cli/spark_app.py snapshot` per batch + `dblog report`",
            t.get("c_airflow_path"), ("chunk_size", "batches", "processes", "snapshot_s"))
        row("(c) `dblog run --driver-threads 0`: Spark's executors read every chunk", t.get("c_spark_only"), c_keys)
        row("(c) `dblog run`, modules not byte-compiled (this venv as installed)", t.get("c_no_bytecode"),
            ("chunk_size", "watermark", "chunks", "snapshot_s"))
        d = t.get("d_dblog_writer")
        if d:
            row("(d) `dblog run` + writer", d, c_keys + ("window_events",))
            w = d["details"].get("writer", {})
            v = d["details"].get("verify")
            out += ["", f"(d) writer: {w.get('rows', 0):,} rows changed in {w.get('transactions', 0):,} transactions "
                        f"over {w.get('seconds')} s = {w.get('achieved_rate')} rows/s (asked {w.get('asked_rate')})."
                    + (f" After the writer stopped, an available-now tail and `dblog mirror`: the mirror "
                       f"{'equals' if v.get('equal') else 'DIFFERS FROM'} the live table "
                       f"({v.get('lake_rows'):,} vs {v.get('source_rows'):,} rows)." if v else "")]
        prof = t.get("profile")
        if prof and "error" not in prof:
            ph = prof["phases_s"]
            out += ["", f"Profile (`benchmarks/profile_snapshot.py`, the same chunk steps in one process without "
                        f"Spark, chunk after chunk, {prof['chunks']} chunks of {prof.get('rows', 0):,} rows, "
                        f"{prof['watermark']}): {prof['sequential_s']} s in total = "
                        f"{prof['sequential_rows_per_s']:,.0f} rows/s on one core.", "",
                    "| step | seconds | share |", "|---|---:|---:|"]
            for k, v in ph.items():
                if k.startswith("reference"):
                    continue
                out.append(f"| {k} | {v} | {100 * v / prof['sequential_s']:.0f}% |")
            out += [f"| (reference: connectorx plain `SELECT *` of the same ranges, no exactness casts) | "
                    f"{ph.get('reference_connectorx_plain_select')} | |",
                    f"| (once per Python worker: import of the task's modules / of pandas) | "
                    f"{prof.get('worker_import_s')} / {prof.get('pandas_import_s', 'n/a')} | |"]
        out.append("")

    tail = results.get("tail")
    if tail:
        r = tail_ratios(tail)
        dec, ours = tail["decode_pymysqlreplication"], tail["dblog_tail"]
        out += ["## Binlog tail throughput", "",
                f"{tail['changes']:,} row changes (UPDATEs of a {tail['changes']:,}-row copy of `orders`, "
                f"{tail['transactions']} transactions) starting at {tail['start']}, after `dblog run` "
                f"(plan, snapshot, report) of that table.", "",
                "| reader | rows | seconds | rows/s | notes |", "|---|---:|---:|---:|---|",
                f"| python-mysql-replication `BinLogStreamReader`, single thread | {dec['rows']:,} | {dec['loop_s']} | "
                f"{r['decode']:,.0f} | first to last event; whole process {dec['seconds']} s = "
                f"{dec['rows_per_s']:,.0f} rows/s |",
                f"| `mariadb-binlog --read-from-remote-server -v` (C, for scale) | {tail['changes']:,} | "
                f"{tail['decode_mariadb_binlog']['seconds']} | {r['mariadb_binlog']:,.0f} | whole process |",
                (f"| `dblog tail --available-now` (default: this cold range is read in the driver) | {ours['rows']:,} | "
                 f"{ours['seconds']} | {r['tail']:,.0f} | whole process, no Spark session |" if ours.get("in_driver") else
                 f"| `dblog tail --available-now` | {ours['rows']:,} | {ours['seconds']} | {r['tail']:,.0f} | whole "
                 f"process; the streaming query alone {ours['query_s']} s = {_fmt(r['tail_query'])} rows/s |")]
        sp = tail.get("dblog_tail_spark")
        if sp:
            out.append(f"| `dblog tail --available-now --driver-catch-up-mb 0` (Spark's streaming query, as for a "
                       f"range over 64 MB) | {sp['rows']:,} | {sp['seconds']} | {r['tail_spark']:,.0f} | whole process; "
                       f"the streaming query alone {sp['query_s']} s = {_fmt(r['tail_spark_query'])} rows/s |")
        out.append("")
        prof = tail.get("profile")
        if prof and "error" not in prof:
            out += ["Profile (`benchmarks/profile_tail.py`, one process, no Spark, same binlog range):", "",
                    "| step | rows | seconds | rows/s |", "|---|---:|---:|---:|"]
            labels = {"1_binlog_items": "python-mysql-replication's event stream + dblog's compiled row decoder (binlog_items)",
                      "2_read_changes": "+ change events (read_changes)",
                      "emit_rule_only": "emit rule (chunk lookup, should_emit) alone",
                      "event_rows_only": "change events → Arrow (event_rows) alone",
                      "3_source_read": "the streaming source's read() of each planned partition, one after another"}
            for k, label in labels.items():
                step = prof.get(k)
                if step:
                    rate = step.get("rows_per_s") or (round(step["rows"] / step["seconds"]) if step["seconds"] else 0)
                    parts = step.get("partitions")
                    note = f" ({len(parts)} partitions: " + ", ".join(f"{p['seconds']} s" for p in parts) + ")" \
                        if parts and len(parts) > 1 else ""
                    out.append(f"| {label}{note} | {step['rows']:,} | {step['seconds']} | {rate:,.0f} |")
            out.append("")
        if tail.get("verify"):
            v = tail["verify"]
            out += [f"After the tail, `dblog mirror` {'equals' if v['equal'] else 'DIFFERS FROM'} the live table "
                    f"({v['lake_rows']:,} vs {v['source_rows']:,} rows).", ""]

    lat = results.get("latency")
    if lat and lat.get("runs"):
        out += ["## Commit → lake latency (`dblog tail --continuous`)", "",
                f"Trigger interval {lat['trigger_seconds']} s. A writer thread commits one transaction every "
                f"{lat['tick_s'] * 1000:.0f} ms (rate × {lat['tick_s']} rows, each stamped with a unique token) and "
                f"records the wall-clock time when the commit returned. A watcher polls the sink's "
                f"`_spark_metadata` log every {lat['poll_s'] * 1000:.0f} ms; a token is *in the lake* when the "
                f"first committed micro-batch listing a file that holds it appears (what an exactly-once reader "
                f"of the file sink can see). Latency = that moment − commit time, same clock; the poll adds up to "
                f"{lat['poll_s'] * 1000:.0f} ms.", "",
                "| asked rate | achieved | transactions | p50 | p90 | p99 | max | missing |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for rate, run in lat["runs"].items():
            out.append(f"| {rate}/s | {run['writer']['achieved_rate']}/s | {run['transactions']} | {run['p50_s']} s | "
                       f"{run['p90_s']} s | {run['p99_s']} s | {run['max_s']} s | {run['missing']} |")
        out.append("")
        b = lat.get("burst")
        if b:
            out += [f"**Running tail, steady state:** with the same `--continuous` tail already running, every row of "
                    f"the {b['changes']:,}-row table was updated once ({b['transactions']} transactions written in "
                    f"{b['write_s']} s); the last change was in the lake {b['seconds']} s after the first commit = "
                    f"**{b['rows_per_s']:,.0f} changes/s** ({b['missing']} missing). Unlike `--available-now` "
                    f"above, no JVM or query start-up is in this figure.", ""]

    out += where_the_time_goes(results)
    analysis = HERE / "analysis.md"
    if analysis.exists():
        out += ["", analysis.read_text().strip(), ""]
    out += ["## Method", "",
            "- Data: `tpchgen-cli tbl` at the scale factor, loaded with `LOAD DATA LOCAL INFILE` into a private "
            "MariaDB (`tests/support/local_mariadb.py`, ROW/FULL binlog) with primary keys "
            "`orders(o_orderkey)` (sparse keys) and `lineitem(l_orderkey, l_linenumber)` (composite); the load "
            "is not binlogged. Data and datadir are cached under `.bench/`. A warm-up `mariadb --quick` scan "
            "of each table precedes its measurements, so every reader sees a warm buffer pool.",
            "- (a) `mariadb --quick` prints every row to /dev/null; `benchmarks/cx_scan.py` reads "
            "`SELECT *` with connectorx to Arrow (1 thread, or 2 partitions on the first key column) and "
            "writes one snappy Parquet file with pyarrow.",
            "- (b) `benchmarks/spark_jdbc.py`: `spark.read.jdbc` with `partitionColumn` on the first key "
            "column, bounds from a MIN/MAX query, Debian's `libmariadb-java` driver "
            "(`org.mariadb.jdbc.Driver`, URL `jdbc:mysql://`), then `df.write.parquet`; same session "
            "settings as dblog (local[2], 2 GB driver).",
            "- (c) `dblog run --source URI --table tpch.T --state S --sink K --chunk-size N --batch-size "
            "10000 --watermark W`: plan (while the Spark session starts), all chunks as one Spark job, "
            "report, and the available-now tail (its streaming query is skipped when the binlog "
            "holds no change of the table since the snapshot); several chunk sizes, then the other watermark strategies at the best size. "
            "The recommended default is `consistent_snapshot` (race-free on MariaDB); (c) is its best run.",
            "- (d) (c) again while a thread updates random existing rows of the same table "
            "(500 rows/s: 5-row transactions every 10 ms), then checks the lake converges.",
            "- Tail: see above; the decode baseline is python-mysql-replication alone reading the same "
            "binlog range (filtered to the table, like the tail) and touching every row image.",
            "- Every measured process gets byte-compiled modules (a bytecode cache under `.bench/pycache`, "
            "whatever `PYTHONDONTWRITEBYTECODE` says) and runs from `.bench/`; with `--code-rev REV` the "
            "package is exported from that commit and put first on `PYTHONPATH`, so a long run measures "
            "one commit while the working tree changes.",
            "- `--quick` (SF 0.1, 50k tail changes, 20 s latency runs) checks the harness in minutes; its "
            "figures are dominated by fixed start-up costs and say little about throughput.",
            ""]
    return "\n".join(out)


def where_the_time_goes(results: dict) -> list[str]:
    """Figures derived from this run's phases and profiles (computed, so they never go stale)."""
    out = ["## Where the time goes (derived from this run)", ""]
    for table, t in results.get("snapshot", {}).items():
        c, b = t.get("c_dblog"), t.get("b_spark_jdbc")
        if not c or "phases" not in c.get("details", {}):
            continue
        ph, rows = c["details"]["phases"], t["rows"]
        total = c["seconds"]
        job = ph.get("snapshot_job_s") or 0
        tail = ph.get("tail_s_total") or 0
        fixed = total - job
        skipped = tail < 1.0  # the tail found no change of the table in the binlog and started no query
        tail_text = (f"the available-now tail {tail} s (no change since the snapshot: the streaming query was "
                     f"skipped)" if skipped else f"the available-now tail {tail} s although no change had happened "
                     f"(window events: {c['details'].get('window_events', 0)})")
        in_driver, chunks = c["details"].get("driver_chunks", 0), c["details"].get("chunks")
        spark_rows = c["details"].get("snapshot_rows") or rows
        if not job:  # the dblog process read every chunk; no Spark job ran
            out += [f"**{table}** — (c) took {total} s: the `dblog` process read all {chunks} chunks itself on two "
                    f"connections and ran no Spark job (under `local[2]` no Spark starts: it would run no more "
                    f"tasks at once than those two threads); {tail_text}; start, plan and exit the rest."]
            spark_only = t.get("c_spark_only")
            sj = (spark_only or {}).get("details", {}).get("snapshot_s")
            if sj:
                line = (f"With `--driver-threads 0` Spark's executors read every chunk: {spark_only['seconds']} s in "
                        f"all, the job {sj} s ({rows / sj:,.0f} rows/s), the JVM's start and first Python workers "
                        f"most of the rest")
                if b and b.get("details", {}).get("job_s"):
                    bj = b["details"]["job_s"]
                    line += (f"; job against job, Spark JDBC's bounds query + read + write took {bj} s "
                             f"({rows / bj:,.0f} rows/s): {bj / sj:.2f}×")
                out.append(line + ".")
            out.append("")
            continue
        lines = [f"**{table}** — (c) took {total} s: Spark session start {ph.get('spark_start_s')} s (while the "
                 f"`dblog` process read {in_driver} of the {chunks} chunks itself), the snapshot "
                 f"job {job} s for the other {spark_rows:,} rows ({spark_rows / job:,.0f} rows/s), {tail_text}, "
                 f"plan, report and exit "
                 f"{round(total - job - tail - (ph.get('spark_start_s') or 0), 2)} s. Everything but the job is "
                 f"{100 * fixed / total:.0f}% of the run."]
        if b and b.get("details", {}).get("job_s"):
            bj = b["details"]["job_s"]
            lines.append(f"Job against job (JVM start excluded on both sides): dblog's snapshot job "
                         f"{spark_rows / job:,.0f} rows/s vs Spark JDBC's bounds query + read + write of the whole "
                         f"table in {bj} s, {rows / bj:,.0f} rows/s = {spark_rows / job / (rows / bj):.2f}×.")
            if not skipped:
                no_tail = total - tail
                lines.append(f"Without the empty tail (c) would take about {no_tail:.1f} s = "
                             f"{rows / no_tail:,.0f} rows/s = {b['seconds'] / no_tail:.2f}× (b).")
        prof = t.get("profile")
        if prof and "error" not in prof:
            ph2 = prof["phases_s"]
            top = sorted(((k, v) for k, v in ph2.items() if not k.startswith("reference")), key=lambda kv: -kv[1])[:3]
            lines.append(f"The same chunk steps in one process without Spark, one chunk after another: "
                         f"{prof['sequential_s']} s ({prof['sequential_rows_per_s']:,.0f} rows/s); largest steps "
                         + ", ".join(f"{k} {v} s" for k, v in top)
                         + f". The Spark job (2 tasks at once, Python worker start included) read "
                         f"{spark_rows / job:,.0f} rows/s, {spark_rows / job / prof['sequential_rows_per_s']:.2f}× "
                         f"that: on 2 cores the MariaDB server threads that "
                         f"produce the rows already take most of the second core, so parallel chunk reads gain "
                         f"little on this machine.")
        quick = t.get("a_mariadb_quick")
        if quick:
            lines.append(f"For scale: `mariadb --quick` alone needs {quick['seconds']} s for this table; 0.5× of it "
                         f"would leave {2 * quick['seconds']:.1f} s for JVM start, planning, the job and the tail.")
        out += [" ".join(lines), ""]
    tail = results.get("tail", {})
    exp = tail.get("decode_experiments")
    if exp and "error" not in exp:
        n = exp.get("parallel", 2)
        out += [f"**Decoding in parallel** (`benchmarks/decode_experiments.py`, the tail's {tail['changes']:,}-change "
                f"range, {n} reader processes at once):", "",
                "| variant | changes/s (wall) | reader CPU s (sum) | per reader (wall s / CPU s) |",
                "|---|---:|---:|---|"]
        labels = {"single": "one reader decodes all (baseline)",
                  "no_decode": "one reader, headers only, no row decoded",
                  "share": f"{n} readers over the whole range, reader k decodes rows events k, k+{n}, k+2×{n}, ...",
                  "split": f"{n} readers, each over its own transaction-aligned byte range"}
        for k, label in labels.items():
            v = exp.get(k)
            if v:
                per = ", ".join(f"{r['loop_s']} / {r.get('cpu_s', '?')}" for r in v["readers"])
                vs = f" ({v['vs_single']}×)" if "vs_single" in v else ""
                out.append(f"| {label} | {v['rows_per_s']:,.0f}{vs} | {v.get('cpu_s', '?')} | {per} |")
        out.append("")
    return out


def write_docs(results: dict, docs: Path) -> None:
    docs.mkdir(parents=True, exist_ok=True)
    write_chart(results, docs / "benchmarks.png")
    (docs / "benchmarks.md").write_text(markdown(results))
