"""Retrying remote object-store calls: exponential backoff with jitter.

Remote stores fail transiently (throttling, a restarting server, a dropped connection). The
caller says which errors are transient; those are retried a bounded number of times with growing,
jittered sleeps so many workers hitting a throttled bucket do not retry in lock-step. Anything
else propagates at once: retrying a 403 only delays the error.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_attempts` calls; before attempt n+1, sleep ~base*2^(n-1), capped at max_delay."""

    max_attempts: int = 5
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0

    def delay(self, attempt: int) -> float:
        """The sleep after failed attempt `attempt` (1-based): "equal jitter" in [d/2, d]."""
        d = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return random.uniform(d / 2, d)


class RetriesExhausted(Exception):
    """Every attempt failed transiently; `last` is the final error, `attempts` how many were made."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    is_transient: Callable[[BaseException], bool],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `fn` until it returns, raises a non-transient error, or the attempts run out.

    Non-transient errors propagate unchanged; exhaustion raises RetriesExhausted from the last
    error, so the caller decides how to report both.
    """
    attempt = 1
    while True:
        try:
            return fn()
        except Exception as e:
            if not is_transient(e):
                raise
            if attempt >= policy.max_attempts:
                raise RetriesExhausted(attempt, e) from e
            sleep(policy.delay(attempt))
            attempt += 1
