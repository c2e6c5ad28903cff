"""A throwaway private PostgreSQL with ``wal_level=logical``, for tests, the demo and the benchmarks.

It never touches the system's PostgreSQL (the Debian service on 5432): its own cluster made by
``initdb`` in ``DATADIR/data``, trust authentication for 127.0.0.1 and the Unix socket (which lives
in ``DATADIR``), a free loopback port, stopped by PID. ``python -m tests.support.local_postgres
start DIR`` prints its URI.

Running as root. ``postgres`` and ``initdb`` refuse to run as root, so the server runs under
another user ID. What works here (checked on Debian 12, PostgreSQL 15, as root in a container):

1. ``unshare --map-user=NOBODY --map-group=NOGROUP`` (the default when the kernel allows
   unprivileged user namespaces): the server runs as ``nobody`` inside a user namespace that maps
   that ID to root outside, so the cluster's files stay root's, ``DATADIR`` may sit anywhere root
   can reach (pytest's ``/tmp/pytest-of-root`` is mode 0700) and root's tools read them as usual.
2. Otherwise the ``postgres`` OS user (Debian's package creates it; else ``nobody``) through
   ``subprocess``'s ``user=``/``group=`` (setuid/setgid, no ``su``/``runuser`` in between, so the
   process we hold is the postmaster). ``DATADIR`` is chowned to that user; when its ancestors do
   not let that user through (pytest's 0700 base directory), the cluster goes to a private
   ``/tmp/dblog-postgres-*`` directory linked from ``DATADIR/data`` and removed at exit.

``DBLOG_PG_RUN_AS=userns`` or ``DBLOG_PG_RUN_AS=USER`` forces one way; ``DBLOG_PG_BINDIR`` names
the server's ``bin`` directory (default: the newest ``/usr/lib/postgresql/*/bin``).
"""
from __future__ import annotations

import atexit
import functools
import glob
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# every setting a capture needs, plus what makes a throwaway cluster fast (it is never recovered)
DEFAULT_SETTINGS = (
    "wal_level=logical",
    "max_replication_slots=10",
    "max_wal_senders=10",
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=200",
    "log_min_messages=warning",
    "log_statement=none",
)

HBA = """\
# written by tests/support/local_postgres.py: trust on loopback and the private socket only
local   all             all                         trust
host    all             all         127.0.0.1/32    trust
local   replication     all                         trust
host    replication     all         127.0.0.1/32    trust
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_bindir() -> Path:
    """The newest installed server's ``bin`` (``initdb``, ``postgres``, ``pg_ctl``)."""
    override = os.environ.get("DBLOG_PG_BINDIR")
    if override:
        return Path(override)

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    found = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if os.access(f"{d}/postgres", os.X_OK)]
    if found:
        return Path(max(found, key=version))
    pg_config = shutil.which("pg_config")
    if pg_config:
        bindir = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip()
        if bindir and os.access(f"{bindir}/postgres", os.X_OK):
            return Path(bindir)
    raise RuntimeError("no PostgreSQL server found (/usr/lib/postgresql/*/bin): apt-get install postgresql")


@functools.cache
def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


@functools.cache
def _userns_works() -> bool:
    unshare = shutil.which("unshare")
    if not unshare:
        return False
    uid, gid = _nobody()
    try:
        done = subprocess.run([unshare, f"--map-user={uid}", f"--map-group={gid}", "true"],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _traversable(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid`` can reach and write ``path`` by its mode bits (ACLs and extra groups ignored)."""
    for part in [*reversed(path.parents), path]:
        st = part.stat()
        bits = (stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH)
        if not st.st_mode & bits:
            return False
    return True


@dataclass
class LocalPostgres:
    """One private cluster. ``settings`` (``name=value``) are appended to the defaults (later wins)."""

    datadir: Path
    port: int = 0
    user: str = "postgres"  # the cluster's superuser (initdb -U); it has REPLICATION
    settings: tuple[str, ...] = ()
    locale: str = "C.UTF-8"
    environment: dict[str, str] = field(default_factory=dict)  # added to the server's environment (LANGUAGE=de)
    process: subprocess.Popen | None = None
    _run: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.datadir = Path(self.datadir).resolve()

    # -- where things are ------------------------------------------------------------------------
    @property
    def data(self) -> Path:
        return self.datadir / "data"

    @property
    def log_path(self) -> Path:
        return self.datadir / "server.log"

    @property
    def socket_dir(self) -> str:
        # a Unix socket path is at most 107 bytes: without room for ".s.PGSQL.NNNNN", TCP only
        return str(self.datadir) if len(str(self.datadir)) < 90 else ""

    def uri(self, db: str = "postgres", user: str | None = None, password: str = "") -> str:
        auth = f"{user or self.user}:{password}" if password else (user or self.user)
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{db}"

    def dsn(self, db: str = "postgres", **extra: str) -> str:
        """A libpq keyword DSN (what ``psycopg2.connect`` and its replication connections take)."""
        words = {"host": "127.0.0.1", "port": str(self.port), "user": self.user, "dbname": db, **extra}
        return " ".join(f"{k}={v}" for k, v in words.items())

    # -- running as someone else than root --------------------------------------------------------
    def _how(self) -> dict:
        """How to run server programs: a command prefix and Popen keywords (empty when not root)."""
        if self._run:
            return self._run
        if os.geteuid() != 0:
            self._run = {"prefix": [], "popen": {}, "chown": None}
            return self._run
        choice = os.environ.get("DBLOG_PG_RUN_AS", "")
        if choice == "userns" or (not choice and _userns_works()):
            uid, gid = _nobody()
            self._run = {"prefix": [shutil.which("unshare") or "unshare", f"--map-user={uid}", f"--map-group={gid}"],
                         "popen": {}, "chown": None}
            return self._run
        name = choice or ("postgres" if _has_user("postgres") else "nobody")
        entry = pwd.getpwnam(name)
        self._run = {"prefix": [], "popen": {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []},
                     "chown": (entry.pw_uid, entry.pw_gid)}
        return self._run

    def _prepare_dirs(self) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        owner = self._how()["chown"]
        if owner is None:
            return
        uid, gid = owner
        if not self.data.exists() and not _traversable(self.datadir, uid, gid):
            # the postgres user cannot get through an ancestor: keep the cluster where it can
            if self.data.is_symlink():  # a former run's private cluster, removed when it exited
                self.data.unlink()
            private = Path(tempfile.mkdtemp(prefix="dblog-postgres-", dir="/tmp"))
            atexit.register(shutil.rmtree, private, True)
            os.chown(private, uid, gid)
            self.data.symlink_to(private / "data")
        target = self.data.resolve()
        for path in (self.datadir, target.parent):
            os.chown(path, uid, gid)
        if target.exists():
            for root, dirs, files in os.walk(target):
                for name in (*dirs, *files):
                    os.lchown(os.path.join(root, name), uid, gid)
            os.chown(target, uid, gid)
        if not _traversable(self.datadir, uid, gid):  # the socket goes there: TCP only then
            self._run["no_socket"] = True

    def _initdb(self, bindir: Path) -> None:
        how = self._how()
        done = subprocess.run(
            [*how["prefix"], str(bindir / "initdb"), "-D", str(self.data.resolve()), "-U", self.user,
             "--auth=trust", "-E", "UTF8", f"--locale={self.locale}", "--no-sync", "--no-instructions"],
            capture_output=True, text=True, cwd="/", **how["popen"],
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
        (self.data / "pg_hba.conf").write_text(HBA)

    # -- life --------------------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> "LocalPostgres":
        bindir = find_bindir()
        self._prepare_dirs()
        if not (self.data / "PG_VERSION").exists():
            self._initdb(bindir)
        how = self._how()
        self.port = self.port or free_port()
        sockets = "" if how.get("no_socket") else self.socket_dir
        flags = ["-D", str(self.data.resolve()), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={sockets}"]
        for setting in (*DEFAULT_SETTINGS, *self.settings):
            flags += ["-c", setting]
        log = open(self.log_path, "ab")
        if how["chown"]:
            os.chown(self.log_path, *how["chown"])
        try:
            self.process = subprocess.Popen([*how["prefix"], str(bindir / "postgres"), *flags],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                                            start_new_session=True, env={**os.environ, **self.environment},
                                            **how["popen"])
        finally:
            log.close()
        atexit.register(self.stop)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.process = None
                raise RuntimeError(f"postgres exited: {tail}")
            if self._ping():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"postgres did not accept connections within {timeout}s")

    def _ping(self) -> bool:
        import psycopg2

        try:
            psycopg2.connect(self.dsn(connect_timeout="2")).close()
            return True
        except psycopg2.OperationalError:
            return False

    def sql(self, *statements: str, db: str = "postgres") -> list[tuple]:
        """Run statements (autocommit) as the superuser, untouched by a database's time limits a test sets for dblog;
        returns the last statement's rows."""
        import psycopg2

        conn = psycopg2.connect(self.dsn(db), options="-c statement_timeout=0 -c idle_in_transaction_session_timeout=0 "
                                                      "-c idle_session_timeout=0")
        conn.autocommit = True
        try:
            rows: list[tuple] = []
            with conn.cursor() as cur:
                for stmt in statements:
                    cur.execute(stmt)
                    rows = list(cur.fetchall()) if cur.description else []
            return rows
        finally:
            conn.close()

    def stop(self) -> None:
        """Fast shutdown (SIGINT: clients and walsenders are disconnected), then immediate, then kill."""
        if self.process is None:
            return
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGQUIT, 10), (signal.SIGKILL, 10)):
            if self.process.poll() is not None:
                break
            try:
                self.process.send_signal(sig)
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        self.process = None

    def __enter__(self) -> "LocalPostgres":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def main(argv: list[str] | None = None) -> int:
    """``start DIR`` runs a server in the foreground until SIGTERM/SIGINT, printing its URI."""
    from tests.support.processes import serve_in_foreground

    return serve_in_foreground("tests.support.local_postgres", LocalPostgres, argv)


if __name__ == "__main__":
    sys.exit(main())
