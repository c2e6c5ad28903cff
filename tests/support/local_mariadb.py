"""A throwaway private MariaDB with a ROW/FULL binlog, for tests, the demo and the benchmarks.

It never touches the system's MariaDB: own datadir, own socket, own temporary directory (a clean-up
of /tmp by anything else on the machine deleted its temporary tables' files mid-statement: "Error on
delete of '/tmp/#sql-temptable-...'"), a free loopback port, stopped by PID.
``python -m tests.support.local_mariadb start DIR`` prints its URI.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_FLAGS = (
    "--log-bin=mysql-bin",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
)


def find_mariadbd() -> str:
    for candidate in (shutil.which("mariadbd"), "/usr/sbin/mariadbd", "/usr/local/sbin/mariadbd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    subprocess.run(["bash", str(Path(__file__).resolve().parents[2] / "scripts" / "system-deps.sh")], check=True)
    return shutil.which("mariadbd") or "/usr/sbin/mariadbd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalMariaDB:
    """One private server. ``extra_flags`` replace nothing; they are appended (later flags win)."""

    datadir: Path
    port: int = 0
    server_id: int = 1
    extra_flags: tuple[str, ...] = ()
    binlog: bool = True
    process: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.datadir = Path(self.datadir).resolve()  # mariadbd changes into its datadir: relative paths break

    @property
    def socket_path(self) -> str:
        return str(self.datadir / "mysqld.sock")

    def uri(self, user: str = "root", password: str = "", db: str = "") -> str:
        auth = f"{user}:{password}" if password else user
        return f"mysql://{auth}@127.0.0.1:{self.port}/{db}".rstrip("/")

    def start(self, timeout: float = 60) -> "LocalMariaDB":
        mariadbd = find_mariadbd()
        self.datadir.mkdir(parents=True, exist_ok=True)
        data = self.datadir / "data"
        if not (data / "mysql").exists():
            install = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"
            subprocess.run(
                [install, "--no-defaults", f"--datadir={data}", "--auth-root-authentication-method=normal",
                 "--skip-test-db", *(["--user=root"] if os.geteuid() == 0 else [])],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
        self.port = self.port or free_port()
        (self.datadir / "tmp").mkdir(exist_ok=True)
        flags = [
            f"--datadir={data}", f"--socket={self.socket_path}", f"--port={self.port}",
            f"--tmpdir={self.datadir / 'tmp'}",
            "--bind-address=127.0.0.1", f"--pid-file={self.datadir / 'mysqld.pid'}",
            f"--log-error={self.datadir / 'error.log'}", "--skip-name-resolve",
            f"--server-id={self.server_id}", "--innodb-buffer-pool-size=512M",
            "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--max-connections=500",
            "--innodb-log-file-size=256M",
        ]
        if self.binlog:
            flags += list(DEFAULT_FLAGS)
        flags += list(self.extra_flags)
        if os.geteuid() == 0:
            flags.append("--user=root")
        self.process = subprocess.Popen([mariadbd, "--no-defaults", *flags],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        atexit.register(self.stop)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                log = (self.datadir / "error.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mariadbd exited with {self.process.returncode}: {log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                if self._ping():
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"mariadbd did not accept connections within {timeout}s")

    def _ping(self) -> bool:
        import pymysql

        try:
            pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=2).close()
            return True
        except pymysql.MySQLError:
            return False

    def sql(self, *statements: str, db: str | None = None) -> list[tuple]:
        """Run statements as root; returns the last statement's rows."""
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", database=db, autocommit=True)
        try:
            rows: list[tuple] = []
            with conn.cursor() as cur:
                for stmt in statements:
                    cur.execute(stmt)
                    rows = list(cur.fetchall())
            return rows
        finally:
            conn.close()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "LocalMariaDB":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``start DIR`` runs a server in the foreground until SIGTERM/SIGINT, printing its URI."""
    from tests.support.processes import serve_in_foreground

    return serve_in_foreground("tests.support.local_mariadb", LocalMariaDB, argv)


if __name__ == "__main__":
    sys.exit(main())
