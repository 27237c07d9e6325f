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
then ``END(run, stage, count)``, the number of elements of that stage sent on the link
(checked when it arrives). A sender sends a stage's output as its actors produce it, in
frames of at most `frame_bytes`; on a link, a source actor's elements arrive in sequence
order, so a (destination, source) group is complete once its source's END is in.
``ABORT(run)``: the sender's run failed (an actor failure, a lost peer); a receiver waiting
for it gives up the run as well and tells its own peers, so no task waits for an END that
never comes; the driver fails the epoch (the barrier manager retries it). Frames of an earlier
run still on a link (a failed run's) are dropped by their run number. A link that breaks or
carries a frame that does not verify is lost: the task's run fails with `PeerLost`, and the
driver ends the lease (a new one starts for the retry).

**Bounded channels** (RisingWave's permits, per link). A receiver does not collect a stage's
input before it runs it: an actor is fed while its input arrives, in the same deterministic
order as ever, ports in name order, within a port source actors in ascending id, within a
source sequence order (`PeerMesh.pull`). Each incoming link's reader thread files a frame's
elements by (run, destination actor, source actor) into spools and keeps at most `window`
bytes of them in memory (one element more when the link holds none): credit returns as the
consumer takes an element. When the window is full:

- if the element is for the group the consumer is draining right now, the reader waits for
  credit and reads nothing more from the socket, so TCP pushes back on the sender (a "credit
  wait"); the consumer is taking from that very group, so the wait ends;
- otherwise (the element is out of order: for another actor, a later source, a later stage)
  the link's out-of-order groups go to a temporary file, the element after them ("spilled");
  a group read back to its end returns to memory.

So a link's memory stays within the window plus one element, and no order of senders and
stages can deadlock: a reader only ever waits on the consumer's own current group (a naive
window that stops the socket whatever the frame is for deadlocks on a join whose inputs
come from different stages of one sender: the receiver drains the later stage's port first,
while the sender is still blocked in the earlier stage's output). A task's output for its own
later actors goes through the same spools (link = its own slot), so it is bounded too.

Nothing read from a link is unpickled (elements are `exchange.encode_elements`, headers are
fixed structs).

With Spark's network encryption on, every link is TLS as well (`runtime.link_tls`: a per-lease
certificate both ends present; the HMAC stays).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import select
import socket
import struct
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from piestream.common.errors import InternalError
from piestream.runtime.exchange import (
    Element,
    MalformedPayload,
    chunk_source,
    decode_elements,
    encode_elements,
)
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
#: bytes of elements a link holds in memory at most (one element more if it holds none)
WINDOW_BYTES = 16 << 20
HELLO_TIMEOUT = 5.0
_POLL = 0.2

#: the peer table's document (driver -> tasks, once per lease)
PEERS_FORMAT = 2  # 2: with the links' window


@dataclass(frozen=True)
class ChannelStats:
    """One data-plane channel (sender slot -> receiver slot; a slot to itself: its output for
    its own later actors) in one epoch: what crossed it and how much it held back (RisingWave's
    per-channel permits). `send_s` is the time the sender spent handing frames to the link
    (long when the receiver stopped reading: TCP back-pressure); `credit_wait_s` the time the
    receiver's reader did not read the link because its window was full for the group the
    consumer drains ("blocked"); `spilled_bytes` what went to disk instead; `peak_bytes` the
    most the channel held in memory (at most the window plus one element)."""

    sender: int
    receiver: int
    rows: int = 0
    bytes: int = 0  # payload (encoded chunks) received
    elements: int = 0
    wire_bytes: int = 0  # on the link, framing and MACs included (0 for a slot to itself)
    send_s: float = 0.0
    credit_waits: int = 0
    credit_wait_s: float = 0.0
    spilled_bytes: int = 0
    peak_bytes: int = 0


#: a task's counters of one incoming channel: sender, rows, payload bytes, elements, credit
#: waits, ns waited for credit, bytes spilled, peak bytes in memory
IN_CHANNEL = struct.Struct("<IQQQQQQQ")
#: ... and of one outgoing link: receiver, bytes on the wire, ns spent sending
OUT_CHANNEL = struct.Struct("<IQQ")
_N = struct.Struct("<I")


@dataclass
class _LinkCounters:
    rows: int = 0
    bytes: int = 0
    elements: int = 0
    credit_waits: int = 0
    credit_wait_ns: int = 0
    spilled: int = 0
    peak: int = 0


def encode_channels(incoming: Mapping[int, _LinkCounters], outgoing: Mapping[int, tuple[int, int]]) -> bytes:
    """A task's channel counters of one run (`PeerMesh.channel_counters`)."""
    out = [_N.pack(len(incoming))]
    for q, c in sorted(incoming.items()):
        out.append(
            IN_CHANNEL.pack(
                q, c.rows, c.bytes, c.elements, c.credit_waits, c.credit_wait_ns, c.spilled, c.peak
            )
        )
    out.append(_N.pack(len(outgoing)))
    out.extend(OUT_CHANNEL.pack(q, b, ns) for q, (b, ns) in sorted(outgoing.items()))
    return b"".join(out)


def decode_channels(
    slot: int, data: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[list[ChannelStats], dict[tuple[int, int], tuple[int, int]], int]:
    """Task `slot`'s counters: its incoming channels, its outgoing links' (wire bytes, send ns)
    by (sender, receiver), and the offset after them; `MalformedPayload` if garbage."""
    try:
        (n,) = _N.unpack_from(data, offset)
        offset += _N.size
        incoming = []
        for _ in range(n):  # per channel, a handful
            q, rows, nbytes, els, waits, wait_ns, spilled, peak = IN_CHANNEL.unpack_from(data, offset)
            offset += IN_CHANNEL.size
            incoming.append(
                ChannelStats(q, slot, rows, nbytes, els, 0, 0.0, waits, wait_ns / 1e9, spilled, peak)
            )
        (n,) = _N.unpack_from(data, offset)
        offset += _N.size
        outgoing = {}
        for _ in range(n):
            q, wire, ns = OUT_CHANNEL.unpack_from(data, offset)
            offset += OUT_CHANNEL.size
            outgoing[(slot, q)] = (wire, ns)
    except struct.error as e:
        raise MalformedPayload(f"malformed channel counters: {e}") from None
    return incoming, outgoing, offset


def merge_channels(
    incoming: Iterable[ChannelStats], outgoing: Mapping[tuple[int, int], tuple[int, int]]
) -> tuple[ChannelStats, ...]:
    """Every task's channels, one row per (sender, receiver), with the sender's side joined."""
    rows = {(c.sender, c.receiver): c for c in incoming}
    for key, (wire, ns) in outgoing.items():
        c = rows.get(key, ChannelStats(*key))
        rows[key] = dataclasses.replace(c, wire_bytes=wire, send_s=ns / 1e9)
    return tuple(rows[k] for k in sorted(rows))


class PeerLost(InternalError):
    """A link of the data plane broke (a peer died, a frame did not verify, the driver went
    away): the run fails and the lease ends."""


class PeerAborted(InternalError):
    """A peer gave up the run (its actor failed): this task gives it up too."""


def encode_peers(peers: Sequence[tuple[str, int]], window: int = WINDOW_BYTES) -> bytes:
    """The peer table, with the links' window (`PeerMesh.window`)."""
    doc = {"format": PEERS_FORMAT, "peers": [[h, p] for h, p in peers], "window": window}
    return json.dumps(doc).encode()


def decode_peers(data: bytes | bytearray | memoryview) -> tuple[list[tuple[str, int]], int]:
    """(every slot's address, the links' window)."""
    try:
        doc = json.loads(bytes(data))
        if doc.get("format") != PEERS_FORMAT:
            raise ValueError(f"peer table format {doc.get('format')!r}")
        window = int(doc["window"])
        if window <= 0:
            raise ValueError(f"a window of {window} bytes")
        return [(str(h), int(p)) for h, p in doc["peers"]], window
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise MalformedPayload(f"malformed peer table: {e}") from None


def stage_of(plan: Any) -> dict[tuple[int, ...], tuple[int, int]]:
    """Destination actor -> (the stage that runs it, its partition there = the slot)."""
    where: dict[tuple[int, ...], tuple[int, int]] = {}
    for s in range(len(plan.stages)):
        for actor, part in plan.partition_index(s).items():
            where[tuple(actor)] = (s, part)
    return where


class _Spool:
    """One (run, destination actor, source actor) group's payloads in arrival order: in memory,
    or, once spilled, in a temporary file (every later payload too, until it is read back to
    its end)."""

    __slots__ = ("file", "link", "mem", "rpos", "wpos")

    def __init__(self, link: int) -> None:
        self.link = link  # the slot whose link it came over
        self.mem: deque[bytes] = deque()
        self.file: Any = None
        self.rpos = 0
        self.wpos = 0

    def empty(self) -> bool:
        return not self.mem and self.rpos == self.wpos

    def spill(self) -> int:
        """Move the payloads in memory to the file; the bytes moved."""
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="piestream-spill-")  # noqa: SIM115 (closed by close)
        moved = 0
        while self.mem:  # per element (a chunk), never per row
            moved += self.write(self.mem.popleft())
        return moved

    def write(self, payload: bytes) -> int:
        self.file.seek(self.wpos)
        self.file.write(COUNT.pack(len(payload)))
        self.file.write(payload)
        self.wpos += COUNT.size + len(payload)
        return len(payload)

    def pop(self) -> tuple[bytes, bool]:
        """The next payload, and whether it was in memory."""
        if self.file is None:
            return self.mem.popleft(), True
        self.file.seek(self.rpos)
        (n,) = COUNT.unpack(self.file.read(COUNT.size))
        payload = self.file.read(n)
        self.rpos += COUNT.size + n
        if self.rpos == self.wpos:  # read back to its end: memory again
            self.close()
        return payload, False

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        self.file = None
        self.rpos = self.wpos = 0


#: a group's key: (run, destination actor, source actor id)
GroupKey = tuple[int, tuple[int, ...], int]


class PeerMesh:
    """One task's side of the data plane: its listener, its links to and from every peer, and
    the spools its incoming elements wait in (bounded per link, see the module docstring)."""

    def __init__(
        self, key: bytes, slot: int, host: str, tls: LinkTls | None = None, window: int = WINDOW_BYTES
    ) -> None:
        self.key = key
        self.slot = slot
        self.window = window
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
        # per run: spools by group, ENDs (sender, stage) -> count, elements got so far
        self._spools: dict[GroupKey, _Spool] = {}
        self._ends: dict[int, dict[tuple[int, int], int]] = {}
        self._got: dict[int, Counter[tuple[int, int]]] = {}
        self._aborted: dict[int, int] = {}
        self._mem: Counter[int] = Counter()  # bytes in memory per link (sender slot)
        self._want: GroupKey | None = None  # the group the consumer drains now
        self.bytes_sent = 0
        #: since the last `begin`: reader waits for credit (back-pressure), bytes spilled to
        #: disk, the most bytes one link held in memory, the largest element filed
        self.credit_waits = 0
        self.spilled_bytes = 0
        self.peak_link_bytes = 0
        self.largest_element = 0
        #: ... and per channel: incoming by (run, sender slot), outgoing (wire bytes, ns
        #: sending) by receiver slot (`channel_counters`)
        self._in: dict[tuple[int, int], _LinkCounters] = {}
        self._out: dict[int, list[int]] = {}
        self._threads: list[threading.Thread] = []
        self._start(self._accept_loop, "piestream-data-accept")

    @property
    def frame_bytes(self) -> int:
        """The payload a DATA frame carries at most (one element more if it is larger)."""
        return max(1, min(FRAME_BYTES, self.window))

    # -- links -------------------------------------------------------------------------------
    def connect(self, peers: Sequence[tuple[str, int]], window: int | None = None) -> None:
        """Open a link to every other peer (their listeners were up before their hellos)."""
        if window is not None:
            self.window = window
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
        """Files the link's frames by run and group until it closes (waiting for credit: the
        socket is not read meanwhile)."""
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
                    del frame  # only the elements are kept (and counted in the window)
                    with self.cv:
                        if run < self.run:
                            continue
                        self._got.setdefault(run, Counter())[(sender, stage)] += len(elements)
                    for dest, payload in elements:  # per element (a chunk), never per row
                        self._admit((run, dest, chunk_source(payload)), sender, payload, block=True)
                elif kind == END:
                    (count,) = COUNT.unpack_from(frame, 1 + RUN_STAGE.size)
                    with self.cv:
                        if run < self.run:
                            continue
                        got = self._got.get(run, Counter())[(sender, stage)]
                        if got != count:
                            raise MalformedPayload(
                                f"slot {sender} sent {got} elements of stage {stage}, its END says {count}"
                            )
                        self._ends.setdefault(run, {})[(sender, stage)] = count
                        self.cv.notify_all()
                else:
                    raise MalformedPayload(f"a data-plane frame of kind {bytes(kind)!r}")
        except (EOFError, OSError, struct.error, MalformedPayload) as e:  # FrameRejected is an OSError
            if not self.closing:
                self._lose(f"slot {self.slot} lost its link from slot {sender}: {e}")
        finally:
            chan.close()

    def _admit(self, key: GroupKey, sender: int, payload: bytes, block: bool) -> None:
        """File one element into its group's spool under the link's window (module docstring)."""
        size = len(payload)
        with self.cv:
            self.largest_element = max(self.largest_element, size)
            counters = self._link_in(key[0], sender)
            counters.bytes += size
            counters.elements += 1
            while True:
                if self.closing or self.lost is not None or key[0] < self.run or key[0] in self._aborted:
                    return  # the run (or the mesh) is over: nobody takes it
                spool = self._spools.get(key)
                if spool is None:
                    spool = self._spools[key] = _Spool(sender)
                if spool.file is not None:  # spilled: later payloads follow on disk, in order
                    written = spool.write(payload)
                    self.spilled_bytes += written
                    counters.spilled += written
                    self.cv.notify_all()
                    return
                held = self._mem[sender]
                if held == 0 or held + size <= self.window:
                    spool.mem.append(payload)
                    self._mem[sender] = held + size
                    self.peak_link_bytes = max(self.peak_link_bytes, held + size)
                    counters.peak = max(counters.peak, held + size)
                    self.cv.notify_all()
                    return
                # the window is full: out-of-order groups of this link go to disk first
                for k, other in self._spools.items():  # per group, not per element
                    if other.link == sender and other.mem and k != self._want:
                        moved = other.spill()
                        self._mem[sender] -= moved
                        self.spilled_bytes += moved
                        counters.spilled += moved
                if self._mem[sender] == 0 or self._mem[sender] + size <= self.window:
                    continue
                if block and key == self._want:
                    # all the link holds is what the consumer drains now: wait for its credit
                    self.credit_waits += 1
                    counters.credit_waits += 1
                    t0 = time.perf_counter_ns()
                    self.cv.wait(_POLL)
                    counters.credit_wait_ns += time.perf_counter_ns() - t0
                    continue
                moved = spool.spill()  # out of order itself: to disk, in order
                self.spilled_bytes += moved
                counters.spilled += moved
                continue

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
        """A new run: what earlier runs left on the links is dropped; the counters restart."""
        with self.cv:
            self.run = run
            for d in (self._ends, self._got, self._aborted):
                for r in [r for r in d if r < run]:
                    del d[r]
            for key in [k for k in self._spools if k[0] < run]:
                self._drop(key)
            self.credit_waits = self.spilled_bytes = self.peak_link_bytes = self.largest_element = 0
            self._in = {k: c for k, c in self._in.items() if k[0] >= run}
            self._out = {}
            self.cv.notify_all()

    def _link_in(self, run: int, sender: int) -> _LinkCounters:
        c = self._in.get((run, sender))
        if c is None:
            c = self._in[(run, sender)] = _LinkCounters()
        return c

    def count_rows(self, run: int, sender: int, rows: int) -> None:
        """The consumer took `rows` rows of `run` that came over `sender`'s channel."""
        with self.cv:
            self._link_in(run, sender).rows += rows

    def channel_counters(self, run: int) -> bytes:
        """`run`'s per-channel counters (`encode_channels`), for the driver."""
        with self.cv:
            incoming = {q: c for (r, q), c in self._in.items() if r == run}
            return encode_channels(incoming, {q: (b, ns) for q, (b, ns) in self._out.items()})

    def _drop(self, key: GroupKey) -> None:
        spool = self._spools.pop(key)
        self._mem[spool.link] -= sum(len(p) for p in spool.mem)
        spool.close()

    def put_local(self, run: int, dest: tuple[int, ...], payload: bytes) -> None:
        """An element of this task's output for one of its own later actors (never waits)."""
        self._admit((run, tuple(dest), chunk_source(payload)), self.slot, payload, block=False)

    def pull(
        self, run: int, dest: tuple[int, ...], source: int, end: tuple[int, int] | None, control: Any
    ) -> Iterator[bytes]:
        """The payloads of `source`'s group for `dest`, in order, as they arrive; complete when
        `end` (the source's (slot, stage)) has sent its END, or at once for a local source
        (`end` None: its output is all filed already). Returns credit as it takes. Raises
        `PeerAborted` if a peer gave the run up, `PeerLost` if a link broke or the driver's
        connection `control` closed meanwhile."""
        key = (run, tuple(dest), source)
        try:
            while True:
                with self.cv:
                    self._want = key
                    self.cv.notify_all()  # a reader holding this group's element may go on
                    while True:
                        if self.lost is not None:
                            raise PeerLost(self.lost)
                        if run in self._aborted:
                            raise PeerAborted(f"slot {self._aborted[run]} gave up the epoch's run {run}")
                        spool = self._spools.get(key)
                        if spool is not None and not spool.empty():
                            payload, in_memory = spool.pop()
                            if in_memory:
                                self._mem[spool.link] -= len(payload)  # credit back
                                self.cv.notify_all()
                            break
                        if end is None or end in self._ends.get(run, {}):
                            if spool is not None:
                                self._drop(key)
                            return
                        self.cv.wait(_POLL)
                        if _readable(control):  # mid-run the driver sends nothing: it ended the lease
                            raise PeerLost(f"slot {self.slot}: the driver ended the lease mid-epoch")
                yield payload
        finally:
            with self.cv:
                if self._want == key:
                    self._want = None
                self.cv.notify_all()

    def idle(self) -> None:
        """The consumer drains no group now (an actor that failed mid-input left its own)."""
        with self.cv:
            self._want = None
            self.cv.notify_all()

    def leftover(self, run: int) -> list[GroupKey]:
        """Groups of `run` still holding elements (none once every actor took its input)."""
        with self.cv:
            return [k for k, s in self._spools.items() if k[0] == run and not s.empty()]

    def sender(self, run: int, stage: int) -> StageSender:
        """Where stage `stage`'s output for other slots goes, as it is produced."""
        return StageSender(self, run, stage)

    def send(self, run: int, stage: int, out: Mapping[int, list[Element]], ends: Iterable[int]) -> None:
        """Stage `stage`'s whole output for other slots (`out`, by receiver), then END to every
        slot of `ends` (those running a later stage)."""
        sender = self.sender(run, stage)
        for q, elements in sorted(out.items()):
            for e in elements:
                sender.add(q, e)
        sender.end(ends)

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

    def _send(self, q: int, *parts: bytes) -> None:
        chan = self._link(q)
        before = chan.bytes_sent
        t0 = time.perf_counter_ns()
        try:
            chan.send(*parts)  # blocks while the receiver's window is full (TCP back-pressure)
        except OSError as e:
            raise PeerLost(f"slot {self.slot} lost its link to {chan.peer}: {e}") from e
        sent = chan.bytes_sent - before
        self.bytes_sent += sent
        out = self._out.setdefault(q, [0, 0])  # only the consumer's thread sends
        out[0] += sent
        out[1] += time.perf_counter_ns() - t0

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
            self.cv.notify_all()
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
        with self.cv:
            for key in list(self._spools):
                self._drop(key)


class StageSender:
    """One stage's output on its way to other slots: per receiver, elements gather into a DATA
    frame of up to `frame_bytes`, sent when full (so a receiver gets the stage's output while
    it is produced); `end` sends the rest and the stage's END to every later stage's slot."""

    def __init__(self, mesh: PeerMesh, run: int, stage: int) -> None:
        self.mesh = mesh
        self.header = RUN_STAGE.pack(run, stage)
        self.limit = mesh.frame_bytes
        self.batches: dict[int, list[Element]] = {}
        self.sizes: Counter[int] = Counter()
        self.counts: Counter[int] = Counter()

    def add(self, q: int, element: Element) -> None:
        batch = self.batches.setdefault(q, [])
        batch.append(element)
        self.counts[q] += 1
        self.sizes[q] += len(element[1])
        if self.sizes[q] >= self.limit:
            self._flush(q)

    def _flush(self, q: int) -> None:
        batch = self.batches.pop(q, [])
        self.sizes[q] = 0
        if batch:
            self.mesh._send(q, DATA, self.header, encode_elements(batch))

    def end(self, ends: Iterable[int]) -> None:
        for q in sorted(self.batches):
            self._flush(q)
        for q in sorted(ends):
            self.mesh._send(q, END, self.header, COUNT.pack(self.counts[q]))


def _readable(sock: Any) -> bool:
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
