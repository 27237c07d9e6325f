"""The task side of a leased Spark job, and the commands on its wire to the driver
(`runtime.leased`): authenticated frames (`runtime.wire`); the plan as its versioned JSON once
per epoch (`epoch_plan.encode_plan`); elements as the exchange's own bytes with their destination.
Nothing read from the socket is unpickled; the per-job key and the connector registry (code)
come in the task's closure."""

from __future__ import annotations

import functools
import logging
import os
import socket
import struct
import traceback
from collections.abc import Iterable
from typing import Any

from piestream.runtime.actor_task import TaskHook, run_partition
from piestream.runtime.epoch_plan import EpochPlan, decode_plan
from piestream.runtime.exchange import (
    ActorFailed,
    MalformedPayload,
    decode_elements,
    encode_elements,
    encode_failure,
)
from piestream.runtime.runners import worker_gc_checkpoint
from piestream.runtime.wire import FROM_TASK, Channel, FrameRejected
from piestream.stream.connector import Connectors

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # every slot's task must say hello within this, or the epoch runs plain

#: the hello's format: (wire version, slot, pid); a driver refuses any other version
WIRE_VERSION = 1
HELLO = struct.Struct("<Bqq")
STAGE = struct.Struct("<I")

# frames: driver -> task
PLAN = b"P"  # + encode_plan bytes
RUN = b"R"  # + stage + elements: run this slot's partition of the stage over them
STOP = b"S"
# task -> driver
OUT = b"O"  # + elements: the partition's output
FAILED = b"F"  # + encode_failure bytes: an actor failed (not a data error)
CRASHED = b"X"  # + traceback text: anything else went wrong in the task


# -- the task -----------------------------------------------------------------------------------


def lease_task(
    host: str, port: int, key: bytes, slot: int, hook: TaskHook | None, connectors: Connectors
) -> Any:
    """The long-lived task of `slot` (a module function with bound arguments: Spark pickles it
    by reference, not the module's globals by value)."""
    return functools.partial(lease_loop, host, port, key, slot, hook, connectors)


def lease_loop(
    host: str,
    port: int,
    key: bytes,
    slot: int,
    hook: TaskHook | None,
    connectors: Connectors,
    it: Iterable[Any],
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
        chan.send(HELLO.pack(WIRE_VERSION, slot, os.getpid()))
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
            if kind != RUN or plan is None:
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
    return [(slot, os.getpid(), runs)]
