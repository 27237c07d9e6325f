"""NUMERIC arithmetic with PostgreSQL's scale rules, on whole columns of the per-value-scale
layout (`piestream.common.numeric.NUMERIC_VALUE_ARROW`; not yet the live column layout, which is
decimal128(38, 10) with `piestream.expr.functions.decimal` until issue 14's migration).

Every value keeps its display scale (`piestream.common.numeric`); results get the scale
PostgreSQL gives them:

=================  ==========================================================================
a + b, a - b       max(scale a, scale b), exact
a * b              scale a + scale b, exact
a / b              select_div_scale: at least 16 significant digits, not less than either
                   scale; rounded half away from zero (386.1428571428571429)
a % b              max(scale a, scale b), the remainder of the truncated quotient
round / trunc      the requested digits (at least 0): round(41912.964, 4) = 41912.9640
ceil / floor       0
=================  ==========================================================================

NaN, Infinity and -Infinity follow numeric.c (NaN absorbs everything, Inf - Inf is NaN, x / 0
is an error even for Infinity, x / Inf is 0). A result that needs more than 38 digits, or more
than 28 of them after the point, is 22003: piestream never rounds it silently.

The work is in numpy over the 128-bit unscaled integers (`piestream.common.numeric_arrays`):
int64 arithmetic when every value fits, exact limb arithmetic otherwise. Division by divisors
beyond 32 bits and the transcendental functions compute per row with Python's integers and
`decimal` (said where they do).
"""

from __future__ import annotations

import decimal as pydec
import math
from collections.abc import Callable, Sequence
from decimal import Decimal

import numpy as np
import pyarrow as pa

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.errors import DivisionByZero, FeatureNotSupported, NumericOutOfRange
from piestream.common.numeric import NUMERIC_MAX_SCALE
from piestream.common.numeric_arrays import Num
from piestream.expr.functions.vec import and_valid, full_valid

NAN, PINF, NINF = nm.NAN_SCALE, nm.POS_INF_SCALE, nm.NEG_INF_SCALE
MIN_SIG_DIGITS = 16  # NUMERIC_MIN_SIG_DIGITS
_I62 = np.int64(2**62)


def _valid(*nums: Num) -> np.ndarray | None:
    out: np.ndarray | None = None
    for x in nums:
        if x.valid is not None:
            out = x.valid if out is None else out & x.valid
    return out


def _finish(
    hi: np.ndarray, lo: np.ndarray, scale: np.ndarray, valid: np.ndarray | None, *, int64: bool = False
) -> pa.Array:
    """Pack results, 22003 where a finite one is beyond NUMERIC (|unscaled| >= 2**96, what the
    value encoding stores, or more than 28 fraction digits; `int64`: every result came from int64
    arithmetic, so it is within)."""
    v = full_valid(valid, len(scale))
    big = np.zeros(len(scale), np.bool_) if int64 else ~na.within_limit(hi, lo)
    bad = v & (scale >= 0) & (big | (scale > NUMERIC_MAX_SCALE))
    if bad.any():
        raise nm.overflow()
    return na.pack(Num(hi, lo, scale, valid))


def _small_values(x: Num) -> np.ndarray | None:
    """The unscaled values as int64 when every one fits 62 bits (int64 sums and differences
    cannot wrap), else None."""
    v = x.lo.view(np.int64)
    if not (x.hi == (v >> 63)).all() or not ((v < _I62) & (v > -_I62)).all():
        return None
    return v


def _uniform_scale(x: Num) -> int | None:
    """The one display scale every value of `x` has (no specials), else None."""
    if not len(x):
        return None
    lo, hi = int(x.scale.min()), int(x.scale.max())
    return lo if lo == hi and lo >= 0 else None


def _signs(x: Num) -> np.ndarray:
    """-1 / 0 / 1 of finite values, ±1 of infinities, 0 for NaN."""
    s = np.sign(x.hi) + ((x.hi == 0) & (x.lo != 0))
    s = np.where(x.scale == PINF, 1, np.where(x.scale == NINF, -1, s))
    return np.where(x.scale == NAN, 0, s).astype(np.int64)


# -- + and - ---------------------------------------------------------------------------------------


def add(x: pa.Array, y: pa.Array) -> pa.Array:
    return _add(na.unpack(x), na.unpack(y), subtract=False)


def subtract(x: pa.Array, y: pa.Array) -> pa.Array:
    return _add(na.unpack(x), na.unpack(y), subtract=True)


def _add(a: Num, b: Num, *, subtract: bool) -> pa.Array:
    valid = _valid(a, b)
    s = np.maximum(a.scale, b.scale)
    r = _add_int64(a, b, s, subtract=subtract)
    if r is not None:
        hi, lo = r >> 63, r.view(np.uint64)
    else:
        bh, bl = na.negate(b.hi, b.lo) if subtract else (b.hi, b.lo)
        ah, al, fa = na.mul_pow10(a.hi, a.lo, np.maximum(s - a.scale, 0))
        bh, bl, fb = na.mul_pow10(bh, bl, np.maximum(s - b.scale, 0))
        if ((~fa | ~fb) & full_valid(valid, len(s)) & (s >= 0)).any():
            raise nm.overflow()  # an aligned operand has more than 38 digits: so has the sum
        hi, lo = na.add128(ah, al, bh, bl)  # operands below 10**38: the sum fits 128 bits
    special = a.special | b.special
    if special.any():
        sa = _signs(a)
        sb = -_signs(b) if subtract else _signs(b)
        inf_a = (a.scale == PINF) | (a.scale == NINF)
        inf_b = (b.scale == PINF) | (b.scale == NINF)
        nan = (a.scale == NAN) | (b.scale == NAN) | (inf_a & inf_b & (sa != sb))
        sign = np.where(inf_a, sa, sb)
        s = np.where(special, np.where(nan, NAN, np.where(sign > 0, PINF, NINF)), s)
        hi = np.where(special, 0, hi)
        lo = np.where(special, np.uint64(0), lo)
    return _finish(hi, lo, s, valid, int64=r is not None)


def _add_int64(a: Num, b: Num, s: np.ndarray, *, subtract: bool) -> np.ndarray | None:
    """a ± b aligned to scale `s` in int64, when every operand fits 62 bits and every aligned
    sum stays below 4e18 (most columns: prices, counts); None otherwise."""
    va, vb = _small_values(a), _small_values(b)
    if va is None or vb is None:
        return None
    if subtract:
        vb = -vb
    sa, sb = _uniform_scale(a), _uniform_scale(b)
    if sa is not None and sb is not None:  # one scale per operand (most columns): scalar factors
        ta, tb = max(sa, sb) - sa, max(sa, sb) - sb
        if not ta and not tb:
            return va + vb
        if max(ta, tb) > 18:
            return None
        ma = int(np.abs(va).max()) if len(va) else 0
        mb = int(np.abs(vb).max()) if len(vb) else 0
        if ma * 10**ta + mb * 10**tb >= 4 * 10**18:
            return None
        return va * np.int64(10**ta) + vb * np.int64(10**tb)
    ka = np.clip(s - a.scale, 0, None)
    kb = np.clip(s - b.scale, 0, None)
    if not ka.any() and not kb.any():
        return va + vb  # both below 2**62: no wrap-around
    if max(int(ka.max()), int(kb.max())) > 18:
        return None
    bound = np.abs(va).astype(np.float64) * na.P10_F[ka] + np.abs(vb).astype(np.float64) * na.P10_F[kb]
    if not (bound < 4.0e18).all():
        return None
    return va * na.P10_I64[ka] + vb * na.P10_I64[kb]


def negate(x: pa.Array) -> pa.Array:
    a = na.unpack(x)
    hi, lo = na.negate(a.hi, a.lo)
    s = np.where(a.scale == PINF, NINF, np.where(a.scale == NINF, PINF, a.scale))
    return na.pack(Num(hi, lo, s, a.valid))


def absolute(x: pa.Array) -> pa.Array:
    a = na.unpack(x)
    _, mh, ml = na.magnitude(a.hi, a.lo)
    s = np.where(a.scale == NINF, PINF, a.scale)
    return na.pack(Num(mh.view(np.int64), ml, s, a.valid))


# -- * ---------------------------------------------------------------------------------------------


def multiply(x: pa.Array, y: pa.Array) -> pa.Array:
    a, b = na.unpack(x), na.unpack(y)
    valid = _valid(a, b)
    s = a.scale + b.scale
    hi = lo = None
    if na.fits_int64(a.hi, a.lo).all() and na.fits_int64(b.hi, b.lo).all():
        p, q = a.lo.view(np.int64), b.lo.view(np.int64)
        if (np.abs(p.astype(np.float64) * q.astype(np.float64)) < 4.0e18).all():
            r = p * q
            hi, lo = r >> 63, r.view(np.uint64)
    if hi is None or lo is None:
        an, amh, aml = na.magnitude(a.hi, a.lo)
        bn, bmh, bml = na.magnitude(b.hi, b.lo)
        rh, rl, fits = na.from_limbs(na.mul_limbs(na.to_limbs(amh, aml), na.to_limbs(bmh, bml)))
        if (~fits & full_valid(valid, len(s)) & ~a.special & ~b.special).any():
            raise nm.overflow()
        hi, lo = na.signed(an ^ bn, np.where(fits, rh, 0).astype(np.uint64), rl)
    special = a.special | b.special
    if special.any():
        sa, sb = _signs(a), _signs(b)
        nan = (a.scale == NAN) | (b.scale == NAN) | (sa * sb == 0)  # Inf * 0 is NaN
        s = np.where(special, np.where(nan, NAN, np.where(sa * sb > 0, PINF, NINF)), s)
        hi = np.where(special, 0, hi)
        lo = np.where(special, np.uint64(0), lo)
    return _finish(hi, lo, s, valid)


# -- / and % ---------------------------------------------------------------------------------------


def _weight_first_digit(x: Num) -> tuple[np.ndarray, np.ndarray]:
    """PostgreSQL's NumericVar view of finite values: the base-10000 weight of the leading
    digit group and that group (1..9999; zero is weight 0, digit 0)."""
    small = _small_values(x)
    if small is not None:  # int64 magnitudes: digit counts by search, the group by division
        mag = np.abs(small)
        nd = np.searchsorted(na.P10_I64, mag, side="right").astype(np.int64)
        e10 = nd - 1 - np.maximum(x.scale, 0)
        w = e10 // 4
        m = e10 - 4 * w + 1
        lead = mag // na.P10_I64[np.maximum(nd - m, 0)] * na.P10_I64[np.maximum(m - nd, 0)]
        zero = nd == 0
        return np.where(zero, 0, w), np.where(zero, 0, lead)
    _, mh, ml = na.magnitude(x.hi, x.lo)
    nd = na.ndigits(mh, ml)
    zero = nd == 0
    e10 = nd - 1 - np.maximum(x.scale, 0)
    w = e10 // 4
    m = e10 - 4 * w + 1  # digits in the leading group, 1..4
    cut = np.maximum(nd - m, 0)
    _, ql = na.div_pow10(mh.view(np.int64), ml, cut, "trunc")
    lead = ql.view(np.int64) * na.P10_I64[np.maximum(m - nd, 0)]
    return np.where(zero, 0, w), np.where(zero, 0, lead)


def select_div_scale(a: Num, b: Num) -> np.ndarray:
    """numeric.c's select_div_scale: the quotient's scale, per row."""
    w1, d1 = _weight_first_digit(a)
    w2, d2 = _weight_first_digit(b)
    qweight = w1 - w2 - (d1 <= d2)
    rscale = MIN_SIG_DIGITS - qweight * 4
    return np.clip(np.maximum(rscale, np.maximum(np.maximum(a.scale, b.scale), 0)), 0, 1000)


def divide(x: pa.Array, y: pa.Array) -> pa.Array:
    a, b = na.unpack(x), na.unpack(y)
    return _divide(a, b, select_div_scale(a, b), _valid(a, b))


def divide_at(x: pa.Array, y: pa.Array, rscale: int) -> pa.Array:
    """x / y rounded once (half away from zero) at the fixed scale `rscale`."""
    a, b = na.unpack(x), na.unpack(y)
    return _divide(a, b, np.full(len(a), rscale, np.int64), _valid(a, b))


def divide_by_counts(total: pa.Array, counts: np.ndarray) -> pa.Array:
    """avg: sum / count with the count as a NUMERIC of scale 0 (counts > 0 where used)."""
    a = na.unpack(total)
    b = na.from_int64(np.maximum(counts, 1), 0, None)
    return _divide(a, b, select_div_scale(a, b), a.valid)


def _divide(a: Num, b: Num, rscale: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    v = full_valid(valid, len(a))
    zero_b = (b.hi == 0) & (b.lo == 0) & (b.scale >= 0)
    if (zero_b & v & (a.scale != NAN)).any():
        raise DivisionByZero("division by zero")
    fin = v & ~a.special & ~b.special & ~zero_b
    if (rscale[fin] > NUMERIC_MAX_SCALE).any():
        raise nm.overflow()
    rscale = np.minimum(rscale, NUMERIC_MAX_SCALE)
    neg = (a.hi < 0) ^ (b.hi < 0)
    _, nh, nl = na.magnitude(a.hi, a.lo)
    _, dh, dl = na.magnitude(b.hi, b.lo)
    shift = np.where(fin, rscale - np.maximum(a.scale, 0) + np.maximum(b.scale, 0), 0)
    dl = np.where(fin, dl, np.uint64(1))
    dh = np.where(fin, dh, np.uint64(0))
    qh, ql = _quotient(nh, nl, dh, dl, shift, fin)
    hi, lo = na.signed(neg, qh, ql)
    s = rscale.copy()
    special = a.special | b.special
    if special.any():
        sa, sb = _signs(a), _signs(b)
        inf_a = (a.scale == PINF) | (a.scale == NINF)
        inf_b = (b.scale == PINF) | (b.scale == NINF)
        nan = (a.scale == NAN) | (b.scale == NAN) | (inf_a & inf_b)
        to_zero = inf_b & ~inf_a & ~nan  # finite / Inf = 0
        s = np.where(nan, NAN, np.where(inf_a, np.where(sa * sb > 0, PINF, NINF), np.where(to_zero, 0, s)))
        hi = np.where(special, 0, hi)
        lo = np.where(special, np.uint64(0), lo)
    return _finish(hi, lo, s, valid)


def _quotient(
    nh: np.ndarray, nl: np.ndarray, dh: np.ndarray, dl: np.ndarray, shift: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """round(|n| * 10**shift / |d|) half away from zero, as (hi, lo) magnitudes, where `rows`;
    22003 where it has more than 38 digits."""
    n = len(nh)
    qh = np.zeros(n, np.uint64)
    ql = np.zeros(n, np.uint64)
    todo = np.flatnonzero(rows)
    if not len(todo):
        return qh, ql
    # int64: numerator and divisor below 2**62
    num_f = (nh[todo].astype(np.float64) * 2.0**64 + nl[todo].astype(np.float64)) * na.P10_F[shift[todo]]
    fast = (num_f < 4.0e18) & (shift[todo] <= 18) & (dh[todo] == 0) & (dl[todo] < np.uint64(2**62))
    if fast.any():
        r = todo[fast]
        num = nl[r].view(np.int64) * na.P10_I64[shift[r]]
        den = dl[r].view(np.int64)
        q, rem = np.divmod(num, den)
        q += 2 * rem >= den
        ql[r] = q.view(np.uint64)
    todo = todo[~fast]
    # limbs: any numerator, divisors below 2**32 (avg's counts, most literals)
    small = (dh[todo] == 0) & (dl[todo] < np.uint64(2**32))
    if small.any():
        r = todo[small]
        limbs = na.mul_pow10_limbs(na.to_limbs(nh[r], nl[r]), shift[r])
        d = dl[r]
        q, rem = na.divmod_small(limbs, d)
        q = na.add_small(q, (rem * np.uint64(2) >= d).astype(np.uint64))
        h, low, fits = na.from_limbs(q)
        if not (fits & na.below_limit(h, low)).all():
            raise nm.overflow()
        qh[r], ql[r] = h, low
    todo = todo[~small]
    # per row with Python integers: divisors beyond 32 bits whose quotient needs 128 bits
    for i in todo.tolist():
        num_i = ((int(nh[i]) << 64) | int(nl[i])) * 10 ** int(shift[i])
        den_i = (int(dh[i]) << 64) | int(dl[i])
        q_i, rem_i = divmod(num_i, den_i)
        q_i += 2 * rem_i >= den_i
        if q_i >= nm.LIMIT:
            raise nm.overflow()
        qh[i], ql[i] = np.uint64(q_i >> 64), np.uint64(q_i & (2**64 - 1))
    if not na.below_limit(qh, ql).all():
        raise nm.overflow()
    return qh, ql


def modulus(x: pa.Array, y: pa.Array) -> pa.Array:
    """Remainder of the truncated quotient, with the dividend's sign, at max(scale a, scale b)."""
    a, b = na.unpack(x), na.unpack(y)
    valid = _valid(a, b)
    v = full_valid(valid, len(a))
    zero_b = (b.hi == 0) & (b.lo == 0) & (b.scale >= 0)
    if (zero_b & v & (a.scale != NAN)).any():
        raise DivisionByZero("division by zero")
    s = np.maximum(np.maximum(a.scale, b.scale), 0)
    ah, al, fa = na.mul_pow10(a.hi, a.lo, np.maximum(s - a.scale, 0))
    bh, bl, fb = na.mul_pow10(b.hi, b.lo, np.maximum(s - b.scale, 0))
    fin = v & ~a.special & ~b.special & ~zero_b
    hi = np.zeros(len(a), np.int64)
    lo = np.zeros(len(a), np.uint64)
    ok = fa & fb & na.fits_int64(ah, al) & na.fits_int64(bh, bl)
    rows = fin & ok
    if rows.any():
        p, q = al.view(np.int64)[rows], bl.view(np.int64)[rows]
        r = np.fmod(p, np.where(q == -1, 1, q))
        hi[rows], lo[rows] = r >> 63, r.view(np.uint64)
    for i in np.flatnonzero(fin & ~ok).tolist():  # per row: operands beyond 64 bits once aligned
        da = nm.value_of(_int(a, i), int(a.scale[i]))
        db = nm.value_of(_int(b, i), int(b.scale[i]))
        with pydec.localcontext(_CTX):
            r_i, _ = nm.parts_of((da % db).quantize(Decimal(1).scaleb(-int(s[i]))))
        hi[i], lo[i] = r_i >> 64, np.uint64(r_i & (2**64 - 1))
    # NaN % x, Inf % x: NaN; x % Inf: x
    inf_b = (b.scale == PINF) | (b.scale == NINF)
    keep_a = inf_b & ~a.special
    nan = (a.special | b.special) & ~keep_a
    s = np.where(nan, NAN, np.where(keep_a, a.scale, s))
    hi = np.where(keep_a, a.hi, np.where(nan, 0, hi))
    lo = np.where(keep_a, a.lo, np.where(nan, np.uint64(0), lo))
    return _finish(hi, lo, s, valid)


def _int(x: Num, i: int) -> int:
    return (int(x.hi[i]) << 64) | int(x.lo[i])


def div_trunc(x: pa.Array, y: pa.Array) -> pa.Array:
    """div(a, b): the quotient truncated toward zero, scale 0."""
    a, b = na.unpack(x), na.unpack(y)
    q = _divide(a, b, np.maximum(np.maximum(a.scale, b.scale), 0) + 1, _valid(a, b))
    return rescale_to(q, 0, "trunc")


# -- rounding --------------------------------------------------------------------------------------


def rescale_to(x: pa.Array, digits: int | np.ndarray, mode: str) -> pa.Array:
    """round / trunc / ceil / floor to `digits` fraction digits (negative: left of the point);
    the result's scale is max(digits, 0) (round(1.5, 3) = 1.500). Specials stay as they are."""
    a = na.unpack(x)
    d = np.broadcast_to(np.asarray(digits, np.int64), a.scale.shape)
    d = np.clip(d, -2 * nm.NUMERIC_PRECISION - 2, 10_000)
    keep = np.maximum(d, 0)
    # drop to `d` digits (rounding), then carry the zeros a negative `d` leaves on the left
    num, _ = na.rescale(a, np.minimum(a.scale, d), mode)
    up = np.where(~a.special, np.maximum(-d, 0), 0)
    hi, lo, fits = na.mul_pow10(num.hi, num.lo, np.minimum(up, 80))
    fin = ~a.special & a.vmask()
    if (~fits & fin).any():
        raise nm.overflow()
    at = Num(hi, lo, np.where(~a.special, np.maximum(np.minimum(a.scale, d), 0), a.scale), a.valid)
    if (fin & (keep > NUMERIC_MAX_SCALE)).any():
        raise nm.overflow()
    out, bad = na.rescale(at, np.where(~a.special, keep, a.scale))
    if bad.any():
        raise nm.overflow()
    return na.pack(out)


def apply_typmod(x: pa.Array, precision: int, scale: int) -> pa.Array:
    """A value assigned to NUMERIC(precision, scale): rounded half away from zero to `scale`
    digits, 22003 when its integer part has more than precision - scale digits or it is
    infinite (NaN is kept)."""
    a = na.unpack(x)
    v = a.vmask()
    if ((a.scale == PINF) | (a.scale == NINF))[v].any():
        raise NumericOutOfRange(
            "numeric field overflow",
            detail=f"A field with precision {precision}, scale {scale} cannot hold an infinite value.",
        )
    out, bad = na.rescale(a, np.where(a.special, a.scale, scale))
    _, mh, ml = na.magnitude(out.hi, out.lo)
    big = na.ge_pow10(mh, ml, np.full(len(a), precision, np.int64)) & ~a.special
    if (bad | (big & v)).any():
        raise nm.typmod_overflow(precision, scale)
    return na.pack(out)


# -- conversions -----------------------------------------------------------------------------------


def from_integer(v: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """Integers as NUMERIC of scale 0."""
    return na.pack(na.from_int64(v, 0, valid))


def from_scaled(v: np.ndarray, scale: int, valid: np.ndarray | None) -> pa.Array:
    """int64 values that carry `scale` implied fraction digits."""
    return na.pack(na.from_int64(v, scale, valid))


def to_integer(x: pa.Array, lo_bound: int, hi_bound: int, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Values rounded half away from zero to int64 and checked against [lo_bound, hi_bound]:
    NaN and infinities cannot be converted (0A000, as numeric.c says)."""
    a = na.unpack(x)
    v = a.vmask()
    if ((a.scale == NAN) & v).any():
        raise FeatureNotSupported(f"cannot convert NaN to {what}")
    if (a.special & v).any():
        raise FeatureNotSupported(f"cannot convert infinity to {what}")
    r, _ = na.rescale(a, np.zeros(len(a), np.int64))
    ok = na.fits_int64(r.hi, r.lo)
    out = r.lo.view(np.int64)
    if ((~ok | (out < lo_bound) | (out > hi_bound)) & v).any():
        raise NumericOutOfRange(f"{what} out of range")
    return np.where(v, out, 0), a.valid


def to_float(x: pa.Array) -> pa.Array:
    """Correctly rounded doubles: one exact division where the unscaled value has 53 bits and
    10**scale is exact (scale <= 22), else the decimal text through Arrow's float parser."""
    from piestream.expr.functions.vec import from_numpy

    a = na.unpack(x)
    fits = na.fits_int64(a.hi, a.lo)
    u = a.lo.view(np.int64)
    easy = fits & (np.abs(u) < 2**53) & (a.scale <= 22) & ~a.special
    out = u.astype(np.float64) / na.P10_F[np.clip(a.scale, 0, 22)]
    out = np.where(
        a.scale == NAN, np.nan, np.where(a.scale == PINF, np.inf, np.where(a.scale == NINF, -np.inf, out))
    )
    hard = np.flatnonzero(~easy & ~a.special & a.vmask())
    if len(hard):
        texts = pa.array([nm.format_numeric(nm.value_of(_int(a, i), int(a.scale[i]))) for i in hard.tolist()])
        out[hard] = texts.cast(pa.float64()).to_numpy()
    return from_numpy(out, a.valid, pa.float64())


def from_float(x: pa.Array, digits: int) -> pa.Array:
    """float8_numeric / float4_numeric: the float's `digits` significant digits (15 for double,
    6 for real, "%.*g"), trailing zeros dropped; NaN and infinities map to their NUMERIC twins."""
    f = np.asarray(x.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
    valid = and_valid(x)
    n = len(f)
    finite = np.isfinite(f)
    text = np.char.mod(f"%.{digits - 1}e", np.where(finite, f, 0.0))  # d.ddd...e±XX, in C
    raw = text.astype(f"S{len(text[0]) if n else 1}")
    m = np.frombuffer(raw.tobytes(), np.uint8).reshape(n, -1) if n else np.zeros((0, 1), np.uint8)
    neg = m[:, 0] == ord("-")
    body = np.where(neg[:, None], np.roll(m, -1, axis=1), m)
    digs = np.concatenate([body[:, :1], body[:, 2 : digits + 1]], axis=1).astype(np.int64) - ord("0")
    exp_txt = np.char.partition(text, "e")[:, 2]
    exp = exp_txt.astype(np.int64)
    mant = digs @ (10 ** np.arange(digits - 1, -1, -1, dtype=np.int64))
    # drop trailing zeros of the significant digits: they are not written by %g
    tz = np.zeros(n, np.int64)
    live = np.flatnonzero(mant != 0)
    while len(live):
        z = mant[live] % 10 == 0
        live = live[z]
        mant[live] //= 10
        tz[live] += 1
    last = exp - (digits - 1) + tz  # exponent of the last kept digit
    scale = np.maximum(-last, 0)
    if ((scale > NUMERIC_MAX_SCALE) & finite & full_valid(valid, n)).any():
        raise nm.overflow()
    ints = np.flatnonzero((last > 0) & finite)
    num = na.from_int64(np.where(neg, -mant, mant), scale, valid)
    if len(ints):  # 1e+20: whole numbers beyond the significant digits
        hi, lo, fits = na.mul_pow10(num.hi, num.lo, np.where(last > 0, last, 0))
        if (~fits & finite & full_valid(valid, n)).any():
            raise nm.overflow()
        num = Num(hi, lo, num.scale, valid)
    sc = np.where(np.isnan(f), NAN, np.where(f == np.inf, PINF, np.where(f == -np.inf, NINF, num.scale)))
    hi = np.where(finite, num.hi, 0)
    lo = np.where(finite, num.lo, np.uint64(0))
    return _finish(hi, lo, sc, valid)


def to_text(x: pa.Array) -> pa.Array:
    """numeric_out of every value: all digits of the display scale, never an exponent."""
    a = na.unpack(x)
    v = a.vmask()
    fits = na.fits_int64(a.hi, a.lo) & ~a.special
    u = np.where(fits, a.lo.view(np.int64), 0)
    mag = np.abs(u)
    sc = np.clip(a.scale, 0, 18)
    unit = na.P10_I64[sc]
    whole, frac = np.divmod(mag, unit)
    import pyarrow.compute as pc

    sign = pc.if_else(pa.array(u < 0), "-", "")
    frac_txt = pc.utf8_lpad(pa.array(frac).cast(pa.string()), width=1, padding="0")
    frac_txt = _lpad_each(frac_txt, sc)
    point = pc.if_else(pa.array(sc > 0), ".", "")
    frac_txt = pc.if_else(pa.array(sc > 0), frac_txt, "")
    text = pc.binary_join_element_wise(sign, pa.array(whole).cast(pa.string()), point, frac_txt, "")
    slow = np.flatnonzero(~(fits & (a.scale <= 18)) & v)
    if len(slow):
        from piestream.expr.functions.vec import scatter

        vals = [nm.format_numeric(nm.value_of(_int(a, i), int(a.scale[i]))) for i in slow.tolist()]
        keep = np.flatnonzero(~np.isin(np.arange(len(a)), slow))
        text = scatter(
            len(a), [(keep, text.take(pa.array(keep))), (slow, pa.array(vals, pa.string()))], pa.string()
        )
    if a.valid is not None:
        text = pc.if_else(pa.array(a.valid), text, pa.nulls(len(a), pa.string()))
    return text


def _lpad_each(text: pa.Array, width: np.ndarray) -> pa.Array:
    """Left-pad each string with zeros to its own width (the fraction digits)."""
    import pyarrow.compute as pc

    out = text
    for w in np.unique(width).tolist():
        if w <= 1:
            continue
        rows = pa.array(width == w)
        out = pc.if_else(rows, pc.utf8_lpad(out, width=w, padding="0"), out)
    return out


# -- per row (transcendental functions) ------------------------------------------------------------

_CTX = pydec.Context(prec=120, rounding=pydec.ROUND_HALF_UP, Emax=10**6, Emin=-(10**6))


def per_row(fn: Callable[..., Decimal], arrays: Sequence[pa.Array]) -> pa.Array:
    """`fn` over the rows' Python values (NULL in, NULL out); its results are checked against
    NUMERIC's 38 digits. For sqrt, exp, ln, log and power only: rarely used, hard to vectorize."""
    cols = [nm.from_arrow(a) if _is_numeric(a) else a.to_pylist() for a in arrays]
    n = len(arrays[0]) if arrays else 0
    out: list[Decimal | None] = []
    for i in range(n):  # per row: see the docstring
        row = [c[i] for c in cols]
        if any(v is None for v in row):
            out.append(None)
            continue
        with pydec.localcontext(_CTX):
            out.append(nm.check(fn(*row)))
    return nm.to_arrow(out)


def _is_numeric(a: pa.Array) -> bool:
    return nm.is_numeric_array(a)


def weight_digits(d: Decimal) -> tuple[int, int]:
    """(weight, first base-10000 digit group) of a finite nonzero Decimal, as numeric.c."""
    e10 = d.adjusted()
    w = e10 // 4
    lead = abs(d).scaleb(-4 * w)
    return w, int(lead)


def dscale(d: Decimal) -> int:
    exp = d.as_tuple().exponent
    return max(-exp, 0) if isinstance(exp, int) else 0


def estimate_ln_dweight(d: Decimal) -> int:
    """numeric.c's estimate_ln_dweight: roughly the decimal weight of ln(d)."""
    if d <= 0:
        return 0
    if Decimal("0.9") <= d <= Decimal("1.1"):
        x = d - 1
        return 0 if x == 0 else x.adjusted()
    w, first = weight_digits(d)
    digits = first
    dweight = w * 4
    rest = abs(d).scaleb(-4 * w) - first
    if rest:
        digits = digits * 10000 + int(rest.scaleb(4))
        dweight -= 4
    ln_var = math.log(digits) + dweight * 2.302585092994046
    return int(math.log10(abs(ln_var))) if ln_var else 0


def round_to(d: Decimal, rscale: int) -> Decimal:
    rscale = min(max(rscale, 0), 1000)
    return d.quantize(Decimal(1).scaleb(-rscale), rounding=pydec.ROUND_HALF_UP, context=_CTX)


# -- numeric.c's result scales of the transcendental functions --------------------------------------
#: numeric.c's NUMERIC_MIN_SIG_DIGITS: the least significant digits such a result keeps.
MIN_SIG_DIGITS = 16


def _finished(d: Decimal, rscale: int, *inputs: Decimal) -> Decimal:
    """`d` rounded to numeric.c's `rscale`, at least each input's display scale, at most the
    layout's 28 fraction digits (README: differences from PostgreSQL)."""
    if not d.is_finite():
        return d
    rscale = max([rscale, 0, *(dscale(x) for x in inputs)])
    return round_to(d, min(rscale, nm.NUMERIC_MAX_SCALE))


def pg_sqrt(x: Decimal) -> Decimal:
    """numeric_sqrt: sweight = (weight + 1) * DEC_DIGITS / 2 - 1, rscale = 16 - sweight."""
    if not x.is_finite():
        return x
    w = weight_digits(x)[0] if x else 0
    return _finished(x.sqrt(), MIN_SIG_DIGITS - ((w + 1) * 4 // 2 - 1), x)


def pg_exp(x: Decimal) -> Decimal:
    """numeric_exp: rscale = 16 - the result's approximate decimal weight."""
    if not x.is_finite():
        return x if x.is_nan() or x > 0 else Decimal(0)
    val = max(min(float(x) * 0.434294481903252, 2000.0), -2000.0)
    return _finished(x.exp(), MIN_SIG_DIGITS - int(val), x)


def pg_ln(x: Decimal) -> Decimal:
    """numeric_ln: rscale = 16 - estimate_ln_dweight."""
    if not x.is_finite():
        return x
    return _finished(x.ln(), MIN_SIG_DIGITS - estimate_ln_dweight(x), x)


def pg_log(base: Decimal, x: Decimal) -> Decimal:
    """log_var: rscale = 16 - (ln dweight of x - ln dweight of base)."""
    if not (x.is_finite() and base.is_finite()):
        return x if x.is_nan() or base.is_finite() else Decimal("NaN")
    w = estimate_ln_dweight(x) - estimate_ln_dweight(base)
    return _finished(x.ln() / base.ln(), MIN_SIG_DIGITS - w, base, x)


def pg_power(x: Decimal, y: Decimal) -> Decimal:
    """power_var / power_var_int: rscale = 16 - the result's approximate decimal weight, at least
    the inputs' display scales. Finite inputs only (the caller handles NaN / Infinity)."""
    if x == 0:
        return _finished(Decimal(0) if y > 0 else Decimal(1), MIN_SIG_DIGITS, x, y)
    if y == y.to_integral_value() and abs(y) <= 10_000:
        r = x ** int(y)
    else:
        r = x**y
    fx = abs(float(x))  # x is finite and nonzero here; its float may still under/overflow
    weight = float(y) * math.log10(fx) if 0.0 < fx < math.inf else float(r.adjusted())
    return _finished(r, MIN_SIG_DIGITS - int(weight), x, y)
