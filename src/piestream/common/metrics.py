"""Counters the server keeps for monitoring, in a form a scrape can read without locks.

The parts that do the work (barrier manager, pgwire) own plain objects from here and update
them once per epoch or per statement, never per row; the Prometheus collector of the dashboard
(`piestream.server.dashboard.metrics`) reads them at scrape time. Nothing here imports a
metrics library, so the low layers stay free of it.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict, deque
from collections.abc import Sequence

#: seconds: from a millisecond statement to a minute-long epoch (Prometheus' defaults, widened)
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


class Histogram:
    """Observations counted into fixed buckets (upper bounds, +Inf implied), with their sum."""

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, value)] += 1
            self.sum += value

    @property
    def count(self) -> int:
        return sum(self._counts)

    def cumulative(self) -> tuple[list[tuple[str, int]], float]:
        """([(upper bound as text, observations ≤ it)], sum): what an exposition format wants."""
        with self._lock:
            counts, total = list(self._counts), self.sum
        out: list[tuple[str, int]] = []
        acc = 0
        for bound, n in zip((*(repr(float(b)) for b in self.bounds), "+Inf"), counts, strict=True):
            acc += n
            out.append((bound, acc))
        return out, total


class LabelledHistograms:
    """One `Histogram` per label value (e.g. per statement kind), created on first use."""

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self._by: dict[str, Histogram] = {}
        self._lock = threading.Lock()

    def observe(self, label: str, value: float) -> None:
        h = self._by.get(label)
        if h is None:
            with self._lock:
                h = self._by.setdefault(label, Histogram(self.bounds))
        h.observe(value)

    def items(self) -> list[tuple[str, Histogram]]:
        with self._lock:
            return sorted(self._by.items())


class FragmentTotals:
    """Sums of the numbers actors report each epoch (rows in/out, seconds, cache lookups ...),
    per fragment, since the server started: counters, as Prometheus wants them. The last
    `window_s` seconds of each fragment's sums are kept too, for rates (`rate`)."""

    def __init__(self, window_s: float = 10.0) -> None:
        self._by: dict[int, defaultdict[str, float]] = {}
        self._history: dict[int, deque[tuple[float, dict[str, float]]]] = {}
        self._lock = threading.Lock()
        self.window_s = window_s

    def add(self, fragment_id: int, stats: dict[str, float], names: Sequence[str]) -> None:
        now = time.monotonic()
        with self._lock:
            acc = self._by.get(fragment_id)
            if acc is None:
                acc = self._by[fragment_id] = defaultdict(float)
                # the fragment's start: its rate counts from its first epoch
                self._history[fragment_id] = deque([(now, {})])
            for name in names:
                v = stats.get(name)
                if v is not None:
                    acc[name] += v
            h = self._history[fragment_id]
            h.append((now, dict(acc)))  # per actor report, once per epoch: a few per second
            while len(h) > 2 and h[1][0] < now - self.window_s:
                h.popleft()

    def rate(self, fragment_id: int, name: str) -> float | None:
        """`name`'s increase per second since the oldest kept sum (at most `window_s` before the
        last epoch, or the fragment's start); None when not seen yet. It falls towards 0 while
        no epoch commits."""
        now = time.monotonic()
        with self._lock:
            h = self._history.get(fragment_id)
            if not h:
                return None
            t0, first = h[0]
            last = h[-1][1]
        return (last.get(name, 0.0) - first.get(name, 0.0)) / max(now - t0, 1e-3)

    def snapshot(self) -> dict[int, dict[str, float]]:
        with self._lock:
            return {f: dict(v) for f, v in self._by.items()}
