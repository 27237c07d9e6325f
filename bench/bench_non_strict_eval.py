"""Non-strict streaming evaluation (data errors become NULL): its cost per 1024-row chunk as the
number of failing rows grows, next to the strict (batch) evaluation of the same clean chunk.

A clean chunk is one vectorized evaluation either way; a failing chunk is bisected to find its
failing rows (O(k log n) evaluations of slices for k bad rows).

    .venv/bin/python bench/bench_non_strict_eval.py
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.types import INT
from piestream.expr import InputRef, bind_call, eval_non_strict, literal

N = 1024


def _chunk(bad: int) -> DataChunk:
    x = np.arange(1, N + 1, dtype=np.int32)
    if bad:
        x[np.linspace(0, N - 1, bad).astype(int)] = 0
    return DataChunk([pa.array(x)], length=N)


def main() -> None:
    e = bind_call("/", [literal(100), InputRef(0, INT)])
    clean = _chunk(0)
    reps = 300
    t = time.perf_counter()
    for _ in range(reps):
        e.eval(clean)
    strict = (time.perf_counter() - t) / reps
    print(f"{'case':<34}{'ms/chunk':>10}{'M rows/s':>10}")
    print(f"{'strict eval, no bad rows (anchor)':<34}{strict * 1e3:>10.3f}{N / strict / 1e6:>10.2f}")
    for bad in (0, 1, 10, 100, N):
        chunk = _chunk(bad)
        reps = 300 if bad <= 10 else 5
        t = time.perf_counter()
        for _ in range(reps):
            eval_non_strict(e, chunk)
        dt = (time.perf_counter() - t) / reps
        print(f"{f'non-strict, {bad} bad rows':<34}{dt * 1e3:>10.3f}{N / dt / 1e6:>10.2f}")


if __name__ == "__main__":
    main()
