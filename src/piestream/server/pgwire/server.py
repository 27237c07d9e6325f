"""The PostgreSQL wire-protocol server: a listening socket and a thread per connection.

`PgServer(database).start()` serves on 127.0.0.1:4566 unless told otherwise (port 0 picks a free
port; see `.port`). A misbehaving client — garbage bytes, oversized messages, a disconnect in the
middle of a query — ends only its own connection. `stop()` shuts down gracefully: it stops
accepting, lets running statements finish (up to `shutdown_timeout`), tells idle clients
``57P01 terminating connection due to administrator command``, cancels what is still running,
then closes the `Database` (which stops the barrier loop after the epoch in flight).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import logging
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from piestream.common.metrics import LabelledHistograms
from piestream.meta.roles import RoleCatalog
from piestream.server.database import Database
from piestream.server.pgwire.auth import Authenticator, LoginThrottle, ScramVerifier
from piestream.server.pgwire.connection import Connection
from piestream.server.pgwire.tls import TlsConfig

log = logging.getLogger(__name__)

DEFAULT_PORT = 4566
DEFAULT_HOST = "127.0.0.1"


def _password_of(roles: RoleCatalog, user: str) -> str | None:
    r = roles.get(user)
    return r.password if r is not None else None  # NOLOGIN is refused after authentication


@dataclass
class PgwireMetrics:
    """What /metrics reports of the wire protocol, updated per connection and per statement."""

    connections: int = 0  # accepted since start
    statement_seconds: LabelledHistograms = field(default_factory=LabelledHistograms)  # by statement kind
    statement_errors: int = 0
    auth_failures: int = 0


class PgServer:
    """Serves one `Database` to PostgreSQL clients (psql, psycopg, JDBC, SQLAlchemy, ...)."""

    def __init__(
        self,
        database: Database,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        auth: dict[str, Any] | None = None,
        *,
        max_connections: int = 100,
        shutdown_timeout: float = 10.0,
        close_database: bool = True,
        tls: TlsConfig | None = None,
    ) -> None:
        self.database = database
        self.host = host
        self.port = port
        self.authenticator: Authenticator | None = None
        if auth:
            users = dict(auth.get("users", {}))
            roles = database.roles
            # the file's users log in with the file's passwords (as superusers when new)
            roles.seed(
                {
                    u: (ScramVerifier.parse(p) or ScramVerifier.from_password(p)).text()
                    for u, p in users.items()
                }
            )
            self.authenticator = Authenticator(
                auth.get("method", "scram-sha-256"), users, lookup=lambda u: _password_of(roles, u)
            )
        self.throttle = LoginThrottle()
        self.tls = tls
        self.ssl_context: ssl.SSLContext | None = tls.context() if tls is not None else None
        self.require_ssl_remote = tls is not None and tls.require_remote
        self.max_connections = max_connections
        self.shutdown_timeout = shutdown_timeout
        self.close_database = close_database
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._connections: dict[int, Connection] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._pids = itertools.count((os.getpid() % 10_000) * 100 + 1)
        self.metrics = PgwireMetrics()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> PgServer:
        """Bind and start accepting in a background thread; returns self."""
        if self._listener is not None:
            return self
        infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, addr = infos[0]
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(addr)
        listener.listen(128)
        listener.settimeout(0.2)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._accept_thread = threading.Thread(target=self._accept_loop, name="piestream-pgwire", daemon=True)
        self._accept_thread.start()
        log.info("piestream listening on %s:%d", self.host, self.port)
        return self

    def serve_forever(self) -> None:
        """Start (if needed) and block until `stop()` is called (from a signal handler or thread)."""
        self.start()
        while not self._stopped.wait(0.5):
            pass

    def stop(self, timeout: float | None = None) -> None:
        """Graceful shutdown (see the module docstring); safe to call more than once."""
        if self._stopping.is_set():
            self._stopped.wait()
            return
        self._stopping.set()
        timeout = self.shutdown_timeout if timeout is None else timeout
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            connections = list(self._connections.values())
            threads = list(self._threads.values())
        for c in connections:
            c.request_close()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            left = list(self._connections.values())
            threads = list(self._threads.values())
        for c in left:
            log.warning("cancelling a statement still running at shutdown (connection %d)", c.pid)
            c.force_close()
        for t in threads:
            t.join(timeout=2)
        if self.close_database:
            self.database.close()
        self._stopped.set()

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connections ----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                log.exception("accept failed")
                time.sleep(0.1)
                continue
            sock.settimeout(None)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock, address, next(self._pids))
            self.metrics.connections += 1
            thread = threading.Thread(target=conn.run, name=f"piestream-conn-{conn.pid}", daemon=True)
            with self._lock:
                self._connections[conn.pid] = conn
                self._threads[conn.pid] = thread
            thread.start()

    def _unregister(self, conn: Connection) -> None:
        with self._lock:
            self._connections.pop(conn.pid, None)
            self._threads.pop(conn.pid, None)

    def too_many_connections(self) -> bool:
        with self._lock:
            return len(self._connections) > self.max_connections

    def sessions(self) -> int:
        """Connections past their start-up (authenticated), as pg_stat_activity counts them."""
        with self._lock:
            return sum(1 for c in self._connections.values() if c.state not in ("starting", "closed"))

    def cancel(self, pid: int, secret: int) -> None:
        """A CancelRequest: only the right (pid, secret key) pair cancels anything."""
        with self._lock:
            conn = self._connections.get(pid)
        if conn is not None and conn.secret == secret:
            conn.request_cancel()

    def activity(self) -> list[tuple[Any, ...]]:
        """pg_stat_activity rows: one per client connection."""
        with self._lock:
            conns = list(self._connections.values())
        rows = []
        for c in conns:
            if c.state in ("starting", "closed"):
                continue
            host, port = (c.address[0], c.address[1]) if isinstance(c.address, tuple) else (None, None)
            started = dt.datetime.fromtimestamp(c.started, dt.UTC).isoformat(sep=" ")
            query_started = (
                dt.datetime.fromtimestamp(c.query_started, dt.UTC).isoformat(sep=" ")
                if c.query_started
                else None
            )
            app = c.session.settings.get("application_name", "") if c.session else ""
            rows.append(
                (0, c.database, c.pid, 10, c.user, app, host, port, started, query_started, c.state,
                 c.current_query, "client backend")
            )  # fmt: skip
        return rows
