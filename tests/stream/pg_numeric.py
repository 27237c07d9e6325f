"""PostgreSQL's avg of integers as a test model (numeric.c's select_div_scale), written apart
from the engine's kernels so the tests check them against the rule, not against themselves."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, localcontext


def _base10000(n: int) -> tuple[int, int]:
    """(weight, first digit) of |n| in numeric.c's base-10000 digits; (0, 0) for zero."""
    n, w = abs(n), 0
    while n >= 10000:
        n, w = n // 10000, w + 1
    return (w, n) if n else (0, 0)


def pg_int_avg(total: int, count: int) -> Decimal:
    """sum / count of integers (both of display scale 0) at select_div_scale, rounded half away
    from zero: at least 16 significant digits (avg(1, 2, 2) = 1.6666666666666667)."""
    (w1, d1), (w2, d2) = _base10000(total), _base10000(count)
    qweight = w1 - w2 - (1 if d1 <= d2 else 0)
    rscale = max(16 - qweight * 4, 0)
    with localcontext(prec=80):
        return (Decimal(total) / Decimal(count)).quantize(Decimal(1).scaleb(-rscale), ROUND_HALF_UP)
