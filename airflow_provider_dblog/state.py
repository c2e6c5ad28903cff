"""The state directory: the plan, one report per finished chunk, the offset map, tail checkpoints.

Every file is written atomically (temp file + rename), so a killed step never leaves a torn file,
and nothing here ever holds a password.

    STATE/plan.json                       tables, their chunks, and the batches over all tables
    STATE/reports/DB.TABLE/chunk-N.json   one per finished chunk read (LW, HW, rows, output file)
    STATE/offsets.json                    the binlog-split offset map (after ``dblog report``)
    STATE/checkpoints/DB.TABLE/           Spark Structured Streaming checkpoint of the tail
    STATE/caught_up/DB.TABLE.json         every row change of the table in [from, to) is in the lake (none
                                          there, or read by a driver catch-up): a tail at ``from`` may move to ``to``
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_dblog.core.chunks import ChunkRange
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.dialects.base import Column, SourceConfig, TableMeta
from airflow_provider_dblog.errors import DblogError


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1, default=str)
    os.replace(tmp, path)


def read_json(path: Path):
    return json.loads(path.read_text())


def meta_to_dict(meta: TableMeta) -> dict:
    return {"database": meta.database, "name": meta.name, "key_columns": list(meta.key_columns),
            "key_source": meta.key_source, "columns": [vars(c) for c in meta.columns]}


def meta_from_dict(data: dict) -> TableMeta:
    return TableMeta(data["database"], data["name"], tuple(Column(**c) for c in data["columns"]),
                     tuple(data["key_columns"]), data["key_source"])


@dataclass(frozen=True)
class TablePlan:
    meta: TableMeta
    chunks: tuple[ChunkRange, ...]
    strategy: str
    planned_at: BinlogPosition
    planned_gtid: str | None = None  # the server's GTID state when planned (informational)

    def chunk(self, chunk_id: int) -> ChunkRange:
        return self.chunks[chunk_id]


@dataclass(frozen=True)
class Batch:
    index: int
    table: str
    chunk_ids: tuple[int, ...]

    def label(self, plan: TablePlan) -> str:
        first, last = plan.chunk(self.chunk_ids[0]), plan.chunk(self.chunk_ids[-1])
        lo = "-∞" if first.lo is None else ",".join(map(str, first.lo))
        hi = "∞" if last.hi is None else ",".join(map(str, last.hi))
        return f"{self.table} chunks {self.chunk_ids[0]}-{self.chunk_ids[-1]} [{lo}, {hi})"


class StateDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    # ---- plan ----
    @property
    def plan_file(self) -> Path:
        return self.path / "plan.json"

    def has_plan(self) -> bool:
        return self.plan_file.exists()

    def load_raw(self) -> dict:
        if not self.has_plan():
            raise DblogError(f"no plan in {self.path}: run `dblog plan --source URI --table DB.TABLE --state "
                             f"{self.path}` first")
        return read_json(self.plan_file)

    def source(self) -> SourceConfig:
        return SourceConfig.parse(self.load_raw()["source"]).resolve_password()

    def options(self) -> dict:
        return self.load_raw().get("options", {})

    def tables(self) -> dict[str, TablePlan]:
        raw = self.load_raw()
        return {name: TablePlan(meta_from_dict(t["meta"]), tuple(ChunkRange.from_dict(c) for c in t["chunks"]),
                                t["strategy"], BinlogPosition.from_dict(t["planned_at"]), t.get("planned_gtid"))
                for name, t in raw["tables"].items()}

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
        raw = read_json(self.plan_file) if self.has_plan() else {"version": 1, "tables": {}, "batches": []}
        if raw.get("source", source.public_uri) != source.public_uri:
            raise DblogError(f"{self.path} already holds a plan for {raw['source']}: use another --state directory")
        raw["source"] = source.public_uri
        raw.setdefault("options", {}).update(options)
        name = plan.meta.qualified
        raw["tables"][name] = {"meta": meta_to_dict(plan.meta), "chunks": [c.to_dict() for c in plan.chunks],
                               "strategy": plan.strategy, "planned_at": plan.planned_at.to_dict(),
                               "planned_gtid": plan.planned_gtid}
        kept = [b for b in raw["batches"] if b["table"] != name]
        ids = [c.id for c in plan.chunks]
        new = [{"table": name, "chunks": ids[i:i + batch_size]} for i in range(0, len(ids), batch_size)]
        raw["batches"] = kept + new
        write_json(self.plan_file, raw)
        return self.batches()

    # ---- chunk reports ----
    def report_file(self, table: str, chunk_id: int) -> Path:
        return self.path / "reports" / table / f"chunk-{chunk_id:06d}.json"

    def write_report(self, table: str, chunk_id: int, report: dict) -> None:
        write_json(self.report_file(table, chunk_id), report)

    def reports(self, table: str) -> dict[int, dict]:
        folder = self.path / "reports" / table
        if not folder.exists():
            return {}
        return {int(p.stem.split("-")[1]): read_json(p) for p in sorted(folder.glob("chunk-*.json"))}

    # ---- offsets & checkpoints ----
    @property
    def offsets_file(self) -> Path:
        return self.path / "offsets.json"

    def checkpoint_dir(self, table: str) -> Path:
        return self.path / "checkpoints" / table

    # ---- catch-up checks ----
    def caught_up_file(self, table: str) -> Path:
        return self.path / "caught_up" / f"{table}.json"

    def write_caught_up(self, table: str, start: BinlogPosition, end: BinlogPosition) -> None:
        """Record that the lake holds every row change of ``table`` in the binlog range ``[start, end)``
        (none there, or read by a catch-up; write this only after checking or writing it): a tail whose
        position is in that range may move to ``end``. A range that continues the recorded one extends it."""
        path = self.caught_up_file(table)
        if path.exists():
            data = read_json(path)
            if BinlogPosition.from_dict(data["from"]) <= start <= BinlogPosition.from_dict(data["to"]):
                start = BinlogPosition.from_dict(data["from"])
        write_json(path, {"table": table, "from": start.to_dict(), "to": end.to_dict(), "checked_at": time.time()})

    def caught_up(self, table: str, position: BinlogPosition) -> tuple[BinlogPosition, float] | None:
        """(``to``, when it was recorded) if the recorded range covers ``position`` (``from <= position <= to``):
        the lake already holds every change of the table between ``position`` and ``to``; None otherwise."""
        path = self.caught_up_file(table)
        if not path.exists():
            return None
        data = read_json(path)
        start, end = BinlogPosition.from_dict(data["from"]), BinlogPosition.from_dict(data["to"])
        if start <= position <= end:
            return end, float(data.get("checked_at") or path.stat().st_mtime)
        return None
