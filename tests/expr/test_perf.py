"""Regression guard: vectorized kernels over a million rows stay in the millisecond range
(bounds are generous so a loaded machine does not fail them; see the report for figures)."""

from __future__ import annotations

import time
from decimal import Decimal

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.types import BIGINT, INT, INTERVAL, TIMESTAMP
from piestream.expr import InputRef, bind_call, cast, literal

N = 1_000_000


def _best(fn: object, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def test_million_row_kernels_are_vectorized() -> None:
    rng = np.random.default_rng(0)
    chunk = DataChunk(
        [
            pa.array(rng.integers(-(10**6), 10**6, N).astype(np.int32)),
            pa.array(rng.integers(1, 10**8, N)),
            pa.array(rng.integers(1_600_000_000_000_000, 1_700_000_000_000_000, N)).cast(pa.timestamp("us")),
        ]
    )
    i, b, ts = InputRef(0, INT), InputRef(1, BIGINT), InputRef(2, TIMESTAMP)
    bounds = {
        "int + int": (bind_call("+", [i, i]), 0.25),
        "int > literal": (bind_call(">", [i, literal(100)]), 0.25),
        "bigint / literal": (bind_call("/", [b, literal(7)]), 0.25),
        "numeric * bigint": (bind_call("*", [literal(Decimal("0.908")), b]), 1.0),
        "tumble_start": (bind_call("tumble_start", [ts, cast(literal("10 s"), INTERVAL)]), 0.5),
        "to_char": (bind_call("to_char", [ts, literal("YYYY-MM-DD")]), 1.5),
    }
    for name, (e, bound) in bounds.items():
        e.eval(chunk)
        assert _best(lambda e=e: e.eval(chunk)) < bound, name
