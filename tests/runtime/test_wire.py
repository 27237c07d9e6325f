"""The leased runner's wire (`runtime.wire`) and what crosses it (`exchange`, `encode_plan`):
authenticated frames (a forged, replayed, reflected or oversized frame is dropped and its
connection closed), and versioned data, never pickles, that round-trips exactly and refuses
garbage with `MalformedPayload`."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
from collections.abc import Iterator

import pytest
from tests.runtime.graph_fixtures import table_and_mv

from piestream.common.epoch import EpochPair
from piestream.common.errors import DivisionByZero
from piestream.plan.serde import encode_fragment
from piestream.runtime.epoch_plan import EpochPlan, decode_plan, encode_plan, plan_epoch
from piestream.runtime.exchange import (
    ActorFailed,
    ActorReport,
    MalformedPayload,
    decode_elements,
    decode_failure,
    decode_report,
    encode_elements,
    encode_failure,
    encode_report,
)
from piestream.runtime.lease_task import (
    BODY,
    EPOCH,
    HELLO,
    NOTHING_HELD,
    WIRE_VERSION,
    HeldPlan,
    PlanSender,
    WorkerPlan,
    compress,
    decompress,
    pack_hello,
    unpack_hello,
)
from piestream.runtime.wire import FROM_DRIVER, FROM_TASK, LEN, MAC_BYTES, Channel, FrameRejected, new_key
from piestream.storage.hummock.shared_buffer import StorageOptions
from piestream.storage.hummock.version import HummockVersion, Level, SstableInfo, TableWatermark
from piestream.stream.connector import registered_connectors
from piestream.stream.errors import StreamErrorRecord
from piestream.stream.executor import StreamingConfig
from piestream.stream.message import Barrier, BarrierKind


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel, socket.socket, socket.socket]]:
    """A driver's and a task's channel over a socket pair, and the raw sockets."""
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    key = new_key()
    yield Channel(a, key, FROM_DRIVER, "task"), Channel(b, key, FROM_TASK, "driver"), a, b
    a.close()
    b.close()


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.fileno() == -1 or sock.recv(1) == b""
    except OSError:
        return True


def test_frames_round_trip_in_order(pair) -> None:  # type: ignore[no-untyped-def]
    driver, task, _, _ = pair
    task.send(b"hello")
    driver.send(b"P", b"x" * 20_000)
    driver.send(b"R")
    assert driver.recv() == b"hello"
    assert task.recv() == b"P" + b"x" * 20_000
    assert task.recv() == b"R"
    assert driver.bytes_sent == 2 * (LEN.size + MAC_BYTES) + 20_002


def test_a_forged_frame_is_dropped_logged_and_closes_the_connection(pair, caplog) -> None:  # type: ignore[no-untyped-def]
    driver, _, raw_driver, raw_task = pair
    frame = bytearray(LEN.pack(5) + b"\0" * MAC_BYTES + b"hello")  # a MAC nobody computed
    raw_task.sendall(frame)
    with caplog.at_level(logging.WARNING, logger="piestream.runtime.wire"), pytest.raises(FrameRejected):
        driver.recv()
    assert "HMAC" in caplog.text
    assert raw_driver.fileno() == -1  # closed by the driver's side
    assert _closed(raw_task)


def test_a_frame_altered_on_the_way_does_not_verify(pair) -> None:  # type: ignore[no-untyped-def]
    driver, _, _, raw_task = pair
    honest = Channel(socket.socket(), driver._key, FROM_TASK)  # the task's MAC, captured
    honest.sock.close()
    body = b"O" + encode_elements([((-1,), b"report")])
    mac = honest._mac(FROM_TASK, 0, (body,))
    tampered = bytearray(body)
    tampered[-1] ^= 1
    raw_task.sendall(LEN.pack(len(body)) + mac + bytes(tampered))
    with pytest.raises(FrameRejected):
        driver.recv()


def test_replayed_and_reflected_frames_do_not_verify() -> None:
    key = new_key()
    socks: list[socket.socket] = []

    def pipe() -> tuple[socket.socket, socket.socket]:
        a, b = socket.socketpair()
        socks.extend((a, b))
        return a, b

    try:
        # replay: a task's frame captured and sent twice (its sequence number is in the MAC)
        a, b = pipe()
        Channel(a, key, FROM_TASK).send(b"OUT")
        frame = b.recv(1 << 16)
        c, d = pipe()
        c.sendall(frame + frame)
        driver = Channel(d, key, FROM_DRIVER)
        assert driver.recv() == b"OUT"
        with pytest.raises(FrameRejected):
            driver.recv()
        # reflection: a driver's frame sent back to the driver (the direction is in the MAC)
        e, f = pipe()
        drv = Channel(e, key, FROM_DRIVER)
        drv.send(b"PLAN")
        f.sendall(f.recv(1 << 16))
        with pytest.raises(FrameRejected):
            drv.recv()
        # another job's key
        g, h = pipe()
        Channel(g, new_key(), FROM_TASK).send(b"hello")
        with pytest.raises(FrameRejected):
            Channel(h, key, FROM_DRIVER).recv()
    finally:
        for s in socks:
            s.close()


def test_an_oversized_or_unexpected_length_is_refused_before_its_body(pair) -> None:  # type: ignore[no-untyped-def]
    driver, task, _, raw_task = pair
    raw_task.sendall(LEN.pack(1 << 62))  # nothing follows: reading a body would wait forever
    with pytest.raises(FrameRejected, match="bytes"):
        driver.recv()
    a, b = socket.socketpair()
    Channel(a, task._key, FROM_TASK).send(b"x" * 40)
    with pytest.raises(FrameRejected):
        Channel(b, task._key, FROM_DRIVER).recv(exact=17)  # a hello has a fixed size
    a.close()
    b.close()


def _report() -> ActorReport:
    sst = SstableInfo(7, 1000, 900, b"\x00\x01lo", b"\x00\x01hi\xff", (1, 3), 10, 5 << 16, 6 << 16)
    wm = TableWatermark(6 << 16, ((0, 128, b"\x01\x02"), (128, 256, b"\x03")))
    err = StreamErrorRecord("EXPRESSION", 2, "Project", "22012", "division by zero", 3, "(1, 0)")
    stats = {"rows_in": 12.0, "cache_hits": 3.5}
    # global watermarks: memcomparable bytes, b"" for a filter table without one yet
    return ActorReport(65537, 6 << 16, (sst,), {3: wm}, stats, (err,), {5: b"\x81\x00\x02", 6: b""})


def test_a_report_round_trips_as_versioned_json() -> None:
    report = _report()
    data = encode_report(report)
    assert decode_report(data) == report
    doc = json.loads(data[1:])
    assert doc["format"] == 1 and doc["actor"] == 65537  # data, not a pickle
    assert decode_failure(data) is None
    empty = ActorReport(1, 2, ())
    assert decode_report(encode_report(empty)) == empty


def test_a_failure_round_trips_with_its_error() -> None:
    failed = ActorFailed(DivisionByZero("division by zero", detail="x = 0"), 3, 196609)
    got = decode_failure(encode_failure(failed))
    assert got is not None
    assert isinstance(got.error, DivisionByZero) and got.error.detail == "x = 0"
    assert (got.fragment_id, got.actor_id, got.error.sqlstate) == (3, 196609, "22012")


@pytest.mark.parametrize(
    "payload",
    [
        b"R",
        b"Rnot json",
        b'R{"format": 2, "actor": 1}',
        b'R{"format": 1, "actor": "1", "epoch": 1, "ssts": [], "watermarks": [], "stats": {}, "errors": []}',
        b'R{"format": 1, "actor": 1, "epoch": 1, "ssts": [{"id": 1}], "watermarks": [], "stats": {}, '
        b'"errors": []}',
        b"\x80\x04\x95 a pickle",
        b"Fgarbage",
        b'F{"format": 1, "fragment": 1, "actor": 2, "error": "no marker"}',
    ],
)
def test_garbage_reports_are_refused(payload: bytes) -> None:
    with pytest.raises(MalformedPayload):
        if payload[:1] == b"F":
            decode_failure(payload)
        else:
            decode_report(payload)


def test_garbage_elements_are_refused() -> None:
    good = encode_elements([((1, 0), b"abc"), ((-1,), b"R{}")])
    assert decode_elements(good) == [((1, 0), b"abc"), ((-1,), b"R{}")]
    for bad in (good[:-1], good + b"x", b"\xff\xff\xff\xff", b"\x01\x00\x00\x00\x09"):
        with pytest.raises(MalformedPayload):
            decode_elements(bad)


def test_an_epoch_plan_round_trips_without_its_connectors() -> None:
    fragments = table_and_mv(2)
    version = HummockVersion(
        9,
        l0=(Level(0, (_report().ssts[0],), 4),),
        table_committed_epoch={1: 5 << 16},
        max_committed_epoch=5 << 16,
        table_watermarks={3: _report().watermarks[3]},
    )
    from piestream.plan.fragment import StreamGraph

    plan = plan_epoch(
        StreamGraph({f.fragment_id: f for f in fragments}),
        {f.fragment_id: encode_fragment(f) for f in fragments},
        data_epoch=6 << 16,
        barrier=Barrier(EpochPair(7 << 16, 6 << 16), BarrierKind.BARRIER),
        committed_epoch=5 << 16,
        version=version,
        store_url="s3://bucket/prefix",
        config=StreamingConfig(chunk_size=17, strict_mode=True),
        storage_options=StorageOptions(block_size=4096, table_block_sizes=((3, 1024),)),
        global_watermarks={4: b"\x81\x07", 5: b""},
    )
    plan = dataclasses.replace(plan, task_slots=2, roots={2: 1})
    data = encode_plan(plan)
    assert json.loads(data)["format"] == 1
    assert decode_plan(data, plan.connectors) == plan
    assert decode_plan(data, registered_connectors()).fragment(2) == fragments[1]
    for bad in (data[:-1], b"[]", data.replace(b'"format":1', b'"format":9'), b"\x80\x04K\x01."):
        with pytest.raises(MalformedPayload):
            decode_plan(bad, plan.connectors)


def test_paused_sources_cross_the_plan_only_when_some_are_paused() -> None:
    """`StreamingConfig.paused_sources` is optional in the plan: omitted when empty (the plan
    format stays; a plan without it reads), carried when a source is paused."""
    from piestream.runtime.epoch_plan import _config_doc, _streaming_config

    plain = StreamingConfig(chunk_size=17)
    assert "paused_sources" not in _config_doc(plain)
    assert _streaming_config(json.loads(json.dumps(_config_doc(plain)))) == plain
    paused = StreamingConfig(chunk_size=17, paused_sources=("k", "s2"))
    doc = json.loads(json.dumps(_config_doc(paused)))
    assert doc["paused_sources"] == ["k", "s2"] and _streaming_config(doc) == paused


def _two_epochs() -> tuple[EpochPlan, EpochPlan]:
    """A plan and the next epoch's: the same jobs, one more SST."""
    fragments = table_and_mv(2)
    sst = _report().ssts[0]
    version = HummockVersion(9, l0=(Level(0, (sst,), 4),), max_committed_epoch=5 << 16)
    from piestream.plan.fragment import StreamGraph

    plan = plan_epoch(
        StreamGraph({f.fragment_id: f for f in fragments}),
        {f.fragment_id: encode_fragment(f) for f in fragments},
        data_epoch=6 << 16,
        barrier=Barrier(EpochPair(7 << 16, 6 << 16), BarrierKind.BARRIER),
        committed_epoch=5 << 16,
        version=version,
        store_url="s3://bucket/prefix",
    )
    newer = dataclasses.replace(sst, object_id=sst.object_id + 1)
    version2 = HummockVersion(
        10, l0=(Level(0, (newer,), 5), Level(0, (sst,), 4)), max_committed_epoch=6 << 16
    )
    plan2 = dataclasses.replace(
        plan,
        data_epoch=7 << 16,
        barrier=Barrier(EpochPair(8 << 16, 7 << 16), BarrierKind.BARRIER),
        committed_epoch=6 << 16,
        version=version2,
        global_watermarks={4: b"\x81\x09"},  # each epoch's part carries the epoch's
    )
    return plan, plan2


def _deliver(frames: list[tuple[bytes, ...]], worker: WorkerPlan) -> EpochPlan:
    """What a task does with an epoch's plan frames."""
    plan = None
    for parts in frames:
        frame = bytearray(b"".join(parts))
        if frame[:1] == BODY:
            worker.take_body(frame)
        else:
            assert frame[:1] == EPOCH
            plan = worker.plan_of(frame, registered_connectors())
    assert plan is not None
    return plan


def test_the_plan_body_goes_once_per_worker_and_held_ssts_as_ids() -> None:
    """`PlanSender`: a worker gets the plan's body once (while its digest holds) and of each
    epoch's version only the SSTs it does not hold; what it rebuilds is the plan, exactly."""
    plan, plan2 = _two_epochs()
    sender, worker = PlanSender(), WorkerPlan()
    frames, held = sender.frames(plan, worker.held(), run=1, dml=0)
    assert [f[0] for f in frames] == [BODY, EPOCH]
    assert _deliver(frames, worker) == plan
    assert worker.held() == held and held.version_id == 9
    # the next epoch: no body, the SST the worker holds as its id, the new one in full
    frames2, held2 = sender.frames(plan2, held, run=2, dml=3)
    assert [f[0] for f in frames2] == [EPOCH]
    doc = json.loads(decompress(frames2[0][-1]))
    l0 = [lv["ssts"] for lv in doc["version"]["l0"]]
    assert l0 == [[plan2.version.l0[0].ssts[0].to_json()], [plan.version.l0[0].ssts[0].object_id]]
    assert _deliver(frames2, worker) == plan2
    assert worker.held() == held2
    # changed jobs (a CREATE MATERIALIZED VIEW between epochs): a new body, picked up
    more = {**plan2.fragments, 99: plan2.fragments[1]}
    plan3 = dataclasses.replace(plan2, fragments=more)
    frames3, _ = sender.frames(plan3, held2, run=3, dml=0)
    assert [f[0] for f in frames3] == [BODY, EPOCH]
    assert _deliver(frames3, worker).fragments == more
    # a worker that holds nothing (a new Python worker) gets everything again
    assert [f[0] for f in sender.frames(plan3, NOTHING_HELD, run=4, dml=0)[0]] == [BODY, EPOCH]


def test_the_plan_body_is_encoded_again_only_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each epoch's plan is a new object: `PlanSender` encodes (and hashes) its body only when
    a field the body holds differs from the last one's, and a change of any of them (here the
    config, as a paused source makes it) sends a new body that the worker rebuilds."""
    from piestream.runtime import lease_task

    encoded: list[EpochPlan] = []
    encode = lease_task.encode_plan_body

    def counted(plan: EpochPlan) -> tuple[bytes, bytes]:
        encoded.append(plan)
        return encode(plan)

    monkeypatch.setattr(lease_task, "encode_plan_body", counted)
    plan, plan2 = _two_epochs()
    sender, worker = PlanSender(), WorkerPlan()
    frames, held = sender.frames(plan, worker.held(), run=1, dml=0)
    _deliver(frames, worker)
    copy = dataclasses.replace(plan2, fragments=dict(plan2.fragments), stages=tuple(plan2.stages))
    frames2, held2 = sender.frames(copy, held, run=2, dml=0)
    assert encoded == [plan] and [f[0] for f in frames2] == [EPOCH]
    assert _deliver(frames2, worker) == plan2
    paused = dataclasses.replace(plan2, config=dataclasses.replace(plan2.config, paused_sources=("s",)))
    frames3, _ = sender.frames(paused, held2, run=3, dml=0)
    assert encoded == [plan, paused] and [f[0] for f in frames3] == [BODY, EPOCH]
    assert _deliver(frames3, worker).config.paused_sources == ("s",)


def test_a_worker_refuses_plans_it_cannot_rebuild() -> None:
    """An EPOCH of a body the worker does not hold, an SST id it does not hold, or a body that
    does not match its digest raises `MalformedPayload` (the task then ends the lease, and its
    next hello says it holds nothing)."""
    plan, plan2 = _two_epochs()
    sender = PlanSender()
    frames, held = sender.frames(plan, NOTHING_HELD, run=1, dml=0)
    with pytest.raises(MalformedPayload, match="does not hold"):
        _deliver(frames[1:], WorkerPlan())  # the EPOCH without its BODY
    # the driver believes the worker holds version 9's SSTs; this one does not
    frames2, _ = sender.frames(plan2, held, run=2, dml=0)
    stranger = WorkerPlan()
    stranger.take_body(bytearray(b"".join(frames[0])))
    with pytest.raises(MalformedPayload, match="no SST"):
        _deliver(frames2, stranger)
    _, digest, packed = frames[0]
    altered = decompress(packed).replace(b'"task_slots":0', b'"task_slots":1')  # after its digest
    assert altered != decompress(packed)
    with pytest.raises(MalformedPayload, match="digest"):
        WorkerPlan().take_body(bytearray(BODY + digest + compress(altered)))


def test_the_hello_says_what_the_worker_holds() -> None:
    held = HeldPlan(b"d" * 32, b"s" * 8, 42)
    hello = pack_hello(3, 1234, "127.0.0.1", 5678, held)
    assert len(hello) == HELLO.size
    assert unpack_hello(hello) == (WIRE_VERSION, 3, 1234, ("127.0.0.1", 5678), held)
    assert unpack_hello(pack_hello(0, 1, "::1", 2))[4] == NOTHING_HELD


def test_an_answer_round_trips_and_garbage_is_refused() -> None:
    """A DONE answer: the data plane's counters, per channel, and its reports compressed; a
    cut, altered or oversized one raises `MalformedPayload` (the lease ends)."""
    from piestream.runtime.data_plane import COUNT, encode_channels
    from piestream.runtime.lease_task import CHANNEL_STATS, DONE, compress, decompress, parse_done

    class C:  # one incoming channel's counters, as a mesh keeps them
        rows, bytes, elements, credit_waits, credit_wait_ns, spilled, peak = 7, 700, 2, 1, 5_000_000, 0, 700

    reports = [((-1,), encode_report(_report()))]
    channels = encode_channels({0: C()}, {0: (900, 2_000_000)})  # type: ignore[dict-item]
    reply = bytearray(
        b"".join(
            [
                DONE,
                COUNT.pack(900),
                CHANNEL_STATS.pack(1, 0, 700, 400),
                channels,
                compress(encode_elements(reports)),
            ]
        )
    )
    done = parse_done(1, reply)
    assert (done.peer_bytes, done.credit_waits, done.peak_link_bytes, done.largest_element) == (
        900,
        1,
        700,
        400,
    )
    (c,) = done.incoming
    assert (c.sender, c.receiver, c.rows, c.bytes, c.credit_waits, c.credit_wait_s) == (
        0,
        1,
        7,
        700,
        1,
        0.005,
    )
    assert done.outgoing == {(1, 0): (900, 2_000_000)}
    assert done.elements == reports and decode_report(done.elements[0][1]) == _report()
    for bad in (reply[:-1], reply[:20], reply + b"x", reply[:-8] + b"\0" * 8):
        with pytest.raises(MalformedPayload):
            parse_done(1, bad)
    with pytest.raises(MalformedPayload):
        decompress(compress(b"x" * 100)[:-2])  # cut short
