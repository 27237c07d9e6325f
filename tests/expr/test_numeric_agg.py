"""Retractable sum/avg of the per-value-scale NUMERIC (issue 14): PostgreSQL's scale (the largest
of the group's values, lowered again when its last value is retracted), NaN / ±Infinity counted
apart, and exact 128-bit sums, against Python's decimal arithmetic."""

from __future__ import annotations

import decimal
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from piestream.common import numeric as nm
from piestream.common.errors import NumericOutOfRange
from piestream.expr.functions.numeric_agg import SumState


def col(*texts: str | None) -> pa.Array:
    return nm.to_arrow([None if t is None else nm.parse(t) for t in texts])


def texts(arr: pa.Array) -> list[str | None]:
    return [None if v is None else nm.format_numeric(v) for v in nm.from_arrow(arr)]


def test_the_sum_has_the_largest_scale_and_retractions_lower_it() -> None:
    st = SumState.empty(3)
    st.apply(col("1.5", "2.25", "1.5", "2.5", None), np.array([0, 0, 1, 1, 2]))
    assert texts(st.sums()) == ["3.75", "4.0", None]
    st.apply(col("2.25", "0.000"), np.array([0, 1]), np.array([-1, 1]))
    assert texts(st.sums())[:2] == ["1.5", "4.000"]
    st.apply(col("0.000", "1.5", "2.5"), np.array([1, 1, 1]), np.array([-1, -1, -1]))
    assert texts(st.sums())[:2] == ["1.5", None]  # group 1 holds no values: NULL, as sum() of none


def test_avg_uses_select_div_scale() -> None:
    st = SumState.empty(2)
    st.apply(col("6221", "6222", "1.50", "2"), np.array([0, 0, 1, 1]))
    assert texts(st.avgs()) == ["6221.5000000000000000", "1.7500000000000000"]


def test_nan_and_infinities_are_counted_apart_and_retract() -> None:
    st = SumState.empty(4)
    st.apply(
        col("1", "NaN", "Infinity", "-Infinity", "Infinity", "2.5", "-Infinity"),
        np.array([0, 0, 1, 1, 2, 2, 3]),
    )
    assert texts(st.sums()) == ["NaN", "NaN", "Infinity", "-Infinity"]
    assert texts(st.avgs()) == ["NaN", "NaN", "Infinity", "-Infinity"]
    st.apply(col("NaN", "-Infinity", "Infinity"), np.array([0, 1, 2]), np.array([-1, -1, -1]))
    assert texts(st.sums()) == ["1", "Infinity", "2.5", "-Infinity"]


def test_a_sum_beyond_96_bits_is_22003_not_wrapped() -> None:
    """A NUMERIC holds |unscaled| < 2**96 (what the value encoding stores): a larger sum is 22003."""
    st = SumState.empty(1)
    big = str(2**96 - 2)
    st.apply(col(big), np.array([0]))
    with pytest.raises(NumericOutOfRange):
        st.apply(col(big), np.array([0]))
    neg = SumState.empty(1)
    neg.apply(col("-" + "4" * 28, "-" + "5" * 27), np.array([0, 0]))
    assert texts(neg.sums()) == [str(-int("4" * 28) - int("5" * 27))]
    with pytest.raises(NumericOutOfRange):
        neg.apply(col("-75" + "0" * 27), np.array([0]))


def test_random_chunks_of_inserts_and_retractions_agree_with_decimal() -> None:
    rng = random.Random(14)
    groups = 7
    st = SumState.empty(groups)
    held: list[list[Decimal]] = [[] for _ in range(groups)]
    for _ in range(30):
        vals: list[Decimal] = []
        gs: list[int] = []
        signs: list[int] = []
        for _ in range(rng.randint(1, 40)):
            g = rng.randrange(groups)
            if held[g] and rng.random() < 0.4:
                v = held[g].pop(rng.randrange(len(held[g])))
                signs.append(-1)
            else:
                scale = rng.choice([0, 1, 2, 2, 3, 9, 12])  # aligned sums stay below 2**96
                v = Decimal(rng.randint(-(10**12), 10**12)).scaleb(-scale)
                held[g].append(v)
                signs.append(1)
            vals.append(v)
            gs.append(g)
        st.apply(nm.to_arrow(vals), np.array(gs), np.array(signs))
        want: list[str | None] = []
        for h in held:
            if not h:
                want.append(None)
                continue
            scale = max(max(-v.as_tuple().exponent, 0) for v in h)  # type: ignore[operator]
            with decimal.localcontext(decimal.Context(prec=100)):
                total = sum(h, Decimal(0)).quantize(Decimal(1).scaleb(-scale))
            want.append(nm.format_numeric(total if total else abs(total)))
        assert texts(st.sums()) == want


def test_min_and_max_keep_the_chosen_values_scale() -> None:
    from piestream.expr.functions.numeric_agg import extreme_rows

    arr = col("1.5", "2.50", "NaN", "-Infinity", "1.50", None, "2.5", "-3.000", "0.10")
    groups = np.array([0, 0, 1, 1, 2, 2, 0, 3, 3])
    hi = extreme_rows(arr, groups, 5, largest=True)
    lo = extreme_rows(arr, groups, 5, largest=False)
    assert texts(arr.take(pa.array(hi[:4]))) == ["2.50", "NaN", "1.50", "0.10"]
    assert texts(arr.take(pa.array(lo[:4]))) == ["1.5", "-Infinity", "1.50", "-3.000"]
    assert hi[4] == lo[4] == -1  # no values
