"""Report: check every planned chunk reported its exact range, build the binlog-split offset map (a
table whose startup mode reads no snapshot starts every key at the mode's position)."""
from __future__ import annotations

import logging

from airflow_provider_dblog.core.config import compress_ids
from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.offsets import TableOffsets
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


def build_offsets(state_dir: str) -> dict:
    """Persist the offset map; raises one line listing every missing or inconsistent chunk."""
    state = StateDir(state_dir)
    tables = state.tables()
    problems, offsets, summary = [], {}, {"tables": {}}
    for name, plan in tables.items():
        if not plan.startup.snapshots:  # nothing read: every key's stream starts at the mode's position
            offsets[name] = TableOffsets.from_chunks(name, plan.chunks, {c.id: plan.start_at for c in plan.chunks})
            summary["tables"][name] = {"chunks": 0, "rows": 0, "startup": str(plan.startup),
                                       "min_hw": str(plan.start_at), "max_hw": str(plan.start_at)}
            continue
        reports = state.reports(name)
        missing = [c.id for c in plan.chunks if c.id not in reports]
        if missing:
            batches = sorted({b.index for b in state.batches() if set(b.chunk_ids(name)) & set(missing)})
            problems.append(f"{name} chunks {compress_ids(missing)} have no report (rerun batches "
                            f"{', '.join(map(str, batches))})")
            continue
        hws = {}
        for chunk in plan.chunks:
            rep = reports[chunk.id]
            expected = chunk.to_dict()
            if rep["lo"] != expected["lo"] or rep["hi"] != expected["hi"]:
                problems.append(f"{name} chunk {chunk.id} reported range {rep['lo']}..{rep['hi']}, the plan says "
                                f"{expected['lo']}..{expected['hi']} (re-plan or --force rerun its batch)")
            lw, hw = SourcePosition.from_dict(rep["lw"]), SourcePosition.from_dict(rep["hw"])
            if lw > hw:
                problems.append(f"{name} chunk {chunk.id} has LW {lw} after HW {hw}")
            hws[chunk.id] = hw
        offsets[name] = TableOffsets.from_chunks(name, plan.chunks, hws)
        summary["tables"][name] = {"chunks": len(plan.chunks), "rows": sum(r["rows"] for r in reports.values()),
                                   "min_hw": str(offsets[name].min_hw), "max_hw": str(offsets[name].max_hw)}
    if problems:
        raise DblogError("report failed: " + "; ".join(problems))
    state.write_offsets(offsets)
    summary["chunks"] = sum(t["chunks"] for t in summary["tables"].values())
    summary["rows"] = sum(t["rows"] for t in summary["tables"].values())
    hws = [o for t in offsets.values() for o in (t.min_hw, t.max_hw)]
    summary["min_hw"] = str(min(hws)) if hws else None
    summary["max_hw"] = str(max(hws)) if hws else None
    log.info("report: %d chunks, %d rows; offset map in %s", summary["chunks"], summary["rows"], state.offsets_file)
    return summary
