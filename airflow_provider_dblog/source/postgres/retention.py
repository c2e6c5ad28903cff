"""The WAL a capture's slot holds, in the terms of ``core.retention`` (whose rules were written for binlogs).

PostgreSQL keeps every WAL segment from the slot's ``restart_lsn`` on, with one exception: past
``max_slot_wal_keep_size`` (PostgreSQL 13+) the server may remove it and mark the slot *lost*, which is the
purge of a binlog. The WAL from ``restart_lsn`` to now is listed as the pseudo files positions name
(``lsn.HHHHHH``: 4 GiB of WAL each, the LSN's high half), their sizes the bytes the slot holds in each, and
``max_slot_wal_keep_size`` as the size limit, so ``purge_risks`` warns while a table's position is close to
it. There is no age limit. A lost slot has no files and says why (``BinlogRetention.lost``): every table is
reported purged, whatever part of the 4 GiB a pseudo file spans it sits in.
"""
from __future__ import annotations

import time
from typing import Sequence

from airflow_provider_dblog.core.positions import SourcePosition, lsn_position
from airflow_provider_dblog.core.retention import BinlogFile, BinlogRetention
from airflow_provider_dblog.source.postgres.connection import PostgresClient
from airflow_provider_dblog.source.postgres.slot import lost_slot_message, slot_state

HALF = 1 << 32


def wal_retention(client: PostgresClient, slot: str | None, needed: Sequence[SourcePosition] = ()) -> BinlogRetention:
    now = client.current_lsn()
    state = slot_state(client, slot) if slot else None
    start = state.restart if state is not None and state.wal_status != "lost" else now
    files = []
    for high in range(start >> 32, (now >> 32) + 1):
        lo, hi = max(start, high * HALF), min(now, (high + 1) * HALF)
        files.append(BinlogFile(lsn_position(high * HALF).file, max(0, hi - lo)))
    keep = None
    if client.version_num >= 130000:
        mb = int(client.scalar("SELECT setting FROM pg_settings WHERE name = 'max_slot_wal_keep_size'"))
        keep = mb * 1024 * 1024 if mb >= 0 else None
    if state is not None and state.wal_status == "lost":
        return BinlogRetention((), None, keep, time.time(), lost_slot_message(client, slot))
    return BinlogRetention(tuple(files), None, keep, time.time())
