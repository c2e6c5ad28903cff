"""A Spark standalone cluster for tests: a master and one worker as separate processes on loopback, from
pip's pyspark (``bin/spark-class``), stopped by PID. The worker runs in a private mount namespace with an
empty tmpfs over ``hidden``: it cannot see the driver's files there (state, checkpoints, test data), as
an executor on another host could not."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from tests.support.processes import stop_group


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkCluster:
    root: Path
    hidden: Path  # the worker sees an empty tmpfs here
    cores: int = 2  # per worker
    memory: str = "2g"  # per worker
    workers: int = 1
    env: dict = field(default_factory=dict)  # the worker's environment beside ours (e.g. S3 credentials)
    processes: list = field(default_factory=list, repr=False)
    port: int = 0

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str], private: bool = False) -> subprocess.Popen:
        own = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # S3 settings: only ``env``'s
        env = {**own, **self.env, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOG_DIR": str(self.root / "logs"), "SPARK_WORKER_DIR": str(self.root / "work")}
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        if private:  # a mount namespace of its own: the tmpfs hides ``hidden`` from this process only
            script = f'mount -t tmpfs tmpfs "{self.hidden}" && exec "$@"'
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]
        out = open(self.root / "logs" / f"{name}.out", "w")
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                   cwd=self.root)
        self.processes.append(process)
        return process

    def start(self) -> "SparkCluster":
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "work").mkdir(exist_ok=True)
        self.port = _free_port()
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(self.port), "--webui-port", str(_free_port())])
        self._wait_for("master", "Starting Spark master")
        for i in range(self.workers):
            name = "worker" if i == 0 else f"worker-{i}"
            self._spawn(name, ["org.apache.spark.deploy.worker.Worker", self.master, "--host", "127.0.0.1",
                               "--cores", str(self.cores), "--memory", self.memory, "--webui-port",
                               str(_free_port()), "--work-dir", str(self.root / "work")], private=True)
            self._wait_for(name, "Successfully registered with master")
        return self

    def _wait_for(self, name: str, line: str, seconds: float = 90) -> None:
        log = self.root / "logs" / f"{name}.out"
        deadline = time.time() + seconds
        while time.time() < deadline:
            if line in log.read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self.processes):
                break
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"Spark {name} did not start: {log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop_group(process)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
