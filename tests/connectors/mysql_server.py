"""A real MariaDB (Debian's 10.11) for the mysql-cdc tests: mariadb-install-db in a temporary
directory, the binlog in ROW format with full row images and full row metadata, a free loopback
port, started and stopped by the tests themselves (no mocks).

mariadbd refuses to run as root, so as root the data directory belongs to `nobody` and the
server runs with `--user=nobody` (it drops to that user itself).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql

USER = "cdc"
PASSWORD = "cdc-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MariaDbServer:
    """One MariaDB server: `start()`, `stop()`, `restart()`; `sql()` runs ordinary SQL."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="piestream-mariadb-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.host = "127.0.0.1"
        self.database = "shop"
        self.sock = self.root / "sock"
        self._as_root = os.geteuid() == 0
        self._proc: subprocess.Popen[bytes] | None = None

    def _user_args(self) -> list[str]:
        return ["--user=nobody"] if self._as_root else []

    def init(self) -> None:
        if self._as_root:
            shutil.chown(self.root, "nobody")
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", *self._user_args(), f"--datadir={self.data}",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            check=True, capture_output=True, cwd="/",
        )  # fmt: skip

    def start(self) -> None:
        self._proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", *self._user_args(), f"--datadir={self.data}",
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.sock}",
             f"--pid-file={self.root / 'pid'}", f"--log-error={self.root / 'log'}",
             f"--log-bin={self.data / 'binlog'}", "--server-id=1", "--binlog-format=ROW",
             "--binlog-row-image=FULL", "--binlog-row-metadata=FULL", "--skip-name-resolve",
             "--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=0", "--sync-binlog=0",
             "--innodb-log-file-size=16M", "--max-connections=100", "--performance-schema=OFF"],
            cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                self._root_conn().close()
                break
            except pymysql.err.OperationalError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.root / "log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"MariaDB did not start:\n{log}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def _root_conn(self) -> Any:
        return pymysql.connect(unix_socket=str(self.sock), user="root", autocommit=True, connect_timeout=2)

    def connect(self, **kw: Any) -> Any:
        """A connection of the CDC user to the test database over TCP."""
        return pymysql.connect(
            host=self.host, port=self.port, user=USER, password=PASSWORD, database=self.database,
            autocommit=True, **kw,
        )  # fmt: skip

    def sql(
        self, statement: str, params: tuple[object, ...] | None = None, *, root: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run one statement (or several separated by ';') as the CDC user (or root); the rows
        of the last one."""
        conn = (
            self._root_conn() if root else self.connect(client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS)
        )
        try:
            with conn.cursor() as cur:
                cur.execute(statement, params)
                rows = list(cur.fetchall()) if cur.description else []
                while cur.nextset():
                    rows = list(cur.fetchall()) if cur.description else []
                return rows
        finally:
            conn.close()

    def with_options(self, **extra: str) -> str:
        """The WITH options of a mysql-cdc source or table on this server."""
        opts = {
            "connector": "mysql-cdc",
            "hostname": self.host,
            "port": str(self.port),
            "username": USER,
            "password": PASSWORD,
            "database.name": self.database,
            **{k.replace("_", "."): v for k, v in extra.items()},
        }
        return ", ".join(f"{k} = '{v}'" for k, v in opts.items())


def start_server() -> MariaDbServer:
    srv = MariaDbServer()
    srv.init()
    srv.start()
    conn = srv._root_conn()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {srv.database}")
            cur.execute(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
            # what the connector needs: read the tables, and the replication client/slave rights
            cur.execute(
                f"GRANT SELECT, RELOAD, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{USER}'@'%'"
            )
            cur.execute(f"GRANT ALL ON {srv.database}.* TO '{USER}'@'%'")
    finally:
        conn.close()
    return srv
