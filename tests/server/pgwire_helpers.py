"""A raw protocol client for the tests that need exact messages (limits, garbage, cancel)."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer
from piestream.server.pgwire.protocol import PROTOCOL_V3


def start_server(data_dir: Path, auth: dict[str, Any] | None = None) -> PgServer:
    """A server on a free port over a fresh local-runner Database in `data_dir`."""
    config = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2)
    return PgServer(Database(data_dir, config=config), port=0, auth=auth, shutdown_timeout=5).start()


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def startup(user: str = "root", database: str = "dev") -> bytes:
    body = (
        struct.pack("!i", PROTOCOL_V3) + cstr("user") + cstr(user) + cstr("database") + cstr(database) + b"\0"
    )
    return struct.pack("!i", len(body) + 4) + body


class Raw:
    """A socket speaking the protocol by hand; `read()` returns one (type, body) message."""

    def __init__(self, port: int, do_startup: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.pid = self.secret = 0
        if do_startup:
            self.sock.sendall(startup())
            for kind, body in self.until(b"Z"):
                if kind == b"K":
                    self.pid, self.secret = struct.unpack("!ii", body)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read(self) -> tuple[bytes, bytes]:
        kind = self._recv(1)
        (length,) = struct.unpack("!i", self._recv(4))
        return kind, self._recv(length - 4)

    def until(self, stop: bytes) -> list[tuple[bytes, bytes]]:
        out = []
        while True:
            kind, body = self.read()
            out.append((kind, body))
            if kind == stop:
                return out

    def closed(self) -> bool:
        """Whether the server closed the connection (reads EOF, maybe after a final message)."""
        try:
            while True:
                self.read()
        except (ConnectionError, OSError):
            return True

    def close(self) -> None:
        self.sock.close()


def error_fields(body: bytes) -> dict[str, str]:
    out = {}
    for part in body.split(b"\0"):
        if part:
            out[part[:1].decode()] = part[1:].decode()
    return out


def data_rows(messages: list[tuple[bytes, bytes]]) -> list[list[bytes | None]]:
    rows = []
    for kind, body in messages:
        if kind != b"D":
            continue
        (n,) = struct.unpack("!h", body[:2])
        pos, row = 2, []
        for _ in range(n):
            (ln,) = struct.unpack("!i", body[pos : pos + 4])
            pos += 4
            if ln < 0:
                row.append(None)
            else:
                row.append(body[pos : pos + ln])
                pos += ln
        rows.append(row)
    return rows
