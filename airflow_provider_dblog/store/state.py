"""The state: the plan, one report per finished chunk, the offset map, catch-up records, on a local
path or ``s3://BUCKET/PREFIX`` (``store.files``); Spark's streaming checkpoint beside it.

Every file is written atomically (a local temp file + rename, or one S3 PUT), so a killed step never
leaves a torn file; only the driver writes here (executors return their reports to it), and nothing
here ever holds a password.

    STATE/plan.json                       tables, their chunks, and the batches over all tables
    STATE/reports/DB.TABLE/chunk-N.json   one per finished chunk read (LW, HW, rows, ...)
    STATE/offsets.json                    the binlog-split offset map (after ``dblog report``)
    STATE/caught_up/DB.TABLE.json         every row change of the table in [from, to) is in the lake (none
                                          there, or read by a driver catch-up): a tail at ``from`` may move to ``to``
    CHECKPOINT/DB.TABLE/                  Spark Structured Streaming checkpoint of the tail: ``--checkpoint``,
                                          by default STATE/checkpoints for a local state (Spark here cannot
                                          write to S3: no s3a); losing it costs a restart, the lake records
                                          the tail's position
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.config import SourceConfig
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.store.checkpoints import CheckpointState, checkpoint_state
from airflow_provider_dblog.store.credentials import with_password
from airflow_provider_dblog.store.files import Files


@dataclass(frozen=True)
class TablePlan:
    meta: TableMeta
    chunks: tuple[ChunkRange, ...]
    strategy: str
    planned_at: BinlogPosition
    planned_gtid: str | None = None  # the server's GTID state when planned (informational)

    def chunk(self, chunk_id: int) -> ChunkRange:
        return self.chunks[chunk_id]

    def key_span(self, chunk_ids: Sequence[int]) -> str:
        """``[lo, hi)`` of consecutive chunks, for labels."""
        first, last = self.chunk(chunk_ids[0]), self.chunk(chunk_ids[-1])
        lo = "-∞" if first.lo is None else ",".join(map(str, first.lo))
        hi = "∞" if last.hi is None else ",".join(map(str, last.hi))
        return f"[{lo}, {hi})"


@dataclass(frozen=True)
class Batch:
    index: int
    table: str
    chunk_ids: tuple[int, ...]

    def label(self, plan: TablePlan) -> str:
        return f"{self.table} chunks {self.chunk_ids[0]}-{self.chunk_ids[-1]} {plan.key_span(self.chunk_ids)}"


class StateDir:
    """``path``: a local directory or ``s3://BUCKET/PREFIX``; ``checkpoints``: where the tail's Spark
    checkpoints live (a local or cluster-mounted directory; default ``STATE/checkpoints`` for a local state)."""

    def __init__(self, path: str | os.PathLike, checkpoints: str | os.PathLike | None = None):
        self.files = Files(path)
        self.path = self.files.local or self.files.root  # for messages: the directory or the URI
        if checkpoints:
            self.checkpoints = Path(checkpoints)
        else:
            self.checkpoints = self.files.local / "checkpoints" if self.files.local else None
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

    def tables(self) -> dict[str, TablePlan]:
        raw = self.load_raw()
        if self._tables is not None and self._tables[0] is raw:
            return self._tables[1]
        tables = {name: TablePlan(TableMeta.from_dict(t["meta"]), tuple(ChunkRange.from_dict(c) for c in t["chunks"]),
                                t["strategy"], BinlogPosition.from_dict(t["planned_at"]), t.get("planned_gtid"))
                  for name, t in raw["tables"].items()}
        self._tables = (raw, tables)
        return tables

    def table(self, name: str) -> TablePlan:
        tables = self.tables()
        if name not in tables:
            raise DblogError(f"table {name} is not planned in {self.path}: planned are {', '.join(tables) or 'none'}")
        return tables[name]

    def batches(self) -> list[Batch]:
        return [Batch(i, b["table"], tuple(b["chunks"])) for i, b in enumerate(self.load_raw()["batches"])]

    def batch(self, index: int) -> Batch:
        batches = self.batches()
        if not 0 <= index < len(batches):
            raise DblogError(f"batch {index} does not exist: the plan in {self.path} has batches 0-{len(batches) - 1}")
        return batches[index]

    def save_plan(self, source: SourceConfig, plan: TablePlan, batch_size: int, options: dict) -> list[Batch]:
        """Adds (or replaces) one table's plan; batches of other tables keep their indexes."""
        raw = self.files.read_json(self.PLAN) if self.has_plan() else {"version": 1, "tables": {}, "batches": []}
        if raw.get("source", source.public_uri) != source.public_uri:
            raise DblogError(f"{self.path} already holds a plan for {raw['source']}: use another --state directory")
        raw["source"] = source.public_uri
        raw.setdefault("options", {}).update(options)
        name = plan.meta.qualified
        raw["tables"][name] = {"meta": plan.meta.to_dict(), "chunks": [c.to_dict() for c in plan.chunks],
                               "strategy": plan.strategy, "planned_at": plan.planned_at.to_dict(),
                               "planned_gtid": plan.planned_gtid}
        kept = [b for b in raw["batches"] if b["table"] != name]
        ids = [c.id for c in plan.chunks]
        new = [{"table": name, "chunks": ids[i:i + batch_size]} for i in range(0, len(ids), batch_size)]
        raw["batches"] = kept + new
        self.files.write_json(self.PLAN, raw)
        self._plan = (self.files.identity(self.PLAN), raw)  # an S3 mtime has whole seconds: no stale cache
        return self.batches()

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

    def pending_chunks(self, batch_index: int, force: bool = False,
                       chunk_ids: Sequence[int] | None = None) -> tuple[str, list[int]]:
        """The batch's table and its chunks to read: ``chunk_ids`` of it (default all), unreported unless ``force``."""
        batch = self.batch(batch_index)
        wanted = list(batch.chunk_ids if chunk_ids is None else [c for c in chunk_ids if c in batch.chunk_ids])
        done = self.reports(batch.table) if not force else {}
        return batch.table, [c for c in wanted if c not in done]

    def unreported_chunks(self, table: str) -> list[int]:
        """The table's chunks without a report, in batch order (one read of its reports)."""
        done = self.reports(table)
        return [c for b in self.batches() if b.table == table for c in b.chunk_ids if c not in done]

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
        if self.checkpoints is None:
            raise DblogError(f"the state {self.path} is on object storage, where Spark's streaming checkpoint "
                             f"cannot be written here: give the tail a local or cluster-mounted directory with "
                             f"--checkpoint DIR")
        return self.checkpoints

    def checkpoint_dir(self, table: str) -> Path:
        return self.checkpoint_root() / table

    def checkpoint(self, table: str) -> CheckpointState:
        return checkpoint_state(self.checkpoint_dir(table))

    # ---- catch-up checks ----
    def caught_up_file(self, table: str) -> str:
        return f"caught_up/{table}.json"

    def write_caught_up(self, table: str, start: BinlogPosition, end: BinlogPosition) -> None:
        """Record that the lake holds every row change of ``table`` in the binlog range ``[start, end)``
        (none there, or read by a catch-up; write this only after checking or writing it): a tail whose
        position is in that range may move to ``end``. A range that continues the recorded one extends it."""
        name = self.caught_up_file(table)
        if self.files.exists(name):
            data = self.files.read_json(name)
            if BinlogPosition.from_dict(data["from"]) <= start <= BinlogPosition.from_dict(data["to"]):
                start = BinlogPosition.from_dict(data["from"])
        self.files.write_json(name, {"table": table, "from": start.to_dict(), "to": end.to_dict(),
                                     "checked_at": time.time()})

    def caught_up(self, table: str, position: BinlogPosition) -> tuple[BinlogPosition, float] | None:
        """(``to``, when it was recorded) if the recorded range covers ``position`` (``from <= position <= to``):
        the lake already holds every change of the table between ``position`` and ``to``; None otherwise."""
        name = self.caught_up_file(table)
        if not self.files.exists(name):
            return None
        data = self.files.read_json(name)
        start, end = BinlogPosition.from_dict(data["from"]), BinlogPosition.from_dict(data["to"])
        if start <= position <= end:
            return end, float(data.get("checked_at") or self.files.modified(name))
        return None

    def resume_position(self, table: str, min_hw: BinlogPosition) -> BinlogPosition:
        """Where the tail resumes: the checkpoint's latest offset; without one the min HW, or the end of
        a recorded catch-up check that covers it (the streaming source's first offset starts there)."""
        checkpoint = self.checkpoint(table)
        if checkpoint.kind != "none":
            return checkpoint.position
        checked = self.caught_up(table, min_hw)
        return checked[0] if checked else min_hw
