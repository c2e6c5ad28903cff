"""A chunk's watermark window on PostgreSQL, for snapshot-only captures (the stream is not wired yet).

``low()`` opens one REPEATABLE READ, READ ONLY transaction on the snapshot connection and reads
``pg_current_wal_lsn()`` as its first statement, which also takes the transaction's snapshot; the
chunk's COPY runs in that transaction (``read_snapshot``), so it sees exactly that snapshot; ``high()``
reads ``pg_current_wal_lsn()`` again and ends the transaction. LW and HW are those two WAL locations.

For snapshot-only captures the HW is informational: there is no stream to hand the chunk over to, the
chunk's rows are exactly its snapshot's, and nothing is merged (the window has no events). The HW is what
the lake records for the chunk (``_pos``, Delta app transaction) so positions keep their one codec.

What the stream will need (not done here): this window has the ``position`` strategy's race (a
transaction whose commit record is below LW may not be visible yet to the snapshot, as on MySQL); the
exact analogue of ``consistent_snapshot`` is a snapshot exported by the replication slot
(``CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')`` + ``SET TRANSACTION SNAPSHOT``), and DBLog's
watermarks map to ``pg_logical_emit_message`` marks read back from the slot.
"""
from __future__ import annotations

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import BinlogPosition, lsn_position
from airflow_provider_dblog.core.tables import TableMeta
from airflow_provider_dblog.source.postgres.connection import PostgresClient

STRATEGY = "position"


def resolve_strategy(strategy: str) -> str:
    """``auto`` and ``position``: the LSNs around the chunk's transaction; the others need the stream."""
    if strategy in ("auto", STRATEGY):
        return STRATEGY
    raise DblogError(f"watermark strategy {strategy} is not available for PostgreSQL sources yet (snapshot-only "
                     f"reads each chunk in one REPEATABLE READ transaction): use --watermark auto")


class SnapshotWindow:
    """LW/HW: the WAL location read as the first statement of the chunk's transaction and after its read."""

    def __init__(self, client: PostgresClient, meta: TableMeta):
        self.client, self.meta = client, meta
        self.lw = self.hw = None

    def low(self) -> None:
        self.lw = lsn_position(self.client.begin_snapshot())

    def high(self) -> None:
        if not self.client.in_snapshot:
            raise DblogError(f"the snapshot transaction of a chunk of {self.meta.qualified} ended before its high "
                             f"watermark: reading the chunk again")
        self.hw = lsn_position(self.client.end_snapshot())

    def window(self) -> tuple[BinlogPosition, BinlogPosition, list[ChangeEvent]]:
        return self.lw, self.hw, []
