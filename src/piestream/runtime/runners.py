"""Executing an epoch plan: on Spark (the real thing) or in-process (unit tests, debugging).

Both run the same `run_partition` for every partition of a stage (one or more actors); they
differ only in who moves the elements between stages. `SparkRunner` builds one RDD per stage
(`parallelize` for stage 0, then `partitionBy` with the stage's exact partition function) and
collects the reports: one Spark job per epoch, at most one task per core and stage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

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

if TYPE_CHECKING:
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


class LocalRunner:
    """Runs every actor in this process, stage by stage."""

    def __init__(self, hook: TaskHook | None = None, task_slots: int = 0) -> None:
        self.hook = hook  # called at fixed points of every task (tests inject faults with it)
        self.task_slots = task_slots  # partitions per stage at most (0: one per actor)

    def run(self, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[ActorReport]:
        if not plan.stages:
            return []
        plan = replace(plan, task_slots=self.task_slots)
        parts = dml_elements(plan, dml)
        elements: list[Element] = []
        for k in range(len(plan.stages)):
            if k > 0:
                part_of = StagePartitioner(plan, k)
                parts = [[] for _ in range(plan.num_partitions(k))]
                for e in elements:
                    parts[part_of(e[0])].append(e)
            elements = [e for i, part in enumerate(parts) for e in run_partition(plan, k, i, part, self.hook)]
        return collect_reports(plan, elements)


class SparkRunner:
    """Runs each epoch as one Spark job on the given session."""

    def __init__(
        self, spark: SparkSession, hook: TaskHook | None = None, task_slots: int | None = None
    ) -> None:
        self.spark = spark
        self.sc = spark.sparkContext
        self.hook = hook  # pickled into each epoch's tasks (tests inject faults with it)
        # a task costs tens of ms whatever it does: a stage has at most one task per core
        self.task_slots = self.sc.defaultParallelism if task_slots is None else task_slots

    def run(self, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[ActorReport]:
        if not plan.stages:
            return []
        plan = replace(plan, task_slots=self.task_slots)
        parts = dml_elements(plan, dml)
        n0 = plan.num_partitions(0)
        rdd = self.sc.parallelize(parts, n0).mapPartitionsWithIndex(_stage_fn(plan, 0, self.hook, first=True))
        for k in range(1, len(plan.stages)):
            n = plan.num_partitions(k)
            rdd = rdd.partitionBy(n, StagePartitioner(plan, k)).mapPartitionsWithIndex(
                _stage_fn(plan, k, self.hook)
            )
        self.sc.setJobDescription(f"piestream epoch {plan.data_epoch}")
        return collect_reports(plan, rdd.collect())


def _stage_fn(plan: EpochPlan, stage: int, hook: TaskHook | None, *, first: bool = False):  # type: ignore[no-untyped-def]
    def run(index: int, it):  # type: ignore[no-untyped-def]
        if first:
            # stage 0 partitions hold one element: the list of that actor's DML elements
            elements = [e for lst in it for e in lst]
            return run_partition(plan, stage, index, elements, hook)
        return run_partition(plan, stage, index, it, hook)

    return run
