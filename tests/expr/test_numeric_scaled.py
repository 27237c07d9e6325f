"""The per-value-scale NUMERIC core (issue 14): `common.numeric`, `common.numeric_arrays` and the
kernels of `expr.functions.numeric_scaled`, checked against PostgreSQL's printed results and
against Python's exact `decimal` arithmetic."""

from __future__ import annotations

import decimal
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.errors import DivisionByZero, FeatureNotSupported, InvalidInput, NumericOutOfRange
from piestream.expr.functions import numeric_scaled as ns


def col(*texts: str | None) -> pa.Array:
    return nm.to_arrow([None if t is None else nm.parse(t) for t in texts])


def texts(arr: pa.Array) -> list[str | None]:
    return [None if v is None else nm.format_numeric(v) for v in nm.from_arrow(arr)]


# -- values and text ---------------------------------------------------------------------------


def test_text_keeps_the_written_scale_and_reads_the_special_values_in_any_case() -> None:
    cases = {
        "1.50": "1.50",
        "1.5": "1.5",
        "-0.00": "0.00",
        "1e3": "1000",
        "1.5e-3": "0.0015",
        ".5": "0.5",
        " 7 ": "7",
        "NaN": "NaN",
        "nan": "NaN",
        "Infinity": "Infinity",
        "+inf": "Infinity",
        "-INFINITY": "-Infinity",
        "-Inf": "-Infinity",
    }
    for text, out in cases.items():
        assert nm.format_numeric(nm.parse(text)) == out, text
    assert texts(col(*cases)) == list(cases.values())
    with pytest.raises(InvalidInput, match="invalid input syntax for type numeric"):
        nm.parse("1.2.3")


def test_beyond_96_bits_or_28_fraction_digits_is_22003_never_rounded() -> None:
    """|unscaled| < 2**96 (what the value encoding stores) and at most 28 fraction digits."""
    assert nm.format_numeric(nm.parse("0." + "0" * 27 + "1")) == "0." + "0" * 27 + "1"
    assert nm.format_numeric(nm.parse(str(2**96 - 1))) == str(2**96 - 1)
    assert nm.format_numeric(nm.parse("7.9228162514264337593543950335")) == "7.9228162514264337593543950335"
    for text in (
        "1" + "0" * 38,
        "0." + "0" * 28 + "1",
        "1." + "0" * 29,
        str(2**96),
        "7.9228162514264337593543950336",
    ):
        with pytest.raises(NumericOutOfRange) as e:
            nm.parse(text)
        assert e.value.sqlstate == "22003"


def test_the_arrow_column_round_trips_scales_specials_and_nulls() -> None:
    values = ["1.50", "1.5", None, "NaN", "-Infinity", "Infinity", "-12345678901234567890.123456789", "0"]
    arr = col(*values)
    assert arr.type == nm.NUMERIC_VALUE_ARROW
    assert texts(arr) == ["1.50", "1.5", None, "NaN", "-Infinity", "Infinity", values[6], "0"]
    assert texts(na.pack(na.unpack(arr))) == texts(arr)
    assert ns.to_text(arr).to_pylist() == texts(arr)


# -- order and equality ------------------------------------------------------------------------


def test_nan_equals_nan_and_sorts_above_infinity() -> None:
    a = na.unpack(col("NaN", "NaN", "Infinity", "1.5", "-Infinity", "1.50", "-1e28"))
    b = na.unpack(col("NaN", "Infinity", "99999999999999999999", "1.50", "-99999", "1.5", "-1e27"))
    assert na.compare(a, b).tolist() == [0, 1, 1, 0, -1, 0, -1]


def test_the_order_key_sorts_like_postgresql_and_equal_values_share_it() -> None:
    values = ["NaN", "1.50", "-Infinity", "0", "Infinity", "-2", "1.5", "-0.001", "7e28", "-7e28", "0.000"]
    keys = na.order_key(na.unpack(col(*values)))
    raw = [bytes(k) for k in keys]
    ordered = [values[i] for i in sorted(range(len(values)), key=lambda i: raw[i])]
    assert ordered[:3] == ["-Infinity", "-7e28", "-2"]
    assert ordered[-3:] == ["7e28", "Infinity", "NaN"]
    assert [Decimal(v) for v in ordered[3:-3]] == sorted(Decimal(v) for v in ordered[3:-3])
    assert raw[1] == raw[6]  # 1.50 = 1.5
    assert raw[3] == raw[10]  # 0 = 0.000
    assert len(set(raw)) == len(values) - 2


def test_normalize_strips_trailing_zeros_small_and_wide() -> None:
    arr = col("1.50", "0.000", "-2.10", "123456789012345678901234.5000", "NaN", None)
    assert texts(na.pack(na.normalize(na.unpack(arr)))) == [
        "1.5",
        "0",
        "-2.1",
        "123456789012345678901234.5",
        "NaN",
        None,
    ]


# -- arithmetic: PostgreSQL's scales -----------------------------------------------------------


def test_select_div_scale_matches_postgresql() -> None:
    cases = {
        ("2703", "7.0"): "386.1428571428571429",
        ("1", "3.0"): "0.33333333333333333333",
        ("1000000000000", "7"): "142857142857.14285714",
        ("10000000000000000", "7"): "1428571428571428.5714",
        ("1", "30000"): "0.000033333333333333333333",
        ("12443", "2"): "6221.5000000000000000",
        ("10", "4"): "2.5000000000000000",
        ("-7.5", "2.50"): "-3.0000000000000000",
        ("0", "3"): "0.00000000000000000000",
    }
    (a, b) = zip(*cases, strict=True)
    assert texts(ns.divide(col(*a), col(*b))) == list(cases.values())
    avg = ns.divide_by_counts(col("12443", "7.5", None), np.array([2, 3, 0]))
    assert texts(avg) == ["6221.5000000000000000", "2.5000000000000000", None]


def test_a_quotient_needing_more_than_28_fraction_digits_is_22003() -> None:
    """PostgreSQL gives 1/10^12 32 fraction digits; the value encoding holds 28 (documented cap)."""
    with pytest.raises(NumericOutOfRange):
        ns.divide(col("1"), col("1000000000000"))


def test_sums_take_the_larger_scale_and_products_add_scales() -> None:
    a, b = col("1.5", "1.50", "-0.001", "99999999999999999999.5"), col("1.50", "2", "0.1", "0.25")
    assert texts(ns.add(a, b)) == ["3.00", "3.50", "0.099", "99999999999999999999.75"]
    assert texts(ns.subtract(a, b)) == ["0.00", "-0.50", "-0.101", "99999999999999999999.25"]
    assert texts(ns.multiply(a, b)) == ["2.250", "3.00", "-0.0001", "24999999999999999999.875"]
    assert texts(ns.multiply(col("1940"), col("0.908"))) == ["1761.520"]


def test_rounding_keeps_the_requested_digits() -> None:
    assert texts(ns.rescale_to(col("41912.964", "1.5", "-2.5", "NaN"), 4, "round")) == [
        "41912.9640",
        "1.5000",
        "-2.5000",
        "NaN",
    ]
    assert texts(ns.rescale_to(col("2.5", "-2.5", "1234.5"), 0, "round")) == ["3", "-3", "1235"]
    assert texts(ns.rescale_to(col("1234.5"), -2, "round")) == ["1200"]
    assert texts(ns.rescale_to(col("-2.5", "2.5"), 0, "floor")) == ["-3", "2"]


# -- special values ----------------------------------------------------------------------------


def test_special_values_follow_numeric_c() -> None:
    inf, ninf, nan = "Infinity", "-Infinity", "NaN"
    assert texts(ns.subtract(col(inf, inf, nan, "1"), col(inf, ninf, "1", ninf))) == [nan, inf, nan, inf]
    assert texts(ns.add(col(inf, inf, "5.5"), col(ninf, "1", nan))) == [nan, inf, nan]
    assert texts(ns.multiply(col("0", inf, ninf, "-2"), col(inf, ninf, ninf, inf))) == [nan, ninf, inf, ninf]
    assert texts(ns.divide(col("1", inf, inf, nan, "-3"), col(inf, inf, "-2", "0", ninf))) == [
        "0",
        nan,
        ninf,
        nan,
        "0",
    ]
    assert texts(ns.negate(col(inf, ninf, nan, "1.50"))) == [ninf, inf, nan, "-1.50"]
    assert texts(ns.absolute(col(ninf, "-1.50", nan))) == [inf, "1.50", nan]
    assert texts(ns.modulus(col("7.5", inf, "7"), col("2", "3", inf))) == ["1.5", nan, "7"]


@pytest.mark.parametrize("dividend", ["1", "Infinity", "-Infinity", "0"])
def test_division_by_zero_is_22012_even_for_infinity(dividend: str) -> None:
    with pytest.raises(DivisionByZero) as e:
        ns.divide(col(dividend), col("0.00"))
    assert e.value.sqlstate == "22012"
    with pytest.raises(DivisionByZero):
        ns.modulus(col(dividend), col("0"))


def test_nan_and_infinity_do_not_convert_to_integers() -> None:
    """numeric.c's numeric_int4/8: 'cannot convert NaN to integer' (ERRCODE_FEATURE_NOT_SUPPORTED)."""
    for special, name in (("NaN", "NaN"), ("Infinity", "infinity"), ("-Infinity", "infinity")):
        with pytest.raises(FeatureNotSupported, match=f"cannot convert {name} to integer"):
            ns.to_integer(col("1", special), -(2**31), 2**31 - 1, "integer")
    out, _ = ns.to_integer(col("2.5", "-2.5", None), -(2**31), 2**31 - 1, "integer")
    assert out.tolist() == [3, -3, 0]


def test_floats_map_their_specials_and_keep_their_shortest_digits() -> None:
    f = pa.array([0.1, float("nan"), float("inf"), -float("inf"), 1e20, None], pa.float64())
    assert texts(ns.from_float(f, 15)) == [
        "0.1",
        "NaN",
        "Infinity",
        "-Infinity",
        "100000000000000000000",
        None,
    ]
    back = ns.to_float(col("0.1", "NaN", "-Infinity", "123456789012345678901234567.5"))
    assert back.to_pylist()[0] == 0.1 and np.isnan(back.to_pylist()[1])
    assert back.to_pylist()[2:] == [-float("inf"), 1.2345678901234568e26]


def test_a_typmod_rounds_and_refuses_infinity() -> None:
    assert texts(ns.apply_typmod(col("2.5", "1.005", "NaN"), 6, 2)) == ["2.50", "1.01", "NaN"]
    with pytest.raises(NumericOutOfRange, match="numeric field overflow") as e:
        ns.apply_typmod(col("Infinity"), 6, 2)
    assert "cannot hold an infinite value" in str(e.value.detail)
    with pytest.raises(NumericOutOfRange, match="numeric field overflow") as e:
        ns.apply_typmod(col("9999.995"), 6, 2)
    assert "must round to an absolute value less than 10^4" in str(e.value.detail)


# -- against Python's exact decimal arithmetic -------------------------------------------------


def _pg(d: Decimal) -> str:
    """PostgreSQL has no negative zero."""
    return str(d if d else d.copy_abs())


def _pg_div_scale(a: Decimal, b: Decimal) -> int:
    """select_div_scale written out on Decimals, independently of the vectorized one."""

    def weight_first(d: Decimal) -> tuple[int, int]:
        if not d:
            return 0, 0
        return ns.weight_digits(d)

    w1, d1 = weight_first(a)
    w2, d2 = weight_first(b)
    qweight = w1 - w2 - (1 if d1 <= d2 else 0)
    return max(16 - 4 * qweight, ns.dscale(a), ns.dscale(b), 0)


def dscale_of(d: Decimal) -> int:
    exp = d.as_tuple().exponent
    return max(-exp, 0) if isinstance(exp, int) else 0


def test_random_columns_agree_with_exact_decimal_arithmetic() -> None:
    rng = random.Random(14)
    ctx = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)

    def value(big: bool) -> Decimal:
        scale = rng.randint(0, 12)
        digits = rng.randint(0, 14 if big else 6) + scale  # aligned sums stay below 2**96
        u = rng.randint(-(10**digits) + 1, 10**digits - 1)
        return Decimal(u).scaleb(-scale)

    for big in (False, True):
        a = [value(big) for _ in range(400)]
        b = [value(big) for _ in range(400)]
        b = [x if x else Decimal("1.0") for x in b]
        ca, cb = nm.to_arrow(a), nm.to_arrow(b)
        got = nm.from_arrow(ns.add(ca, cb))
        assert got == [ctx.add(x, y) for x, y in zip(a, b, strict=True)]
        assert [str(g) for g in got] == [_pg(ctx.add(x, y)) for x, y in zip(a, b, strict=True)]
        if not big:  # the products that fit a NUMERIC (|unscaled| < 2**96, scale <= 28)
            fits = [
                i
                for i, (x, y) in enumerate(zip(a, b, strict=True))
                if abs(ctx.multiply(x, y).scaleb(dscale_of(x) + dscale_of(y))) < 2**96
            ]
            prod = nm.from_arrow(
                ns.multiply(nm.to_arrow([a[i] for i in fits]), nm.to_arrow([b[i] for i in fits]))
            )
            assert [str(p) for p in prod] == [_pg(ctx.multiply(a[i], b[i])) for i in fits]
            assert len(fits) > 100
        want: dict[int, Decimal] = {}
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            s = _pg_div_scale(x, y)
            w = ctx.divide(x, y).quantize(Decimal(1).scaleb(-s), context=ctx)
            if s <= 28 and abs(w.scaleb(s)) < 2**96:  # what the value encoding holds
                want[i] = w
        ok = sorted(want)
        q = nm.from_arrow(ns.divide(nm.to_arrow([a[i] for i in ok]), nm.to_arrow([b[i] for i in ok])))
        assert [str(v) for v in q] == [_pg(want[i]) for i in ok]
        assert len(ok) > 100
