"""Counters the server keeps for monitoring, in a form a scrape can read without locks.

The parts that do the work (barrier manager, pgwire) own plain objects from here and update
them once per epoch or per statement, never per row; the Prometheus collector of the dashboard
(`piestream.server.dashboard.metrics`) reads them at scrape time. Nothing here imports a
metrics library, so the low layers stay free of it.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
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
    per fragment, since the server started: counters, as Prometheus wants them."""

    def __init__(self) -> None:
        self._by: dict[int, defaultdict[str, float]] = {}
        self._lock = threading.Lock()

    def add(self, fragment_id: int, stats: dict[str, float], names: Sequence[str]) -> None:
        with self._lock:
            acc = self._by.get(fragment_id)
            if acc is None:
                acc = self._by[fragment_id] = defaultdict(float)
            for name in names:
                v = stats.get(name)
                if v is not None:
                    acc[name] += v

    def snapshot(self) -> dict[int, dict[str, float]]:
        with self._lock:
            return {f: dict(v) for f, v in self._by.items()}
