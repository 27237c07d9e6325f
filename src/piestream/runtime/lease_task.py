"""The task side of a leased Spark job, and the wire between it and the driver
(`runtime.leased`): length-prefixed frames; the plan pickled once per epoch (what SparkRunner
pickles into its task closures); elements as the exchange's own bytes with their destination."""

from __future__ import annotations

import functools
import os
import pickle
import socket
import struct
import traceback
from collections.abc import Iterable
from typing import Any

from piestream.runtime.actor_task import TaskHook, run_partition
from piestream.runtime.epoch_plan import EpochPlan
from piestream.runtime.exchange import ActorFailed, decode_elements, encode_elements, encode_failure
from piestream.runtime.runners import worker_gc_checkpoint

CONNECT_TIMEOUT = 10.0  # every slot's task must say hello within this, or the epoch runs plain

LEN = struct.Struct("<Q")
HELLO = struct.Struct("<16sqq")  # token, slot, pid
STAGE = struct.Struct("<I")

# frames: driver -> task
PLAN = b"P"  # + pickled EpochPlan
RUN = b"R"  # + stage + elements: run this slot's partition of the stage over them
STOP = b"S"
# task -> driver
OUT = b"O"  # + elements: the partition's output
FAILED = b"F"  # + encode_failure bytes: an actor failed (not a data error)
CRASHED = b"X"  # + traceback text: anything else went wrong in the task


# -- framing ------------------------------------------------------------------------------------


def send_frame(sock: socket.socket, *parts: bytes) -> None:
    size = sum(len(p) for p in parts)
    sock.sendall(LEN.pack(size) + b"".join(parts))


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("connection closed")
        got += k
    return buf


def recv_frame(sock: socket.socket) -> bytearray:
    (n,) = LEN.unpack(recv_exact(sock, LEN.size))
    return recv_exact(sock, n)


# -- the task -----------------------------------------------------------------------------------


def lease_task(host: str, port: int, token: bytes, slot: int, hook: TaskHook | None) -> Any:
    """The long-lived task of `slot` (a module function with bound arguments: Spark pickles it
    by reference, not the module's globals by value)."""
    return functools.partial(lease_loop, host, port, token, slot, hook)


def lease_loop(
    host: str, port: int, token: bytes, slot: int, hook: TaskHook | None, it: Iterable[Any]
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
    plan: EpochPlan | None = None
    runs = 0
    try:
        send_frame(sock, HELLO.pack(token, slot, os.getpid()))
        while True:
            try:
                frame = recv_frame(sock)
            except (EOFError, OSError):
                break  # the lease ended (or the driver went away)
            kind = frame[:1]
            if kind == STOP:
                break
            if kind == PLAN:
                plan = pickle.loads(frame[1:])
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
            send_frame(sock, *reply)
    finally:
        sock.close()
    return [(slot, os.getpid(), runs)]
