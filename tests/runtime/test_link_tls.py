"""TLS on the data plane (`runtime.link_tls`): with a lease's certificate the meshes' links are
really TLS (a handshake happened, each end saw the lease's certificate) and still carry the
HMAC'd frames; a plaintext peer and a peer with another certificate are refused at the handshake;
the runner turns TLS on from Spark's settings; on Spark the MVs equal DuckDB with it on."""

from __future__ import annotations

import socket
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from piestream.common.chunk import StreamChunk
from piestream.runtime.data_plane import DATA_PLANE_VERSION, LINK_HELLO, PeerMesh
from piestream.runtime.exchange import encode_chunk
from piestream.runtime.link_tls import LinkTls, new_link_tls, spark_wants_tls
from piestream.runtime.wire import Channel, link, new_key


def _wait(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _meshes(tls: LinkTls) -> list[PeerMesh]:
    key = new_key()
    ms = [PeerMesh(key, s, "127.0.0.1", tls) for s in range(2)]
    for m in ms:
        m.connect([(x.host, x.port) for x in ms])
    _wait(lambda: all(len(m.inc) == 1 for m in ms))
    return ms


def test_links_are_tls_with_the_lease_certificate_and_carry_frames() -> None:
    tls = new_link_tls()
    ms = _meshes(tls)
    try:
        for m in ms:
            for chan in (*m.out.values(), *m.inc.values()):
                sock = chan.sock
                assert isinstance(sock, ssl.SSLSocket)
                assert sock.version() in ("TLSv1.2", "TLSv1.3")
                # the peer presented the lease's certificate (mutual TLS)
                peer = sock.getpeercert(binary_form=True)
                assert (
                    peer is not None
                    and ssl.DER_cert_to_PEM_cert(peer).encode().strip() == tls.cert_pem.strip()
                )
        quiet, other = socket.socketpair()
        for m in ms:
            m.begin(1)
        chunk = StreamChunk(np.zeros(100, np.int8), [pa.array(np.arange(100, dtype=np.int64))])
        payload = encode_chunk("fragment:5", 10, 0, chunk)
        ms[0].send(1, 0, {1: [((7, 1), payload)]}, [1])
        assert list(ms[1].pull(1, (7, 1), 10, (0, 0), quiet)) == [payload]
        quiet.close()
        other.close()
    finally:
        for m in ms:
            m.close()


def test_a_plaintext_peer_or_another_certificate_is_refused() -> None:
    tls = new_link_tls()
    key = new_key()
    target = PeerMesh(key, 1, "127.0.0.1", tls)
    try:
        # plaintext, with the right key even: the handshake fails, the hello is never read
        sock = socket.create_connection((target.host, target.port), timeout=5)
        Channel(sock, key, link(0, 1), receives=link(1, 0)).send(LINK_HELLO.pack(DATA_PLANE_VERSION, 0, 1))
        sock.settimeout(10)
        closed = False
        try:  # the target ends the connection (a TLS alert at most): without TLS it would keep it
            while sock.recv(4096):
                pass
            closed = True
        except ConnectionResetError:
            closed = True
        assert closed and target.inc == {}
        sock.close()
        # a TLS peer holding another lease's certificate: refused at the handshake
        stranger = PeerMesh(key, 0, "127.0.0.1", new_link_tls())
        stranger.connect([(stranger.host, stranger.port), (target.host, target.port)])
        assert stranger.lost is not None and "could not reach slot 1" in stranger.lost
        stranger.close()
        time.sleep(0.3)
        assert target.inc == {}  # nobody got a link in
        # and the lease's own peer does
        friend = PeerMesh(key, 0, "127.0.0.1", tls)
        friend.connect([(friend.host, friend.port), (target.host, target.port)])
        _wait(lambda: 0 in target.inc)
        assert friend.lost is None
        friend.close()
    finally:
        target.close()


def test_the_runner_follows_sparks_encryption_settings(spark: Any) -> None:
    from pyspark import SparkConf

    assert spark_wants_tls(spark.sparkContext) is False  # the test suite's session: off

    class Ctx:  # what the runner asks of its SparkContext: its conf
        def __init__(self, **conf: str) -> None:
            self.conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))

        def getConf(self) -> SparkConf:
            return self.conf

    assert spark_wants_tls(Ctx(**{"spark.network.crypto.enabled": "true"}))
    assert spark_wants_tls(Ctx(**{"spark.ssl.enabled": "TRUE"}))
    assert not spark_wants_tls(Ctx(**{"spark.ssl.enabled": "false"}))


@pytest.mark.spark
def test_mvs_equal_duckdb_over_tls_links(tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leased runner with TLS on: MVs (agg, join, top-n) equal DuckDB while rescaled up and
    down across a restart, every lease with its own certificate, no payload via the driver."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "sql"))
    from test_rescale_sql import _drive

    from piestream.runtime import leased
    from piestream.server.database import DatabaseConfig

    made: list[LinkTls] = []

    def counting() -> LinkTls:
        made.append(new_link_tls())
        return made[-1]

    monkeypatch.setattr(leased, "new_link_tls", counting)
    runner = leased.LeasedSparkRunner(spark, lease_seconds=0.0, tls=True)
    try:
        cfg = DatabaseConfig(
            runner="spark", barrier_interval=3600, parallelism=2, background_compaction=False
        )
        _drive(tmp_path / "d", cfg, spark=spark, rounds=1, runner=runner)
    finally:
        runner.close()
    assert runner.leased_epochs > 0 and len(made) >= runner.leased_epochs  # a lease per epoch
    assert len({t.cert_pem for t in made}) == len(made)
