"""A Spark standalone cluster on 127.0.0.1 from the pinned pyspark wheel: a Master and Workers
started with its `bin/spark-class` (connectors-and-clusters.md §1), each in a process group of
its own (a Worker's executor JVM is its child, in its group: SIGKILL of the group takes both),
each Worker with its own SPARK_WORKER_DIR, every port a free one, logs in files."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@contextlib.contextmanager
def moto_bucket_url(bucket: str) -> Iterator[str]:
    """A bucket on a moto S3 server on 127.0.0.1, as an object store URL with its credentials."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield (
            f"s3://{bucket}/db?endpoint=http://{host}:{port}&region=us-east-1"
            "&access_key=testing&secret_key=testing"
        )
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SparkProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:]

    def kill(self) -> None:
        """SIGKILL the process and its group (a Worker's executor JVM)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)

    def wait_for(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.log_path.read_text(errors="replace")):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.log_path.name} exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.2)
        raise RuntimeError(f"{self.log_path.name}: no {pattern!r} within {timeout} s:\n{self.log()}")


@dataclass
class StandaloneCluster:
    root: Path
    port: int = field(default_factory=free_port)
    master: SparkProcess | None = None
    workers: list[SparkProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str, env: dict[str, str] | None = None) -> SparkProcess:
        log_path = self.root / f"{name}.log"
        full_env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            # no REST submission server (its fixed port 6066 would collide between clusters)
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            **(env or {}),
        }
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [str(SPARK_CLASS), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                start_new_session=True,
            )
        return SparkProcess(proc, log_path)

    def start(self, workers: int, timeout: float = 120) -> None:
        """The master and `workers` Workers, started together (a Worker retries until the
        master is up); returns once every Worker registered."""
        self.start_master(timeout=None)
        self.add_workers(workers, timeout)

    def start_master(self, timeout: float | None = 120) -> None:
        self.master = self._start(
            "master",
            MASTER_CLASS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(free_port()),
        )
        if timeout is not None:
            self.master.wait_for(r"I have been elected leader", timeout)

    def add_workers(self, n: int, timeout: float = 120) -> list[SparkProcess]:
        """`n` Workers of one core each, started together, registered when this returns."""
        new = [self._start_worker() for _ in range(n)]
        for w in new:
            w.wait_for(r"Successfully registered with master", timeout)
        return new

    def _start_worker(self, memory: str = "2g") -> SparkProcess:
        n = len(self.workers) + 1
        work_dir = self.root / f"worker{n}"
        work_dir.mkdir(parents=True, exist_ok=True)
        worker = self._start(
            f"worker{n}",
            WORKER_CLASS,
            self.url,
            "--host",
            "127.0.0.1",
            "--cores",
            "1",
            "--memory",
            memory,
            "--webui-port",
            str(free_port()),
            env={"SPARK_WORKER_DIR": str(work_dir)},
        )
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        for p in [*self.workers, *([self.master] if self.master else [])]:
            p.kill()


def _processes() -> Iterator[tuple[int, int, int, bytes]]:
    """(pid, parent pid, process group, command line) of every process."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        yield int(d.name), int(fields[1]), int(fields[2]), cmd


def executor_pids(worker: SparkProcess) -> list[int]:
    """The executor JVMs a Worker started (they stay in its process group)."""
    return [
        pid
        for pid, _, pgid, cmd in _processes()
        if pgid == worker.proc.pid and b"CoarseGrainedExecutorBackend" in cmd
    ]


def python_children(pid: int) -> int:
    """How many Python processes `pid` started (an executor's Python daemon)."""
    return sum(1 for _, ppid, _, cmd in _processes() if ppid == pid and b"python" in cmd)
