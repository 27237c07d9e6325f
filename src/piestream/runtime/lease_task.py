"""The task side of a leased Spark job, and the commands on its wire to the driver
(`runtime.leased`): authenticated frames (`runtime.wire`); the plan as its versioned JSON once
per epoch (`epoch_plan.encode_plan`); elements as the exchange's own bytes with their destination.
Nothing read from the socket is unpickled; the per-job key and the connector registry (code)
come in the task's closure.

By default (exchange "direct") the driver sends a task the epoch's plan and its stage-0 DML,
and the task runs its partition of every stage itself, its output going straight to the tasks
that run the downstream actors (`runtime.data_plane`); it answers once, with its actors'
reports. With exchange "driver" the driver runs the stages one by one (`RUN_STAGE`) and routes each
stage's output (`OUT`) itself."""

from __future__ import annotations

import functools
import logging
import os
import socket
import struct
import traceback
from collections.abc import Iterable
from typing import Any

from piestream.common.errors import InternalError
from piestream.runtime.actor_task import TaskHook, run_partition
from piestream.runtime.data_plane import COUNT, RUN, PeerAborted, PeerLost, PeerMesh, decode_peers, stage_of
from piestream.runtime.epoch_plan import EpochPlan, decode_plan
from piestream.runtime.exchange import (
    REPORT,
    ActorFailed,
    Element,
    MalformedPayload,
    decode_elements,
    encode_elements,
    encode_failure,
)
from piestream.runtime.link_tls import LinkTls
from piestream.runtime.runners import worker_gc_checkpoint
from piestream.runtime.wire import FROM_TASK, Channel, FrameRejected
from piestream.stream.connector import Connectors

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # every slot's task must say hello within this, or the epoch runs plain

#: the hello's format: (wire version, slot, pid, address family (4 or 6), the data plane's
#: address (packed, 16 bytes) and port); a driver refuses any other version
WIRE_VERSION = 2
HELLO = struct.Struct("<BqqB16sH")
STAGE = struct.Struct("<I")

# frames: driver -> task
PEERS = b"T"  # + data_plane.encode_peers: every slot's data-plane address (once per lease)
PLAN = b"P"  # + encode_plan bytes
EPOCH = b"E"  # + run + elements (stage-0 input): run this slot's partitions of every stage
RUN_STAGE = b"R"  # + stage + elements: run this slot's partition of the stage over them
STOP = b"S"
# task -> driver
DONE = b"D"  # + bytes sent to peers + elements: the reports of an EPOCH
OUT = b"O"  # + elements: a RUN_STAGE partition's output
FAILED = b"F"  # + encode_failure bytes: an actor failed (not a data error)
ABORTED = b"A"  # + text: a peer gave the run up (its own answer says why)
LOST = b"L"  # + text: a data-plane link broke: the lease ends
CRASHED = b"X"  # + traceback text: anything else went wrong in the task


def pack_hello(slot: int, pid: int, host: str, port: int) -> bytes:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = socket.inet_pton(family, host)
    return HELLO.pack(
        WIRE_VERSION, slot, pid, 6 if family == socket.AF_INET6 else 4, addr.ljust(16, b"\0"), port
    )


def unpack_hello(body: bytes | bytearray) -> tuple[int, int, int, tuple[str, int]]:
    """(version, slot, pid, data-plane address); struct.error or ValueError if garbage."""
    version, slot, pid, family, addr, port = HELLO.unpack(body)
    if family == 4:
        host = socket.inet_ntop(socket.AF_INET, addr[:4])
    elif family == 6:
        host = socket.inet_ntop(socket.AF_INET6, addr)
    else:
        raise ValueError(f"address family {family}")
    return version, slot, pid, (host, port)


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
    plan: EpochPlan | None = None
    runs = 0
    try:
        # the data plane listens on the address this connection leaves from: it routes
        mesh = PeerMesh(key, slot, sock.getsockname()[0], tls)
    except OSError:
        chan.close()
        raise
    try:
        chan.send(pack_hello(slot, os.getpid(), mesh.host, mesh.port))
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
                    mesh.connect(decode_peers(memoryview(frame)[1:]))
                except MalformedPayload as e:
                    log.error("slot %d: %s; ending the lease", slot, e)
                    break
                continue
            if kind == EPOCH and plan is not None:
                runs += 1
                chan.send(*_epoch(plan, slot, frame, mesh, hook, chan))
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
            chan.send(*reply)
    finally:
        chan.close()
        mesh.close()
    return [(slot, os.getpid(), runs)]


def _epoch(
    plan: EpochPlan, slot: int, frame: bytearray, mesh: PeerMesh, hook: TaskHook | None, control: Channel
) -> list[bytes]:
    """Run an EPOCH command: this slot's partitions of every stage; the answer's frame parts."""
    (run,) = RUN.unpack_from(frame, 1)
    sent = mesh.bytes_sent
    try:
        dml = decode_elements(frame, 1 + RUN.size)
        del frame
        reports = run_direct(plan, slot, run, dml, mesh, hook, control)
        return [DONE, COUNT.pack(mesh.bytes_sent - sent), encode_elements(reports)]
    except Exception as e:
        mesh.abort(run)  # no peer waits for an END of this run that never comes
        if isinstance(e, ActorFailed):
            return [FAILED, encode_failure(e)]
        if isinstance(e, PeerAborted):
            return [ABORTED, str(e).encode()]
        if isinstance(e, PeerLost):
            return [LOST, str(e).encode()]
        return [CRASHED, traceback.format_exc().encode()]


def run_direct(
    plan: EpochPlan,
    slot: int,
    run: int,
    dml: list[Element],
    mesh: PeerMesh,
    hook: TaskHook | None,
    control: Channel,
) -> list[Element]:
    """This slot's partition of every stage it has one in (partition p of a stage runs in slot
    p), in stage order: a stage starts when every runner of every earlier stage has ended its
    output to this slot; its output goes straight to the slots running the destination actors
    (kept here for this slot's own). Returns the actors' reports (for the driver)."""
    where = stage_of(plan)
    runners = [plan.num_partitions(s) for s in range(len(plan.stages))]
    inbox: dict[int, list[Element]] = {0: dml}
    reports: list[Element] = []

    def file(elements: list[Element], after: int) -> None:
        for e in elements:  # per element (a whole chunk), not per row
            loc = where.get(tuple(e[0]))
            if loc is None or loc[0] <= after:
                raise InternalError(f"slot {slot}: an element for {e[0]} arrived at stage {after + 1}")
            inbox.setdefault(loc[0], []).append(e)

    for s, n in enumerate(runners):
        if slot >= n:
            continue
        need = [(p, k) for k in range(s) for p in range(runners[k]) if p != slot]
        if need:
            file(mesh.take(run, need, control), s - 1)
        out: dict[int, list[Element]] = {}
        for e in run_partition(plan, s, slot, inbox.pop(s, []), hook):
            if tuple(e[0]) == REPORT:
                reports.append(e)
                continue
            loc = where.get(tuple(e[0]))
            if loc is None or loc[0] <= s:
                raise InternalError(f"stage {s} emitted an element for {e[0]}, no later stage runs")
            if loc[1] == slot:
                inbox.setdefault(loc[0], []).append(e)
            else:
                out.setdefault(loc[1], []).append(e)
        later = max(runners[s + 1 :], default=0)
        mesh.send(run, s, out, [q for q in range(later) if q != slot])
    return reports
