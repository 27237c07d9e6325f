"""TLS on the task data plane (`runtime.data_plane`) when Spark's own traffic is encrypted.

With ``spark.network.crypto.enabled`` or ``spark.ssl.enabled`` on, a user expects no data to
cross the network in the clear, and the data plane carries exchanged rows. The driver then makes
a self-signed certificate and its private key per lease (`new_link_tls`: EC P-256, valid for a
day, with the `cryptography` library) and hands both to the tasks in their Spark closure, next to
the lease's HMAC key (the closure travels over Spark's RPC, which that same setting encrypts).
Every task presents that certificate on the links it opens and accepts, and requires the peer to
present it too (mutual TLS, pinned: the only trusted certificate is the lease's, host names are
not checked since tasks have no names of their own). A peer without it, or a plaintext one, fails
the handshake and is turned away before any frame is read. The HMAC of every frame stays: TLS
hides the bytes, the MAC still binds each frame to its link and its place on it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

#: the Spark settings that turn TLS on (either)
SPARK_SETTINGS = ("spark.network.crypto.enabled", "spark.ssl.enabled")


@dataclass(frozen=True)
class LinkTls:
    """A lease's certificate and its private key (PEM): what every task of it presents."""

    cert_pem: bytes
    key_pem: bytes

    def context(self, server_side: bool) -> ssl.SSLContext:
        """An SSL context that presents the lease's certificate and trusts only it."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cadata=self.cert_pem.decode())
        # load_cert_chain reads files only: a private file for the moment it reads them
        fd, path = tempfile.mkstemp(prefix="piestream-link-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.cert_pem + self.key_pem)
            ctx.load_cert_chain(path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return ctx


def new_link_tls() -> LinkTls:
    """A fresh self-signed certificate and key for one lease (made on the driver)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "piestream lease")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return LinkTls(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def spark_wants_tls(sc: Any) -> bool:
    """Whether the session's Spark encrypts its own traffic (so the data plane must too)."""
    conf = sc.getConf()
    return any(str(conf.get(k, "false")).strip().lower() == "true" for k in SPARK_SETTINGS)
