"""The task side of a leased Spark job, and the commands on its wire to the driver
(`runtime.leased`): authenticated frames (`runtime.wire`); the plan as versioned JSON, its body
(jobs, stages, config) once per worker process while its digest holds and per epoch only its
epochs and version, the SSTs the worker already holds as their ids (`PlanSender`, `WorkerPlan`;
the hello says what the worker holds); elements as the exchange's own bytes with their destination.
Nothing read from the socket is unpickled; the per-job key and the connector registry (code)
come in the task's closure.

By default (exchange "direct") the driver sends a task the epoch's plan (as above) and its stage-0 DML
(in frames the task reads as its actors take them: `DmlStream`), and the task runs its
partition of every stage itself, each actor fed while its input arrives, its output going
straight to the tasks that run the downstream actors over bounded channels
(`runtime.data_plane`); it answers once, with its actors' reports and its channels' stats.
With exchange "driver" the driver runs the stages one by one (`RUN_STAGE`) and routes each
stage's output (`OUT`) itself."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import socket
import struct
import time
import traceback
import zlib
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from piestream.common.chunk import StreamChunk
from piestream.common.errors import InternalError
from piestream.plan.fragment import actor_id
from piestream.plan.node import DmlNode, ExchangeNode
from piestream.runtime.actor_task import PortInputs, TaskHook, run_actors, run_partition
from piestream.runtime.data_plane import (
    COUNT,
    ChannelStats,
    PeerAborted,
    PeerLost,
    PeerMesh,
    decode_channels,
    decode_peers,
    stage_of,
)
from piestream.runtime.epoch_plan import (
    PLAN_DIGEST_BYTES,
    EpochPlan,
    PlanBody,
    decode_plan,
    decode_plan_body,
    decode_plan_epoch,
    encode_plan_body,
    encode_plan_epoch,
)
from piestream.runtime.exchange import (
    REPORT,
    ActorFailed,
    Element,
    MalformedPayload,
    chunk_header,
    decode_chunk,
    decode_elements,
    encode_elements,
    encode_failure,
    is_failure,
)
from piestream.runtime.link_tls import LinkTls
from piestream.runtime.runners import worker_gc_checkpoint
from piestream.runtime.wire import FROM_TASK, Channel, FrameRejected
from piestream.storage.hummock.version import HummockVersion, SstableInfo
from piestream.stream.connector import Connectors

log = logging.getLogger(__name__)

#: the hook point a leased task calls (with the last plan and actor id -1) as it ends, after
#: the `actor_task.HOOK_POINTS` of its epochs (tests: a task that is slow to end)
LEASE_END = "lease-end"
STORE_DIGEST_BYTES = 8  # a store's url in a hello: a digest, so it says nothing of the path
CONNECT_TIMEOUT = 10.0  # every slot's task must say hello within this, or the epoch runs plain

#: the hello's format: (wire version, slot, pid, address family (4 or 6), the data plane's
#: address (packed, 16 bytes) and port); a driver refuses any other version
#: 4: the plan's body once per worker (`PlanSender`), the hello says what it holds; DONE with
#: per-channel counters and its reports compressed
WIRE_VERSION = 4
HELLO = struct.Struct(f"<BqqB16sH{PLAN_DIGEST_BYTES}s{STORE_DIGEST_BYTES}sq")
STAGE = struct.Struct("<I")
#: a run's data-plane channels: credit waits, bytes spilled, the most bytes a link held, the
#: largest element
CHANNEL_STATS = struct.Struct("<QQQQ")
RUN_FRAMES = struct.Struct("<QQ")  # an EPOCH's run and the number of DML frames after it

# frames: driver -> task
PEERS = b"T"  # + data_plane.encode_peers: every slot's data-plane address (once per lease)
PLAN = b"P"  # + encode_plan bytes (exchange "driver")
BODY = b"B"  # + digest + compressed encode_plan_body bytes: the plan's body, kept by the worker
EPOCH = b"E"  # + run + DML frame count + body digest + compressed encode_plan_epoch: run this
# slot's partitions of every stage of that plan, ...
DML = b"M"  # + elements: ... over the stage-0 input of that many frames that follow it
RUN_STAGE = b"R"  # + stage + elements: run this slot's partition of the stage over them
STOP = b"S"
# task -> driver
DONE = b"D"  # + bytes sent to peers + CHANNEL_STATS + per-channel counters + compressed
# elements: the reports of an EPOCH (`Done`)
OUT = b"O"  # + elements: a RUN_STAGE partition's output
FAILED = b"F"  # + encode_failure bytes: an actor failed (not a data error)
ABORTED = b"A"  # + text: a peer gave the run up (its own answer says why)
LOST = b"L"  # + text: a data-plane link broke: the lease ends
CRASHED = b"X"  # + traceback text: anything else went wrong in the task


@dataclass(frozen=True)
class HeldPlan:
    """What a task's worker process holds of earlier plans (its hello says it): the digest of
    the plan body it keeps, and the store and id of the version whose SSTs it keeps."""

    digest: bytes = bytes(PLAN_DIGEST_BYTES)
    store: bytes = bytes(STORE_DIGEST_BYTES)
    version_id: int = -1


NOTHING_HELD = HeldPlan()


def store_digest(store_url: str) -> bytes:
    return hashlib.sha256(store_url.encode()).digest()[:STORE_DIGEST_BYTES]


def pack_hello(slot: int, pid: int, host: str, port: int, held: HeldPlan = NOTHING_HELD) -> bytes:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = socket.inet_pton(family, host)
    fam = 6 if family == socket.AF_INET6 else 4
    return HELLO.pack(
        WIRE_VERSION, slot, pid, fam, addr.ljust(16, b"\0"), port, held.digest, held.store, held.version_id
    )


def unpack_hello(body: bytes | bytearray) -> tuple[int, int, int, tuple[str, int], HeldPlan]:
    """(version, slot, pid, data-plane address, what the worker holds); struct.error or
    ValueError if garbage."""
    version, slot, pid, family, addr, port, digest, store, version_id = HELLO.unpack(body)
    if family == 4:
        host = socket.inet_ntop(socket.AF_INET, addr[:4])
    elif family == 6:
        host = socket.inet_ntop(socket.AF_INET6, addr)
    else:
        raise ValueError(f"address family {family}")
    return version, slot, pid, (host, port), HeldPlan(digest, store, version_id)


# -- the plan, once per worker ----------------------------------------------------------------


class PlanSender:
    """The driver's side of sending plans (one per runner): per task, the plan's body only when
    the task's worker does not hold it (its hello says which it holds, and the driver knows
    what it sent since), and of the epoch's version in full only the SSTs the worker does not
    hold (it keeps those of the last version it got). An empty epoch then costs a few hundred
    bytes of plan, not the whole plan (issue 27: control traffic per epoch).

    A worker that is told to use what it does not hold (a bug, or a version id another driver
    sent it) ends the lease; its next hello says it holds nothing."""

    def __init__(self, versions: int = 32) -> None:
        self._versions: OrderedDict[tuple[bytes, int], frozenset[int]] = OrderedDict()
        self._max = versions
        # the fields the body encodes (`body_key`), the body, its compressed bytes, its digest
        self._body: tuple[tuple[Any, ...], bytes, bytes, bytes] | None = None
        self._plan: EpochPlan | None = None  # the plan `_epoch` is of
        self._epoch: dict[frozenset[int] | None, bytes] = {}  # the plan's epoch part, by SSTs held

    def frames(
        self, plan: EpochPlan, held: HeldPlan, run: int, dml: int
    ) -> tuple[list[tuple[bytes, ...]], HeldPlan]:
        """The frames of `run` (with `dml` DML frames after it) for a task holding `held`, and
        what it holds once it has read them."""
        if self._plan is not plan:
            self._plan, self._epoch = plan, {}
            self._remember(store_digest(plan.store_url), plan.version)
            # every epoch's plan is a new object, but its body only changes with the jobs (DDL,
            # rescaling), the config or the slots: compared by value, not encoded and hashed
            # again each epoch (issue 27's empty epoch)
            key = body_key(plan)
            if self._body is None or self._body[0] != key:
                body, digest = encode_plan_body(plan)
                self._body = (key, body, compress(body), digest)
        assert self._body is not None
        _, _, packed, digest = self._body
        store = store_digest(plan.store_url)
        known = self._versions.get((store, held.version_id)) if held.store == store else None
        epoch = self._epoch.get(known)
        if epoch is None:
            epoch = self._epoch[known] = compress(encode_plan_epoch(plan, known or frozenset()))
        out: list[tuple[bytes, ...]] = []
        if held.digest != digest:
            out.append((BODY, digest, packed))
        out.append((EPOCH, RUN_FRAMES.pack(run, dml), digest, epoch))
        return out, HeldPlan(digest, store, plan.version.id)

    def _remember(self, store: bytes, version: HummockVersion) -> None:
        key = (store, version.id)
        self._versions[key] = frozenset(s.object_id for s in version.all_ssts())
        self._versions.move_to_end(key)
        while len(self._versions) > self._max:
            self._versions.popitem(last=False)


def body_key(plan: EpochPlan) -> tuple[Any, ...]:
    """The fields `encode_plan_body` encodes (`epoch_plan._body_doc`): two plans whose keys are
    equal have the same body and digest (the fragments in order: the body lists them so)."""
    return (
        tuple(plan.fragments.items()),
        plan.stages,
        plan.store_url,
        plan.config,
        plan.storage_options,
        plan.task_slots,
        plan.roots,
    )


class WorkerPlan:
    """The task's side (one per worker process, so it outlives a lease): the last plan body it
    got, and the SSTs of the last version, by object id."""

    def __init__(self) -> None:
        self.body: PlanBody | None = None
        self.store = NOTHING_HELD.store
        self.version_id = NOTHING_HELD.version_id
        self.ssts: dict[int, SstableInfo] = {}

    def held(self) -> HeldPlan:
        digest = self.body.digest if self.body is not None else NOTHING_HELD.digest
        return HeldPlan(digest, self.store, self.version_id)

    def forget(self) -> None:
        self.__init__()  # type: ignore[misc]

    def take_body(self, frame: bytearray) -> None:
        """A BODY frame; `MalformedPayload` if it is not one."""
        view = memoryview(frame)
        body = decompress(view[1 + PLAN_DIGEST_BYTES :])
        self.body = decode_plan_body(body, bytes(view[1 : 1 + PLAN_DIGEST_BYTES]))

    def plan_of(self, frame: bytearray, connectors: Connectors) -> EpochPlan:
        """An EPOCH frame's plan; `MalformedPayload` if it names a body or SSTs not held here."""
        at = 1 + RUN_FRAMES.size
        digest = bytes(frame[at : at + PLAN_DIGEST_BYTES])
        if self.body is None or self.body.digest != digest:
            raise MalformedPayload("an epoch of a plan body this worker does not hold")
        doc = decompress(memoryview(frame)[at + PLAN_DIGEST_BYTES :])
        plan = decode_plan_epoch(doc, self.body, self.ssts, connectors)
        self.store = store_digest(plan.store_url)
        self.version_id = plan.version.id
        self.ssts = {s.object_id: s for s in plan.version.all_ssts()}
        return plan


#: this worker process's plans (a module global: the worker runs one task at a time)
WORKER_PLAN = WorkerPlan()


#: the most bytes a compressed body or answer may inflate to (more is garbage, not a frame)
MAX_INFLATED = 1 << 30


def compress(data: bytes) -> bytes:
    """Plan bodies and reports on the wire: JSON of repeated names, a few times smaller."""
    return zlib.compress(data, 1)


def decompress(data: bytes | bytearray | memoryview) -> bytes:
    """What `compress` wrote (never more than `MAX_INFLATED`); else `MalformedPayload`."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, MAX_INFLATED)
    except zlib.error as e:
        raise MalformedPayload(f"malformed compressed payload: {e}") from None
    if d.unconsumed_tail or d.unused_data or not d.eof:
        raise MalformedPayload("a compressed payload cut short, too large or with bytes after it")
    return out


@dataclass(frozen=True)
class Done:
    """A task's answer to an EPOCH: bytes it sent its peers, its data plane's counters (all
    channels together: credit waits, bytes spilled, the most one link held, the largest
    element; then per channel), and its actors' reports."""

    peer_bytes: int
    credit_waits: int
    spilled_bytes: int
    peak_link_bytes: int
    largest_element: int
    incoming: list[ChannelStats]
    outgoing: dict[tuple[int, int], tuple[int, int]]
    elements: list[Element]


def parse_done(slot: int, reply: bytearray) -> Done:
    """Slot `slot`'s DONE frame; `MalformedPayload` if it is not one."""
    try:
        (sent,) = COUNT.unpack_from(reply, 1)
        waits, spilled, peak, largest = CHANNEL_STATS.unpack_from(reply, 1 + COUNT.size)
    except struct.error as e:
        raise MalformedPayload(f"malformed answer: {e}") from None
    incoming, outgoing, at = decode_channels(slot, reply, 1 + COUNT.size + CHANNEL_STATS.size)
    elements = decode_elements(decompress(memoryview(reply)[at:]))
    return Done(sent, waits, spilled, peak, largest, incoming, outgoing, elements)


# -- the task -----------------------------------------------------------------------------------


def lease_task(
    host: str,
    port: int,
    key: bytes,
    slot: int,
    hook: TaskHook | None,
    connectors: Connectors,
    tls: LinkTls | None = None,
) -> Any:
    """The long-lived task of `slot` (a module function with bound arguments: Spark pickles it
    by reference, not the module's globals by value); with `tls`, its data-plane links are TLS."""
    return functools.partial(lease_loop, host, port, key, slot, hook, connectors, tls=tls)


def lease_loop(
    host: str,
    port: int,
    key: bytes,
    slot: int,
    hook: TaskHook | None,
    connectors: Connectors,
    it: Iterable[Any],
    *,
    tls: LinkTls | None = None,
) -> list[tuple[int, int, int]]:
    """Connect, say hello, run commands until told to stop or the driver goes away (either way
    the task ends normally, so Spark keeps its Python worker)."""
    for _ in it:  # exhaust the input: the worker stays reusable
        pass
    worker_gc_checkpoint()
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except OSError:  # the driver closed its listener (runner closed) before this task started
        return [(slot, os.getpid(), 0)]
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)
    chan = Channel(sock, key, FROM_TASK, peer=f"the driver at {host}:{port}")
    plan: EpochPlan | None = None  # the via-driver path's plan (PLAN, then RUN_STAGE frames)
    last: EpochPlan | None = None  # the last plan run, either path: the LEASE_END hook's
    runs = 0
    try:
        # the data plane listens on the address this connection leaves from: it routes
        mesh = PeerMesh(key, slot, sock.getsockname()[0], tls)
    except OSError:
        chan.close()
        raise
    try:
        chan.send(pack_hello(slot, os.getpid(), mesh.host, mesh.port, WORKER_PLAN.held()))
        while True:
            try:
                frame = chan.recv()
            except FrameRejected:
                break  # logged by the channel; the driver sees the connection close
            except (EOFError, OSError):
                break  # the lease ended (or the driver went away)
            kind = frame[:1]
            if kind == STOP:
                break
            if kind == PLAN:
                try:
                    plan = decode_plan(memoryview(frame)[1:], connectors)
                except MalformedPayload as e:  # authentic but not a plan: a driver bug
                    log.error("slot %d: %s; ending the lease", slot, e)
                    break
                continue
            if kind == PEERS:
                try:
                    mesh.connect(*decode_peers(memoryview(frame)[1:]))
                except MalformedPayload as e:
                    log.error("slot %d: %s; ending the lease", slot, e)
                    break
                continue
            if kind == BODY:
                try:
                    WORKER_PLAN.take_body(frame)
                except MalformedPayload as e:
                    log.error("slot %d: %s; ending the lease", slot, e)
                    WORKER_PLAN.forget()
                    break
                continue
            if kind == EPOCH:
                try:
                    epoch_plan = WORKER_PLAN.plan_of(frame, connectors)
                except MalformedPayload as e:  # the driver thought this worker held more
                    log.error("slot %d: %s; ending the lease", slot, e)
                    WORKER_PLAN.forget()  # the next hello says so
                    break
                runs += 1
                last = epoch_plan
                chan.send(*_epoch(epoch_plan, slot, frame, mesh, hook, chan))
                continue
            if kind != RUN_STAGE or plan is None:
                break
            (stage,) = STAGE.unpack_from(frame, 1)
            try:
                elements = decode_elements(frame, 1 + STAGE.size)
                del frame
                out = list(run_partition(plan, stage, slot, elements, hook))
                reply = [OUT, encode_elements(out)]
            except Exception as e:
                if isinstance(e, ActorFailed):
                    reply = [FAILED, encode_failure(e)]
                else:
                    reply = [CRASHED, traceback.format_exc().encode()]
            runs += 1
            last = plan
            chan.send(*reply)
    finally:
        if hook is not None and last is not None:
            with contextlib.suppress(Exception):  # the task ends normally whatever it does
                hook(LEASE_END, last, -1)
        chan.close()
        # the mesh's accept loop would only see `close` at its next poll (up to 0.2 s): this
        # task's end, and so the next epoch's job (`LeasedSparkRunner._submit_lease`), would
        # wait that long. A shut-down listener wakes it at once.
        with contextlib.suppress(OSError):
            mesh.listener.shutdown(socket.SHUT_RDWR)
        mesh.close()
    return [(slot, os.getpid(), runs)]


def _epoch(
    plan: EpochPlan, slot: int, frame: bytearray, mesh: PeerMesh, hook: TaskHook | None, control: Channel
) -> list[bytes]:
    """Run an EPOCH command: this slot's partitions of every stage; the answer's frame parts."""
    run, frames = RUN_FRAMES.unpack_from(frame, 1)
    mesh.begin(run)  # what a failed earlier run left is dropped; the channel counters restart
    sent = mesh.bytes_sent
    dml = DmlStream(control, frames)
    try:
        reports = run_direct(plan, slot, run, dml, mesh, hook, control)
        stats = CHANNEL_STATS.pack(
            mesh.credit_waits, mesh.spilled_bytes, mesh.peak_link_bytes, mesh.largest_element
        )
        channels = mesh.channel_counters(run)
        return [DONE, COUNT.pack(mesh.bytes_sent - sent), stats, channels, compress(encode_elements(reports))]
    except Exception as e:
        mesh.abort(run)  # no peer waits for an END of this run that never comes
        mesh.idle()
        with contextlib.suppress(Exception):  # the wire stays in step (a broken one is lost)
            dml.drain()
        if isinstance(e, ActorFailed):
            return [FAILED, encode_failure(e)]
        if isinstance(e, PeerAborted):
            return [ABORTED, str(e).encode()]
        if isinstance(e, PeerLost):
            return [LOST, str(e).encode()]
        return [CRASHED, traceback.format_exc().encode()]


class DmlStream:
    """An EPOCH's stage-0 input: the driver's DML frames, read from its connection as this
    slot's stage-0 actors take them (the driver sends them in that order: by actor, then port,
    then sequence), so a bulk epoch is never held whole here; TCP holds the driver back."""

    def __init__(self, control: Channel, frames: int) -> None:
        self.control = control
        self.left = frames
        self.buf: deque[Element] = deque()

    def _next(self) -> Element | None:
        while not self.buf and self.left:
            frame = self.control.recv()
            self.left -= 1
            if frame[:1] != DML:
                raise MalformedPayload(f"a frame of kind {bytes(frame[:1])!r} among an epoch's DML")
            self.buf.extend(decode_elements(frame, 1))
        return self.buf[0] if self.buf else None

    def take(self, dest: tuple[int, ...], port: str) -> Iterator[StreamChunk]:
        """`dest`'s DML on `port`, in sequence order, as it arrives."""
        last = -1
        while (head := self._next()) is not None and tuple(head[0]) == dest:
            env_port, _, seq = chunk_header(head[1])
            if env_port != port:
                return
            if seq <= last:
                raise InternalError(f"DML for {dest} out of order: {seq} after {last}")
            last = seq
            self.buf.popleft()
            yield decode_chunk(head[1]).chunk

    def finish(self, slot: int, strict: bool = True) -> None:
        """Stage 0 is done: the rest is read (the wire stays in step); none may be left if
        `strict` (with a failed actor, its partition-mates' DML is)."""
        head = self._next()
        self.drain()
        if head is not None and strict:
            raise InternalError(f"slot {slot}: DML for {head[0]}, which no stage-0 actor here took")

    def drain(self) -> None:
        self.buf.clear()
        while self.left:
            self.control.recv()
            self.left -= 1


def run_direct(
    plan: EpochPlan,
    slot: int,
    run: int,
    dml: DmlStream,
    mesh: PeerMesh,
    hook: TaskHook | None,
    control: Channel,
) -> list[Element]:
    """This slot's partition of every stage it has one in (partition p of a stage runs in slot
    p), in stage order. Each actor is fed while its input arrives (`PeerMesh.pull`, in the
    deterministic order); its output goes, as it is produced, straight to the slots running
    the destination actors (this slot's own through its local spools). Returns the actors'
    reports (for the driver)."""
    where = stage_of(plan)
    runners = [plan.num_partitions(s) for s in range(len(plan.stages))]
    reports: list[Element] = []

    def inputs_of(me: tuple[int, int]) -> PortInputs:
        return streamed_inputs(plan, me, slot, run, where, mesh, control, dml)

    failed = False  # an actor's data error: the epoch fails with it (its report), the rest runs
    for s, n in enumerate(runners):
        if slot >= n:
            continue
        sender = mesh.sender(run, s)
        mine = plan.actors_of_partition(s, slot)
        for dest, payload in run_actors(plan, mine, inputs_of, hook, time.perf_counter()):
            dest = tuple(dest)
            if dest == REPORT:
                reports.append((dest, payload))
                failed = failed or is_failure(payload)
                continue
            loc = where.get(dest)
            if loc is None or loc[0] < s or (loc[0] == s and loc[1] != slot):
                raise InternalError(f"stage {s} emitted an element for {dest}, no later actor runs")
            if loc[1] == slot:  # a later stage's actor here, or a fused one of this stage
                mesh.put_local(run, dest, payload)
            else:
                sender.add(loc[1], (dest, payload))
        mesh.idle()
        later = max(runners[s + 1 :], default=0)
        sender.end([q for q in range(later) if q != slot])
        if s == 0:
            dml.finish(slot, strict=not failed)
    dml.finish(slot, strict=not failed)
    left = mesh.leftover(run)
    if left and not failed:  # a failed actor's partition-mates did not run: their input waits
        raise InternalError(f"slot {slot}: input no actor took (run, actor, source): {left[:5]}")
    return reports


def streamed_inputs(
    plan: EpochPlan,
    me: tuple[int, int],
    slot: int,
    run: int,
    where: dict[tuple[int, ...], tuple[int, int]],
    mesh: PeerMesh,
    control: Channel,
    dml: DmlStream,
) -> PortInputs:
    """Actor `me`'s input in the deterministic order (`actor_task.PortInputs`): ports by name;
    within a port the driver's DML (source -1) first, then every upstream actor in ascending
    id, each group as it arrives (from the driver's connection, this slot's spools or a peer's
    link), checked to be in sequence order."""
    frag = plan.fragment(me[0])
    stage = where[me][0]
    groups: dict[str, list[tuple[int, tuple[int, int] | None]]] = {}
    dml_ports: set[str] = set()
    for node in frag.root.walk():
        if isinstance(node, DmlNode):
            dml_ports.add(node.port)
        if not isinstance(node, ExchangeNode) or node.port in groups:
            continue
        up = node.upstream_fragment_id
        sources = groups[node.port] = []
        if up not in plan.fragments:
            continue
        for j in range(plan.fragment(up).parallelism):
            loc = where.get((up, j))
            if loc is None:
                continue
            if loc[1] == slot:  # an actor on this slot ran earlier: its output is filed
                sources.append((actor_id(up, j), None))
            elif loc[0] < stage:  # a peer's earlier stage: complete at its END(slot, stage)
                sources.append((actor_id(up, j), (loc[1], loc[0])))
            # else: another slot's actor of this stage, over a no-shuffle edge: never sends here
    for port in sorted({*groups, *dml_ports}):
        own = dml.take(me, port) if port in dml_ports else iter(())
        sources = sorted(groups.get(port, []))
        yield port, _port_chunks(own, sources, port, me, run, mesh, control)


def _port_chunks(
    dml: Iterable[StreamChunk],
    sources: list[tuple[int, tuple[int, int] | None]],
    port: str,
    me: tuple[int, int],
    run: int,
    mesh: PeerMesh,
    control: Channel,
) -> Iterator[StreamChunk]:
    yield from dml
    for source, end in sources:
        last = -1
        link = mesh.slot if end is None else end[0]
        for payload in mesh.pull(run, me, source, end, control):  # per chunk, not per row
            env = decode_chunk(payload)
            mesh.count_rows(run, link, env.chunk.cardinality)
            if env.port != port or env.seq <= last:
                raise InternalError(
                    f"actor {me}: chunk {env.seq} of {source} on port {env.port!r} after {last} on {port!r}"
                )
            last = env.seq
            yield env.chunk
