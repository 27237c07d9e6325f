"""`asof_match` against a brute-force reference: random keys and times with many ties and NULLs,
every operator, integer and string inequality columns."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from piestream.common.types import INT, VARCHAR
from piestream.stream.executors.join.asof import asof_match

_OK = {
    ">=": lambda lt, rt: rt <= lt,
    ">": lambda lt, rt: rt < lt,
    "<=": lambda lt, rt: rt >= lt,
    "<": lambda lt, rt: rt > lt,
}


@pytest.mark.parametrize("op", sorted(_OK))
@pytest.mark.parametrize("strings", [False, True])
def test_asof_match_picks_the_nearest_row(op: str, strings: bool) -> None:
    rng = random.Random(op + str(strings))

    def vals(n: int, hi: int, nulls: float) -> list[int | None]:
        return [None if rng.random() < nulls else rng.randint(0, hi) for _ in range(n)]

    for _ in range(20):
        nl, nr = rng.randint(0, 30), rng.randint(0, 30)
        lk, rk = vals(nl, 3, 0.1), vals(nr, 3, 0.1)
        lt, rt = vals(nl, 9, 0.1), vals(nr, 9, 0.1)
        conv = (lambda v: None if v is None else f"s{v}") if strings else (lambda v: v)
        ltv, rtv = [conv(v) for v in lt], [conv(v) for v in rt]
        typ, arrow = (VARCHAR, pa.string()) if strings else (INT, pa.int32())
        got = asof_match(
            [pa.array(lk, pa.int32())],
            [pa.array(rk, pa.int32())],
            [INT],
            pa.array(ltv, arrow),
            pa.array(rtv, arrow),
            typ,
            op,
        )
        for i in range(nl):
            cands = [
                j
                for j in range(nr)
                if lk[i] is not None
                and rk[j] == lk[i]
                and ltv[i] is not None
                and rtv[j] is not None
                and _OK[op](ltv[i], rtv[j])
            ]
            if not cands:
                assert got[i] == -1
                continue
            pick = max if op in (">=", ">") else min
            best = pick(rtv[j] for j in cands)
            tied = [j for j in cands if rtv[j] == best]
            # ties: the last tied row in input order for >= / >, the first for <= / <
            assert got[i] == (tied[-1] if op in (">=", ">") else tied[0])
