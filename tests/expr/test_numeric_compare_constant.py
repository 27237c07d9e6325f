"""Comparing a per-value-scale NUMERIC column with one constant (issue 14's layout): the int64
fast path (the constant aligned to each of the column's scales) agrees with the general 128-bit
comparison for every value, scale, special and constant, and the SQL operator uses it."""

from __future__ import annotations

import random
from decimal import Decimal

import numpy as np
import pytest

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.expr.functions.comparison import _compare_with_constant, numeric_compare

CONSTANTS = [
    "100.5",
    "-3",
    "0.000123",
    "1.50",
    "0",
    "-0.0000001",
    "5E+3",
    "12.3456789",
    "123456789012345678901234567",
    "-99999999999999999999.99",
]


def values(seed: int) -> list[Decimal | None]:
    rng = random.Random(seed)
    out: list[Decimal | None] = []
    for _ in range(2000):
        r = rng.random()
        if r < 0.05:
            out.append(rng.choice([nm.NAN, nm.POS_INF, nm.NEG_INF, None]))
        else:
            out.append(Decimal(rng.randint(-(10**7), 10**7)).scaleb(-rng.randint(0, 8)))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_fast_path_agrees_with_the_general_comparison(seed: int) -> None:
    col = nm.to_arrow(values(seed))
    a = na.unpack(col)
    for text in CONSTANTS:
        c = Decimal(text)
        fast = _compare_with_constant(a, c)
        assert fast is not None
        general = na.compare(a, na.unpack(nm.to_arrow([c] * len(a))))
        live = a.vmask()
        assert np.array_equal(fast[live], general[live]), text


def test_values_beyond_63_bits_take_the_general_path() -> None:
    col = nm.to_arrow([Decimal("12345678901234567890123.5"), Decimal("1")])
    assert _compare_with_constant(na.unpack(col), Decimal("2")) is None
    assert numeric_compare("greater_than", col, Decimal("2")).to_pylist() == [True, False]


def test_the_operator_matches_postgresql_with_specials_and_nulls() -> None:
    col = nm.to_arrow([Decimal("1.50"), Decimal("1.5"), None, nm.NAN, nm.NEG_INF, Decimal("1.49")])
    assert numeric_compare("equal", col, Decimal("1.500")).to_pylist() == [
        True,
        True,
        None,
        False,
        False,
        False,
    ]
    assert numeric_compare("greater_than", col, Decimal("1.5")).to_pylist() == [
        False,
        False,
        None,
        True,
        False,
        False,
    ]
    assert numeric_compare("less_than", col, nm.NAN).to_pylist() == [True, True, None, False, True, True]
