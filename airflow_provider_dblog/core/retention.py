"""The binlog purge horizon: how long the server keeps the oldest binlog file each table still needs.

A table's tail resumes at its floor (``StateDir.resume_position``); the file holding that position must
still be on the server when the tail reads it, or the table can only be caught up by reading it again
(``dblog tail --on-purge``). The server deletes files on its own in two ways:

* **by age** (``binlog_expire_logs_seconds``, or ``expire_logs_days`` × 86400): at a binlog rotation
  (a full file, ``FLUSH BINARY LOGS``, a restart) it deletes, oldest first, every closed file whose
  *modification time* is older than the period (MariaDB's and MySQL's ``purge_logs_before_date`` compare
  ``st_mtime``). A closed file's modification time is when the rotation that closed it wrote its last
  event, which is within a second of the first event of the next file: that event's timestamp stands in
  for it (it is floored to the second, so the estimate errs early). Where it is unknown the file's own
  first event is used (earlier still: warns early, never late). The file being written is never purged:
  it has at least a whole period left once it is closed.
* **by size** (MariaDB 11.4+ ``max_binlog_total_size``, Percona's ``binlog_space_limit``): while the
  files' total is over the limit the oldest closed file is deleted, so a file survives while it and
  every later file together fit in the limit.

``purge_risks`` is the pure decision; the dialect (``binlog_retention``) gathers the facts. Times are
the server's clock (epoch seconds), like the binlog's timestamps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from airflow_provider_dblog.core.positions import SourcePosition, file_sequence

# a table warns when its file is due to be purged within this share of the expiry period (of the size limit)
DEFAULT_WARNING_SHARE = 0.2


@dataclass(frozen=True)
class BinlogFile:
    """One binlog file the server has: its size and, where looked up, its first event's time (epoch s)."""

    name: str
    size: int
    started_at: float | None = None


@dataclass(frozen=True)
class BinlogRetention:
    """What decides when the server deletes binlog files: its files (oldest first; the last is being
    written), the age limit in seconds and the total-size limit in bytes (None: no such purge), and the
    server's clock when they were read."""

    files: tuple[BinlogFile, ...]
    expire_seconds: float | None
    max_total_size: int | None
    checked_at: float
    lost: str | None = None  # why the capture's whole log is gone, with the fix (an invalidated slot): all purged

    @property
    def oldest(self) -> str | None:
        return self.files[0].name if self.files else None

    def index(self, position: SourcePosition) -> int | None:
        """Where the file holding ``position`` is among ``files`` (matched by sequence number); None if absent."""
        return next((i for i, f in enumerate(self.files) if file_sequence(f.name) == position.seq), None)


@dataclass(frozen=True)
class PurgeRisk:
    """One table's standing against the purge: the file it needs, whether that is gone already, and how
    long (seconds) / how many more binlog bytes until the server may delete it (None: that purge is off
    or the time is unknown; 0 or less: at the server's next check -- a rotation, or a write for the
    size limit)."""

    table: str
    needed: SourcePosition
    file: str
    purged: bool
    seconds_left: float | None
    bytes_left: int | None
    warn: bool
    oldest: str | None = None
    reason: str | None = None  # the log's own account of its loss (``BinlogRetention.lost``)

    def fields(self) -> dict:
        """The health report's fields for this table."""
        return {"binlog_needed": self.file, "binlog_oldest": self.oldest, "binlog_purged": self.purged,
                "purge_in_seconds": None if self.seconds_left is None else round(max(0.0, self.seconds_left), 1),
                "purge_in_bytes": None if self.bytes_left is None else max(0, self.bytes_left),
                "purge_warning": self.message()}

    def message(self) -> str | None:
        """One line for a table whose file is gone or close to it; None otherwise."""
        if self.purged and self.reason:
            return f"{self.table}: {self.reason}"
        if self.purged:
            return (f"{self.table} needs binlog {self.file} (from {self.needed}), which the server already purged "
                    f"(oldest is {self.oldest or 'none'}): its changes since then are lost to the tail; the next "
                    f"`dblog tail` reads the table again (--on-purge resnapshot, the default) or stops (--on-purge "
                    f"fail)")
        if not self.warn:
            return None
        left = []
        if self.seconds_left is not None:
            left.append("purgeable now (at the next binlog rotation)" if self.seconds_left <= 0 else
                        f"purgeable in {_duration(self.seconds_left)}")
        if self.bytes_left is not None:
            left.append("over the binlog size limit (purged at the next write)" if self.bytes_left <= 0 else
                        f"purged after {_size(self.bytes_left)} more binlog")
        return (f"{self.table} needs binlog {self.file} (from {self.needed}), {' / '.join(left)}: catch the tail "
                f"up (dblog tail) or keep binlogs longer, or the table must be read again")


def purge_risks(needed: Mapping[str, SourcePosition], retention: BinlogRetention, now: float,
                warn_seconds: float | None = None, warn_bytes: int | None = None) -> dict[str, PurgeRisk]:
    """Per table (``needed``: the position its tail resumes at) whether its file is purged, how close the
    server is to purging it, and whether that is within the warning margin: ``warn_seconds`` before the
    age limit deletes it, or ``warn_bytes`` before the size limit does (None: ``DEFAULT_WARNING_SHARE`` of
    the limit). ``now``: the server's clock."""
    expire, limit = retention.expire_seconds or None, retention.max_total_size or None
    if warn_seconds is None and expire is not None:
        warn_seconds = DEFAULT_WARNING_SHARE * expire
    if warn_bytes is None and limit is not None:
        warn_bytes = int(DEFAULT_WARNING_SHARE * limit)
    files = retention.files
    risks = {}
    for table, position in needed.items():
        if retention.lost:
            risks[table] = PurgeRisk(table, position, position.file or f"#{position.seq}", True, None, None, False,
                                     retention.oldest, retention.lost)
            continue
        i = retention.index(position)
        file = files[i].name if i is not None else position.file or f"#{position.seq}"
        if i is None:  # gone; unless newer than every file (another server's position: the tail refuses it)
            newer = bool(files) and position.seq > file_sequence(files[-1].name)
            risks[table] = PurgeRisk(table, position, file, not newer, None, None, False, retention.oldest)
            continue
        seconds = None
        if expire is not None:
            if i == len(files) - 1:
                seconds = float(expire)  # being written: a whole period once it is closed
            else:
                ended = files[i + 1].started_at or files[i].started_at
                seconds = None if ended is None else ended + expire - now
        left = None if limit is None else limit - sum(f.size for f in files[i:])
        warn = ((seconds is not None and warn_seconds is not None and seconds <= warn_seconds)
                or (left is not None and warn_bytes is not None and left <= warn_bytes))
        risks[table] = PurgeRisk(table, position, file, False, seconds, left, warn, retention.oldest)
    return risks


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _size(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
