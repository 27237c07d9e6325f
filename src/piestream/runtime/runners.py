"""Executing an epoch plan: on Spark (the real thing) or in-process (unit tests, debugging).

Both run the same `run_partition` for every partition of a stage (one or more actors); they
differ only in who moves the elements between stages. `SparkRunner` builds one RDD per stage
slot (`parallelize` for stage 0, then one shuffle per stage with the stage's exact partition
function) and collects the reports: one Spark job per epoch, at most one task per core and
stage, each slot always in the same Python worker.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from piestream.common.chunk import StreamChunk
from piestream.common.errors import InternalError, PiestreamError, client_error, parse_error_marker
from piestream.runtime.actor_task import TaskHook, run_partition
from piestream.runtime.epoch_plan import EpochPlan, StagePartitioner, dml_elements
from piestream.runtime.exchange import (
    REPORT,
    ActorFailed,
    ActorReport,
    Element,
    decode_failure,
    decode_report,
)
from piestream.runtime.spark import cluster_task_slots

if TYPE_CHECKING:
    from pyspark.core.rdd import RDD
    from pyspark.sql import SparkSession


class EpochRunner(Protocol):
    def run(self, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[ActorReport]: ...


def collect_reports(plan: EpochPlan, elements: Sequence[Element]) -> list[ActorReport]:
    """Exactly one report per actor (a re-run task may have reported twice: keep one)."""
    by_actor: dict[int, ActorReport] = {}
    failures: list[ActorFailed] = []
    for dest, payload in elements:
        if tuple(dest) != REPORT:
            raise InternalError(f"epoch job ended with a chunk for {dest}")
        failed = decode_failure(payload)
        if failed is not None:
            failures.append(failed)
            continue
        r = decode_report(payload)
        if r.epoch == plan.data_epoch:
            by_actor.setdefault(r.actor_id, r)
    if failures:  # an actor met a data error: the epoch fails with it (the lowest actor's)
        raise min(failures, key=lambda f: f.actor_id)
    missing = plan.actor_ids() - set(by_actor)
    if missing:
        raise InternalError(f"epoch {plan.data_epoch}: actors {sorted(missing)} did not report")
    return [by_actor[a] for a in sorted(by_actor)]


def epoch_error(e: BaseException) -> tuple[PiestreamError, int | None]:
    """What a client may see of an epoch's failure `e` (raised in-process, or by Spark where a
    worker's exception arrives as traceback text only) and the fragment that failed, if known."""
    if isinstance(e, ActorFailed):
        return e.error, e.fragment_id
    marked = parse_error_marker(str(e))
    if marked is not None:
        return marked[0], marked[1].get("fragment_id")
    return client_error(e, "streaming epoch failed"), None


#: Runs one stage: (stage, input elements per partition) -> output elements per partition.
StageFn = Callable[[int, list[list[Element]]], list[list[Element]]]


def run_stages(
    plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]], stage: StageFn
) -> list[ActorReport]:
    """An epoch driven from this process: every stage's partitions by `stage`, in stage order,
    each stage's output routed to the next stage's partitions (`StagePartitioner`)."""
    parts = dml_elements(plan, dml)
    outs: list[list[Element]] = []
    for k in range(len(plan.stages)):
        if k > 0:
            part_of = StagePartitioner(plan, k)
            parts = [[] for _ in range(plan.num_partitions(k))]
            for out in outs:
                for e in out:
                    parts[part_of(e[0])].append(e)
        outs = stage(k, parts)
    return collect_reports(plan, [e for out in outs for e in out])


#: The slots of the in-process runner (no cluster to ask): the parallelism jobs had before ADAPTIVE.
DEFAULT_SLOTS = 2


class LocalRunner:
    """Runs every actor in this process, stage by stage."""

    def __init__(self, hook: TaskHook | None = None, task_slots: int = 0) -> None:
        self.hook = hook  # called at fixed points of every task (tests inject faults with it)
        self.task_slots = task_slots  # partitions per stage at most (0: one per actor)
        #: what ADAPTIVE jobs follow in-process, where there is no cluster: the default parallelism
        self.slots = DEFAULT_SLOTS

    def cluster_slots(self) -> int:
        return self.slots

    def run(self, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[ActorReport]:
        if not plan.stages:
            return []
        plan = replace(plan, task_slots=self.task_slots)

        def stage(k: int, parts: list[list[Element]]) -> list[list[Element]]:
            return [list(run_partition(plan, k, i, part, self.hook)) for i, part in enumerate(parts)]

        return run_stages(plan, dml, stage)


#: Seconds without a job after which the runner touches every slot's worker: well inside Spark's
#: one minute of pool inactivity after which it stops idle workers (checked every 10 s).
KEEP_ALIVE_SECONDS = 20.0


class SparkRunner:
    """Runs each epoch as one Spark job on the given session.

    Actors keep their worker process (spark-notes §4: Python workers are reused, but a partition
    lands on whichever idle worker comes first). Each partition index p of a stage ("slot" p) is
    its own single-partition Python RDD built with the environment variable
    ``PIESTREAM_WORKER_SLOT=p``; Spark keys its Python worker pools by environment, so slot p's
    tasks always get slot p's worker, and since only one of them runs at a time that pool holds
    one long-lived process. An actor keeps its slot across epochs (`EpochPlan.partition_index`),
    so it runs where its operator caches are. The slots of a stage are joined by one union and
    one shuffle, exactly as `partitionBy` would do it (buckets formed in Python, keyed by the
    destination's partition).
    """

    def __init__(
        self,
        spark: SparkSession,
        hook: TaskHook | None = None,
        task_slots: int | None = None,
        keep_alive_seconds: float | None = KEEP_ALIVE_SECONDS,
    ) -> None:
        self.spark = spark
        self.sc = spark.sparkContext
        self.hook = hook  # pickled into each epoch's tasks (tests inject faults with it)
        # a task costs tens of ms whatever it does: a stage has at most one task per core. Unless
        # given, the slots are the cluster's (`cluster_task_slots`) and follow it between epochs
        # once `cluster_slots` saw a change (executors joined or were lost)
        self._follow_slots = task_slots is None
        if task_slots is None:
            task_slots = cluster_task_slots(self.sc) or self.sc.defaultParallelism
        self.task_slots = task_slots
        self._slots_seen = task_slots
        self.keep_alive_seconds = keep_alive_seconds
        self._lock = threading.Lock()  # one Spark job of this runner at a time (epoch or keep-alive)
        self._last_job = time.monotonic()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        self._classes: dict[str, Any] = {}  # `_jvm_classes`, for the context `_classes_of`
        self._classes_of: Any = None
        self._slot_sets: dict[int, Any] = {}

    def run(self, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[ActorReport]:
        if not plan.stages:
            return []
        self._start_keeper()
        with self._lock:
            if self._slots_seen != self.task_slots:  # the epoch runs on the slots last seen
                self.task_slots = self._slots_seen
            try:
                return self._run(plan, dml)
            finally:
                self._last_job = time.monotonic()

    def cluster_slots(self) -> int:
        """The task slots ADAPTIVE jobs follow: the cluster's now (`cluster_task_slots`; the last
        ones seen while no executor is registered), or the `task_slots` the runner was given. The
        runner's own stages follow from the next epoch on."""
        if self._follow_slots:
            self._slots_seen = cluster_task_slots(self.sc) or self._slots_seen
        return self._slots_seen

    def close(self) -> None:
        """Stop keeping the slots' workers alive (a later `run` starts again)."""
        self._stop.set()
        keeper, self._keeper = self._keeper, None
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join(timeout=30)

    # -- keeping the slots' Python workers (and their operator caches) alive --------------------
    def _start_keeper(self) -> None:
        if self.keep_alive_seconds is None or (self._keeper is not None and self._keeper.is_alive()):
            return
        self._stop = threading.Event()
        self._keeper = threading.Thread(
            target=_keep_alive_loop,
            args=(weakref.ref(self), self._stop),
            name="piestream-keep-alive",
            daemon=True,
        )
        self._keeper.start()

    def keep_alive(self) -> list[int]:
        """Run one no-op task in every slot's worker (under the epoch lock, so it never takes a
        worker an epoch needs) and return the workers' pids, by slot.

        Spark stops a worker pool's idle Python workers when the pool saw no activity for a
        minute (`PythonWorkerFactory.IDLE_WORKER_TIMEOUT_NS`, hard-coded: no configuration
        changes it, spark-notes §4), and with them the operator caches of the actors of that
        slot. A task handed to the slot's worker and back counts as activity."""
        with self._lock:
            return self._keep_alive_job()

    def _keep_alive_job(self) -> list[int]:
        """`keep_alive`'s job, under the epoch lock."""
        n = self.task_slots
        src = self.sc.parallelize(range(n), n)
        outs = [self._in_slot(src, p, _worker_pid, False) for p in range(n)]
        self.sc.setJobDescription("piestream keep-alive")
        pids = self.sc.union(outs).collect()
        self._last_job = time.monotonic()
        return [pid for _, pid in sorted(pids)]

    def _run(self, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[ActorReport]:
        plan = replace(plan, task_slots=self.task_slots)
        parts = dml_elements(plan, dml)
        last = len(plan.stages) - 1
        src = self.sc.parallelize(parts, plan.num_partitions(0))
        outs = [self._slot(src, plan, 0, p, last == 0) for p in range(plan.num_partitions(0))]
        for k in range(1, len(plan.stages)):
            shuffled = self._shuffle(outs, plan.num_partitions(k))
            outs = [self._slot(shuffled, plan, k, p, k == last) for p in range(plan.num_partitions(k))]
        self.sc.setJobDescription(f"piestream epoch {plan.data_epoch}")
        return collect_reports(plan, self.sc.union(outs).collect())

    def _slot(self, src: RDD[Any], plan: EpochPlan, stage: int, slot: int, last: bool) -> RDD[Any]:
        """Partition `slot` of `src` run by slot `slot`'s worker: the stage's actors of that
        partition; unless `last`, the output comes bucketed for the next stage's shuffle."""
        return self._in_slot(src, slot, _slot_fn(plan, stage, slot, self.hook, last), not last)

    def _in_slot(self, src: RDD[Any], slot: int, fn: Any, bypass: bool) -> RDD[Any]:
        """Partition `slot` of `src` mapped by `fn` in slot `slot`'s worker pool."""
        from pyspark.core.rdd import RDD

        jvm = self._jvm_classes()
        pruned = jvm["PartitionPruningRDD"].create(src._jrdd.rdd(), self._slot_set(slot))
        one: RDD[Any] = RDD(pruned.toJavaRDD(), self.sc, src._jrdd_deserializer)
        out = one.mapPartitions(fn)
        if bypass:
            out._bypass_serializer = True  # type: ignore[attr-defined]
        with _ENV_LOCK:  # the Python function takes the context's environment when it is built
            # swapped, never mutated: another thread (a user's, or a lease's job thread) may be
            # iterating the context's dict while it builds its own function
            env = self.sc.environment
            self.sc.environment = {**env, SLOT_ENV: str(slot)}
            try:
                out._jrdd  # noqa: B018 - builds the JVM PythonRDD now, with the slot's environment
            finally:
                self.sc.environment = env
        return out

    def _jvm_classes(self) -> dict[str, Any]:
        """The JVM classes the runner calls, looked up once per SparkContext.

        Each py4j lookup by name (`jvm.org.apache...`, `jvm.PythonRDD`) is a round trip per
        package segment, and for most of them the JVM first tries `Class.forName` on the
        partial name, which fails only after searching every jar of the class path: a third
        of the JVM's CPU in an empty epoch went there."""
        if self._classes_of is not self.sc._jsc or not self._classes:
            jvm = self.sc._jvm
            assert jvm is not None
            self._classes = {
                "PartitionPruningRDD": jvm.org.apache.spark.rdd.PartitionPruningRDD,
                "PairwiseRDD": jvm.org.apache.spark.api.python.PairwiseRDD,
                "PythonPartitioner": jvm.org.apache.spark.api.python.PythonPartitioner,
                "PythonRDD": jvm.org.apache.spark.api.python.PythonRDD,
                "PythonUtils": jvm.org.apache.spark.api.python.PythonUtils,
                "ArrayList": jvm.java.util.ArrayList,
            }
            self._slot_sets = {}
            self._classes_of = self.sc._jsc
        return self._classes

    def _slot_set(self, slot: int) -> Any:
        """The Scala `Set(slot)` that `PartitionPruningRDD` keeps partitions by (an Int =>
        Boolean), built once per slot."""
        keep = self._slot_sets.get(slot)
        if keep is None:
            jvm = self._jvm_classes()
            chosen = jvm["ArrayList"]()
            chosen.add(slot)
            keep = self._slot_sets[slot] = jvm["PythonUtils"].toSeq(chosen).toSet()
        return keep

    def _shuffle(self, outs: list[RDD[Any]], n: int) -> RDD[Any]:
        """One shuffle of the slots' bucketed output into `n` partitions (`partitionBy`'s)."""
        from pyspark.core.rdd import RDD
        from pyspark.serializers import BatchedSerializer

        jvm = self._jvm_classes()
        joined = self.sc.union(outs)
        pairs = jvm["PairwiseRDD"](joined._jrdd.rdd()).asJavaPairRDD()
        partitioner = jvm["PythonPartitioner"](n, 0)
        jrdd = jvm["PythonRDD"].valueOfPair(pairs.partitionBy(partitioner))
        return RDD(jrdd, self.sc, BatchedSerializer(self.sc._unbatched_serializer))


#: The environment variable that gives each slot's tasks their own Python worker pool.
SLOT_ENV = "PIESTREAM_WORKER_SLOT"
_ENV_LOCK = threading.Lock()


def _keep_alive_loop(ref: weakref.ref[SparkRunner], stop: threading.Event) -> None:
    """While the runner lives and is not closed: after `keep_alive_seconds` without a job, run a
    keep-alive job. Ends by itself when the SparkContext stops."""
    while True:
        runner = ref()
        if runner is None or runner.keep_alive_seconds is None:
            return
        wait = runner._last_job + runner.keep_alive_seconds - time.monotonic()
        interval = runner.keep_alive_seconds
        if wait <= 0:
            if runner.sc._jsc is None:  # the context was stopped
                return
            try:
                runner.keep_alive()
            except Exception:  # Spark going down: the next epoch reports its errors
                return
            wait = interval
        del runner  # hold no reference while asleep
        if stop.wait(max(0.5, wait)):
            return


def _worker_pid(it: Iterable[int]) -> list[tuple[int, int]]:
    worker_gc_checkpoint()
    return [(slot, os.getpid()) for slot in it]


#: Tasks of a slot's worker between two full collections of its whole heap (`worker_gc_checkpoint`).
GC_FULL_EVERY = 64
_worker_tasks = 0


def worker_gc_checkpoint() -> None:
    """Called in a slot's Python worker at the start of each task.

    PySpark's daemon runs a full `gc.collect()` in a reused worker after *every* task. It scans
    every tracked object of the interpreter (modules, classes, decoded plans, caches: ~90K here)
    and cost ~45 ms of CPU per task, ten times the task's own work in an empty epoch. At a task's
    start the previous task's collection has just run, so every object left is live: freezing
    them (`gc.freeze`, O(1)) keeps them out of the next collections, which then scan only what
    this task allocated. Non-cyclic garbage is still freed by reference counting; a cycle that
    was live when frozen and dies later waits for the next full collection: every
    `GC_FULL_EVERY` tasks the heap is unfrozen, and the daemon's collection after that task
    scans (and frees) everything."""
    global _worker_tasks
    _worker_tasks += 1
    if _worker_tasks % GC_FULL_EVERY == 0:
        gc.unfreeze()
    else:
        gc.freeze()


def _slot_fn(plan: EpochPlan, stage: int, slot: int, hook: TaskHook | None, last: bool):  # type: ignore[no-untyped-def]
    def run(it):  # type: ignore[no-untyped-def]
        worker_gc_checkpoint()
        if stage == 0:
            # stage 0 partitions hold one element: the list of that actor's DML elements
            elements = [e for lst in it for e in lst]
        else:
            elements = it
        out = run_partition(plan, stage, slot, elements, hook)
        if last:
            return out
        return _bucketed(out, StagePartitioner(plan, stage + 1))

    return run


def _bucketed(elements: Iterable[Element], part_of: StagePartitioner) -> Iterator[bytes]:
    """Elements as `partitionBy` ships them: (partition, pickled list of elements) pairs."""
    from pyspark.serializers import CPickleSerializer, pack_long

    ser = CPickleSerializer()
    buckets: dict[int, list[Element]] = {}
    size = 0
    for e in elements:
        buckets.setdefault(part_of(e[0]), []).append(e)
        size += len(e[1])
        if size > _BUCKET_BYTES:
            yield from _flush(buckets, ser, pack_long)
            size = 0
    yield from _flush(buckets, ser, pack_long)


_BUCKET_BYTES = 16 << 20


def _flush(buckets: dict[int, list[Element]], ser: Any, pack_long: Any) -> Iterator[bytes]:
    for p in sorted(buckets):
        yield pack_long(p)
        yield ser.dumps(buckets[p])
    buckets.clear()
