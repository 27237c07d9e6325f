"""Epochs on Spark jobs whose tasks run every stage of the epoch: Spark's per-stage cost paid
once per job, not once per exchange.

`SparkRunner` runs every epoch as one Spark job with one shuffle stage per exchange, and each
Python stage costs ~35-60 ms whatever its tasks do: an empty epoch of a 3-stage query takes
~0.1-0.14 s of which the actors' own work is a few ms. `LeasedSparkRunner` instead starts a
Spark job of ONE stage whose tasks (one per slot, in the slot's own Python worker pool exactly
like SparkRunner's, so an actor's operator caches are where it runs) connect back to a TCP
listener of the driver and then loop on commands: "here is the epoch's plan", "run the
epoch over this stage-0 input", "stop". Each task runs its slot's partition of every stage and
sends each stage's output (Arrow IPC chunks) straight to the tasks running the downstream
actors (`runtime.data_plane`: each task listens on its executor's host, says where in its
hello, and the driver hands out the peer table once per lease). The driver carries control,
not data: plans, DML, and the actors' reports back (`wire_stats`: `driver_exchange_bytes` is
0). With `exchange="driver"` (the fallback, for a cluster whose executors cannot reach each
other) the driver instead runs the stages like `LocalRunner` (`run_stages`) and routes every
stage's output itself. A round trip costs well under a millisecond.

**One job per epoch, or a lease.** With `lease_seconds=0` (the database's default runner,
"spark") every epoch is exactly one such Spark job: an empty epoch costs one stage, ~40-65 ms
instead of ~100-140 ms. The job of the next epoch is started as soon as an epoch's job is done
(while the driver commits the epoch and waits for the next barrier), so its start is mostly off
the epoch's path; it gives the slots back after `idle_seconds` without an epoch, or when
another Spark job waits. A bulk epoch runs on the lease too: the driver sends each task its
DML in frames that the task reads as its stage-0 actors take them (`lease_task.DmlStream`),
and the data plane's channels are bounded (`channel_window` bytes in memory per link,
`runtime.data_plane`), so no process holds a stage's whole input (with exchange "driver" the
driver still routes, and holds, each stage's output). With `lease_seconds > 0` (runner
"spark-leased") the job serves the epochs that start within `lease_seconds` of it: an epoch
then costs the actors' work plus ~1 ms. While such a job runs its tasks hold every task slot,
so any other Spark job (a batch query, the Spark data source, a benchmark's recompute) waits
for it. So the job is a lease: it ends at the first epoch boundary `lease_seconds` after it
started, after `idle_seconds` without an epoch, and as soon as another active Spark job is seen
(checked between epochs every 0.2 s, and at an epoch's end); the next epoch starts a new job.
Another Spark job therefore waits about until the running epoch ends, and at most about one
lease plus one epoch. A new job is only started when no other Spark job is active, and if its
tasks do not all connect within `connect_timeout` (slots busy, or fewer free cores than slots),
the epoch runs as a plain `SparkRunner` job instead, as do the epochs of the next
`retry_seconds`: nothing waits on a job that cannot start.

**Failures.** A task that dies, or a socket that fails mid-epoch (to the driver, or a data
link between two tasks: the tasks that see it answer LOST), ends the lease (its job is
cancelled if it does not end by itself) and fails the epoch with an `InternalError`, which the
barrier manager retries like any failed Spark job; the next epoch starts a fresh lease. An
actor's failure comes back as the `ActorFailed` (data errors as its report, as with Spark) and
leaves the lease running: its task tells its peers it gave the run up (ABORT), so none waits
for its output, and frames of the failed run still on a link are dropped by its number.
Operator caches follow `actor_task`'s rule unchanged: an actor's cache is used only when it
reflects the epoch the plan says is committed.

**The wire** (`runtime.lease_task`, with the task's loop; `runtime.wire`, the frames). Every
frame carries an HMAC-SHA256 under a per-lease key (32 random bytes, drawn here, handed to the
tasks in their Spark closures), over its direction, its sequence number and its body. The plan
is versioned JSON: its body once per worker process and body digest, then per epoch only its
epochs and version (`lease_task.PlanSender`; the connector registry, which is
code, travels in the closure, and a lease ends when the registry changes); elements are the
exchange's own bytes (Arrow IPC chunks, JSON reports) with their destination: nothing read from
a socket is unpickled. A connection whose hello does not verify under the current lease's key
(a stranger, a task of an ended lease) is closed at once; a frame that does not verify later is
dropped, logged and its connection closed: the lease ends and the epoch fails as a lost task's
would (retried). The listener binds to the driver's host (127.0.0.1 in local mode). With
Spark's ``spark.network.crypto.enabled`` or ``spark.ssl.enabled`` on (or ``tls=True``), each
lease also gets a self-signed certificate in its closure and the tasks' data-plane links are
TLS (`runtime.link_tls`).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from piestream.common.chunk import StreamChunk
from piestream.common.errors import InternalError
from piestream.runtime.actor_task import TaskHook
from piestream.runtime.data_plane import WINDOW_BYTES, ChannelStats, encode_peers, merge_channels
from piestream.runtime.epoch_plan import EpochPlan, dml_elements, dml_frames, encode_plan
from piestream.runtime.exchange import (
    REPORT,
    ActorReport,
    Element,
    MalformedPayload,
    decode_elements,
    decode_failure,
    encode_elements,
)
from piestream.runtime.lease_task import (
    ABORTED,
    CONNECT_TIMEOUT,
    DML,
    DONE,
    FAILED,
    HELLO,
    LOST,
    NOTHING_HELD,
    OUT,
    PEERS,
    PLAN,
    RUN_STAGE,
    STAGE,
    STOP,
    WIRE_VERSION,
    HeldPlan,
    PlanSender,
    lease_task,
    parse_done,
    unpack_hello,
)
from piestream.runtime.link_tls import new_link_tls, spark_wants_tls
from piestream.runtime.runners import KEEP_ALIVE_SECONDS, SparkRunner, collect_reports, run_stages
from piestream.runtime.wire import FROM_DRIVER, Channel, FrameRejected, new_key
from piestream.stream.connector import Connectors, registered_connectors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LEASE_SECONDS = 30.0  # a lease ends at the first epoch boundary this long after its job started
IDLE_SECONDS = 1.0  # ... or after this long without an epoch
MAX_IDLE_SECONDS = 10.0  # the most `spark_runner` lets a job wait for the next epoch
STARTUP_TIMEOUT = 60.0  # ... unless they all run (starting Python workers): then within this
HELLO_TIMEOUT = 2.0  # a connection's hello must arrive this fast (a task sends it at once)
RETRY_SECONDS = 30.0  # after a lease could not start, epochs run plainly this long before the next try
#: how a lease's stages exchange their output: "direct" (task to task, `runtime.data_plane`;
#: the driver carries only control and DML) or "driver" (the driver routes every chunk)
EXCHANGES = ("direct", "driver")
RETIRE_GRACE = 3.0  # an ended lease's job gets this long to finish by itself before it is cancelled
_POLL = 0.2  # how often a waiting driver looks at its job, and the reaper at its lease

log = logging.getLogger(__name__)


class LeaseLost(InternalError):
    """The leased job's task of a slot died or stopped answering mid-epoch: the epoch failed as a
    Spark job whose task died would (retried by the barrier manager)."""


class LeasedTaskError(Exception):
    """A task's non-actor failure; its text is the worker's traceback (markers and all), as Spark
    would hand it to the driver."""


# -- the driver ---------------------------------------------------------------------------------


class _Lease:
    """One long-lived Spark job and its tasks' connections, by slot."""

    def __init__(self, key: bytes, slots: int, group: str, connectors: Connectors) -> None:
        self.key = key
        self.connectors = connectors  # the registry its tasks got in their closures
        self.slots = slots
        self.group = group
        self.started = time.monotonic()
        self.cv = threading.Condition()
        self.conns: dict[int, Channel] = {}
        self.pids: dict[int, int] = {}
        self.peers: dict[int, tuple[str, int]] = {}  # slot -> its task's data-plane address
        self.held: dict[int, HeldPlan] = {}  # slot -> what its worker holds of plans (`PlanSender`)
        self.peers_sent = False  # the peer table went to every task
        self.runs = 0  # epochs (attempts) run on the lease: the data plane's run numbers
        self.gathering = True  # hellos accepted until every slot said it, or the lease ends
        self.ended = False
        self.busy = False  # commands sent whose answers were not all read yet
        self.job_done = threading.Event()
        self.job_ids: set[int] = set()  # its job's Spark id, once seen (`_others_waiting`)
        self.job_error: BaseException | None = None
        self.reaper: threading.Thread | None = None

    def offer(self, slot: int, pid: int, chan: Channel, peer: tuple[str, int], held: HeldPlan) -> bool:
        with self.cv:
            if not self.gathering or self.ended or not 0 <= slot < self.slots or slot in self.conns:
                return False
            self.conns[slot] = chan
            self.pids[slot] = pid
            self.peers[slot] = peer
            self.held[slot] = held
            if len(self.conns) == self.slots:
                self.gathering = False
            self.cv.notify_all()
            return True

    def wait_ready(self, timeout: float, final: bool = True) -> bool:
        """Whether every slot's task connected within `timeout`; hellos are refused afterwards
        if `final`."""
        end = time.monotonic() + timeout
        with self.cv:
            while len(self.conns) < self.slots and not self.job_done.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    break
                self.cv.wait(min(left, _POLL))
            ready = len(self.conns) == self.slots and not self.job_done.is_set()
            if ready or final:
                self.gathering = False
            return ready

    def healthy(self) -> bool:
        """Every task is connected and has sent nothing since its last answer (between epochs a
        readable socket means it closed)."""
        if self.ended or self.job_done.is_set():
            return False
        socks = list(self.conns.values())
        try:
            readable, _, _ = select.select(socks, [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close_connections(self, stop: bool) -> None:
        with self.cv:
            self.ended = True
            self.gathering = False
            conns, self.conns = self.conns, {}
        for chan in conns.values():
            if stop:
                with contextlib.suppress(OSError):
                    chan.send(STOP)
            chan.close()


class LeasedSparkRunner(SparkRunner):
    """Runs epochs in leased long-lived Spark jobs (see the module docstring); an epoch no lease
    can run runs as SparkRunner's one-job epoch."""

    def __init__(
        self,
        spark: SparkSession,
        hook: TaskHook | None = None,
        task_slots: int | None = None,
        keep_alive_seconds: float | None = KEEP_ALIVE_SECONDS,
        *,
        lease_seconds: float = LEASE_SECONDS,
        idle_seconds: float = IDLE_SECONDS,
        connect_timeout: float = CONNECT_TIMEOUT,
        startup_timeout: float = STARTUP_TIMEOUT,
        retry_seconds: float = RETRY_SECONDS,
        exchange: str = "direct",
        channel_window: int = WINDOW_BYTES,
        tls: bool | None = None,
    ) -> None:
        super().__init__(spark, hook, task_slots, keep_alive_seconds)
        #: TLS on the data plane's links (`runtime.link_tls`); None: when Spark encrypts its own
        self.tls = spark_wants_tls(self.sc) if tls is None else tls
        if exchange not in EXCHANGES:
            raise ValueError(f"not an exchange: {exchange!r} (one of {', '.join(EXCHANGES)})")
        self.exchange = exchange
        #: bytes each data-plane link holds in memory at most (`runtime.data_plane`)
        self.channel_window = channel_window
        self.lease_seconds = lease_seconds
        self.idle_seconds = idle_seconds
        self.connect_timeout = connect_timeout
        self.startup_timeout = startup_timeout
        self.retry_seconds = retry_seconds
        self._no_lease_until = 0.0  # a lease that could not start is not tried again until then
        self._lease: _Lease | None = None
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._host = "127.0.0.1"
        self._closed = threading.Event()
        self._reaper: threading.Thread | None = None
        self._retiring: list[_Lease] = []
        self._status: dict[str, Any] = {}  # `_status_jvm`, for the context `_status_of`
        self._status_of: Any = None
        self._plans = PlanSender()
        self._job_threads: ThreadPoolExecutor | None = None
        self._dml_threads: ThreadPoolExecutor | None = None
        self._leases = 0
        self._last_epoch = time.monotonic()
        self._last_check = 0.0
        #: epochs run on a lease and as plain Spark jobs (tests and benchmarks look)
        self.leased_epochs = 0
        self.plain_epochs = 0
        self._exchange_bytes = 0  # the last epoch's `wire_stats`
        self._wire_bytes = 0
        self._peer_bytes = 0
        self._channels: tuple[ChannelStats, ...] = ()
        #: the data plane's channels over all leased epochs: the tasks' credit waits (a reader
        #: stopped reading its link: back-pressure), bytes spilled to disk, and the most bytes
        #: one link held in memory in any epoch (at most the window plus the largest element)
        self.credit_waits = 0
        self.spilled_bytes = 0
        self.peak_link_bytes = 0
        self.largest_element = 0

    # -- EpochRunner ----------------------------------------------------------------------------
    def _run(self, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[ActorReport]:
        """One epoch, under the runner's lock (`SparkRunner.run`)."""
        lease = self._usable_lease(plan.connectors)
        self._exchange_bytes = self._wire_bytes = self._peer_bytes = 0
        self._channels = ()
        if lease is None:
            self.plain_epochs += 1
            self._drop_lease()  # a job of ours holding the slots would keep the plain job waiting
            return super()._run(plan, dml)
        try:
            reports = self._run_leased(lease, plan, dml)
        except BaseException as e:
            # answers still due (the lease is out of step), or a task sent garbage: end it
            if lease.busy or isinstance(e, MalformedPayload):
                self._end_lease(lease, stop=False)
            raise
        finally:
            self._last_epoch = time.monotonic()
        self.leased_epochs += 1
        expired = self._last_epoch - lease.started >= self.lease_seconds
        if expired or self._others_waiting_now(lease):
            self._end_lease(lease, stop=True)
            if expired and not self._others_waiting(None):
                # the next epoch's job starts now, while the driver commits this one and waits
                # for the next barrier: its start is off the epoch's path
                self._submit_lease()
        return reports

    def wire_stats(self) -> dict[str, Any]:
        """The driver's traffic in the epoch run last: exchange payload that passed through the
        driver (none with the direct exchange, nor on a plain job, whose shuffle moves chunks
        between executors; every chunk from one stage to the next with exchange "driver"), all
        bytes on the wire to the tasks (DML, plan, reports, framing; chunks too if it routes
        them), the bytes the tasks sent each other on the data plane, and per data-plane channel
        what crossed it and how long it held back (`data_plane.ChannelStats`)."""
        return {
            "driver_exchange_bytes": self._exchange_bytes,
            "driver_wire_bytes": self._wire_bytes,
            "peer_exchange_bytes": self._peer_bytes,
            "channels": self._channels,
        }

    def keep_alive(self) -> list[int]:
        """SparkRunner's keep-alive job, unless a lease's tasks keep the slots' workers busy
        anyway (its job would wait for the lease, which the reaper cannot end meanwhile: it
        needs the lock this holds)."""
        with self._lock:
            lease = self._lease
            if lease is not None and not lease.ended and not lease.job_done.is_set():
                return [pid for _, pid in sorted(lease.pids.items())]
            self._drop_lease()
            return self._keep_alive_job()

    def _drop_lease(self) -> None:
        """End the lease (a pre-started one too) and wait for every job of ours to end, so a
        plain job gets the slots: tasks end when their connection closes; one that has not
        started yet is cancelled."""
        if self._lease is not None:
            self._end_lease(self._lease, stop=True)
        for old in self._retiring:
            if not old.job_done.wait(_POLL) and self.sc._jsc is not None:
                with contextlib.suppress(Exception):
                    self.sc.cancelJobGroup(old.group)
                old.job_done.wait(RETIRE_GRACE)

    def close(self) -> None:
        """End the lease, the listener and the helper threads (a later `run` starts again)."""
        self._closed.set()
        with self._lock:
            lease, self._lease = self._lease, None
            if lease is not None:
                self._end_lease(lease, stop=True)
        for t in (self._reaper, self._acceptor):
            if t is not None and t is not threading.current_thread():
                t.join(timeout=10)
        self._reaper = self._acceptor = None
        for old in self._retiring:
            if old.reaper is not None:
                old.reaper.join(timeout=RETIRE_GRACE + 10)
        self._retiring = []
        if self._job_threads is not None:
            self._job_threads.shutdown(wait=True)
            self._job_threads = None
        if self._dml_threads is not None:
            self._dml_threads.shutdown(wait=True)
            self._dml_threads = None
        super().close()
        self._closed = threading.Event()

    @property
    def lease_pids(self) -> dict[int, int]:
        """The current lease's task processes, by slot (empty without a lease)."""
        lease = self._lease
        return dict(lease.pids) if lease is not None and not lease.ended else {}

    # -- running an epoch on the lease ----------------------------------------------------------
    def _run_leased(
        self, lease: _Lease, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]
    ) -> list[ActorReport]:
        plan = replace(plan, task_slots=self.task_slots)
        conns = dict(lease.conns)
        wire_before = sum(c.bytes_sent + c.bytes_received for c in conns.values())
        try:
            if self.exchange == "direct":
                return self._run_direct(lease, plan, dml, conns)
            return self._run_via_driver(lease, plan, dml, conns)
        finally:
            self._wire_bytes = sum(c.bytes_sent + c.bytes_received for c in conns.values()) - wire_before

    def _run_direct(
        self,
        lease: _Lease,
        plan: EpochPlan,
        dml: Mapping[int, Sequence[StreamChunk]],
        conns: dict[int, Channel],
    ) -> list[ActorReport]:
        """The epoch on the data plane: every task gets the plan and its stage-0 DML, runs its
        partitions of every stage, exchanging with its peers directly, and answers with its
        actors' reports; every answer is read, so the lease stays in step."""
        lease.busy = True
        if not lease.peers_sent:
            table = encode_peers([lease.peers[s] for s in range(lease.slots)], self.channel_window)
            for slot in sorted(conns):
                self._send(lease, conns[slot], PEERS, table)
            lease.peers_sent = True
        parts = dml_elements(plan, dml)
        lease.runs += 1
        frames = {slot: dml_frames(plan, slot, parts[slot] if slot < len(parts) else []) for slot in conns}
        for slot in sorted(conns):  # the plan's body only to workers that do not hold it
            held = lease.held.get(slot, NOTHING_HELD)
            plan_frames, lease.held[slot] = self._plans.frames(plan, held, lease.runs, len(frames[slot]))
            for frame in plan_frames:
                self._send(lease, conns[slot], *frame)
        streaming = self._send_dml(lease, conns, frames)
        try:
            return self._direct_answers(lease, plan, conns)
        finally:
            for f in streaming:  # done: every task read all its DML before it answered
                f.result()

    def _send_dml(
        self, lease: _Lease, conns: dict[int, Channel], frames: dict[int, list[bytes]]
    ) -> list[Future[None]]:
        """Each slot's DML frames; a bulk epoch's from a thread per slot (a task reads them as
        its stage 0 takes them: one slot's must not wait for another's)."""
        if all(len(f) <= 1 for f in frames.values()):
            for slot in sorted(conns):
                for frame in frames[slot]:
                    self._send(lease, conns[slot], DML, frame)
            return []
        if self._dml_threads is None:
            self._dml_threads = ThreadPoolExecutor(8, thread_name_prefix="piestream-lease-dml")

        def send(slot: int) -> None:
            for frame in frames[slot]:
                self._send(lease, conns[slot], DML, frame)

        return [self._dml_threads.submit(send, slot) for slot in sorted(conns) if frames[slot]]

    def _direct_answers(self, lease: _Lease, plan: EpochPlan, conns: dict[int, Channel]) -> list[ActorReport]:
        """Every task's answer to an EPOCH (all are read, so the lease stays in step)."""
        elements: list[Element] = []
        incoming: list[ChannelStats] = []  # the data plane's channels (`EpochStats.channels`)
        outgoing: dict[tuple[int, int], tuple[int, int]] = {}
        failure: BaseException | None = None
        lost: str | None = None
        aborted = False
        for slot in sorted(conns):
            reply = self._recv(lease, conns[slot])
            kind = reply[:1]
            if kind == DONE:
                done = parse_done(slot, reply)
                self._peer_bytes += done.peer_bytes
                self.credit_waits += done.credit_waits
                self.spilled_bytes += done.spilled_bytes
                self.peak_link_bytes = max(self.peak_link_bytes, done.peak_link_bytes)
                self.largest_element = max(self.largest_element, done.largest_element)
                incoming.extend(done.incoming)
                outgoing.update(done.outgoing)
                # reports only: a chunk here would have passed the driver (and fails the epoch)
                self._exchange_bytes += sum(len(p) for d, p in done.elements if d != REPORT)
                elements.extend(done.elements)
                continue
            text = reply[1:].decode(errors="replace")
            if kind == LOST:
                lost = lost or text
            elif kind == ABORTED:
                aborted = True  # the peer that gave up first says why
            elif failure is None:
                failed = decode_failure(bytes(reply[1:])) if kind == FAILED else None
                failure = failed if failed is not None else LeasedTaskError(f"slot {slot} failed: {text}")
        lease.busy = False
        self._channels = merge_channels(incoming, outgoing)
        if lost is not None:
            self._end_lease(lease, stop=False)
            raise LeaseLost(f"the leased Spark job's data plane failed: {lost}")
        if failure is None and aborted:
            failure = InternalError("a task of the lease gave up the epoch, none said why")
        if failure is not None:
            raise failure
        return collect_reports(plan, elements)

    def _run_via_driver(
        self,
        lease: _Lease,
        plan: EpochPlan,
        dml: Mapping[int, Sequence[StreamChunk]],
        conns: dict[int, Channel],
    ) -> list[ActorReport]:
        """The epoch with the driver routing every stage's output to the next (exchange
        "driver")."""
        blob = encode_plan(plan)
        lease.busy = True
        for slot in sorted(conns):
            self._send(lease, conns[slot], PLAN, blob)
        lease.busy = False

        def stage(k: int, parts: list[list[Element]]) -> list[list[Element]]:
            lease.busy = True
            for i, part in enumerate(parts):
                self._send(lease, conns[i], RUN_STAGE, STAGE.pack(k), encode_elements(part))
            outs: list[list[Element]] = []
            failure: BaseException | None = None
            for i in range(len(parts)):  # every answer is read, so the lease stays in step
                reply = self._recv(lease, conns[i])
                kind = reply[:1]
                if kind == OUT:
                    out = decode_elements(reply, 1)
                    if k + 1 < len(plan.stages):  # routed by this process to the next stage
                        self._exchange_bytes += sum(len(p) for d, p in out if d != REPORT)
                    outs.append(out)
                    continue
                outs.append([])
                if failure is None:
                    failed = decode_failure(bytes(reply[1:])) if kind == FAILED else None
                    if failed is not None:
                        failure = failed
                    else:
                        text = reply[1:].decode(errors="replace")
                        failure = LeasedTaskError(f"slot {i} failed in stage {k}: {text}")
            lease.busy = False
            if failure is not None:
                raise failure
            return outs

        return run_stages(plan, dml, stage)

    def _send(self, lease: _Lease, chan: Channel, *parts: bytes) -> None:
        try:
            chan.send(*parts)
        except OSError as e:
            raise LeaseLost(f"the leased Spark job lost a task: {e}") from e

    def _recv(self, lease: _Lease, chan: Channel) -> bytearray:
        """A task's next frame; waits as long as the task works, but not past its job's end."""
        while True:
            try:
                ready, _, _ = select.select([chan], [], [], _POLL)
            except (OSError, ValueError) as e:
                raise LeaseLost(f"the leased Spark job lost a task: {e}") from e
            if ready:
                try:
                    return chan.recv()
                except FrameRejected as e:  # logged and closed by the channel
                    raise LeaseLost(f"the leased Spark job's wire failed: {e}") from e
                except (EOFError, OSError) as e:
                    raise LeaseLost(f"the leased Spark job lost a task: {e}") from e
            if lease.job_done.is_set() or self._closed.is_set():
                why = lease.job_error or "it ended"
                raise LeaseLost(f"the leased Spark job ended mid-epoch: {why}")

    # -- lease lifecycle --------------------------------------------------------------------------
    def _usable_lease(self, connectors: Connectors) -> _Lease | None:
        """The running lease (waiting for a pre-started one's tasks), or a new one if none runs,
        or None (run the epoch plainly). A lease whose tasks got another connector registry than
        `connectors` (one was registered since) is ended: the registry is code, in the closure."""
        lease = self._lease
        if lease is not None and (lease.connectors != connectors or lease.slots != self.task_slots):
            self._end_lease(lease, stop=True)  # ... or the cluster's slots changed since it began
            lease = None
        if lease is not None and lease.gathering:  # started after the last epoch
            return self._await_lease(lease)
        if lease is not None and lease.healthy():
            return lease
        if lease is not None:
            self._end_lease(lease, stop=False)
        for old in self._retiring:  # an ended job still holding slots would only slow the start
            old.job_done.wait(RETIRE_GRACE)
        if time.monotonic() < self._no_lease_until or self._others_waiting(None):
            return None
        return self._await_lease(self._submit_lease(connectors))

    def _submit_lease(self, connectors: Connectors | None = None) -> _Lease:
        """Start a lease's job (its tasks connect while the driver goes on)."""
        self._ensure_listener()
        self._leases += 1
        n = self.task_slots
        if connectors is None:
            connectors = registered_connectors()
        lease = _Lease(new_key(), n, f"piestream-lease-{id(self)}-{self._leases}", connectors)
        tls = new_link_tls() if self.tls and self.exchange == "direct" else None
        self._lease = lease
        host, port = self._task_address()

        def run_job() -> None:
            # the job is built here too: its py4j calls (~15 ms) stay off the epoch's path
            try:
                # not beside the last lease's tasks: a slot whose task still runs would get a
                # second Python worker, and the two would alternate, each with the caches of
                # two epochs ago (its tasks end within ~50 ms of their STOP)
                for old in [x for x in self._retiring if x is not lease]:
                    old.job_done.wait(RETIRE_GRACE)
                src = self.sc.parallelize(range(n), n)
                outs = [
                    self._in_slot(
                        src, p, lease_task(host, port, lease.key, p, self.hook, connectors, tls), False
                    )
                    for p in range(n)
                ]
                job = self.sc.union(outs)
                self.sc.setJobGroup(lease.group, "piestream leased epochs", interruptOnCancel=False)
                if not lease.ended:  # ended while being built: no job at all
                    job.collect()
            except BaseException as e:  # cancelled, or a task died: the lease sees it as ended
                lease.job_error = e
            finally:
                lease.job_done.set()
                with lease.cv:
                    lease.cv.notify_all()
                self._last_job = time.monotonic()  # the slots' workers were busy until now

        if self._job_threads is None:
            # long-lived threads run the jobs (one ending while the next starts, a retiring one
            # being cancelled): a thread per job would open and close a py4j connection per epoch
            self._job_threads = ThreadPoolExecutor(4, thread_name_prefix="piestream-lease-job")
        self._job_threads.submit(run_job)
        self._start_reaper()  # ends it if no epoch comes, or another Spark job waits
        return lease

    def _await_lease(self, lease: _Lease) -> _Lease | None:
        """`lease` once every slot's task has connected, or None (run the epoch plainly). Tasks
        that all run are only starting their Python workers (seconds on a loaded machine, the
        first time): they get up to `startup_timeout`."""
        ready = lease.wait_ready(self.connect_timeout, final=False)
        if not ready and self._all_tasks_running(lease):
            ready = lease.wait_ready(max(0.0, self.startup_timeout - self.connect_timeout))
        if not ready:
            # the epoch runs as a plain job, but not beside this job's tasks: a slot's task
            # running twice at once would give the slot a second Python worker (and its actors
            # a worker without their caches). Tasks that connected end when told; pending
            # ones are cancelled before they start.
            self._drop_lease()
            # fewer free task slots than slots (a busy or small cluster): not every epoch should
            # wait `connect_timeout` for that
            self._no_lease_until = time.monotonic() + self.retry_seconds
            return None
        self._last_epoch = time.monotonic()
        return lease

    def _end_lease(self, lease: _Lease, stop: bool) -> None:
        """Close the lease's connections (its tasks then end by themselves and Spark keeps their
        workers); a job that does not end within RETIRE_GRACE is cancelled."""
        if self._lease is lease:
            self._lease = None
        lease.close_connections(stop)
        if lease.reaper is not None:
            return

        def retire() -> None:
            if not lease.job_done.wait(RETIRE_GRACE) and self.sc._jsc is not None:
                with contextlib.suppress(Exception):
                    self.sc.cancelJobGroup(lease.group)
                lease.job_done.wait(RETIRE_GRACE)

        lease.reaper = threading.Thread(target=retire, name="piestream-lease-retire", daemon=True)
        lease.reaper.start()
        self._retiring = [x for x in self._retiring if not x.job_done.is_set()] + [lease]

    def _all_tasks_running(self, lease: _Lease) -> bool:
        """Whether every task of `lease`'s job has a slot (so none waits for one)."""
        try:
            tracker = self.sc.statusTracker()
            for jid in tracker.getJobIdsForGroup(lease.group):
                job = tracker.getJobInfo(jid)
                for sid in job.stageIds if job is not None else []:
                    stage = tracker.getStageInfo(sid)
                    if stage is not None and stage.numActiveTasks >= lease.slots:
                        return True
        except Exception:  # the context is going down
            return False
        return False

    def _others_waiting_now(self, lease: _Lease) -> bool:
        """`_others_waiting`, asked at most every `_POLL` seconds (two JVM calls per epoch
        would be a noticeable part of a leased epoch's cost)."""
        now = time.monotonic()
        if now - self._last_check < _POLL:
            return False
        self._last_check = now
        return self._others_waiting(lease)

    def _others_waiting(self, lease: _Lease | None) -> bool:
        """Whether a Spark job other than `lease`'s (and other than retiring leases') is active.

        PySpark's status tracker fetches a job id list one py4j round trip per element (tens
        of ms in all on a loaded machine, asked several times a second): here a list is one
        round trip (`java.util.Arrays.toString`), and a lease's job ids, once seen, are kept
        (a lease's group has its one job)."""
        try:
            jvm = self._status_jvm()
            active = _ids(jvm["Arrays"].toString(jvm["tracker"].getActiveJobIds()))
            for mine in [lease, *self._retiring]:
                if not active:
                    return False
                if mine is not None:
                    if not mine.job_ids:
                        mine.job_ids = _ids(
                            jvm["Arrays"].toString(jvm["tracker"].getJobIdsForGroup(mine.group))
                        )
                    active -= mine.job_ids
            return bool(active)
        except Exception:  # the context is going down: the epoch reports it
            return False

    def _status_jvm(self) -> dict[str, Any]:
        """The JVM status tracker and `java.util.Arrays`, looked up once per SparkContext (each
        lookup by name is several round trips)."""
        jsc = self.sc._jsc
        if self._status_of is not jsc or not self._status:
            jvm = self.sc._jvm
            assert jsc is not None and jvm is not None
            self._status = {"tracker": jsc.statusTracker(), "Arrays": jvm.java.util.Arrays}
            self._status_of = jsc
        return self._status

    # -- the listener and the reaper -------------------------------------------------------------
    def _task_address(self) -> tuple[str, int]:
        """Where a lease's tasks connect: the listener."""
        assert self._listener is not None
        return self._host, int(self._listener.getsockname()[1])

    def _ensure_listener(self) -> None:
        if self._listener is not None:
            return
        self._host = _driver_host(self.sc)
        srv = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET)
        srv.bind((self._host, 0))
        srv.listen(64)
        srv.settimeout(_POLL)
        self._listener = srv
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="piestream-lease-listener", daemon=True
        )
        self._acceptor.start()

    def _accept_loop(self) -> None:
        srv = self._listener
        assert srv is not None
        try:
            while not self._closed.is_set():
                try:
                    sock, peer = srv.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                lease = self._lease
                if lease is None:
                    sock.close()  # no lease gathers tasks: nobody is expected
                    continue
                chan = Channel(sock, lease.key, FROM_DRIVER, peer=f"a task at {peer[0]}:{peer[1]}")
                try:
                    sock.settimeout(HELLO_TIMEOUT)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    # a fixed-size frame: a stranger's length prefix allocates nothing, and it
                    # must verify under the lease's key (a stranger, a task of an ended lease)
                    version, slot, pid, data_plane, held = unpack_hello(chan.recv(exact=HELLO.size))
                    sock.settimeout(None)
                except (EOFError, OSError, struct.error, ValueError):  # FrameRejected is an OSError
                    chan.close()
                    continue
                if version != WIRE_VERSION:
                    log.warning("refused a task speaking wire version %d (not %d)", version, WIRE_VERSION)
                    chan.close()
                elif not lease.offer(slot, pid, chan, data_plane, held):
                    chan.close()  # a task of an ended lease, or a slot connected twice
        finally:
            srv.close()
            self._listener = None

    def _start_reaper(self) -> None:
        if self._reaper is not None and self._reaper.is_alive():
            return
        self._reaper = threading.Thread(target=self._reap_loop, name="piestream-lease-reaper", daemon=True)
        self._reaper.start()

    def _reap_loop(self) -> None:
        """Ends an idle lease, an expired one, and one another Spark job waits for, between
        epochs (the epoch lock is only tried: a running epoch ends its lease itself)."""
        while not self._closed.wait(_POLL):
            if self._lease is None or not self._lock.acquire(blocking=False):
                continue
            try:
                lease = self._lease
                if lease is None:
                    continue
                now = time.monotonic()
                if (
                    now - self._last_epoch >= self.idle_seconds
                    # a pre-started lease has served no epoch yet: it waits `idle_seconds` for
                    # its first (with lease_seconds 0 it would be ended before any epoch came)
                    or (lease.runs > 0 and now - lease.started >= self.lease_seconds)
                    or not lease.healthy()  # a task died: its slot's peers end at once
                ):
                    self._end_lease(lease, stop=True)
                    continue
            finally:
                self._lock.release()
            # the JVM is asked without the lock: an epoch starting meanwhile does not wait for
            # its round trips (tens of ms on a loaded machine)
            if not self._others_waiting(lease) or not self._lock.acquire(blocking=False):
                continue  # (an epoch running now asks again at its end)
            try:
                if self._lease is lease:
                    self._end_lease(lease, stop=True)
            finally:
                self._lock.release()


def _ids(text: str) -> set[int]:
    """The ids of `java.util.Arrays.toString(int[])`: "[3, 4]"."""
    return {int(x) for x in text.strip("[]").split(",") if x.strip()} if text != "null" else set()


def _driver_host(sc: Any) -> str:
    """Where the tasks reach the driver: 127.0.0.1 in local mode, else `spark.driver.host`."""
    master = str(sc.master or "")
    if master.startswith("local"):
        return "127.0.0.1"
    host = sc.getConf().get("spark.driver.host")
    return str(host) if host else socket.gethostname()


#: the Spark runner kinds a database can run its epochs on (`DatabaseConfig.runner`)
SPARK_RUNNERS = ("spark", "spark-shuffle", "spark-leased")


def spark_runner(
    spark: SparkSession, kind: str, lease_seconds: float = LEASE_SECONDS, barrier_interval: float = 1.0
) -> SparkRunner:
    """The runner of `kind`: "spark" (one single-stage job per epoch), "spark-shuffle" (one job
    per epoch, a Spark shuffle per exchange) or "spark-leased" (a job serves the epochs of
    `lease_seconds`). The job started for the next epoch waits for it a few barrier intervals
    (at most MAX_IDLE_SECONDS) before it gives the slots back."""
    if kind == "spark-shuffle":
        return SparkRunner(spark)
    if kind not in SPARK_RUNNERS:
        raise ValueError(f"not a Spark runner: {kind!r} (one of {', '.join(SPARK_RUNNERS)})")
    idle = min(MAX_IDLE_SECONDS, max(IDLE_SECONDS, 2.5 * barrier_interval))
    lease = 0.0 if kind == "spark" else lease_seconds
    return LeasedSparkRunner(spark, lease_seconds=lease, idle_seconds=idle)


def check_runner_kind(kind: str) -> None:
    """Refuse a runner kind no runner has (before a database opens anything)."""
    if kind != "local" and kind not in SPARK_RUNNERS:
        raise ValueError(f"unknown runner {kind!r}: one of local, {', '.join(SPARK_RUNNERS)}")
