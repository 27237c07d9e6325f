"""The leased job's data plane (`runtime.data_plane`), in-process: tasks' meshes on loopback
exchange elements directly, a receiver's input is complete only once every sender's END is in
(counts checked), an ABORT or a broken link fails the run instead of wedging it, an earlier
run's frames are dropped, and strangers or frames of another link are turned away."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from piestream.runtime.data_plane import (
    DATA_PLANE_VERSION,
    LINK_HELLO,
    PeerAborted,
    PeerLost,
    PeerMesh,
    decode_peers,
    encode_peers,
)
from piestream.runtime.exchange import MalformedPayload
from piestream.runtime.wire import Channel, FrameRejected, link, new_key


@pytest.fixture
def meshes() -> Iterator[tuple[list[PeerMesh], socket.socket]]:
    """Three slots' meshes, linked to each other, and a silent driver connection."""
    key = new_key()
    ms = [PeerMesh(key, s, "127.0.0.1") for s in range(3)]
    table = [(m.host, m.port) for m in ms]
    for m in ms:
        m.connect(decode_peers(encode_peers(table)))
    _wait(lambda: all(len(m.inc) == 2 for m in ms))
    quiet, other = socket.socketpair()
    yield ms, quiet
    for m in ms:
        m.close()
    quiet.close()
    other.close()


def _wait(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _el(actor: int, n: int) -> tuple[tuple[int, ...], bytes]:
    return ((7, actor), b"C" + bytes([n]) * 100)


def test_stage_output_reaches_its_receivers_once_every_sender_ended(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
    ms[0].send(1, 0, {1: [_el(1, 1), _el(1, 2)], 2: [_el(2, 3)]}, [1, 2])
    got: list[object] = []
    # slot 1 needs stage 0 of slots 0 and 2: it waits for slot 2's END
    t = threading.Thread(target=lambda: got.extend(ms[1].take(1, [(0, 0), (2, 0)], quiet)))
    t.start()
    time.sleep(0.3)
    assert t.is_alive() and not got
    ms[2].send(1, 0, {1: [_el(1, 4)]}, [0, 1])
    t.join(10)
    assert sorted(got) == sorted([_el(1, 1), _el(1, 2), _el(1, 4)])  # type: ignore[type-var]
    assert ms[2].take(1, [(0, 0)], quiet) == [_el(2, 3)]
    assert ms[0].bytes_sent > 300 and ms[1].bytes_sent == 0


def test_a_count_that_does_not_match_fails_the_run(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
    ms[0].send(1, 0, {1: [_el(1, 1)]}, [])  # data, no END ...
    ms[0].send(1, 0, {}, [1])  # ... then an END that says none was sent
    with pytest.raises(PeerLost, match="sent 1 elements of stage 0, its END says 0"):
        ms[1].take(1, [(0, 0)], quiet)


def test_an_abort_releases_the_waiters_and_the_next_run_drops_its_frames(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
    ms[0].send(1, 0, {1: [_el(1, 1)]}, [])  # part of run 1's output, then slot 0 gives up
    ms[0].abort(1)
    with pytest.raises(PeerAborted, match="slot 0 gave up"):
        ms[1].take(1, [(0, 0)], quiet)
    for m in ms:  # the retry: nothing of run 1 is in its input
        m.begin(2)
    ms[0].send(2, 0, {1: [_el(1, 9)]}, [1])
    assert ms[1].take(2, [(0, 0)], quiet) == [_el(1, 9)]


def test_a_dead_peer_or_driver_fails_the_run_instead_of_wedging_it(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
    a, b = socket.socketpair()
    b.close()  # the driver's connection closed: readable
    with pytest.raises(PeerLost, match="driver ended the lease"):
        ms[1].take(1, [(0, 0)], a)
    a.close()
    ms[0].close()  # slot 0's task dies mid-run
    with pytest.raises(PeerLost, match="lost its link from slot 0"):
        ms[1].take(1, [(0, 0)], quiet)
    with pytest.raises(PeerLost):
        ms[2].send(1, 1, {0: [_el(0, 1)]}, [0])  # sending to it fails too, or ...
        ms[2].take(1, [(0, 0)], quiet)  # ... its link in is lost


def test_strangers_and_frames_of_another_link_are_turned_away(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, _ = meshes
    target = ms[1]
    hello = LINK_HELLO.pack(DATA_PLANE_VERSION, 0, 1)
    # a hello under another key; one claiming to be for another slot; a second link from slot 0
    attempts = [
        (new_key(), link(0, 1), hello),
        (target.key, link(0, 2), LINK_HELLO.pack(DATA_PLANE_VERSION, 0, 2)),
        (target.key, link(0, 1), hello),
    ]
    for key, direction, body in attempts:
        with socket.create_connection((target.host, target.port), timeout=10) as bad:
            Channel(bad, key, direction, "stranger", link(1, 0)).send(body)
            assert bad.recv(1) == b""  # closed by the receiver
    assert target.lost is None and set(target.inc) == {0, 2}  # without effect
    # a frame of link 0 -> 1 does not verify on link 0 -> 2
    x, y = socket.socketpair()
    Channel(x, target.key, link(0, 1)).send(b"D")
    with pytest.raises(FrameRejected):
        Channel(y, target.key, b"", receives=link(0, 2)).recv()
    x.close()
    y.close()


def test_a_garbage_peer_table_is_refused() -> None:
    with pytest.raises(MalformedPayload):
        decode_peers(b'{"format": 2, "peers": []}')
    with pytest.raises(MalformedPayload):
        decode_peers(b"\x80not json")
