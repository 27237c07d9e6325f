"""`piestream serve` as a real child process, for tests that kill it, fuzz it or cluster it.

The child runs in its own session (process group), so a SIGKILL of the group takes its JVM and
Spark's Python workers with it. Its stdout and stderr go to a log file (a pipe nobody reads
could fill up and stall the server); `start` waits for the "ready on HOST:PORT" line.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_READY = re.compile(r"piestream: ready on [\d.]+:(\d+)")


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    log_path: Path

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=root dbname=dev"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:]

    def kill(self) -> None:
        """SIGKILL the server and everything it started (JVM, Python workers)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 60) -> None:
        """A clean shutdown (SIGTERM: running statements finish), then SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        self.kill()


def start_server(
    data_dir: Path,
    *args: str,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> ServerProcess:
    """Start `piestream serve --data-dir DATA_DIR --port 0 ARGS...`; returns once it listens."""
    log_path = log_path or data_dir.parent / f"{data_dir.name}-server.log"
    cmd = [sys.executable, "-m", "piestream.cli", "serve", "--data-dir", str(data_dir), "--port", "0", *args]
    full_env = {**os.environ, **(env or {})}
    start = log_path.stat().st_size if log_path.exists() else 0  # earlier runs' lines stay before
    with open(log_path, "ab") as log:
        log.write(f"\n=== {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
    server = ServerProcess(proc, 0, data_dir, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _READY.findall(log_path.read_bytes()[start:].decode(errors="replace"))
        if found:
            server.port = int(found[-1])
            return server
        if proc.poll() is not None:
            raise RuntimeError(f"piestream serve exited with {proc.returncode}:\n{server.log()}")
        time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"piestream serve did not get ready in {timeout} s:\n{server.log()}")
