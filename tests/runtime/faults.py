"""Fault injection into actor tasks (a `TaskHook` for the runners).

The hooks are pickled into Spark's task closures and run in the Python workers, so every decision
is a pure function of (seed, epoch, actor, point, attempt): a retried attempt knows whether it is
still meant to fail. On Spark the attempt is `TaskContext.attemptNumber()`; in-process (the
`LocalRunner`, where only the barrier manager retries a failed epoch) a per-process counter
counts the calls. Every injected failure appends a line to `<log_dir>/faults.log`, so a test can
check that the failures it meant to cause really happened.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from piestream.runtime.actor_task import HOOK_POINTS
from piestream.runtime.epoch_plan import EpochPlan

_LOCAL_ATTEMPTS: dict[tuple[object, ...], int] = {}


class InjectedFault(RuntimeError):
    pass


def _attempt(key: tuple[object, ...]) -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except ImportError:  # pragma: no cover - pyspark is a dependency
        ctx = None
    if ctx is not None:
        return int(ctx.attemptNumber())
    n = _LOCAL_ATTEMPTS.get(key, 0)
    _LOCAL_ATTEMPTS[key] = n + 1
    return n


def _log(log_dir: str, line: str) -> None:
    fd = os.open(os.path.join(log_dir, "faults.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_log(log_dir: str | Path) -> list[tuple[int, int, str, int]]:
    """(epoch, actor, point, attempt) of every injected failure."""
    path = Path(log_dir) / "faults.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        e, a, p, n = line.split()
        out.append((int(e), int(a), p, int(n)))
    return out


@dataclass(frozen=True)
class RandomFaults:
    """Fail a random share of tasks at a random point, on their first attempt(s) only.

    `rate` is the probability that a given (actor, epoch) fails at all. Each chosen task fails on
    attempts 0 .. n-1 with n in 1..`max_failed_attempts` (keep it below Spark's
    `spark.task.maxFailures`, 4 in the tests' `local[2,4]`). With `one_per_epoch` at most one
    actor per epoch fails, once: the in-process runner has no task retries, so each failure
    costs one of the barrier manager's epoch attempts.
    """

    seed: int
    rate: float
    log_dir: str
    max_failed_attempts: int = 2
    one_per_epoch: bool = False
    points: tuple[str, ...] = HOOK_POINTS  # where to fail
    fragment_id: int | None = None  # only this fragment's actors

    def choice(self, plan: EpochPlan, actor_id: int) -> tuple[str, int] | None:
        if self.fragment_id is not None:
            if self.fragment_id not in plan.fragments:
                return None
            if actor_id not in plan.fragment(self.fragment_id).actor_ids():
                return None
        if self.one_per_epoch:
            r = random.Random(f"{self.seed}:{plan.data_epoch}")
            if r.random() >= self.rate:
                return None
            if r.choice(sorted(plan.actor_ids())) != actor_id:
                return None
            return r.choice(self.points), 1
        r = random.Random(f"{self.seed}:{plan.data_epoch}:{actor_id}")
        if r.random() >= self.rate:
            return None
        return r.choice(self.points), r.randint(1, self.max_failed_attempts)

    def __call__(self, point: str, plan: EpochPlan, actor_id: int) -> None:
        chosen = self.choice(plan, actor_id)
        if chosen is None or chosen[0] != point:
            return
        attempt = _attempt((self.seed, plan.data_epoch, actor_id, point))
        if attempt < chosen[1]:
            _log(self.log_dir, f"{plan.data_epoch} {actor_id} {point} {attempt}")
            raise InjectedFault(f"injected: actor {actor_id} epoch {plan.data_epoch} at {point!r}")


@dataclass(frozen=True)
class AnyOf:
    """Run several hooks; the first to raise fails the task."""

    hooks: tuple[RandomFaults, ...]

    def __call__(self, point: str, plan: EpochPlan, actor_id: int) -> None:
        for h in self.hooks:
            h(point, plan, actor_id)


@dataclass(frozen=True)
class AlwaysFail:
    """Fail every attempt of the tasks of one fragment at one point (exhausts all retries)."""

    fragment_id: int
    point: str
    log_dir: str

    def __call__(self, point: str, plan: EpochPlan, actor_id: int) -> None:
        if point != self.point:
            return
        if self.fragment_id not in plan.fragments:
            return
        if actor_id not in plan.fragment(self.fragment_id).actor_ids():
            return
        _log(self.log_dir, f"{plan.data_epoch} {actor_id} {point} -1")
        raise InjectedFault(f"injected (always): actor {actor_id} epoch {plan.data_epoch} at {point!r}")
