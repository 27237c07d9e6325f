"""The leased job's data plane (`runtime.data_plane`), in-process: tasks' meshes on loopback
exchange elements directly, a receiver's input is complete only once every sender's END is in
(counts checked), an ABORT or a broken link fails the run instead of wedging it, an earlier
run's frames are dropped, and strangers or frames of another link are turned away."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

from piestream.common.chunk import StreamChunk
from piestream.runtime.data_plane import (
    DATA_PLANE_VERSION,
    LINK_HELLO,
    PeerAborted,
    PeerLost,
    PeerMesh,
    decode_channels,
    decode_peers,
    encode_peers,
    merge_channels,
)
from piestream.runtime.exchange import Element, MalformedPayload, decode_chunk, encode_chunk
from piestream.runtime.wire import Channel, FrameRejected, link, new_key


@pytest.fixture
def meshes() -> Iterator[tuple[list[PeerMesh], socket.socket]]:
    """Three slots' meshes, linked to each other, and a silent driver connection."""
    key = new_key()
    ms = [PeerMesh(key, s, "127.0.0.1") for s in range(3)]
    table = [(m.host, m.port) for m in ms]
    for m in ms:
        m.connect(*decode_peers(encode_peers(table)))
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


def _el(actor: int, source: int, seq: int, rows: int = 10, port: str = "fragment:5") -> Element:
    chunk = StreamChunk(np.zeros(rows, np.int8), [pa.array(np.arange(rows, dtype=np.int64) + seq)])
    return ((7, actor), encode_chunk(port, source, seq, chunk))


def _seqs(m: PeerMesh, run: int, actor: int, source: int, end: tuple[int, int] | None, quiet) -> list[int]:  # type: ignore[no-untyped-def]
    return [decode_chunk(p).seq for p in m.pull(run, (7, actor), source, end, quiet)]


def test_stage_output_reaches_its_receivers_group_by_group(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
    ms[0].send(1, 0, {1: [_el(1, 10, 0), _el(1, 10, 1)], 2: [_el(2, 10, 2)]}, [1, 2])
    got: list[int] = []
    # slot 1 takes source 20's group first: it runs on slot 2, so it waits for slot 2's END
    t = threading.Thread(target=lambda: got.extend(_seqs(ms[1], 1, 1, 20, (2, 0), quiet)))
    t.start()
    time.sleep(0.3)
    assert t.is_alive() and not got
    ms[2].send(1, 0, {1: [_el(1, 20, 0)]}, [0, 1])
    t.join(10)
    assert got == [0]
    assert _seqs(ms[1], 1, 1, 10, (0, 0), quiet) == [0, 1]  # filed meanwhile, in order
    assert _seqs(ms[2], 1, 2, 10, (0, 0), quiet) == [2]
    assert ms[0].bytes_sent > 300 and ms[1].bytes_sent == 0
    assert all(m.leftover(1) == [] for m in ms)
    # a task's own output for its later actors goes through its local spools
    ms[1].put_local(1, (7, 3), _el(3, 30, 0)[1])
    assert ms[1].leftover(1) == [(1, (7, 3), 30)]
    assert _seqs(ms[1], 1, 3, 30, None, quiet) == [0]


def test_a_count_that_does_not_match_fails_the_run(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
    ms[0].send(1, 0, {1: [_el(1, 10, 1)]}, [])  # data, no END ...
    ms[0].send(1, 0, {}, [1])  # ... then an END that says none was sent
    with pytest.raises(PeerLost, match="sent 1 elements of stage 0, its END says 0"):
        _seqs(ms[1], 1, 1, 10, (0, 0), quiet)


def test_an_abort_releases_the_waiters_and_the_next_run_drops_its_frames(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
    ms[0].send(1, 0, {1: [_el(1, 10, 1)]}, [])  # part of run 1's output, then slot 0 gives up
    ms[0].abort(1)
    with pytest.raises(PeerAborted, match="slot 0 gave up"):
        _seqs(ms[1], 1, 1, 10, (0, 0), quiet)
    for m in ms:  # the retry: nothing of run 1 is in its input
        m.begin(2)
    ms[0].send(2, 0, {1: [_el(1, 10, 9)]}, [1])
    assert _seqs(ms[1], 2, 1, 10, (0, 0), quiet) == [9]
    assert ms[1].leftover(1) == [] and ms[1].leftover(2) == []


def test_a_dead_peer_or_driver_fails_the_run_instead_of_wedging_it(meshes) -> None:  # type: ignore[no-untyped-def]
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
    a, b = socket.socketpair()
    b.close()  # the driver's connection closed: readable
    with pytest.raises(PeerLost, match="driver ended the lease"):
        _seqs(ms[1], 1, 1, 10, (0, 0), a)
    a.close()
    ms[0].close()  # slot 0's task dies mid-run
    with pytest.raises(PeerLost, match="lost its link from slot 0"):
        _seqs(ms[1], 1, 1, 10, (0, 0), quiet)
    with pytest.raises(PeerLost):
        ms[2].send(1, 1, {0: [_el(0, 10, 1)]}, [0])  # sending to it fails too, or ...
        _seqs(ms[2], 1, 1, 10, (0, 0), quiet)  # ... its link in is lost


WINDOW = 64 << 10


def test_out_of_order_input_spills_to_disk_instead_of_deadlocking(meshes) -> None:  # type: ignore[no-untyped-def]
    """A join's ports fed from two stages of one sender, a 64 KiB window: the receiver drains
    port "fragment:3" (the sender's stage 1) first, while the sender still sends its stage 0
    ("fragment:5", 2 MB). A reader that stopped its socket whenever the window is full would
    deadlock here (the sender never gets to stage 1, the receiver never takes stage 0); the
    out-of-order stage 0 goes to disk instead, within the window in memory."""
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
        m.window = WINDOW
    stage0 = [_el(1, 50, i, rows=4096, port="fragment:5") for i in range(64)]  # 32 KiB each
    stage1 = [_el(1, 30, i, rows=512, port="fragment:3") for i in range(8)]

    def sender() -> None:
        ms[0].send(1, 0, {1: stage0}, [1])
        ms[0].send(1, 1, {1: stage1}, [1])

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    got: list[list[int]] = []
    done = threading.Event()

    def consumer() -> None:
        got.append(_seqs(ms[1], 1, 1, 30, (0, 1), quiet))  # port fragment:3 first ...
        got.append(_seqs(ms[1], 1, 1, 50, (0, 0), quiet))  # ... then fragment:5
        done.set()

    threading.Thread(target=consumer, daemon=True).start()
    assert done.wait(60), "the receiver deadlocked"
    t.join(10)
    assert got == [list(range(8)), list(range(64))]
    largest = max(len(p) for _, p in stage0 + stage1)
    assert ms[1].spilled_bytes > 1 << 20  # most of stage 0 waited on disk
    assert 0 < ms[1].peak_link_bytes <= WINDOW + largest
    assert ms[1].leftover(1) == []


def test_a_full_window_stops_the_link_and_the_sender(meshes) -> None:  # type: ignore[no-untyped-def]
    """While the consumer holds its group's input, the link's reader stops at the window (a
    credit wait) and TCP stops the sender; credit returns as the consumer takes."""
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
        m.window = WINDOW
    elements = [_el(1, 10, i, rows=8192) for i in range(400)]  # 64 KiB each, 25 MB in all
    t = threading.Thread(target=lambda: ms[0].send(1, 0, {1: elements}, [1]), daemon=True)
    t.start()
    pulled = ms[1].pull(1, (7, 1), 10, (0, 0), quiet)
    first = decode_chunk(next(pulled)).seq  # the consumer drains this group now ...
    _wait(lambda: ms[1].credit_waits > 0)  # ... but takes nothing more: the reader waits
    time.sleep(0.5)
    assert t.is_alive()  # the sender is held back: 25 MB do not fit the window and TCP's buffers
    rest = [decode_chunk(p).seq for p in pulled]
    t.join(30)
    assert [first, *rest] == list(range(400))
    assert ms[1].spilled_bytes == 0  # in order: nothing went to disk
    assert ms[1].peak_link_bytes <= WINDOW + max(len(p) for _, p in elements)


def test_channel_counters_show_what_crossed_and_the_back_pressure(meshes) -> None:  # type: ignore[no-untyped-def]
    """Per channel (sender slot -> receiver slot), one run's counters: elements and payload
    bytes filed, the receiver's credit waits and the time its reader held the link unread, and
    the sender's wire bytes and time spent sending while it was held back (issue 27: channel
    counters in EpochStats, so back-pressure is visible). A new run starts from zero."""
    ms, quiet = meshes
    for m in ms:
        m.begin(1)
        m.window = WINDOW
    elements = [_el(1, 10, i, rows=8192) for i in range(400)]  # 64 KiB each, 25 MB in all
    t = threading.Thread(target=lambda: ms[0].send(1, 0, {1: elements}, [1]), daemon=True)
    t.start()
    pulled = ms[1].pull(1, (7, 1), 10, (0, 0), quiet)
    next(pulled)
    _wait(lambda: ms[1].credit_waits > 0)
    time.sleep(0.6)  # the consumer sits on its group: the reader, then the sender, wait
    assert len(list(pulled)) == 399
    t.join(30)
    incoming, none_out, _ = decode_channels(1, ms[1].channel_counters(1))
    assert none_out == {}  # slot 1 sent nothing
    (c,) = incoming
    assert (c.sender, c.receiver, c.elements) == (0, 1, 400)
    assert c.bytes == sum(len(p) for _, p in elements)
    assert c.credit_waits > 0 and c.credit_wait_s > 0.3
    assert 0 < c.peak_bytes <= WINDOW + max(len(p) for _, p in elements) and c.spilled_bytes == 0
    none_in, outgoing, _ = decode_channels(0, ms[0].channel_counters(1))
    assert none_in == [] and set(outgoing) == {(0, 1)}
    wire, send_ns = outgoing[(0, 1)]
    assert wire > c.bytes and send_ns / 1e9 > 0.3  # held back about as long
    (row,) = merge_channels(incoming, outgoing)
    assert row == dataclasses.replace(c, wire_bytes=wire, send_s=send_ns / 1e9)
    ms[1].count_rows(1, 0, 5)  # the consumer (`lease_task`) counts the rows it decoded
    assert decode_channels(1, ms[1].channel_counters(1))[0][0].rows == 5
    for m in ms:
        m.begin(2)
    assert decode_channels(1, ms[1].channel_counters(2))[:2] == ([], {})
    assert decode_channels(0, ms[0].channel_counters(2))[:2] == ([], {})
    with pytest.raises(MalformedPayload):
        decode_channels(1, ms[1].channel_counters(1)[:-3] + b"\x05")


@pytest.mark.spark
def test_epoch_stats_show_every_channel(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A bulk epoch on the default runner with tiny windows: its EpochStats hold one row per
    data-plane channel; the rows that crossed them are the table's rows into the aggregation
    (and the aggregation's on to the join), their wire bytes between slots add up to the
    peer bytes, and their credit waits, spills and peaks are the runner's totals, split."""
    from piestream.runtime.leased import LeasedSparkRunner
    from piestream.server.database import Database, DatabaseConfig

    window = 64 << 10
    runner = LeasedSparkRunner(spark, lease_seconds=0.0, channel_window=window, connect_timeout=60.0)
    config = DatabaseConfig(runner="spark", barrier_interval=3600, parallelism=2, background_compaction=False)
    db = Database(tmp_path / "db", spark=spark, config=config, runner=runner)
    try:
        db.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)")
        db.execute("CREATE TABLE names (v BIGINT PRIMARY KEY, name VARCHAR)")
        db.execute("CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n FROM t GROUP BY v")
        # one stage's output (the aggregation) joined with another's (a table): its input
        # arrives out of order, so the tiny windows fill
        db.execute(
            "CREATE MATERIALIZED VIEW j AS SELECT m.v, m.n, names.name FROM m JOIN names ON m.v = names.v"
        )
        db.execute("INSERT INTO names SELECT g, 'n' || g FROM generate_series(0, 999) AS g; FLUSH")
        first = len(db.barriers.stats)
        db.execute("INSERT INTO t SELECT g, g % 1000 FROM generate_series(1, 200000) AS g; FLUSH")
        (st,) = [x for x in db.barriers.stats[first:] if x.rows_in > 0]
        assert runner.leased_epochs > 0 and st.channels
        pairs = {(c.sender, c.receiver) for c in st.channels}
        assert {(0, 1), (1, 0)} <= pairs  # hash exchange: each slot's table rows reach both
        # 200K table rows into the aggregation, its first-epoch groups (1000) into the MV
        assert sum(c.rows for c in st.channels) >= 200_000
        assert sum(c.wire_bytes for c in st.channels if c.sender != c.receiver) == st.peer_exchange_bytes
        assert all(c.bytes > 0 and c.elements > 0 for c in st.channels if c.rows)
        assert all(c.peak_bytes <= window + runner.largest_element for c in st.channels)
        # the per-channel counters are the runner's totals, split (back-pressure: credit waits
        # and spills; `test_channel_counters_show_what_crossed_and_the_back_pressure`)
        every = [c for x in db.barriers.stats for c in x.channels]
        assert sum(c.credit_waits for c in every) == runner.credit_waits
        assert sum(c.spilled_bytes for c in every) == runner.spilled_bytes
        assert max(c.peak_bytes for c in every) == runner.peak_link_bytes > 0
        got = sorted(tuple(r) for r in db.session().execute_one("SELECT v, n FROM m").rows)
        assert got == [(v, 200) for v in range(1000)]
    finally:
        db.close()
        runner.close()


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
        decode_peers(b'{"format": 1, "peers": []}')  # a table without the links' window
    with pytest.raises(MalformedPayload):
        decode_peers(b'{"format": 2, "peers": [], "window": 0}')
    assert decode_peers(encode_peers([("127.0.0.1", 5)], 4096)) == ([("127.0.0.1", 5)], 4096)
    with pytest.raises(MalformedPayload):
        decode_peers(b"\x80not json")


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["spark-leased", "spark"])
def test_the_plan_body_crosses_once_and_a_new_mv_is_picked_up(spark, tmp_path, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 27's control traffic: the leased runner sends a plan's body to a worker once (on
    one long lease, and across the one-job-per-epoch leases of runner "spark", whose tasks run
    in the same Python workers), so an empty epoch's driver traffic is far below the body's
    size; a CREATE MATERIALIZED VIEW between epochs changes the body, which is sent again and
    used: the new MV equals its query, and later writes reach both MVs."""
    from piestream.runtime.epoch_plan import encode_plan_body
    from piestream.runtime.lease_task import BODY
    from piestream.runtime.leased import LeasedSparkRunner
    from piestream.server.database import Database, DatabaseConfig

    lease = 600.0 if kind == "spark-leased" else 0.0
    runner = LeasedSparkRunner(
        spark, lease_seconds=lease, idle_seconds=30.0, connect_timeout=60.0, retry_seconds=0.0
    )
    bodies: list[bytes] = []  # digest of every BODY frame the driver sent
    sizes: list[int] = []  # the plan body's size, per epoch
    frames_of = runner._plans.frames

    def frames(plan, held, run, dml):  # type: ignore[no-untyped-def]
        out, now = frames_of(plan, held, run, dml)
        bodies.extend(bytes(f[1]) for f in out if f[0] == BODY)
        sizes.append(len(encode_plan_body(plan)[0]))
        return out, now

    runner._plans.frames = frames  # type: ignore[method-assign]
    config = DatabaseConfig(runner=kind, barrier_interval=3600, parallelism=2, background_compaction=False)
    db = Database(tmp_path / "db", spark=spark, config=config, runner=runner)
    try:
        db.execute("CREATE TABLE a (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
        db.execute("CREATE MATERIALIZED VIEW m1 AS SELECT g, count(*) AS n FROM a GROUP BY g")
        db.execute("INSERT INTO a SELECT g, g % 7, g FROM generate_series(1, 500) AS g; FLUSH")
        for _ in range(3):  # the leases' workers have the body now
            db.execute("FLUSH")
        before, first = len(bodies), len(db.barriers.stats)
        for _ in range(12):
            db.execute("FLUSH")
        empty = db.barriers.stats[first:]
        assert len(empty) == 12 and runner.leased_epochs >= 12
        sent = len(bodies) - before
        # one long lease: never again; a lease per epoch: only to a worker that never had it
        assert sent == 0 if kind == "spark-leased" else sent < len(empty)
        # with the body in every epoch it would be at least twice its size (two tasks)
        wire = sorted(s.driver_wire_bytes for s in empty)
        assert 0 < wire[len(wire) // 2] < sizes[-1]
        digests = set(bodies)
        db.execute("CREATE MATERIALIZED VIEW m2 AS SELECT g, sum(v) AS s FROM a WHERE v % 2 = 0 GROUP BY g")
        assert set(bodies) - digests, "the changed plan's body was not sent"
        db.execute("INSERT INTO a SELECT g, g % 7, g FROM generate_series(501, 700) AS g; FLUSH")
        s = db.session()
        got1 = sorted(tuple(r) for r in s.execute_one("SELECT g, n FROM m1").rows)
        got2 = sorted(tuple(r) for r in s.execute_one("SELECT g, s FROM m2").rows)
        assert got1 == sorted(tuple(r) for r in s.execute_one("SELECT g, count(*) FROM a GROUP BY g").rows)
        want2 = "SELECT g, sum(v) FROM a WHERE v % 2 = 0 GROUP BY g"
        assert got2 == sorted(tuple(r) for r in s.execute_one(want2).rows)
        assert got1 == sorted(Counter(g % 7 for g in range(1, 701)).items())
    finally:
        db.close()
        runner.close()
