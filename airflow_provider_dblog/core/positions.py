"""Source positions: a total order over every change event and every snapshot row, one codec for both
sources (a MySQL / MariaDB binlog file and offset; a PostgreSQL LSN, mapped below).

An event's position is the *end* offset of its binlog event (what the server reports as the
next position) plus the row's index inside the event, so that

* a position read with ``SHOW MASTER STATUS`` (a transaction boundary) is greater than or equal to
  every event already written, and smaller than every event written later;
* a snapshot row carries its chunk's high watermark with ``row = SNAPSHOT_ROW``, which sorts after
  every event that the snapshot includes and before every event after it;
* a table planned again closes its changelog history with delete rows at ``row = CLOSED_ROW`` of the new
  plan's position: after every change the lake took before it, before its new chunks' rows (a chunk read
  at that very position included).

After a failover to a promoted replica (``steps.failover``) positions come from another server's binlog,
whose file numbers may be lower than those the lake holds. Each server a capture follows is an *epoch*:
a position's sequence is ``epoch * EPOCH_SPAN + the file's number``, so every position of a later server
sorts after every position of an earlier one, and ``file`` keeps the server's own file name.

The one codec of positions: ``to_dict``/``from_dict`` (state files, streaming offsets), ``encode``/
``decode`` (the lake's ``_pos``), ``to_version``/``from_version`` (Delta app transactions).
``encode()`` gives a fixed-width string whose lexicographic order is the position order: that
string is the ``_pos`` column of the lake, so Spark, pyarrow and SQL all order it correctly.

PostgreSQL sources use the same codec (``lsn_position``): a WAL location (LSN, a 64-bit byte address
printed ``HI/LO``) is the position ``seq = HI`` (the LSN's high 32 bits), ``offset = LO`` (its low 32
bits) in the pseudo file ``lsn.HHHHHH``, so ``to_dict``/``from_dict``, ``encode`` (``_pos`` sorts in WAL
order) and ``to_version`` keep working unchanged; ``row`` orders the changes inside one commit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from airflow_provider_dblog.core.errors import DblogError

SNAPSHOT_ROW = 99_999_999
CLOSED_ROW = SNAPSHOT_ROW - 1
# the row indexes one position orders: 0 .. ROWS_PER_POSITION - 1, whose events (2i, and 2i + 1 for a key change's
# insert: ``core.events.row_change``) all sort below CLOSED_ROW in ``encode()``'s eight digits
ROWS_PER_POSITION = CLOSED_ROW // 2
EPOCH_SPAN = 1_000_000  # binlog file numbers have six digits
MAX_EPOCH = 7  # (7 + 1) * EPOCH_SPAN << OFFSET_BITS still fits a Delta app transaction version (63 bits)
OFFSET_BITS = 40  # a binlog file is at most 1 GiB (max_binlog_size): offsets fit in 40 bits
_FILE_RE = re.compile(r"^(?P<base>.+)\.(?P<seq>\d+)$")
_ENCODED_RE = re.compile(r"^(\d{8})\.(\d{12})\.(\d{8})$")


@lru_cache(maxsize=1024)  # every binlog event's position names its file
def file_sequence(file: str) -> int:
    match = _FILE_RE.match(file)
    if not match:
        raise ValueError(f"not a binlog file name: {file!r} (expected BASE.NNNNNN)")
    return int(match.group("seq"))


def too_many_rows(pos: "SourcePosition") -> str:
    """Why the row ``pos.row`` of one change has no position of its own (``ROWS_PER_POSITION`` or more rows in one
    MySQL rows event or XA transaction; PostgreSQL spreads such a transaction: ``stream.change_position``): its
    ``_pos`` would collide with ``CLOSED_ROW`` or sort wrongly as nine digits."""
    return (f"row {pos.row:,} of the change at {pos.with_row(0)}: one binlog event or XA transaction holds more rows "
            f"than dblog's positions order ({ROWS_PER_POSITION:,}); write such changes in smaller transactions "
            f"(and a smaller binlog_row_event_max_size for one event)")


def check_row_index(row: int, pos: "SourcePosition") -> None:
    """Refuse in one line a row index no position orders (``too_many_rows``): the last guard, under the readers'
    own (which stop only the tables that need the change)."""
    if row >= ROWS_PER_POSITION:
        raise DblogError(f"{too_many_rows(pos.with_row(row))}; then re-snapshot the tables it changed")


def encode_position(seq: int, offset: int, row: int) -> str:
    """``SourcePosition(seq, offset, row).encode()`` without the object (a block's rows)."""
    return f"{seq:08d}.{offset:012d}.{row:08d}"


def position_prefix(pos: "SourcePosition") -> bytes:
    """``pos.encode()`` without its row, as bytes: what a block's rows at one position share (each row's eight
    digits follow: ``spans.fixed_strings``)."""
    return encode_position(pos.seq, pos.offset, 0)[:-8].encode()


@dataclass(frozen=True, order=True)
class SourcePosition:
    """A point in the source's change log (a binlog event's end, or a WAL location: ``lsn_position``);
    ordered by (file sequence, offset, row)."""

    seq: int
    offset: int
    row: int = 0
    file: str = field(default="", compare=False)

    @classmethod
    def at(cls, file: str, offset: int, row: int = 0, epoch: int = 0) -> "SourcePosition":
        """The position ``offset`` of the server's binlog ``file``, on the capture's ``epoch``-th server."""
        return cls(epoch * EPOCH_SPAN + file_sequence(file), int(offset), int(row), file)

    @property
    def epoch(self) -> int:
        return self.seq // EPOCH_SPAN

    def encode(self) -> str:
        return encode_position(self.seq, self.offset, self.row)

    def with_row(self, row: int) -> "SourcePosition":
        return SourcePosition(self.seq, self.offset, row, self.file)

    @classmethod
    def decode(cls, text: str, base: str = "") -> "SourcePosition":
        match = _ENCODED_RE.match(text)
        if not match:
            raise ValueError(f"not an encoded position: {text!r}")
        seq, offset, row = (int(g) for g in match.groups())
        return cls(seq, offset, row, _file_name(base, seq))

    def boundary(self) -> "SourcePosition":
        """The transaction boundary this position's event ends at (row index dropped)."""
        return SourcePosition(self.seq, self.offset, 0, self.file)

    def as_snapshot(self) -> "SourcePosition":
        """The position snapshot rows read at this high watermark carry."""
        return SourcePosition(self.seq, self.offset, SNAPSHOT_ROW, self.file)

    def as_closed(self) -> "SourcePosition":
        """The position of the delete rows that close a table's history when it is planned again here."""
        return SourcePosition(self.seq, self.offset, CLOSED_ROW, self.file)

    def to_version(self) -> int:
        """The transaction boundary as one integer that orders like positions (a Delta app
        transaction version: the lake records how far it got with it)."""
        return (self.seq << OFFSET_BITS) | self.offset

    @classmethod
    def from_version(cls, version: int, base: str = "") -> "SourcePosition":
        seq, offset = version >> OFFSET_BITS, version & ((1 << OFFSET_BITS) - 1)
        return cls(seq, offset, 0, _file_name(base, seq))

    def in_file_of(self, other: "SourcePosition") -> "SourcePosition":
        """This position with the binlog file name it has in ``other``'s naming (same base name)."""
        base = other.file.rsplit(".", 1)[0] if other.file else ""
        return SourcePosition(self.seq, self.offset, self.row, _file_name(base, self.seq) if base else self.file)

    def to_dict(self) -> dict:
        return {"file": self.file, "pos": self.offset, **({"epoch": self.epoch} if self.epoch else {})}

    @classmethod
    def from_dict(cls, data: dict) -> "SourcePosition":
        return cls.at(data["file"], data["pos"], epoch=int(data.get("epoch", 0)))

    def __str__(self) -> str:
        if self.file.startswith(LSN_FILE + "."):  # a PostgreSQL WAL location, as PostgreSQL prints it
            return f"{self.seq % EPOCH_SPAN:X}/{self.offset:X}" + (f"#{self.row}" if self.row else "")
        return f"{self.file or self.seq}:{self.offset}" + (f"#{self.row}" if self.row else "")


LSN_FILE = "lsn"  # the pseudo file name of PostgreSQL positions: lsn.HHHHHH (the LSN's high 32 bits)
LSN_LOW_BITS = 32


def lsn_position(lsn: int, row: int = 0) -> SourcePosition:
    """The position of PostgreSQL WAL location ``lsn`` (an ``int``; ``0/16B3748`` is ``0x16B3748``):
    ``seq`` = its high 32 bits, ``offset`` = its low 32 bits, ``file`` = ``lsn.{seq:06d}``. Positions order
    as the LSNs do, and ``encode()`` stays fixed-width while the high half is below ``EPOCH_SPAN`` (4 PB of
    WAL: ``ValueError`` beyond). ``row`` orders the changes of one transaction (``SNAPSHOT_ROW`` for a
    chunk's snapshot rows, as for binlog positions)."""
    if lsn < 0:
        raise ValueError(f"not a WAL location: {lsn}")
    high, low = lsn >> LSN_LOW_BITS, lsn & ((1 << LSN_LOW_BITS) - 1)
    if high >= EPOCH_SPAN:
        raise ValueError(f"WAL location {high:X}/{low:X} is beyond what a position encodes (high half < {EPOCH_SPAN})")
    return SourcePosition(high, low, int(row), f"{LSN_FILE}.{high:06d}")


def position_lsn(position: SourcePosition) -> int:
    """The WAL location (``int``) of a position made by ``lsn_position`` (its row index dropped)."""
    return ((position.seq % EPOCH_SPAN) << LSN_LOW_BITS) | position.offset


def _file_name(base: str, seq: int) -> str:
    """The server's name of the binlog file of sequence ``seq`` ("" without a base name)."""
    return f"{base}.{seq % EPOCH_SPAN:06d}" if base else ""


def merge_gtids(state: str, passed) -> str:
    """A GTID state (``D-S-N`` per domain, comma-separated) moved on by the GTIDs ``passed`` after it (the
    last one per domain wins)."""
    domains = {g.split("-")[0]: g for g in (x.strip() for x in state.split(",")) if g}
    for gtid in passed:
        domains[gtid.split("-")[0]] = gtid
    return ",".join(domains[d] for d in sorted(domains, key=int))
