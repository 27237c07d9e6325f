"""DirtyGroups sums sum(BIGINT)'s decimal deltas as int64 halves: the groups' sums stay exact
over reductions, at the 64-bit edges, with NULL deltas, and after a value beyond 64 bits."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from piestream.common.types import BIGINT
from piestream.stream.executors.agg import dirty
from piestream.stream.executors.agg.dirty import DirtyGroups
from piestream.stream.executors.agg.states import DeltaSpec

DEC = pa.decimal128(38, 0)
EDGES = [0, 1, -1, 2**31, -(2**31), 2**32 - 1, 2**32, -(2**32), 2**63 - 1, -(2**63), 2**62]


@pytest.mark.parametrize("wide_at", [None, 3])
def test_split_sums_equal_python_sums(monkeypatch: pytest.MonkeyPatch, wide_at: int | None) -> None:
    monkeypatch.setattr(dirty, "_REDUCE_AT", 50)  # reduce (and re-sum the halves) many times
    rng = random.Random(7 if wide_at is None else 8)
    d = DirtyGroups([BIGINT], [DeltaSpec(DEC, "sum"), DeltaSpec(pa.int64(), "sum"), DeltaSpec(DEC, "max")])
    assert d._split == {0}
    want: dict[int, list[Any]] = {}
    for step in range(8):
        n = rng.randint(1, 40)
        keys = [rng.randint(0, 12) for _ in range(n)]
        vals = [
            rng.choice(EDGES) if rng.random() < 0.5 else rng.randint(-(2**63), 2**63 - 1) for _ in range(n)
        ]
        if step == wide_at:
            vals[0] = 2**63  # -(-2^63): beyond 64 bits, the halves are joined back
        nulls = [rng.random() < 0.1 for _ in range(n)]
        dv = [None if z else Decimal(v) for v, z in zip(vals, nulls, strict=True)]
        d.add([pa.array(keys, pa.int64())], [pa.array(dv, DEC), pa.array([1] * n), pa.array(dv, DEC)], n)
        for k, v in zip(keys, dv, strict=True):
            s, c, hi = want.get(k, [None, 0, None])
            if v is not None:
                s = v if s is None else s + v
                hi = v if hi is None else max(hi, v)
            want[k] = [s, (c or 0) + 1, hi]
    assert (wide_at is None) == bool(d._split)
    g = d.take()
    assert g is not None
    got = {
        k: [s, c, m]
        for k, s, c, m in zip(
            g.key_cols[0].to_pylist(),
            g.deltas[0].to_pylist(),
            g.deltas[1].to_pylist(),
            g.deltas[2].to_pylist(),
            strict=True,
        )
    }
    assert got == want
    assert g.deltas[0].type == DEC
