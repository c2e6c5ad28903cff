"""Where the source is, and the one place that validates the options users give (CLI, DAG params,
connection extras): each check raises ``DblogError`` with the one-line fix."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Sequence
from urllib.parse import quote, unquote, urlparse

from airflow_provider_dblog.core.errors import DblogError

PASSWORD_ENV = "DBLOG_SOURCE_PASSWORD"
STRATEGIES = ("auto", "position", "watermark_table", "consistent_snapshot")
DEFAULT_CHUNK_SIZE = 100_000
DEFAULT_BATCH_SIZE = 8
# URI schemes that have a dialect (``source.register_dialect`` adds one, e.g. the tests' in-memory source)
SOURCE_SCHEMES = {"mysql": "mysql", "mariadb": "mysql", "postgresql": "postgresql", "postgres": "postgresql"}
DEFAULT_PORTS = {"mysql": 3306, "postgresql": 5432}
# sources whose URI must name the database (a PostgreSQL capture is one database: its tables are SCHEMA.TABLE)
NEEDS_DATABASE = {"postgresql"}
SOURCE_FORMS = "mysql://USER[:PASSWORD]@HOST:PORT[/DB] or postgresql://USER[:PASSWORD]@HOST:PORT/DB"
# a password holding one of / ? # @ ends the USER:PASSWORD@HOST part early: its tail was taken for the host (an
# error then named a piece of the password, and a DNS lookup sent it out) or for the path, query or fragment
ENCODE_HINT = (f"percent-encode / ? # @ % and spaces in the password (%2F %3F %23 %40 %25 %20) or give it in "
               f"${PASSWORD_ENV}")


@dataclass(frozen=True)
class SourceConfig:
    """Where the source is. ``password`` is never serialised: see ``public_uri``."""

    host: str
    port: int
    user: str
    password: str = field(default="", repr=False)
    database: str = ""
    scheme: str = "mysql"

    @classmethod
    def parse(cls, uri: str) -> "SourceConfig":
        try:
            parsed = urlparse(uri)
        except ValueError:  # an unclosed [IPv6] host: said without the URI (it may hold the password)
            raise DblogError(f"bad --source: the host is not a name or an address ({SOURCE_FORMS})") from None
        if parsed.query or parsed.fragment or "@" in parsed.path:  # said without the URI: it may hold the password
            raise DblogError(f"bad --source: a '?', '#' or '@' after the host (URI options are not supported): "
                             f"{ENCODE_HINT}")
        if parsed.scheme not in SOURCE_SCHEMES or not parsed.hostname or not parsed.username:
            raise DblogError(f"bad --source: expected {SOURCE_FORMS} ({ENCODE_HINT})")
        scheme = SOURCE_SCHEMES[parsed.scheme]
        try:
            port = parsed.port or DEFAULT_PORTS.get(scheme, 0)
        except ValueError:
            raise DblogError(f"bad --source: the port is not a number ({SOURCE_FORMS}; {ENCODE_HINT})") from None
        database = unquote(parsed.path.lstrip("/"))
        if scheme in NEEDS_DATABASE and not database:
            raise DblogError(f"bad --source: a {scheme}:// source names its database: "
                             f"{scheme}://USER[:PASSWORD]@HOST:PORT/DB (its tables are SCHEMA.TABLE)")
        return cls(parsed.hostname, port, unquote(parsed.username), unquote(parsed.password or ""), database, scheme)

    @property
    def public_uri(self) -> str:
        """The URI without the password: safe for logs, state files and XComs."""
        user, database = quote(self.user, safe=""), quote(self.database, safe="")
        return f"{self.scheme}://{user}@{self.uri_host}:{self.port}" + (f"/{database}" if database else "")

    @property
    def uri_host(self) -> str:
        """The host as a URI writes it: an IPv6 address in brackets (unbracketed, the state's URI did not parse
        again, nor connectorx's)."""
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def with_password(self, password: str) -> "SourceConfig":
        return replace(self, password=password)


def watermark_strategy(value: Any) -> str:
    strategy = str(value or "auto").strip()
    if strategy not in STRATEGIES:
        raise DblogError(f"unknown watermark strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    return strategy


def positive_int(value: Any, name: str) -> int:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise DblogError(f"{name} must be a whole number, got {value!r}") from None
    if number <= 0:
        raise DblogError(f"{name} must be a positive number, got {number}")
    return number


def table_names(value: Any) -> list[str]:
    """``DB.TABLE`` names from a list or a comma/space separated string."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else re.split(r"[,\s]+", str(value).strip())
    tables = [str(t).strip() for t in items if str(t).strip()]
    for table in tables:
        if table.count(".") < 1:
            raise DblogError(f"bad table name {table!r}: use DB.TABLE")
    return tables


# DB.TABLE: a database part without a dot (where a name is split), spaces inside names allowed ("Mixed Case.*")
_PATTERN = re.compile(r"^[^.]+\.\S.*$")


def table_patterns(value: Any, flag: str = "--tables") -> list[str]:
    """Comma-separated ``DB.TABLE`` names or shell-style globs (``shop.*``, ``shop.order_*``)."""
    items = value if isinstance(value, (list, tuple)) else str(value or "").split(",")
    patterns = [str(p).strip() for p in items]
    for pattern in patterns:
        if not pattern or not _PATTERN.match(pattern) or pattern.count("[") != pattern.count("]"):
            raise DblogError(f"bad {flag} pattern {pattern!r}: use comma-separated DB.TABLE names or globs "
                             f"like shop.* or shop.order_?")
    return patterns


def match_tables(available: Sequence[str], include: Sequence[str], exclude: Sequence[str] = ()) -> list[str]:
    """The ``available`` tables matching an ``include`` pattern and no ``exclude`` pattern, sorted."""
    from fnmatch import fnmatchcase

    return sorted(t for t in available if any(fnmatchcase(t, p) for p in include)
                  and not any(fnmatchcase(t, p) for p in exclude))


def chunk_keys(values: Any, tables: Sequence[str]) -> dict[str, list[str]]:
    """``--chunk-key`` values: ``DB.TABLE=COL[,COL]`` per table, or a bare ``COL[,COL]`` for a single table."""
    items = values if isinstance(values, (list, tuple)) else ([values] if values else [])
    out: dict[str, list[str]] = {}
    for item in items:
        for part in [p for p in str(item).split(";") if p.strip()]:
            table, _, columns = part.rpartition("=")
            cols = column_list(columns)
            if not cols:
                raise DblogError(f"bad --chunk-key {part!r}: use DB.TABLE=COL[,COL] (or COL[,COL] with one --table)")
            if table:
                out[table.strip()] = cols
            elif len(tables) == 1:
                out[tables[0]] = cols
            else:
                raise DblogError(f"--chunk-key {part!r} names no table but the plan has {len(tables)}: "
                                 f"use DB.TABLE=COL[,COL]")
    return out


def column_list(value: Any) -> list[str] | None:
    """``COL[,COL]`` (or a list) -> the columns; None when empty."""
    if value in (None, "", []):
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(c).strip() for c in items if str(c).strip()] or None


def truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on") if isinstance(value, str) else bool(value)


def server_id_range(value: Any) -> tuple[int, int] | None:
    """``[lo, hi]``, ``"lo-hi"`` or ``"lo,hi"`` -> (lo, hi); None when not set."""
    if value in (None, "", []):
        return None
    try:
        parts = value.replace(",", "-").split("-") if isinstance(value, str) else list(value)
        lo, hi = (int(str(p).strip()) for p in parts)
    except (TypeError, ValueError):
        raise DblogError(f"bad server_id_range {value!r} in the connection extras: use [LO, HI] or \"LO-HI\"") from None
    if not 0 < lo <= hi < 2 ** 32:
        raise DblogError(f"bad server_id_range {value!r}: need 0 < LO <= HI < 4294967296, and no replica of the source "
                         f"may use a server id in it")
    return lo, hi


def compress_ids(ids: Sequence[int]) -> str:
    """[1,2,3,7] -> '1-3,7'"""
    out, ids = [], sorted(ids)
    start = prev = ids[0]
    for i in ids[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if i is not None:
            start = prev = i
    return ",".join(out)


def parse_chunk_ids(value: Any) -> list[int] | None:
    """``"3,5-7"`` or ``[3, 5]`` -> sorted ids; None when empty."""
    if value is None or value == "" or value == []:
        return None
    parts = value if isinstance(value, (list, tuple)) else re.split(r"[,\s]+", str(value).strip())
    ids: set[int] = set()
    for part in parts:
        text = str(part).strip()
        if not text:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
        if not match:
            raise DblogError(f"bad chunk id {text!r}: use numbers and ranges like 3,5-7")
        lo = int(match.group(1))
        hi = int(match.group(2) or lo)
        ids.update(range(lo, hi + 1))
    return sorted(ids)
