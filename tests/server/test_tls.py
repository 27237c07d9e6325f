"""TLS on the wire protocol and the dashboard, with a CA and certificates the test makes
(`cryptography`): psql, psycopg and psycopg2 with sslmode=require and verify-full, a wrong CA
refused by the client, the clear-text refusal for other hosts (28000), HTTPS /metrics."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import ssl
import struct
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import psycopg2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pgwire_helpers import start_server

from piestream.server.dashboard import Dashboard
from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer
from piestream.server.pgwire.protocol import GSSENC_REQUEST, SSL_REQUEST
from piestream.server.pgwire.tls import TlsConfig, is_loopback


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(d: Path, cn: str) -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    path = d / f"{cn}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, cert


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tls")
    ca_path, ca_key, ca = make_ca(d, "piestream-test-ca")
    other_ca, _, _ = make_ca(d, "some-other-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    crt, pem = d / "server.crt", d / "server.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pem.chmod(0o600)
    return {"ca": ca_path, "other_ca": other_ca, "cert": crt, "key": pem}


@pytest.fixture(scope="module")
def tls_server(certs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    config = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=1)
    db = Database(tmp_path_factory.mktemp("tlsdb"), config=config)
    tls = TlsConfig(str(certs["cert"]), str(certs["key"]), require_remote=True)
    # all interfaces: the clear-text refusal is tried from this host's non-loopback address
    srv = PgServer(db, host="0.0.0.0", port=0, tls=tls, shutdown_timeout=5).start()
    yield srv
    srv.stop()


def dsn(srv: PgServer, host: str = "localhost", **extra: str) -> str:
    return " ".join(
        [f"host={host} port={srv.port} user=root dbname=dev", *(f"{k}={v}" for k, v in extra.items())]
    )


def test_psycopg_require_and_verify_full(tls_server: PgServer, certs: dict[str, Path]) -> None:
    with psycopg.connect(dsn(tls_server, sslmode="require"), autocommit=True) as pg:
        assert pg.pgconn.ssl_in_use
        assert pg.execute("SELECT 1 + 1").fetchone() == (2,)
    for host in ("localhost", "127.0.0.1"):  # the certificate names both
        with psycopg.connect(
            dsn(tls_server, host, sslmode="verify-full", sslrootcert=str(certs["ca"])), autocommit=True
        ) as pg:
            assert pg.pgconn.ssl_in_use
            pg.execute("CREATE TABLE IF NOT EXISTS secret (k INT)")
            pg.execute("INSERT INTO secret VALUES (7)")
            assert pg.execute("SELECT count(*) FROM secret").fetchone()[0] >= 1  # type: ignore[index]
    # a client trusting another CA refuses the server's certificate: verification is real
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(dsn(tls_server, sslmode="verify-full", sslrootcert=str(certs["other_ca"])))
    # loopback may still connect in the clear (only other hosts must use TLS)
    with psycopg.connect(dsn(tls_server, "127.0.0.1", sslmode="disable")) as pg:
        assert not pg.pgconn.ssl_in_use


def test_psycopg2_verify_full(tls_server: PgServer, certs: dict[str, Path]) -> None:
    conn = psycopg2.connect(dsn(tls_server, sslmode="verify-full", sslrootcert=str(certs["ca"])))
    try:
        assert conn.info.ssl_in_use
        with conn.cursor() as cur:
            cur.execute("SELECT 'over tls'")
            assert cur.fetchone() == ("over tls",)
    finally:
        conn.close()
    conn = psycopg2.connect(dsn(tls_server, sslmode="require"))
    try:
        assert conn.info.ssl_in_use
    finally:
        conn.close()


def test_psql_verify_full(tls_server: PgServer, certs: dict[str, Path]) -> None:
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10"}
    conninfo = dsn(tls_server, sslmode="verify-full", sslrootcert=str(certs["ca"]))
    out = subprocess.run(
        ["psql", conninfo, "-X", "-c", "\\conninfo", "-tAc", "SELECT 40 + 2"],
        check=False, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "42" in out.stdout
    assert "SSL connection" in out.stdout  # psql's \conninfo names the protocol and cipher


def test_clear_text_from_another_host_is_refused(tls_server: PgServer) -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: picks the outgoing interface's address
        addr = probe.getsockname()[0]
    finally:
        probe.close()
    assert not is_loopback((addr, 0)), f"this host needs a non-loopback IPv4 address (got {addr})"
    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect(dsn(tls_server, addr, sslmode="disable"))
    assert "requires SSL" in str(e.value) and "sslmode=require" in str(e.value)
    with psycopg.connect(dsn(tls_server, addr, sslmode="require")) as pg:  # over TLS it is fine
        assert pg.execute("SELECT 3").fetchone() == (3,)


def test_ssl_and_gssenc_requests_on_the_wire(tls_server: PgServer, certs: dict[str, Path]) -> None:
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as s:
        s.sendall(struct.pack("!ii", 8, GSSENC_REQUEST))
        assert s.recv(1) == b"N"  # GSS encryption: not offered, the client may go on
        s.sendall(struct.pack("!ii", 8, SSL_REQUEST))
        assert s.recv(1) == b"S"
        ctx = ssl.create_default_context(cafile=str(certs["ca"]))
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            assert t.version() in ("TLSv1.2", "TLSv1.3")


def test_without_a_certificate_sslmode_require_fails(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "plain")
    try:
        with pytest.raises(psycopg.OperationalError, match=r"(?i)server does not support SSL"):
            psycopg.connect(dsn(srv, "127.0.0.1", sslmode="require"))
    finally:
        srv.stop()


def test_scram_password_over_tls(certs: dict[str, Path], tmp_path: Path) -> None:
    config = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=1)
    tls = TlsConfig(str(certs["cert"]), str(certs["key"]))
    srv = PgServer(
        Database(tmp_path / "d", config=config),
        port=0,
        auth={"method": "scram-sha-256", "users": {"ann": "s3cret"}},
        tls=tls,
        shutdown_timeout=5,
    ).start()
    try:
        conninfo = f"host=localhost port={srv.port} user=ann dbname=dev password=s3cret sslmode=verify-full"
        with psycopg.connect(conninfo + f" sslrootcert={certs['ca']}") as pg:
            assert pg.pgconn.ssl_in_use and pg.execute("SELECT 1").fetchone() == (1,)
    finally:
        srv.stop()


def test_dashboard_over_https(tls_server: PgServer, certs: dict[str, Path]) -> None:
    dash = Dashboard(tls_server.database, host="localhost", port=0, pgwire=tls_server,
                     ssl_context=tls_server.ssl_context).start()  # fmt: skip
    try:
        assert dash.url.startswith("https://localhost:")
        ctx = ssl.create_default_context(cafile=str(certs["ca"]))
        with urllib.request.urlopen(dash.url + "metrics", context=ctx, timeout=10) as r:
            assert r.status == 200 and b"meta_barrier_duration_seconds" in r.read()
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # clear HTTP is not served
            urllib.request.urlopen(f"http://localhost:{dash.port}/health", timeout=10).read()
        with urllib.request.urlopen(dash.url + "health", context=ctx, timeout=10) as r:  # still serving
            assert r.read() == b"ok"
    finally:
        dash.stop()


def test_bad_certificate_files_are_refused_at_start(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("not a certificate")
    from piestream.common.errors import PiestreamError

    with pytest.raises(PiestreamError, match="cannot load the TLS certificate"):
        TlsConfig(str(tmp_path / "c.pem"), str(tmp_path / "c.pem")).context()


def test_is_loopback() -> None:
    assert is_loopback(("127.0.0.1", 1)) and is_loopback(("127.9.8.7", 1))
    assert is_loopback(("::1", 1, 0, 0)) and is_loopback(("::ffff:127.0.0.1", 1, 0, 0))
    assert is_loopback("/tmp/.s.PGSQL.4566")
    assert not is_loopback(("10.1.2.3", 1)) and not is_loopback(("::ffff:10.1.2.3", 1, 0, 0))
    assert not is_loopback(("fe80::1%eth0", 1, 0, 2)) and not is_loopback(("192.0.2.2", 5))


def test_shutdown_tells_a_tls_client_why(certs: dict[str, Path], tmp_path: Path) -> None:
    config = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=1)
    tls = TlsConfig(str(certs["cert"]), str(certs["key"]))
    srv = PgServer(Database(tmp_path / "d", config=config), port=0, tls=tls, shutdown_timeout=5).start()
    pg = psycopg.connect(dsn(srv, sslmode="require"), autocommit=True)
    try:
        assert pg.execute("SELECT 1").fetchone() == (1,)
        srv.stop()
        # the FATAL arrives over the intact TLS session, not as a broken one
        with pytest.raises(psycopg.errors.AdminShutdown, match="terminating connection due to administrator"):
            pg.execute("SELECT 1")
    finally:
        pg.close()
        srv.stop()
