"""A minimal PostgreSQL client (simple query protocol, text results) for `piestream sql`.

It exists so the CLI can talk to a running `piestream serve` without depending on a driver; it
speaks trust, md5 and SCRAM-SHA-256 authentication and returns each statement's columns, rows
(as text), command tag and notices. Anything fancier: use psql or psycopg.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field

from piestream.common.errors import PiestreamError
from piestream.server.pgwire.auth import md5_expected
from piestream.server.pgwire.protocol import (
    PROTOCOL_V3,
    SSL_REQUEST,
    Channel,
    MessageReader,
    cstr,
    int16,
    int32,
)


@dataclass
class TextResult:
    """One statement's answer: column names and type oids, text rows, command tag, notices."""

    columns: list[tuple[str, int]] = field(default_factory=list)
    rows: list[tuple[str | None, ...]] = field(default_factory=list)
    tag: str = ""
    notices: list[str] = field(default_factory=list)
    copy_data: list[bytes] = field(default_factory=list)  # a COPY TO STDOUT's CopyData payloads


def _error(r: MessageReader) -> PiestreamError:
    fields: dict[str, str] = {}
    while r.remaining():
        code = r.byte()
        if code == b"\0":
            break
        fields[code.decode()] = r.cstring()
    pos = fields.get("P")
    return PiestreamError(
        fields.get("M", "error"),
        sqlstate=fields.get("C", "XX000"),
        position=int(pos) if pos and pos.isdigit() else None,
        detail=fields.get("D"),
        hint=fields.get("H"),
    )


class SimpleClient:
    """``SimpleClient(host, port, user, database, password).query(sql) -> [TextResult, ...]``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 4566,
        user: str = "root",
        database: str = "dev",
        password: str | None = None,
        timeout: float | None = 10.0,
        application_name: str = "piestream sql",
        sslmode: str = "prefer",
        sslrootcert: str | None = None,
    ) -> None:
        self.sock: socket.socket = socket.create_connection((host, port), timeout=timeout)
        if sslmode not in ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"):
            raise PiestreamError(f'invalid sslmode value: "{sslmode}"', sqlstate="08P01")
        if sslmode in ("prefer", "require", "verify-ca", "verify-full"):
            self.sock = self._start_tls(host, sslmode, sslrootcert)
        self.sock.settimeout(None)
        self.channel = Channel(self.sock)
        self.user = user
        self.password = password
        self.status = b"I"  # the last ReadyForQuery's transaction status
        body = int32(PROTOCOL_V3) + cstr("user") + cstr(user) + cstr("database") + cstr(database)
        body += cstr("application_name") + cstr(application_name) + b"\0"
        self.channel.send_raw(int32(len(body) + 4) + body)
        self.channel.flush()
        self._authenticate()

    def _start_tls(self, host: str, sslmode: str, rootcert: str | None) -> socket.socket:
        """SSLRequest as libpq sends it: 'S' wraps the socket (checked against `rootcert` for
        verify-*), 'N' is an error unless TLS was only preferred."""
        self.sock.sendall(int32(8) + int32(SSL_REQUEST))
        answer = self.sock.recv(1)
        if answer != b"S":
            if sslmode == "prefer":
                return self.sock
            self.sock.close()
            raise PiestreamError("server does not support SSL, but SSL was required", sqlstate="08P01")
        if sslmode.startswith("verify"):
            ctx = ssl.create_default_context(cafile=rootcert)
            ctx.check_hostname = sslmode == "verify-full"
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx.wrap_socket(self.sock, server_hostname=host)

    def _authenticate(self) -> None:
        ch = self.channel
        scram: tuple[str, str] | None = None
        while True:
            kind, r = ch.read_message()
            if kind == b"E":
                raise _error(r)
            if kind == b"Z":
                self.status = r.byte()
                return
            if kind != b"R":
                continue
            code = r.int32()
            if code == 0:
                continue
            if self.password is None:
                raise PiestreamError("the server asks for a password (use --password)", sqlstate="28P01")
            if code == 5:
                ch.send(b"p", cstr(md5_expected(self.user, self.password, r.bytes_(4))))
            elif code == 10:
                nonce = base64.b64encode(secrets.token_bytes(18)).decode()
                first_bare = f"n=,r={nonce}"
                msg = ("n,," + first_bare).encode()
                ch.send(b"p", cstr("SCRAM-SHA-256") + int32(len(msg)) + msg)
                scram = (first_bare, nonce)
            elif code == 11 and scram is not None:
                ch.send(b"p", self._scram_final(scram[0], scram[1], r.rest().decode()).encode())
            elif code == 12:
                continue  # server signature: trusted, the connection is loopback or the user's choice
            else:
                raise PiestreamError(f"unsupported authentication request {code}", sqlstate="28000")
            ch.flush()

    def _scram_final(self, first_bare: str, nonce: str, server_first: str) -> str:
        assert self.password is not None
        attrs = dict(part.split("=", 1) for part in server_first.split(","))
        if not attrs["r"].startswith(nonce):
            raise PiestreamError("SCRAM nonce mismatch", sqlstate="28000")
        salted = hashlib.pbkdf2_hmac(
            "sha256", self.password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
        )
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        stored = hashlib.sha256(client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(stored, auth_message, hashlib.sha256).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}"

    def query(
        self, sql: str, params: Sequence[str | None] | None = None, copy_in: bytes = b""
    ) -> list[TextResult]:
        """Run a script; raises the first error (statements before it have run). With `params`
        (text values, None = NULL) the one statement goes through the extended protocol, so
        ``$1`` placeholders bind. `copy_in`: the CopyData messages a ``COPY ... FROM STDIN``
        sends (ready-framed, e.g. `copy_binary.encode_messages`)."""
        ch = self.channel
        if params is None:
            ch.send(b"Q", cstr(sql))
        else:
            values = b"".join(int32(-1) if v is None else int32(len(b := v.encode())) + b for v in params)
            ch.send(b"P", cstr("") + cstr(sql) + int16(0))
            ch.send(b"B", cstr("") + cstr("") + int16(0) + int16(len(params)) + values + int16(0))
            ch.send(b"D", b"P" + cstr(""))
            ch.send(b"E", cstr("") + int32(0))
            ch.send(b"S")
        ch.flush()
        return self._results(copy_in)

    def _results(self, copy_in: bytes) -> list[TextResult]:
        results: list[TextResult] = []
        current = TextResult()
        error: PiestreamError | None = None
        while True:
            kind, r = self.channel.read_message()
            if kind == b"T":
                current = TextResult(notices=current.notices)
                for _ in range(r.int16()):
                    name = r.cstring()
                    r.bytes_(6)
                    oid = r.int32()
                    r.bytes_(8)
                    current.columns.append((name, oid))
            elif kind == b"D":
                values: list[str | None] = []
                for _ in range(r.int16()):
                    n = r.int32()
                    values.append(None if n < 0 else r.bytes_(n).decode("utf-8", "replace"))
                current.rows.append(tuple(values))
            elif kind == b"d":
                current.copy_data.append(r.rest())
            elif kind == b"G":
                self.channel.send_raw(copy_in)
                self.channel.send(b"c")
                self.channel.flush()
            elif kind == b"C":
                current.tag = r.cstring()
                results.append(current)
                current = TextResult()
            elif kind == b"N":
                current.notices.append(_error(r).message)
            elif kind == b"E":
                error = _error(r)
            elif kind == b"I":
                results.append(TextResult(tag=""))
            elif kind == b"Z":
                self.status = r.byte()
                break
        if error is not None:
            error.results = results  # type: ignore[attr-defined]
            raise error
        return results

    @property
    def in_transaction(self) -> bool:
        """Whether the last ReadyForQuery said a transaction block is open (or failed)."""
        return self.status in (b"T", b"E")

    def close(self) -> None:
        try:
            self.channel.send(b"X")
            self.channel.flush()
        except Exception:  # the server may be gone already
            pass
        self.sock.close()
