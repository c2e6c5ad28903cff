"""A chunk's window on PostgreSQL: the chunk's rows are stamped with the WAL location read before its snapshot.

``low()`` reads the LW (``PostgresClient.current_lsn``: the WAL insert location once flushed), then opens
one REPEATABLE READ, READ ONLY transaction whose first statement takes the snapshot the chunk's COPY sees
(``read_snapshot``); ``high()`` ends it. The window has no events and HW = LW: the snapshot holds every
transaction before LW (each one's commit was flushed and had returned before the snapshot was taken), and
maybe some after it. The stream (``stream.SlotReader``) emits every change after LW for the chunk's keys,
so those later transactions are applied again on top of the snapshot: their row images are whole rows
applied in commit order, so ``current`` ends the same, and the changelog holds each change once (after
the chunk's snapshot row, which may already show it). No WAL is read per chunk and no slot is needed to
read one, so chunk reads run in parallel anywhere; ``current`` converges exactly as with MySQL's windows.

The one race left is PostgreSQL's own commit order: a commit record flushed, its backend not yet marked
done in the proc array when the chunk's snapshot is taken (microseconds, between two statements of the
reader; longer only while a commit waits for a synchronous standby, ``synchronous_standby_names``), would
be in neither the snapshot nor the stream after LW. Flink CDC's and Debezium's PostgreSQL snapshots share
it; ``dblog verify`` finds such a row and ``dblog resnapshot`` repairs it.
"""
from __future__ import annotations

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import SourcePosition, lsn_position
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.postgres.connection import PostgresClient

STRATEGY = "position"


def resolve_strategy(strategy: str) -> str:
    """``auto`` and ``position``: the WAL location before the chunk's snapshot."""
    if strategy in ("auto", STRATEGY):
        return STRATEGY
    raise DblogError(f"watermark strategy {strategy} is not available for PostgreSQL sources (each chunk is read in "
                     f"one REPEATABLE READ transaction stamped with the WAL location before it): use --watermark auto")


class SnapshotWindow:
    """LW = HW: the WAL location read before the chunk's transaction; no window events."""

    def __init__(self, client: PostgresClient, meta: TableMeta):
        self.client, self.meta = client, meta
        self.lw = None

    def low(self) -> None:
        self.lw = lsn_position(self.client.begin_snapshot())

    def high(self) -> None:
        if not self.client.in_snapshot:
            raise DblogError(f"the snapshot transaction of a chunk of {self.meta.qualified} ended before its high "
                             f"watermark: reading the chunk again")
        self.client.end_snapshot()

    def window(self) -> tuple[SourcePosition, SourcePosition, list[ChangeEvent]]:
        return self.lw, self.lw, []
