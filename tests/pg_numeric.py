"""PostgreSQL's NUMERIC division as a test model (numeric.c's select_div_scale), written apart
from the engine's kernels so the tests check them against the rule, not against themselves.
Importable from every test directory (tests/ holds the root conftest.py)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, localcontext


def _weight_first(d: Decimal) -> tuple[int, int]:
    """(weight, first digit) of |d| in numeric.c's base-10000 digits; (0, 0) for zero."""
    if d == 0:
        return 0, 0
    w = d.adjusted() // 4
    with localcontext(prec=80):
        return w, int(abs(d).scaleb(-4 * w))


def _dscale(d: Decimal) -> int:
    exp = d.as_tuple().exponent
    return max(-exp, 0) if isinstance(exp, int) else 0


def pg_div(a: Decimal | int, b: Decimal | int) -> Decimal:
    """a / b as PostgreSQL's numeric_div: the result scale is select_div_scale's (at least 16
    significant digits, at least either input's display scale), rounded half away from zero."""
    a, b = Decimal(a), Decimal(b)
    (w1, d1), (w2, d2) = _weight_first(a), _weight_first(b)
    qweight = w1 - w2 - (1 if d1 <= d2 else 0)
    rscale = max(16 - qweight * 4, _dscale(a), _dscale(b), 0)
    with localcontext(prec=80):
        return (a / b).quantize(Decimal(1).scaleb(-rscale), ROUND_HALF_UP)


def pg_int_avg(total: int, count: int) -> Decimal:
    """avg of integers: sum / count at select_div_scale (avg(1, 2, 2) = 1.6666666666666667)."""
    return pg_div(total, count)
