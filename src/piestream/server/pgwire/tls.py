"""TLS for the wire protocol and the dashboard (stdlib `ssl`).

With a certificate and key, the server answers a client's SSLRequest with 'S' and runs the rest
of the connection over TLS (PostgreSQL's in-band negotiation; GSSENCRequest is still answered
'N'). `require_remote` refuses clear-text connections from addresses other than loopback with
28000, so passwords never cross a network in the clear. The dashboard serves HTTPS with the same
certificate.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from typing import Any

from piestream.common.errors import PiestreamError


@dataclass(frozen=True)
class TlsConfig:
    """The server's certificate chain and key (PEM files) and its clear-text policy."""

    cert_file: str
    key_file: str
    require_remote: bool = False  # refuse unencrypted connections from non-loopback addresses

    def context(self) -> ssl.SSLContext:
        """A server-side context (TLS 1.2+); a bad file fails here, at start-up, not per client."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as e:
            raise PiestreamError(
                f"cannot load the TLS certificate {self.cert_file} / key {self.key_file}: {e}",
                sqlstate="F0000",
            ) from None
        return ctx


def is_loopback(address: Any) -> bool:
    """Whether a peer address (a socket's (host, port, ...) tuple, or a Unix path) is this host."""
    if not isinstance(address, tuple):
        return True  # a Unix-domain socket
    try:
        ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def refuse_clear_text(address: Any) -> PiestreamError:
    host = address[0] if isinstance(address, tuple) else str(address)
    return PiestreamError(
        f'connection from host "{host}" requires SSL: this server refuses unencrypted connections '
        "from other hosts (connect with sslmode=require or verify-full)",
        sqlstate="28000",
    )
