"""The leased job's data plane: its tasks exchange stage output straight with each other.

The driver carries control, not data (issue 27): each slot's task listens on its executor's
host (port 0 on the address its connection to the driver leaves from, so it routes and never
collides), says (host, port) in its hello, and the driver hands every task the peer table
once per lease. Every task then opens one connection to every other task: a full mesh of
one-way links, each sender's frames under the lease's key with the (sender slot, receiver
slot) pair in the MAC (`wire.link`), so a frame of one link verifies on no other, and a
stranger, or a task of another lease, is turned away at its hello.

On a link, per run (the driver numbers the epochs it runs on a lease, a retried epoch too):
``DATA(run, stage, elements)`` frames with the stage's output for actors the receiver runs,
then ``END(run, stage, count)``, the number of elements of that stage sent on the link. A
receiver's stage s starts once every runner of every stage k < s has sent its END(k), with the
counts checked: its input is complete. Its order is deterministic however the frames
interleaved: an actor sorts its input by (port, source actor, sequence) (`actor_task`).
``ABORT(run)``: the sender's run failed (an actor failure, a lost peer); a receiver waiting
for it gives up the run as well and tells its own peers, so no task waits for an END that
never comes; the driver fails the epoch (the barrier manager retries it). Frames of an earlier
run still on a link (a failed run's) are dropped by their run number. A link that breaks or
carries a frame that does not verify is lost: the task's run fails with `PeerLost`, and the
driver ends the lease (a new one starts for the retry).

With Spark's network encryption on, every link is TLS as well (`runtime.link_tls`: a per-lease
certificate both ends present; the HMAC stays).

Each incoming link has a reader thread that files its frames by run; nothing read from a link
is unpickled (elements are `exchange.encode_elements`, headers are fixed structs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from piestream.common.errors import InternalError
from piestream.runtime.exchange import Element, MalformedPayload, decode_elements, encode_elements
from piestream.runtime.link_tls import LinkTls
from piestream.runtime.wire import Channel, link

log = logging.getLogger(__name__)

#: a link's first frame: (data-plane version, sender slot, receiver slot)
DATA_PLANE_VERSION = 1
LINK_HELLO = struct.Struct("<BII")
RUN_STAGE = struct.Struct("<QI")  # run, stage
COUNT = struct.Struct("<Q")
RUN = struct.Struct("<Q")

DATA = b"D"  # + RUN_STAGE + elements
END = b"E"  # + RUN_STAGE + COUNT
ABORT = b"A"  # + RUN

#: elements of one DATA frame at most (bytes of payload; a stage's output goes in several frames)
FRAME_BYTES = 4 << 20
HELLO_TIMEOUT = 5.0
_POLL = 0.2

#: the peer table's document (driver -> tasks, once per lease)
PEERS_FORMAT = 1


class PeerLost(InternalError):
    """A link of the data plane broke (a peer died, a frame did not verify, the driver went
    away): the run fails and the lease ends."""


class PeerAborted(InternalError):
    """A peer gave up the run (its actor failed): this task gives it up too."""


def encode_peers(peers: Sequence[tuple[str, int]]) -> bytes:
    return json.dumps({"format": PEERS_FORMAT, "peers": [[h, p] for h, p in peers]}).encode()


def decode_peers(data: bytes | bytearray | memoryview) -> list[tuple[str, int]]:
    try:
        doc = json.loads(bytes(data))
        if doc.get("format") != PEERS_FORMAT:
            raise ValueError(f"peer table format {doc.get('format')!r}")
        return [(str(h), int(p)) for h, p in doc["peers"]]
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise MalformedPayload(f"malformed peer table: {e}") from None


def stage_of(plan: Any) -> dict[tuple[int, ...], tuple[int, int]]:
    """Destination actor -> (the stage that runs it, its partition there = the slot)."""
    where: dict[tuple[int, ...], tuple[int, int]] = {}
    for s in range(len(plan.stages)):
        for actor, part in plan.partition_index(s).items():
            where[tuple(actor)] = (s, part)
    return where


class PeerMesh:
    """One task's side of the data plane: its listener, its links to and from every peer."""

    def __init__(self, key: bytes, slot: int, host: str, tls: LinkTls | None = None) -> None:
        self.key = key
        self.slot = slot
        # with TLS (`runtime.link_tls`): every link is wrapped, both ends present the lease's cert
        self._tls_client = None if tls is None else tls.context(server_side=False)
        self._tls_server = None if tls is None else tls.context(server_side=True)
        srv = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        srv.bind((host, 0))
        srv.listen(64)
        srv.settimeout(_POLL)
        self.listener = srv
        self.host = host
        self.port = int(srv.getsockname()[1])
        self.out: dict[int, Channel] = {}  # receiver slot -> link
        self.inc: dict[int, Channel] = {}  # sender slot -> link
        self.cv = threading.Condition()
        self.closing = False
        self.lost: str | None = None
        self.run = 0
        # per run: elements (sender, stage, element), ENDs (sender, stage) -> count, got counts
        self._elements: dict[int, list[Element]] = {}
        self._ends: dict[int, dict[tuple[int, int], int]] = {}
        self._got: dict[int, Counter[tuple[int, int]]] = {}
        self._aborted: dict[int, int] = {}
        self.bytes_sent = 0
        self._threads: list[threading.Thread] = []
        self._start(self._accept_loop, "piestream-data-accept")

    # -- links -------------------------------------------------------------------------------
    def connect(self, peers: Sequence[tuple[str, int]]) -> None:
        """Open a link to every other peer (their listeners were up before their hellos)."""
        for q, (host, port) in enumerate(peers):
            if q == self.slot or q in self.out:
                continue
            try:
                sock = socket.create_connection((host, port), timeout=HELLO_TIMEOUT)
                if self._tls_client is not None:
                    sock = self._tls_client.wrap_socket(sock)  # the handshake, within the timeout
            except OSError as e:  # ssl.SSLError is one
                self._lose(f"slot {self.slot} could not reach slot {q} at {host}:{port}: {e}")
                continue
            chan = Channel(
                sock, self.key, link(self.slot, q), f"slot {q} at {host}:{port}", link(q, self.slot)
            )
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
                chan.send(LINK_HELLO.pack(DATA_PLANE_VERSION, self.slot, q))
            except OSError as e:
                chan.close()
                self._lose(f"slot {self.slot} could not reach slot {q} at {host}:{port}: {e}")
                continue
            self.out[q] = chan

    def _accept_loop(self) -> None:
        while not self.closing:
            try:
                sock, addr = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                sock.settimeout(HELLO_TIMEOUT)
                if self._tls_server is not None:  # a peer without the lease's certificate ends here
                    sock = self._tls_server.wrap_socket(sock, server_side=True)
            except OSError as e:  # ssl.SSLError is one
                log.info("slot %d refused a link from %s:%s: %s", self.slot, addr[0], addr[1], e)
                with contextlib.suppress(OSError):
                    sock.close()
                continue
            chan = Channel(sock, self.key, b"", f"a peer at {addr[0]}:{addr[1]}", b"")
            try:
                body = chan.recv(exact=LINK_HELLO.size, direction=self._hello_link)
                version, sender, _ = LINK_HELLO.unpack(body)
                sock.settimeout(None)
            except (EOFError, OSError, struct.error):  # FrameRejected is an OSError
                chan.close()
                continue
            with self.cv:
                if version != DATA_PLANE_VERSION or sender in self.inc or self.closing:
                    chan.close()  # a second link from one slot: a replayed hello
                    continue
                self.inc[sender] = chan
            self._start(lambda c=chan, p=sender: self._read_loop(p, c), f"piestream-data-{sender}")

    def _hello_link(self, body: bytearray) -> bytes:
        _, sender, receiver = LINK_HELLO.unpack(body)
        if receiver != self.slot:
            raise ValueError(f"a hello for slot {receiver}")
        return link(sender, receiver)

    def _read_loop(self, sender: int, chan: Channel) -> None:
        """Files the link's frames by run until it closes."""
        try:
            while True:
                frame = chan.recv()
                kind = frame[:1]
                if kind == ABORT:
                    (run,) = RUN.unpack_from(frame, 1)
                    with self.cv:
                        self._aborted.setdefault(run, sender)
                        self.cv.notify_all()
                    continue
                run, stage = RUN_STAGE.unpack_from(frame, 1)
                if kind == DATA:
                    elements = decode_elements(frame, 1 + RUN_STAGE.size)
                    with self.cv:
                        if run >= self.run:
                            self._elements.setdefault(run, []).extend(elements)
                            self._got.setdefault(run, Counter())[(sender, stage)] += len(elements)
                            self.cv.notify_all()
                elif kind == END:
                    (count,) = COUNT.unpack_from(frame, 1 + RUN_STAGE.size)
                    with self.cv:
                        if run >= self.run:
                            self._ends.setdefault(run, {})[(sender, stage)] = count
                            self.cv.notify_all()
                else:
                    raise MalformedPayload(f"a data-plane frame of kind {bytes(kind)!r}")
        except (EOFError, OSError, struct.error, MalformedPayload) as e:  # FrameRejected is an OSError
            if not self.closing:
                self._lose(f"slot {self.slot} lost its link from slot {sender}: {e}")
        finally:
            chan.close()

    def _lose(self, why: str) -> None:
        with self.cv:
            if self.lost is None:
                # also how every lease ends (its tasks close their links): the run it fails, if
                # any, reports it to the driver, which logs the epoch's failure
                self.lost = why
                log.info("%s", why)
            self.cv.notify_all()

    # -- one run -------------------------------------------------------------------------------
    def begin(self, run: int) -> None:
        """A new run: what earlier runs left on the links is dropped."""
        with self.cv:
            self.run = run
            for d in (self._elements, self._ends, self._got, self._aborted):
                for r in [r for r in d if r < run]:
                    del d[r]

    def take(self, run: int, need: Iterable[tuple[int, int]], control: Any) -> list[Element]:
        """Every element received in `run` so far, once the (sender, stage) pairs of `need` all
        ended (counts checked). Raises `PeerAborted` if a peer gave the run up, `PeerLost` if
        a link broke or the driver's connection `control` closed meanwhile."""
        need = set(need)
        with self.cv:
            while True:
                if self.lost is not None:
                    raise PeerLost(self.lost)
                if run in self._aborted:
                    raise PeerAborted(f"slot {self._aborted[run]} gave up the epoch's run {run}")
                ends = self._ends.get(run, {})
                if need <= ends.keys():
                    break
                self.cv.wait(_POLL)
                if _readable(control):  # mid-run the driver sends nothing: it ended the lease
                    raise PeerLost(f"slot {self.slot}: the driver ended the lease mid-epoch")
            got = self._got.get(run, Counter())
            for pair in need:
                if got[pair] != ends[pair]:
                    raise PeerLost(
                        f"slot {self.slot}: slot {pair[0]} sent {got[pair]} elements of stage "
                        f"{pair[1]}, its END says {ends[pair]}"
                    )
            return self._elements.pop(run, [])

    def send(self, run: int, stage: int, out: Mapping[int, list[Element]], ends: Iterable[int]) -> None:
        """Stage `stage`'s output for other slots (`out`, by receiver), then END to every slot
        of `ends` (those running a later stage)."""
        for q, elements in sorted(out.items()):
            chan = self._link(q)
            batch: list[Element] = []
            size = 0
            for e in elements:  # per element (a chunk), never per row: frames of FRAME_BYTES
                batch.append(e)
                size += len(e[1])
                if size >= FRAME_BYTES:
                    self._send(chan, DATA, RUN_STAGE.pack(run, stage), encode_elements(batch))
                    batch, size = [], 0
            if batch:
                self._send(chan, DATA, RUN_STAGE.pack(run, stage), encode_elements(batch))
        for q in sorted(ends):
            count = len(out.get(q, ()))
            self._send(self._link(q), END, RUN_STAGE.pack(run, stage), COUNT.pack(count))

    def abort(self, run: int) -> None:
        """Tell every peer this task gave up `run` (best effort: a broken link is lost anyway)."""
        for chan in list(self.out.values()):
            with contextlib.suppress(OSError):
                chan.send(ABORT, RUN.pack(run))

    def _link(self, q: int) -> Channel:
        chan = self.out.get(q)
        if chan is None:
            raise PeerLost(self.lost or f"slot {self.slot} has no link to slot {q}")
        return chan

    def _send(self, chan: Channel, *parts: bytes) -> None:
        before = chan.bytes_sent
        try:
            chan.send(*parts)
        except OSError as e:
            raise PeerLost(f"slot {self.slot} lost its link to {chan.peer}: {e}") from e
        self.bytes_sent += chan.bytes_sent - before

    # -- lifecycle -----------------------------------------------------------------------------
    def _start(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def close(self) -> None:
        """Close every link and the listener; the threads end (a reused worker keeps none)."""
        with self.cv:
            self.closing = True
            chans = [*self.out.values(), *self.inc.values()]
        for chan in chans:
            with contextlib.suppress(OSError):
                chan.sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv
            chan.close()
        with contextlib.suppress(OSError):
            self.listener.close()
        end = time.monotonic() + 2.0
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, end - time.monotonic()))


def _readable(sock: Any) -> bool:
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
