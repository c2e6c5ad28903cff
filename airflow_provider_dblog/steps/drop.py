"""``dblog drop``: remove what a capture made at its source (a PostgreSQL replication slot and publication), so
a capture that is given up no longer makes the server keep its log. The state and the lake stay as they are
(a later tail of this state refuses in one line: its slot is gone)."""
from __future__ import annotations

import logging

from airflow_provider_dblog.source import open_dialect
from airflow_provider_dblog.store.state import StateDir

log = logging.getLogger("dblog")


def drop_capture_stream(state_dir: str) -> dict:
    state = StateDir(state_dir)
    dialect = open_dialect(state.source(), state.options())
    try:
        state.record_stream_dropped()  # first: a drop killed half-way is never undone by a tail's renewal
        dropped = dialect.drop_stream()
    finally:
        dialect.close()
    for what in dropped:
        log.info("dropped %s", what)
    return {"state": str(state.path), "dropped": dropped}
