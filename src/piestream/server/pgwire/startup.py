"""Connection startup: the startup packet, authentication, and the session's initial settings.

Before a session exists the client may ask for TLS (accepted when the server has a certificate:
the connection goes on over TLS; `tls`) or GSS encryption (refused: it goes on in the clear) or
send a CancelRequest for another connection instead. The startup packet names the
protocol version (3.0; newer minor versions and ``_pq_.`` options are answered with
NegotiateProtocolVersion), the user, the database and settings, including ``options``
(``-c name=value``). Authentication is trust, md5 or SCRAM-SHA-256, as the server is configured
(`auth.Authenticator`).
"""

from __future__ import annotations

import logging
import secrets
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from piestream.common.errors import PiestreamError
from piestream.server.pgwire import auth
from piestream.server.pgwire.protocol import (
    CANCEL_REQUEST,
    GSSENC_REQUEST,
    PROTOCOL_V3,
    SSL_REQUEST,
    Channel,
    ClientGone,
    ProtocolViolation,
    cstr,
    int32,
)

log = logging.getLogger(__name__)

#: Settings reported to the client in ParameterStatus (PostgreSQL's GUC_REPORT ones), by wire name.
REPORTED = {
    "application_name": "application_name",
    "client_encoding": "client_encoding",
    "datestyle": "DateStyle",
    "integer_datetimes": "integer_datetimes",
    "intervalstyle": "IntervalStyle",
    "is_superuser": "is_superuser",
    "server_encoding": "server_encoding",
    "server_version": "server_version",
    "session_authorization": "session_authorization",
    "standard_conforming_strings": "standard_conforming_strings",
    "timezone": "TimeZone",
}


@dataclass
class StartupPacket:
    """Who connects to what, and the settings the client asked for (``_pq_.`` options left out)."""

    user: str
    database: str
    parameters: dict[str, str]


def read_startup(
    ch: Channel, cancel: Callable[[int, int], None], tls: ssl.SSLContext | None = None
) -> StartupPacket | None:
    """The client's startup packet, or None when it sent a CancelRequest (passed on to `cancel`).
    With `tls`, an SSLRequest is answered 'S' and `ch` continues over TLS (`ch.encrypted`)."""
    while True:
        code, r = ch.read_startup()
        if code == SSL_REQUEST and tls is not None and not ch.encrypted:
            ch.send_raw(b"S")
            ch.flush()
            # nothing the client sent after the SSLRequest is buffered here (the channel reads
            # exact lengths), so no clear-text bytes can be taken as sent under TLS
            try:
                ch.sock = tls.wrap_socket(ch.sock, server_side=True)
            except (ssl.SSLError, OSError) as e:
                log.info("TLS handshake failed: %s", e)
                raise ClientGone(f"TLS handshake failed: {e}") from None
            ch.encrypted = True
            continue
        if code == SSL_REQUEST and ch.encrypted:
            raise ProtocolViolation("SSLRequest on a connection already using TLS")
        if code in (SSL_REQUEST, GSSENC_REQUEST):
            ch.send_raw(b"N")  # no TLS / GSS encryption: the client goes on in the clear
            ch.flush()
            continue
        if code == CANCEL_REQUEST:
            pid, secret = r.int32(), r.int32()
            cancel(pid, secret)
            return None
        break
    if code >> 16 != 3:
        raise ProtocolViolation(
            f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: server supports 3.0 to 3.0",
            sqlstate="0A000",
        )
    startup: dict[str, str] = {}
    unknown_options: list[str] = []
    while r.remaining():
        name = r.cstring()
        if not name:
            break
        value = r.cstring()
        if name.startswith("_pq_."):
            unknown_options.append(name)
        else:
            startup[name] = value
    if code != PROTOCOL_V3 or unknown_options:
        body = int32(0) + int32(len(unknown_options)) + b"".join(cstr(n) for n in unknown_options)
        ch.send(b"v", body)  # NegotiateProtocolVersion: we speak 3.0
    user = startup.get("user", "")
    if not user:
        raise PiestreamError("no PostgreSQL user name specified in startup packet", sqlstate="28000")
    return StartupPacket(user, startup.get("database") or user, startup)


def authenticate(ch: Channel, authenticator: auth.Authenticator | None, user: str) -> None:
    """The authentication exchange, ending with AuthenticationOk; failures raise (28P01 ...)."""
    if authenticator is None:
        ch.send(b"R", int32(0))
        return
    if not authenticator.uses_scram(user):
        salt = secrets.token_bytes(4)
        ch.send(b"R", int32(5) + salt)
        ch.flush()
        kind, r = ch.read_message()
        if kind != b"p":
            raise ProtocolViolation(f"expected password response, got message type {kind!r}")
        authenticator.check_md5(user, salt, r.cstring())
    else:
        ch.send(b"R", int32(10) + cstr("SCRAM-SHA-256") + b"\0")
        ch.flush()
        kind, r = ch.read_message()
        if kind != b"p":
            raise ProtocolViolation(f"expected SASL response, got message type {kind!r}")
        mechanism = r.cstring()
        if mechanism != "SCRAM-SHA-256":
            raise auth.AuthFailed(
                f"client selected an invalid SASL authentication mechanism: {mechanism}", sqlstate="28000"
            )
        n = r.int32()
        exchange = authenticator.scram(user)
        first = exchange.server_first_message(r.bytes_(n).decode("utf-8", "replace"))
        ch.send(b"R", int32(11) + first.encode())
        ch.flush()
        kind, r = ch.read_message()
        if kind != b"p":
            raise ProtocolViolation(f"expected SASL response, got message type {kind!r}")
        final = exchange.server_final_message(r.rest().decode("utf-8", "replace"))
        ch.send(b"R", int32(12) + final.encode())
    ch.send(b"R", int32(0))


def apply_startup_settings(settings: dict[str, str], packet: StartupPacket) -> None:
    """The new session's settings: the packet's own and those in its ``options``."""
    settings["session_authorization"] = packet.user
    for name, value in packet.parameters.items():
        key = name.lower()
        if key in ("user", "database", "replication", "client_encoding"):
            continue
        if key == "options":
            for opt_name, opt_value in _parse_options(value):
                settings[opt_name.lower()] = opt_value
            continue
        settings[key] = value
    settings["client_encoding"] = "UTF8"  # the only encoding spoken; clients adapt to the report


def _parse_options(options: str) -> list[tuple[str, str]]:
    """The startup ``options`` string: ``-c name=value`` and ``--name=value`` (backslash escapes spaces)."""
    words: list[str] = []
    current = ""
    escape = False
    for ch in options:
        if escape:
            current += ch
            escape = False
        elif ch == "\\":
            escape = True
        elif ch.isspace():
            if current:
                words.append(current)
            current = ""
        else:
            current += ch
    if current:
        words.append(current)
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        w = words[i]
        setting = None
        if w == "-c" and i + 1 < len(words):
            setting = words[i + 1]
            i += 1
        elif w.startswith("-c") or w.startswith("--"):
            setting = w[2:]
        if setting and "=" in setting:
            k, v = setting.split("=", 1)
            out.append((k.replace("-", "_"), v))
        i += 1
    return out
