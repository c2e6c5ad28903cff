"""The state: the plan, one report per finished chunk, the offset map, catch-up records, on a local
path or ``s3://BUCKET/PREFIX`` (``store.files``); Spark's streaming checkpoint beside it.

Every file is written atomically (a local temp file + rename, or one S3 PUT), so a killed step never
leaves a torn file; only the driver writes here (executors return their reports to it), and nothing
here ever holds a password.

    STATE/plan.json                       tables, their chunks, and the batches over all tables
    STATE/reports/DB.TABLE/chunk-N.json   one per finished chunk read (LW, HW, rows, ...)
    STATE/offsets.json                    the binlog-split offset map (after ``dblog report``)
    STATE/schemas/DB.TABLE.json           the table's schema history: DDL statements seen in the binlog and the
                                          columns in force from a position on (after the planned ones)
    STATE/caught_up/DB.TABLE.json         every row change of the table in [from, to) is in the lake (none
                                          there, or read by a driver catch-up): a tail at ``from`` may move to ``to``
    STATE/tail_positions.json             per table, the position up to which the lake holds every change
                                          (the tail's progress, written after each micro-batch it committed)
    CHECKPOINT/tail/                      Spark Structured Streaming checkpoint of the tail: ``--checkpoint``,
                                          by default STATE/checkpoints for a local state (Spark here cannot
                                          write to S3: no s3a); losing it costs a restart, the lake records
                                          the tail's position
"""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from airflow_provider_dblog.core.batches import Batch, BatchGroup
from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.core.schema_events import SchemaChange
from airflow_provider_dblog.core.startup import StartupMode
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.store.checkpoints import CheckpointState, checkpoint_state
from airflow_provider_dblog.store.credentials import with_password
from airflow_provider_dblog.store.files import Files


@dataclass(frozen=True)
class TablePlan:
    meta: TableMeta
    chunks: tuple[ChunkRange, ...]
    strategy: str
    planned_at: SourcePosition
    planned_gtid: str | None = None  # the server's GTID state when planned (informational)
    rows: int = 0  # estimated when planned (progress, batch packing)
    startup: StartupMode = StartupMode()
    start_at: SourcePosition | None = None  # where the stream starts when the startup mode reads no snapshot
    # the lake keeps its columns (``--schema-changes freeze`` ignored a change of them): every re-read of a chunk,
    # a repair's or a resnapshot's too, takes the lake's columns instead of changing them from one chunk's read
    keep_columns: bool = False
    capture: str | None = None  # the capture's id (``StateDir.capture``; stored once in plan.json, not per table)

    def chunk(self, chunk_id: int) -> ChunkRange:
        return self.chunks[chunk_id]

    def key_span(self, chunk_ids: Sequence[int]) -> str:
        """``[lo, hi)`` of consecutive chunks, for labels."""
        first, last = self.chunk(chunk_ids[0]), self.chunk(chunk_ids[-1])
        lo = "-∞" if first.lo is None else ",".join(map(str, first.lo))
        hi = "∞" if last.hi is None else ",".join(map(str, last.hi))
        return f"[{lo}, {hi})"

    def to_dict(self) -> dict:
        return {"meta": self.meta.to_dict(), "chunks": [c.to_dict() for c in self.chunks], "strategy": self.strategy,
                "planned_at": self.planned_at.to_dict(), "planned_gtid": self.planned_gtid, "rows": self.rows,
                "startup": self.startup.to_dict(),
                "start_at": self.start_at.to_dict() if self.start_at else None,
                **({"keep_columns": True} if self.keep_columns else {})}

    @classmethod
    def from_dict(cls, data: dict) -> "TablePlan":
        return cls(TableMeta.from_dict(data["meta"]), tuple(ChunkRange.from_dict(c) for c in data["chunks"]),
                   data["strategy"], SourcePosition.from_dict(data["planned_at"]), data.get("planned_gtid"),
                   int(data.get("rows") or 0), StartupMode.from_dict(data.get("startup")),
                   SourcePosition.from_dict(data["start_at"]) if data.get("start_at") else None,
                   keep_columns=bool(data.get("keep_columns")), capture=data.get("capture"))


def tail_checkpoints(local_state: Path | None, checkpoints: str | os.PathLike | None = None) -> Path | None:
    """Where the tail's Spark checkpoints live: ``checkpoints`` (``--checkpoint``), else ``STATE/checkpoints``
    for a local state (``local_state``), else None (an object-store state: see ``require_checkpoints``)."""
    if checkpoints:
        return Path(checkpoints)
    return local_state / "checkpoints" if local_state else None


def require_checkpoints(state: str | os.PathLike, checkpoints: Path | None) -> Path:
    """The one rule for the tail's checkpoint (the tail applies it, ``plan`` and ``run`` before any work):
    an object-store state needs ``--checkpoint``. One line naming the fix otherwise."""
    if checkpoints is None:
        raise DblogError(f"the state {state} is on object storage, where Spark's streaming checkpoint "
                         f"cannot be written here: give the tail a local or cluster-mounted directory with "
                         f"--checkpoint DIR (DAGs: the checkpoint setting, $DBLOG_CHECKPOINT)")
    return checkpoints


class StateDir:
    """``path``: a local directory or ``s3://BUCKET/PREFIX``; ``checkpoints``: where the tail's Spark
    checkpoints live (a local or cluster-mounted directory; default ``STATE/checkpoints`` for a local state)."""

    def __init__(self, path: str | os.PathLike, checkpoints: str | os.PathLike | None = None):
        self.files = Files(path)
        self.path = self.files.local or self.files.root  # for messages: the directory or the URI
        self.checkpoints = tail_checkpoints(self.files.local, checkpoints)
        self._plan: tuple[tuple, dict] | None = None  # (file identity, parsed plan): parsed once per change
        self._tables: tuple[dict, dict] | None = None

    # ---- plan ----
    PLAN = "plan.json"

    @property
    def plan_file(self) -> str:
        return self.files.uri(self.PLAN)

    def has_plan(self) -> bool:
        return self.files.exists(self.PLAN)

    def load_raw(self) -> dict:
        identity = self.files.identity(self.PLAN)
        if identity is None:
            raise DblogError(f"no plan in {self.path}: run `dblog plan --source URI --table DB.TABLE --state "
                             f"{self.path}` first")
        if self._plan is None or self._plan[0] != identity:
            self._plan = (identity, self.files.read_json(self.PLAN))
        return self._plan[1]

    def source(self) -> SourceConfig:
        return with_password(SourceConfig.parse(self.load_raw()["source"]))

    def options(self) -> dict:
        return self.load_raw().get("options", {})

    def capture(self) -> str | None:
        """This capture's id, made by its first plan: the lake tables it creates carry it, and it writes no table
        another capture made (``LakeTables``). None: planned before captures had ids."""
        return self.load_raw().get("capture")

    def tables(self) -> dict[str, TablePlan]:
        raw = self.load_raw()
        if self._tables is not None and self._tables[0] is raw:
            return self._tables[1]
        tables = {name: TablePlan.from_dict({**t, "capture": raw.get("capture")}) for name, t in raw["tables"].items()}
        self._tables = (raw, tables)
        return tables

    def table(self, name: str) -> TablePlan:
        tables = self.tables()
        if name not in tables:
            raise DblogError(f"table {name} is not planned in {self.path}: planned are {', '.join(tables) or 'none'}")
        return tables[name]

    def table_of(self, plans: dict[str, TablePlan], name: str) -> TablePlan:
        """``name``'s plan from ``plans`` (a ``tables()`` read once for a loop over many tables: on object storage
        each read is a request), with ``table``'s one-line error for a table not planned."""
        return plans.get(name) or self.table(name)

    def batches(self) -> list[Batch]:
        return [Batch.from_dict(i, b) for i, b in enumerate(self.load_raw()["batches"])]

    def batch(self, index: int) -> Batch:
        batches = self.batches()
        if not 0 <= index < len(batches):
            raise DblogError(f"batch {index} does not exist: the plan in {self.path} has batches 0-{len(batches) - 1}")
        return batches[index]

    def batch_label(self, batch: Batch) -> str:
        tables = self.tables()
        return batch.label(lambda table, ids: tables[table].key_span(ids))

    def save_plans(self, source: SourceConfig, plans: Sequence[TablePlan], batches: Sequence[Batch],
                   options: dict, server: dict | None = None, joining: bool = False) -> None:
        """Adds tables' plans and their batches (``batches`` indexed from ``len(self.batches())``);
        tables and batches already planned keep theirs, so their indexes stay valid. ``server``: the
        identity of the server the positions belong to (``DataSourceDialect.server_identity``). ``joining``:
        planned by the tail for joining the capture (``joining()``), recorded in the same write."""
        raw = self.files.read_json(self.PLAN) if self.has_plan() else {"version": 2, "tables": {}, "batches": []}
        if raw.get("source", source.public_uri) != source.public_uri:
            raise DblogError(f"{self.path} already holds a plan for {raw['source']}: use another --state directory")
        if server and raw.get("server") not in (None, server):
            raise DblogError(f"{self.path} holds positions of server {describe_server(raw['server'])}, the source now "
                             f"answers as {describe_server(server)}: use another --state directory")
        if server:
            raw["server"] = server
        new = {p.meta.qualified for p in plans}
        if new & set(raw["tables"]):
            raise ValueError(f"already planned: {', '.join(sorted(new & set(raw['tables'])))}")
        if [b.index for b in batches] != list(range(len(raw["batches"]), len(raw["batches"]) + len(batches))):
            raise ValueError("new batches must be numbered after the plan's batches")
        raw["version"] = 2
        raw.setdefault("capture", uuid.uuid4().hex)
        raw["source"] = source.public_uri
        raw.setdefault("options", {}).update(options)
        for plan in plans:
            raw["tables"][plan.meta.qualified] = plan.to_dict()
        raw["batches"] += [b.to_dict() for b in batches]
        if joining:
            raw["joining"] = sorted(set(raw.get("joining", [])) | new)
        self._save_plan(raw)

    def joining(self) -> list[str]:
        """Tables the tail planned because they started to match the capture's patterns (``steps.new_tables``):
        one of them without offsets was left half read by a tail that stopped before reporting it."""
        return list(self.load_raw().get("joining", []))

    def forget_table(self, table: str) -> None:
        """The table's plan, its chunks in the batches (their indexes stay) and its reports removed: a joining
        table left half read whose plan no longer applies (gone from the source, or another key) is planned
        anew when it matches again; its key is kept (``forgotten_key``) for its next life to close the rows the
        lake holds of this one. Reports first: killed in between, the plan is still there to resume."""
        for report in self.files.names(f"reports/{table}", ".json"):
            self.files.delete(f"reports/{table}/{report}")
        raw = self.files.read_json(self.PLAN)
        if table in raw["tables"]:
            forgotten = TablePlan.from_dict({**raw["tables"].pop(table), "capture": raw.get("capture")})
            raw.setdefault("forgotten", {})[table] = list(forgotten.meta.key_columns)
        kept = [Batch.from_dict(i, b) for i, b in enumerate(raw["batches"])]
        raw["batches"] = [Batch(b.index, tuple(g for g in b.groups if g.table != table), b.rows).to_dict() for b in kept]
        raw["joining"] = [t for t in raw.get("joining", []) if t != table]
        self._save_plan(raw)

    def forgotten_key(self, table: str) -> tuple[str, ...] | None:
        """The key of the table's forgotten plan (``forget_table``) whose lake rows its next life has not closed yet:
        the history was written under it (None: none)."""
        key = self.load_raw().get("forgotten", {}).get(table)
        return None if key is None else tuple(key)

    def closed_forgotten(self, table: str) -> None:
        """The lake's rows of the table's forgotten plan are closed (``LakeTables.restart_current``)."""
        raw = self.files.read_json(self.PLAN)
        if raw.get("forgotten", {}).pop(table, None) is not None:
            self._save_plan(raw)

    def _save_plan(self, raw: dict) -> None:
        """Write the plan and keep what was written as the parsed plan (an S3 mtime has whole seconds: reading it
        back could find the old file's identity, a stale cache)."""
        self.files.write_json(self.PLAN, raw)
        self._plan = (self.files.identity(self.PLAN), raw)

    def server(self) -> dict | None:
        """The identity of the server whose binlog positions the state and the lake hold (None: a plan
        made before dblog recorded it)."""
        return self.load_raw().get("server")

    def record_stream_dropped(self) -> None:
        """``dblog drop`` gave the capture's stream up: a later tail must not make it anew (``renew_stream``)."""
        raw = self.files.read_json(self.PLAN)
        raw.setdefault("options", {})["stream_dropped"] = True
        self._save_plan(raw)

    def replace_table_meta(self, meta: TableMeta) -> None:
        """The table's planned meta replaced, its chunks and reports kept (``TableMeta.with_identity_of``: the
        column identities a re-read brought into the lake)."""
        raw = self.files.read_json(self.PLAN)
        raw["tables"][meta.qualified]["meta"] = meta.to_dict()
        self._save_plan(raw)

    def set_keep_columns(self, table: str, keep: bool) -> None:
        """Whether the table's re-reads keep the lake's columns (``TablePlan.keep_columns``): set by the tail when
        ``--schema-changes freeze`` ignores a change of them, cleared when it follows one."""
        raw = self.files.read_json(self.PLAN)
        entry = raw["tables"][table]
        if bool(entry.get("keep_columns")) == keep:
            return
        if keep:
            entry["keep_columns"] = True
        else:
            entry.pop("keep_columns", None)
        self._save_plan(raw)

    def restart_table_stream(self, table: str, at: SourcePosition) -> None:
        """The table's every chunk was read again from ``at`` on (its binlog was purged): its first read starts
        there now (``first_floor``), not at the plan's position, whose binlog is gone."""
        raw = self.files.read_json(self.PLAN)
        raw["tables"][table]["planned_at"] = at.to_dict()
        self._save_plan(raw)

    def replace_table_plan(self, plan: TablePlan) -> Batch:
        """The table planned again (its key changed): its new chunks in one new batch, its chunks gone from
        the other batches (their indexes stay), its old chunk reports deleted. Returns the new batch."""
        raw = self.files.read_json(self.PLAN)
        name = plan.meta.qualified
        raw["tables"][name] = plan.to_dict()
        kept = [Batch.from_dict(i, b) for i, b in enumerate(raw["batches"])]
        raw["batches"] = [Batch(b.index, tuple(g for g in b.groups if g.table != name), b.rows).to_dict() for b in kept]
        batch = Batch(len(raw["batches"]), (BatchGroup(name, tuple(c.id for c in plan.chunks)),), plan.rows)
        raw["batches"].append(batch.to_dict())
        for report in self.files.names(f"reports/{name}", ".json"):
            self.files.delete(f"reports/{name}/{report}")
        self._save_plan(raw)
        return batch

    def replace_table_offsets(self, table: str, offsets: TableOffsets) -> None:
        every = self.offsets()
        every[table] = offsets
        self.write_offsets(every)

    # ---- chunk reports ----
    def report_file(self, table: str, chunk_id: int) -> str:
        """The report's name in the state (``files.uri`` gives its location)."""
        return f"reports/{table}/chunk-{chunk_id:06d}.json"

    def write_report(self, table: str, chunk_id: int, report: dict) -> None:
        """Driver side only: executors return their reports (``readers.chunk_reader.persist_reports``)."""
        self.files.write_json(self.report_file(table, chunk_id), report)

    def reports(self, table: str) -> dict[int, dict]:
        folder = f"reports/{table}"
        names = [n for n in self.files.names(folder, ".json") if n.startswith("chunk-")]
        reports = self.files.read_all([f"{folder}/{n}" for n in names])
        return {int(n[len("chunk-"):-len(".json")]): report for n, report in zip(names, reports)}

    def reported_chunks(self, table: str) -> set[int]:
        """The ids of the chunks of ``table`` that have a report (their files listed, none read)."""
        names = self.files.names(f"reports/{table}", ".json")
        return {int(n[len("chunk-"):-len(".json")]) for n in names if n.startswith("chunk-")}

    def pending_chunks(self, batch_index: int, force: bool = False, chunk_ids: Sequence[int] | None = None,
                       table: str | None = None) -> list[BatchGroup]:
        """The batch's chunks to read, per table: those of ``table`` (default every table of the batch),
        only ``chunk_ids`` (default all; needs ``table`` when the batch holds several), unreported unless
        ``force``. Groups with nothing to read are left out."""
        batch = self.batch(batch_index)
        if table is not None and table not in batch.tables:
            raise DblogError(f"batch {batch_index} holds no chunk of {table}: it holds {', '.join(batch.tables)}")
        if chunk_ids is not None and table is None and len(batch.groups) > 1:
            raise DblogError(f"batch {batch_index} holds chunks of {len(batch.groups)} tables: name the table of "
                             f"--chunks with --table DB.TABLE")
        out = []
        for group in batch.groups:
            if table is not None and group.table != table:
                continue
            wanted = [c for c in group.chunk_ids if chunk_ids is None or c in chunk_ids]
            done = self.reports(group.table) if not force else {}
            if todo := tuple(c for c in wanted if c not in done):
                out.append(BatchGroup(group.table, todo))
        return out

    def unreported_chunks(self, table: str) -> list[int]:
        """The table's chunks without a report, in batch order (one read of its reports)."""
        done = self.reports(table)
        return [c for b in self.batches() for c in b.chunk_ids(table) if c not in done]

    # ---- offsets & checkpoints ----
    OFFSETS = "offsets.json"

    @property
    def offsets_file(self) -> str:
        return self.files.uri(self.OFFSETS)

    def has_offsets(self) -> bool:
        return self.files.exists(self.OFFSETS)

    def write_offsets(self, offsets: dict[str, TableOffsets]) -> None:
        self.files.write_json(self.OFFSETS, {"tables": {name: o.to_dict() for name, o in offsets.items()},
                                             "built_at": time.time()})

    def offsets(self) -> dict[str, TableOffsets]:
        """The offset map ``dblog report`` built: per table, chunk boundaries and high watermarks."""
        if not self.has_offsets():
            raise DblogError(f"no offset map in {self.path}: run `dblog report --state {self.path}` first")
        return {name: TableOffsets.from_dict(d) for name, d in self.files.read_json(self.OFFSETS)["tables"].items()}

    def offsets_built_at(self) -> float:
        return float(self.files.read_json(self.OFFSETS).get("built_at") or self.files.modified(self.OFFSETS))

    def checkpoint_root(self) -> Path:
        """Where the tail's checkpoints live; raises (one line) for an object-store state without ``--checkpoint``."""
        return require_checkpoints(self.path, self.checkpoints)

    def checkpoint_dir(self) -> Path:
        """The checkpoint of the tail's one streaming query (every table; the tables it serves may change
        from run to run: each table's read starts at its own floor, not at the checkpoint's offset)."""
        return self.checkpoint_root() / "tail"

    def checkpoint(self) -> CheckpointState:
        return checkpoint_state(self.checkpoint_dir())

    # ---- tail progress ----
    TAIL_POSITIONS = "tail_positions.json"

    def tail_positions(self) -> dict[str, tuple[SourcePosition, float]]:
        """Per table (position, when recorded): the lake holds every change of the table up to there."""
        if not self.files.exists(self.TAIL_POSITIONS):
            return {}
        return {name: (SourcePosition.from_dict(d["pos"]), float(d["at"]))
                for name, d in self.files.read_json(self.TAIL_POSITIONS)["tables"].items()}

    def record_tail_positions(self, positions: dict[str, SourcePosition], gtid: str | None = None) -> None:
        """After the lake took every change of these tables up to their positions (a position never
        moves back: a late writer of an older one keeps the newer). ``gtid``: the server's GTID state at
        these positions (one position for all then), what a failover resumes from (``steps.failover``)."""
        if not positions:
            return
        now = time.time()
        raw = self.files.read_json(self.TAIL_POSITIONS)["tables"] if self.files.exists(self.TAIL_POSITIONS) else {}
        for name, pos in positions.items():
            old = raw.get(name)
            if old is None or SourcePosition.from_dict(old["pos"]) <= pos:
                raw[name] = {"pos": pos.to_dict(), "at": now, **({"gtid": gtid} if gtid else {})}
        self.files.write_json(self.TAIL_POSITIONS, {"tables": raw})

    RESNAPSHOTS = "resnapshots.json"

    def resnapshots(self) -> dict[str, SourcePosition]:
        """Per table re-snapshotted whole: the lowest high watermark of its chunks' latest reads. Every row the
        lake holds of the table was read after it, so a change there that the source's log cannot show (a
        statement-logged UPDATE, a partial row image) no longer matters: that is what a re-snapshot fixes."""
        if not self.files.exists(self.RESNAPSHOTS):
            return {}
        return {name: SourcePosition.from_dict(d)
                for name, d in self.files.read_json(self.RESNAPSHOTS)["tables"].items()}

    def record_resnapshot(self, plan: TablePlan) -> None:
        """After a forced read of chunks of ``plan``'s table: when every chunk of the plan has a report, the lowest
        HW of them (``resnapshots``; it never moves back)."""
        table, reports = plan.meta.qualified, self.reports(plan.meta.qualified)
        if any(c.id not in reports for c in plan.chunks):
            return
        lowest = min(SourcePosition.from_dict(reports[c.id]["hw"]) for c in plan.chunks)
        raw = self.files.read_json(self.RESNAPSHOTS)["tables"] if self.files.exists(self.RESNAPSHOTS) else {}
        if table not in raw or SourcePosition.from_dict(raw[table]) < lowest:
            raw[table] = lowest.to_dict()
            self.files.write_json(self.RESNAPSHOTS, {"tables": raw})

    def gtid_of(self, table: str, position: SourcePosition) -> str | None:
        """The GTID state recorded with ``position`` as the table's tail position or catch-up end (None:
        not recorded there)."""
        if self.files.exists(self.TAIL_POSITIONS):
            entry = self.files.read_json(self.TAIL_POSITIONS)["tables"].get(table)
            if entry and entry.get("gtid") and SourcePosition.from_dict(entry["pos"]) == position:
                return entry["gtid"]
        name = self.caught_up_file(table)
        if self.files.exists(name):
            data = self.files.read_json(name)
            if data.get("to_gtid") and SourcePosition.from_dict(data["to"]) == position:
                return data["to_gtid"]
        return None

    def move_source(self, source: SourceConfig) -> None:
        """Read the capture from ``source`` from now on (a promoted replica at another address); the tail
        checks that it continues the captured server's history (``steps.failover``)."""
        raw = self.files.read_json(self.PLAN)
        raw["source"] = source.public_uri
        self._save_plan(raw)

    def follow_server(self, identity: dict, epoch: int, positions: dict[str, SourcePosition]) -> None:
        """The capture now reads the server ``identity`` (a promoted replica) whose positions are of ``epoch``;
        ``positions``: each table's floor on it (the translation of its floor by GTID). The server it
        replaces is kept in ``servers``."""
        raw = self.files.read_json(self.PLAN)
        raw.setdefault("servers", []).append({"server": raw.get("server"), "epoch": raw.get("options", {}).get("epoch", 0),
                                              "until": time.time()})
        raw["server"] = identity
        raw.setdefault("options", {})["epoch"] = epoch
        self._save_plan(raw)
        now = time.time()
        tables = self.files.read_json(self.TAIL_POSITIONS)["tables"] if self.files.exists(self.TAIL_POSITIONS) else {}
        for name, pos in positions.items():
            tables[name] = {"pos": pos.to_dict(), "at": now}
        self.files.write_json(self.TAIL_POSITIONS, {"tables": tables})

    # ---- schema history ----
    def schema_file(self, table: str) -> str:
        return f"schemas/{table}.json"

    def schema_history(self, table: str) -> dict:
        name = self.schema_file(table)
        return self.files.read_json(name) if self.files.exists(name) else {"table": table, "changes": [], "versions": []}

    def record_schema_change(self, change: SchemaChange) -> None:
        """A DDL statement naming the table, once per position."""
        history = self.schema_history(change.table)
        entry = {"pos": change.pos.to_dict(), "start": change.start.to_dict(), "kind": change.kind,
                 "statement": change.statement}
        if entry not in history["changes"]:
            history["changes"].append(entry)
            self.files.write_json(self.schema_file(change.table), history)

    def schema_changes(self, table: str) -> list[SchemaChange]:
        """The DDL statements recorded for ``table``, in binlog order."""
        return sorted((SchemaChange(table, c["kind"], c["statement"], SourcePosition.from_dict(c["start"]),
                                    SourcePosition.from_dict(c["pos"]))
                       for c in self.schema_history(table)["changes"]), key=lambda c: c.pos)

    def record_schema_version(self, meta: TableMeta, pos: SourcePosition) -> None:
        """The table's columns in force from ``pos`` on (the lake follows them)."""
        history = self.schema_history(meta.qualified)
        entry = {"pos": pos.to_dict(), "meta": meta.to_dict()}
        if entry not in history["versions"]:
            history["versions"].append(entry)
            self.files.write_json(self.schema_file(meta.qualified), history)

    def meta_in_force(self, table: str) -> TableMeta:
        """The table's latest recorded columns: the planned ones until a schema change was followed."""
        versions = self.schema_history(table)["versions"]
        return TableMeta.from_dict(versions[-1]["meta"]) if versions else self.table(table).meta

    # ---- signals (core.signals) ----
    SIGNALS = "signals.json"

    def signals(self) -> dict[str, dict]:
        """Every signal row the tail acted on, ignored or refused, by id."""
        return self.files.read_json(self.SIGNALS) if self.files.exists(self.SIGNALS) else {}

    def record_signal(self, signal_id: str, outcome: dict) -> None:
        done = self.signals()
        done[signal_id] = {**outcome, "at": time.time()}
        self.files.write_json(self.SIGNALS, done)

    # ---- catch-up checks ----
    def caught_up_file(self, table: str) -> str:
        return f"caught_up/{table}.json"

    def write_caught_up(self, table: str, start: SourcePosition, end: SourcePosition, gtid: str | None = None) -> None:
        """Record that the lake holds every row change of ``table`` in the binlog range ``[start, end)``
        (none there, or read by a catch-up; write this only after checking or writing it): a tail whose
        position is in that range may move to ``end``. A range that continues the recorded one extends it.
        ``gtid``: the server's GTID state at ``end``."""
        name = self.caught_up_file(table)
        if self.files.exists(name):
            data = self.files.read_json(name)
            if SourcePosition.from_dict(data["from"]) <= start <= SourcePosition.from_dict(data["to"]):
                start = SourcePosition.from_dict(data["from"])
        self.files.write_json(name, {"table": table, "from": start.to_dict(), "to": end.to_dict(),
                                     "checked_at": time.time(), **({"to_gtid": gtid} if gtid else {})})

    def caught_up(self, table: str, position: SourcePosition) -> tuple[SourcePosition, float] | None:
        """(``to``, when it was recorded) if the recorded range covers ``position`` (``from <= position <= to``):
        the lake already holds every change of the table between ``position`` and ``to``; None otherwise."""
        name = self.caught_up_file(table)
        if not self.files.exists(name):
            return None
        data = self.files.read_json(name)
        start, end = SourcePosition.from_dict(data["from"]), SourcePosition.from_dict(data["to"])
        if start <= position <= end:
            return end, float(data.get("checked_at") or self.files.modified(name))
        return None

    def resume_position(self, table: str, min_hw: SourcePosition,
                        recorded: dict[str, tuple[SourcePosition, float]] | None = None,
                        plans: dict[str, TablePlan] | None = None) -> SourcePosition:
        """Where the tail's read of ``table`` starts (its floor): the position the tail recorded, or before its
        first batch its first floor (``first_floor``); moved to the end of a recorded catch-up check that covers
        it. ``recorded``: ``tail_positions()``, ``plans``: ``tables()``, when the caller has them already."""
        recorded = self.tail_positions() if recorded is None else recorded
        position = (max(min_hw, recorded[table][0]) if table in recorded
                    else self.first_floor(table, min_hw, plans))
        checked = self.caught_up(table, position)
        return checked[0] if checked else position


    def first_floor(self, table: str, min_hw: SourcePosition,
                    plans: dict[str, TablePlan] | None = None) -> SourcePosition:
        """Where a table's first read starts: its plan's position, not its smallest chunk HW. The rows between
        them are older than every chunk's HW (``should_emit`` drops them), but a transaction the source writes
        before its outcome (a MySQL XA transaction, at its prepare) may be prepared there and committed after a
        chunk's SELECT: only a read from the plan's position sees its rows (the plan waited for those prepared
        before it: ``DataSourceDialect.check_prepared``). ``plans``: ``tables()``, when the caller has it already
        (on object storage each look at the plan is a request)."""
        plan = (self.tables() if plans is None else plans).get(table)
        return min(min_hw, plan.planned_at.in_file_of(min_hw)) if plan is not None else min_hw


def describe_server(identity: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(identity.items()) if v is not None)
