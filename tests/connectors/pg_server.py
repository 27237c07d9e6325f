"""A real PostgreSQL 15 for the CDC tests: initdb in a temporary directory, `wal_level = logical`,
a free loopback port, started and stopped by the tests themselves (no mocks).

initdb and postgres refuse to run as root, so as root the cluster belongs to `nobody` and every
server command runs through `runuser`; as another user they run directly.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

PG_BIN = Path("/usr/lib/postgresql/15/bin")
USER = "cdc"
PASSWORD = "cdc-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One PostgreSQL cluster: `start()`, `stop()`, `restart()`; `sql()` runs ordinary SQL."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="piestream-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.host = "127.0.0.1"
        self.database = "shop"
        self._as_root = os.geteuid() == 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self._as_root:
            cmd = ["runuser", "-u", "nobody", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, cwd="/")

    def init(self) -> None:
        if self._as_root:
            shutil.chown(self.root, "nobody")
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD)
        if self._as_root:
            shutil.chown(pwfile, "nobody")
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-U", USER, "--pwfile", str(pwfile),
            "-A", "scram-sha-256", "-E", "UTF8", "--no-sync", "--locale=C",
        )  # fmt: skip
        conf = (
            f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
            "wal_level = logical\nmax_replication_slots = 20\nmax_wal_senders = 20\n"
            "fsync = off\nshared_buffers = 32MB\nmax_connections = 60\n"
        )
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(conf)
        with open(self.data / "pg_hba.conf", "a") as f:
            f.write("host replication all 127.0.0.1/32 scram-sha-256\n")

    def start(self) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-w", "start")
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                    break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, database: str | None = None) -> str:
        db = database or self.database
        return f"host={self.host} port={self.port} user={USER} password={PASSWORD} dbname={db}"

    def sql(self, statement: str, params: tuple[object, ...] | None = None) -> list[tuple[object, ...]]:
        """Run one statement in autocommit; its rows (empty when it returns none)."""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            cur = conn.execute(statement.encode(), params)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []

    def with_options(self, **extra: str) -> str:
        """The WITH options of a postgres-cdc source or table on this server."""
        opts = {
            "connector": "postgres-cdc",
            "hostname": self.host,
            "port": str(self.port),
            "username": USER,
            "password": PASSWORD,
            "database.name": self.database,
            **{k.replace("_", "."): v for k, v in extra.items()},
        }
        return ", ".join(f"{k} = '{v}'" for k, v in opts.items())


def start_server() -> PgServer:
    srv = PgServer()
    srv.init()
    srv.start()
    with psycopg.connect(srv.dsn("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {srv.database}".encode())
    return srv
