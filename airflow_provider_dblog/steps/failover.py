"""Failover: the capture's source is now a promoted replica, and the tail resumes on it by GTID.

A binlog position means nothing on another server, but a MariaDB GTID names the same transaction on
the primary and on every replica that applied it. The tail records the GTID state with the positions it
resumes from (``record_tail_positions``, ``write_caught_up``). When the source answers as another server,
each table's floor is looked up by its GTID in the new server's binlog (``position_after_gtid``): that
server's history must contain the lake's (else it is another history: one line, nothing changes). Its
positions become the capture's next *epoch* (``core.positions``): they sort after every position the
lake holds, so ``current`` keeps taking the greatest ``_pos`` per key. A table whose floor has no
recorded GTID (never tailed since its snapshot) is read again on the new server.
"""
from __future__ import annotations

import logging
import shutil

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import MAX_EPOCH, SourcePosition
from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.readers.change_reader import table_floor
from airflow_provider_dblog.store.state import StateDir, describe_server

log = logging.getLogger("dblog")


def follow_promoted_server(state: StateDir, sink: str, dialect, names: list[str], offsets: dict,
                           recorded: dict) -> tuple[object, list[str]]:
    """When the source is another server than the state's and its binlog holds the lake's GTIDs, move the
    capture onto it; returns (the dialect to use, the tables to read again). A source that is the state's
    server, or has no GTIDs to prove its history, is left to ``health.check_same_server``."""
    recorded_server, live = state.server(), dialect.server_identity()
    if recorded_server is None or recorded_server == live:
        return dialect, []
    now = dialect.current_position()
    if dialect.gtid_at(now) is None:
        return dialect, []  # no GTIDs: check_same_server refuses it in one line
    epoch = int(state.options().get("epoch", 0)) + 1
    if epoch > MAX_EPOCH:
        raise DblogError(f"the source now answers as {describe_server(live)}, the capture's {epoch}th server: "
                         f"positions support {MAX_EPOCH} failovers; capture it anew (a new --state and --sink)")
    floors = {name: table_floor(state, sink, dialect, name, offsets[name].min_hw, recorded) for name in names}
    gtids = {name: state.gtid_of(name, floor) for name, floor in floors.items()}
    if not any(gtids.values()):
        raise DblogError(f"the source now answers as {describe_server(live)} (was {describe_server(recorded_server)}), "
                         f"and no GTID was recorded with the lake's positions to prove it continues that history "
                         f"(a tail records them on MariaDB): capture it anew (a new --state and --sink)")
    promoted = open_dialect(state.source(), {**state.options(), "epoch": epoch})
    positions, again = {}, []
    for name in sorted(names, key=lambda n: gtids[n] is None):  # the history is proven before any re-read
        floor, gtid = floors[name], gtids[name]
        if gtid is None:
            again.append(name)
            continue
        try:
            positions[name] = promoted.position_after_gtid(gtid)
        except DblogError as exc:
            if "purged" in str(exc):
                again.append(name)
                continue
            promoted.close()
            raise DblogError(f"the source now answers as {describe_server(live)} (was {describe_server(recorded_server)})"
                             f", but {name}'s lake holds transactions up to GTID {gtid} and this server's binlog "
                             f"does not follow them ({exc}): not a promoted replica of the captured server; "
                             f"capture it anew (a new --state and --sink)") from None
        log.warning("tail: %s: the lake is at %s on server %s = GTID %s = %s on the promoted server %s", name, floor,
                    describe_server(recorded_server), gtid, positions[name], describe_server(live))
    state.follow_server(live, epoch, positions)
    shutil.rmtree(state.checkpoint_dir(), ignore_errors=True)  # its offsets are the old server's positions
    if again:
        log.warning("tail: %s had no GTID recorded at the position the lake holds (not tailed since their "
                    "snapshot): reading their chunks again on the promoted server", ", ".join(again))
    dialect.close()
    return promoted, again


def move_source(state_dir: str, source, save_password: bool = True) -> dict:
    """``dblog failover``: the capture reads ``source`` (a ``SourceConfig``) from now on. Checked here: it answers, it has
    GTIDs (the tail resumes on it by them); the next tail moves every table onto it."""
    from airflow_provider_dblog.store.credentials import remember

    state = StateDir(state_dir)
    if source.scheme != state.source().scheme:
        raise DblogError(f"--source {source.public_uri} is not a {state.source().scheme}:// source like the capture's")
    dialect = open_dialect(source, state.options())
    try:
        live, now = dialect.server_identity(), dialect.current_position()
        if dialect.gtid_at(now) is None:
            raise DblogError(f"{source.address} has no GTIDs: a capture moves to another server by GTID only "
                             f"(MariaDB with GTIDs); capture it anew (a new --state and --sink)")
    finally:
        dialect.close()
    if save_password:
        remember(source)
    state.move_source(source)
    log.info("failover: %s reads %s (%s) from now on; the next tail resumes there by GTID", state_dir,
             source.public_uri, describe_server(live))
    return {"source": source.public_uri, "server": live, "was": state.server()}
