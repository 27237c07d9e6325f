"""The body of one Spark task: run one actor for one epoch.

The task reads its whole input (exhausting the iterator keeps the Python worker reusable),
runs its actors in the plan's order (an actor fused into its upstream's task over a no-shuffle
edge gets that actor's output here, not through a shuffle), orders the chunks per port by
(source actor, sequence), builds the actor's executors over a HummockStorage at the epoch's
pinned version, runs the epoch, uploads the SSTs it wrote (fresh object names every attempt;
meta makes them durable when it commits the epoch), and emits: its output chunks dispatched to
downstream actors, its report for the driver, and every element it only forwards to a deeper stage.

An actor that fails with a data error (SQLSTATE class 22 or 23: the same input fails every
attempt) reports the failure instead of failing the task, so Spark neither retries it nor loses
its Python worker; the driver raises it (`collect_reports`). Any other failure raises
`ActorFailed`, which Spark retries and then hands to the driver as traceback text, with the cause
written into it as a marker (`epoch_error` rebuilds the cause from it).

A `TaskHook` (tests: fault injection; benchmarks: probes) is called at fixed points of the task:
`HOOK_POINTS`, in that order. It may raise to fail the task attempt right there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from piestream.common.chunk import StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.errors import InternalError, client_error, is_data_error
from piestream.common.vnode import VnodeBitmap
from piestream.plan.fragment import actor_id
from piestream.runtime.epoch_plan import EpochPlan
from piestream.runtime.exchange import (
    REPORT,
    ActorFailed,
    ActorReport,
    Element,
    decode_chunk,
    encode_chunk,
    encode_failure,
    encode_report,
)
from piestream.storage.hummock.sstable_store import url_sstable_store
from piestream.storage.hummock.store import HummockStorage
from piestream.stream.actor import Actor, coalesced
from piestream.stream.cache.registry import WORKER_CACHES
from piestream.stream.dispatch import dispatch
from piestream.stream.errors import ActorErrors
from piestream.stream.executor import ActorContext
from piestream.stream.watermark import reported_watermarks

#: Where a task calls its hook: input read; executors ran the epoch; SSTs uploaded; first output
#: element emitted; report emitted (only forwarded elements remain).
HOOK_POINTS = ("input", "executed", "synced", "emitting", "reported")


class TaskHook(Protocol):
    def __call__(self, point: str, plan: EpochPlan, actor_id: int) -> None: ...


#: an actor's input: (port, its chunks) in the deterministic order (ports by name; within a
#: port source actors ascending, each in sequence order), chunks possibly still arriving
PortInputs = Iterable[tuple[str, Iterable[StreamChunk]]]


def run_partition(
    plan: EpochPlan,
    stage: int,
    index: int,
    elements: Iterable[Element],
    hook: TaskHook | None = None,
) -> Iterator[Element]:
    """Run the actors of partition `index` of `stage` (one after the other) over their input."""
    started = time.perf_counter()
    mine = plan.actors_of_partition(stage, index)
    forward: list[Element] = []
    received: dict[tuple[int, ...], list[tuple[str, int, int, StreamChunk]]] = {me: [] for me in mine}
    for dest, payload in elements:  # exhaust the input first
        inbox = received.get(tuple(dest))
        if inbox is not None:
            env = decode_chunk(payload)
            inbox.append((env.port, env.source_actor, env.seq, env.chunk))
        else:
            forward.append((dest, payload))
    done: set[tuple[int, ...]] = set()

    def inputs_of(me: tuple[int, int]) -> PortInputs:
        done.add(me)
        return sorted_inputs(received[me])

    def fused(dest: tuple[int, ...], payload: bytes) -> bool:
        inbox = received.get(tuple(dest))
        if inbox is None:
            return False
        # a fused downstream actor of this task (no-shuffle edge, `epoch_plan`): its input is
        # complete once this actor is done, and it runs after it
        if tuple(dest) in done:
            raise InternalError(f"actor {dest} of this task ran before its input")
        env = decode_chunk(payload)
        inbox.append((env.port, env.source_actor, env.seq, env.chunk))
        return True

    yield from run_actors(plan, mine, inputs_of, hook, started, fused)
    yield from forward


def sorted_inputs(received: list[tuple[str, int, int, StreamChunk]]) -> PortInputs:
    """Received chunks as an actor's input: sorted by (port, source actor, sequence)."""
    received.sort(key=lambda r: (r[0], r[1], r[2]))
    inputs: dict[str, list[StreamChunk]] = {}
    for port, _, _, chunk in received:
        inputs.setdefault(port, []).append(chunk)
    return list(inputs.items())


def run_actors(
    plan: EpochPlan,
    mine: list[tuple[int, int]],
    inputs_of: Callable[[tuple[int, int]], PortInputs],
    hook: TaskHook | None,
    started: float,
    fused: Callable[[tuple[int, ...], bytes], bool] | None = None,
) -> Iterator[Element]:
    """Run the actors `mine` one after the other, each over `inputs_of(actor)`; an element
    `fused` takes (for a later actor of `mine`) is not yielded."""
    for me in mine:
        try:
            for dest, payload in _run_actor(plan, me, inputs_of(me), hook, started):
                if fused is None or not fused(dest, payload):
                    yield dest, payload
        except Exception as e:
            failed = ActorFailed(client_error(e, "streaming epoch failed"), me[0], actor_id(*me))
            if not _is_data_error(failed):
                raise failed from e
            yield REPORT, encode_failure(failed)  # the epoch fails; its other actors need not run
            break
        started = time.perf_counter()


def _is_data_error(failed: ActorFailed) -> bool:
    """A data exception or integrity violation: every attempt over the same input fails alike."""
    return is_data_error(failed.error)


def _run_actor(
    plan: EpochPlan,
    me: tuple[int, int],
    inputs: PortInputs,
    hook: TaskHook | None,
    started: float,
) -> Iterator[Element]:
    fragment_id, actor_index = me
    frag = plan.fragment(fragment_id)
    rows_in = 0

    def counted(chunks: Iterable[StreamChunk]) -> Iterator[StreamChunk]:
        nonlocal rows_in
        for c in chunks:  # per chunk, not per row
            rows_in += c.cardinality
            yield c

    aid = actor_id(fragment_id, actor_index)
    if hook is not None:
        hook("input", plan, aid)
    t0 = time.perf_counter()
    storage = HummockStorage(url_sstable_store(plan.store_url), plan.version, plan.storage_options)
    vnodes = frag.vnode_bitmap(actor_index) if not frag.singleton else VnodeBitmap.full(1)
    # the worker's caches of this actor, if they reflect the committed epoch (same data
    # directory, same vnodes); otherwise empty ones
    cache, warm = WORKER_CACHES.acquire(plan.store_url, aid, plan.committed_epoch, vnodes.to_bytes())
    ctx = ActorContext(
        actor_id=aid,
        fragment_id=fragment_id,
        actor_index=actor_index,
        parallelism=frag.parallelism,
        vnodes=vnodes,
        storage=storage,
        config=plan.config,
        committed_epoch=plan.committed_epoch,
        cache=cache,
        connectors=plan.connectors,
        errors=ActorErrors(fragment_id),
        known_watermarks=dict(plan.global_watermarks),
    )
    actor = Actor(ctx, frag.root)
    actor.init(EpochPair(plan.data_epoch, plan.committed_epoch))
    t1 = time.perf_counter()
    out = actor.run_epoch_streamed(((port, counted(chunks)) for port, chunks in inputs), plan.barrier)
    t2 = time.perf_counter()
    if hook is not None:
        hook("executed", plan, aid)
    t3 = time.perf_counter()
    # not fsynced here: meta makes every reported SST durable at once before it commits the
    # epoch (`HummockManager.commit_epoch`), one group of fsyncs per epoch, not two per actor
    ssts = storage.sync(plan.data_epoch, durable=False)
    t4 = time.perf_counter()
    if hook is not None:
        hook("synced", plan, aid)
    watermarks = storage.take_table_watermarks()
    cache.charge(plan.config.cache_budget_bytes)
    WORKER_CACHES.publish(plan.store_url, aid, plan.data_epoch, cache)
    hits, misses = cache.take_counts()

    port = f"fragment:{fragment_id}"
    seq = 0
    rows_out = 0
    for chunk in coalesced(out):  # fewer, larger pieces to dispatch, encode and decode
        rows_out += chunk.cardinality
        for edge in frag.outputs:
            for dst, sub in dispatch(chunk, edge, actor_index):
                yield (edge.downstream_fragment_id, dst), encode_chunk(port, aid, seq, sub)
                seq += 1
                if hook is not None and seq == 1:
                    hook("emitting", plan, aid)
    t5 = time.perf_counter()
    stats = {
        "rows_in": float(rows_in),
        "rows_out": float(rows_out),
        "seconds": t5 - started,  # from the task's start for its first actor (input read)
        "build_s": t1 - t0,  # executors built and initialised from committed state
        "execute_s": t2 - t1,  # the epoch's chunks and the barrier through the executors
        "sync_s": t4 - t3,  # SSTs built and uploaded
        "emit_s": t5 - t4,  # output encoded and handed to Spark
        "block_cache_hit_rate": storage.sstables.block_cache.hit_rate(),
        "executor_cache_warm": float(warm),  # the worker ran this actor at the committed epoch
        "cache_hits": float(hits),  # keys operator caches answered
        "cache_misses": float(misses),  # ... and keys they sent to the state store
        "cache_bytes": float(cache.nbytes),
        "worker_cache_bytes": float(WORKER_CACHES.nbytes),
        **ctx.metrics,
    }
    report = ActorReport(
        aid, plan.data_epoch, tuple(ssts), watermarks, stats, ctx.errors.records(), reported_watermarks(ctx)
    )
    yield REPORT, encode_report(report)
    if hook is not None:
        hook("reported", plan, aid)
