"""PostgreSQL frontend/backend protocol v3: reading and writing messages on a socket.

Only framing lives here (lengths, C strings, the field layout of each backend message); what a
message *means* is the connection's business. Every length a client sends is checked against a
limit before anything is allocated, so a garbled or hostile byte stream ends its own connection
with a protocol error instead of exhausting memory.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from piestream.common.errors import PiestreamError

PROTOCOL_V3 = 196608  # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

MAX_STARTUP_LEN = 10_000  # PostgreSQL's limit for the startup packet
MAX_MESSAGE_LEN = 64 << 20  # larger messages are rejected (PostgreSQL allows 1 GB; no need here)

_I16 = struct.Struct("!h")
_U16 = struct.Struct("!H")
_I32 = struct.Struct("!i")
_HEADER = struct.Struct("!ci")


class ProtocolViolation(PiestreamError):
    """The client broke the protocol (08P01): the connection cannot continue."""

    sqlstate = "08P01"


class ClientGone(Exception):
    """The client closed the socket (or it broke) — nothing can be sent any more."""


class MessageReader:
    """Parses one message body: integers, C strings and byte ranges, with bounds checks."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolViolation("invalid message format")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def count16(self) -> int:
        """A 16-bit count (parameters, formats): unsigned, so 65535 parameters fit."""
        return int(_U16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def byte(self) -> bytes:
        return self._take(1)

    def bytes_(self, n: int) -> bytes:
        return self._take(n)

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolViolation("invalid string in message")
        raw = self.data[self.pos : end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolViolation('invalid byte sequence for encoding "UTF8"', sqlstate="22021") from None

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def rest(self) -> bytes:
        return self._take(self.remaining())


_TLS_POLL_SECONDS = 0.25


class Channel:
    """A client socket: blocking reads of whole messages, buffered writes flushed on demand."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock  # an ssl.SSLSocket once the client asked for TLS
        self.encrypted = False
        #: over TLS, a blocked read is woken by polling this (a shutdown(SHUT_RD) of the socket
        #: would break the TLS session, and the FATAL that follows could not be sent)
        self.stop_reading: Callable[[], bool] | None = None
        self._out = bytearray()

    # -- reading --------------------------------------------------------------------------------
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self._recv(min(n - len(buf), 1 << 20))
            except OSError as e:
                raise ClientGone(str(e)) from None
            if not chunk:
                raise ClientGone("connection closed by client")
            buf += chunk
        return bytes(buf)

    def _recv(self, size: int) -> bytes:
        if not self.encrypted or self.stop_reading is None:
            return self.sock.recv(size)
        self.sock.settimeout(_TLS_POLL_SECONDS)  # a timeout leaves the TLS session intact
        try:
            while True:
                try:
                    return self.sock.recv(size)
                except TimeoutError:
                    if self.stop_reading():
                        raise ClientGone("the server is shutting down") from None
        finally:
            self.sock.settimeout(None)

    def read_startup(self) -> tuple[int, MessageReader]:
        """The untyped first packet: (protocol code, body after the code)."""
        (length,) = _I32.unpack(self._recv_exact(4))
        if length < 8 or length > MAX_STARTUP_LEN:
            raise ProtocolViolation("invalid length of startup packet")
        body = self._recv_exact(length - 4)
        reader = MessageReader(body)
        return reader.int32(), reader

    def read_message(self) -> tuple[bytes, MessageReader]:
        """(type byte, body) of the next typed message."""
        kind, length = _HEADER.unpack(self._recv_exact(5))
        if length < 4:
            raise ProtocolViolation(f"invalid message length {length}")
        if length - 4 > MAX_MESSAGE_LEN:
            raise ProtocolViolation(f"message too large ({length} bytes)", sqlstate="54000")
        return kind, MessageReader(self._recv_exact(length - 4))

    # -- writing --------------------------------------------------------------------------------
    def send(self, kind: bytes, body: bytes = b"") -> None:
        self._out += kind
        self._out += _I32.pack(len(body) + 4)
        self._out += body
        if len(self._out) > 1 << 16:
            self.flush()

    def send_raw(self, data: bytes) -> None:
        self._out += data

    def send_buffers(self, buffers: Iterable[memoryview]) -> None:
        """Ready-framed messages, sent as they are after what is pending (large buffers, such as
        a binary COPY's, are not copied into the output buffer); each is sent as soon as the
        iterable yields it, so a streamed COPY TO is written while the rest is encoded."""
        self.flush()
        try:
            for buf in buffers:
                self.sock.sendall(buf)
        except OSError as e:
            raise ClientGone(str(e)) from None

    def flush(self) -> None:
        if not self._out:
            return
        data, self._out = bytes(self._out), bytearray()
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise ClientGone(str(e)) from None


# -- message bodies ---------------------------------------------------------------------------------


def cstr(s: str) -> bytes:
    return s.encode("utf-8") + b"\0"


def int16(v: int) -> bytes:
    return _I16.pack(v)


def count16(v: int) -> bytes:
    return _U16.pack(v)


def int32(v: int) -> bytes:
    return _I32.pack(v)


@dataclass(frozen=True)
class FieldDescription:
    """One column of a RowDescription."""

    name: str
    type_oid: int
    type_len: int
    type_mod: int = -1
    format: int = 0  # 0 text, 1 binary
    table_oid: int = 0
    column: int = 0


def row_description(fields: Sequence[FieldDescription]) -> bytes:
    parts = [int16(len(fields))]
    for f in fields:
        parts.append(cstr(f.name))
        parts.append(
            struct.pack("!ihihih", f.table_oid, f.column, f.type_oid, f.type_len, f.type_mod, f.format)
        )
    return b"".join(parts)


def data_row(values: Sequence[bytes | None]) -> bytes:
    parts = [int16(len(values))]
    for v in values:
        if v is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            parts.append(_I32.pack(len(v)))
            parts.append(v)
    return b"".join(parts)


def error_fields(
    severity: str,
    sqlstate: str,
    message: str,
    *,
    detail: str | None = None,
    hint: str | None = None,
    position: int | None = None,
) -> bytes:
    """The body of an ErrorResponse / NoticeResponse (S, V, C, M, D, H, P fields)."""
    fields = [(b"S", severity), (b"V", severity), (b"C", sqlstate), (b"M", message)]
    if detail:
        fields.append((b"D", detail))
    if hint:
        fields.append((b"H", hint))
    if position is not None and position > 0:
        fields.append((b"P", str(position)))
    return b"".join(code + cstr(value) for code, value in fields) + b"\0"


def parameter_status(name: str, value: str) -> bytes:
    return cstr(name) + cstr(value)
