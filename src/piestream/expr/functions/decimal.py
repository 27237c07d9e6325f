"""Exact NUMERIC arithmetic on decimal128(38, 10) columns, vectorized with numpy.

Arrow's decimal kernels widen (38, 10) x (38, 10) beyond decimal128 and are slow (hundreds of ms
per million rows), so NUMERIC arithmetic works on the unscaled 128-bit integers directly: a
value is a signed (hi int64, lo uint64) pair, and multiplication / scaling use 32-bit limbs held
in uint64 arrays (a 32x32-bit product plus two 32-bit carries fits 64 bits exactly). Results are
rounded half away from zero to the fixed scale 10, as PostgreSQL rounds numerics.

Division and modulus of large values and the transcendental functions fall back to Arrow's
decimal256 kernels or to Python's `decimal` per row (said where it happens).
"""

from __future__ import annotations

import decimal
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common.errors import DivisionByZero, NumericOutOfRange
from piestream.common.numeric_arrays import add_small, divmod_small, mul_limbs, mul_small, trim
from piestream.common.types import NUMERIC, NUMERIC_PRECISION, NUMERIC_SCALE
from piestream.expr.functions import numeric_scaled as ns
from piestream.expr.functions.vec import and_valid, full_valid, per_row, view

_F = TypeVar("_F", bound=Callable[..., Any])

NUM_ARROW = pa.decimal128(38, NUMERIC_SCALE)
_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_LIMIT = 10**38  # decimal128(38, s) holds magnitudes below this
_OVERFLOW = "value overflows numeric format"
_P10 = np.int64(10**NUMERIC_SCALE)

Limbs = list[np.ndarray]  # little-endian 32-bit limbs of magnitudes, one uint64 array per limb


# -- 128-bit views --------------------------------------------------------------------------------


def to_i128(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(hi int64, lo uint64) unscaled values of a decimal128 array; NULL slots read as 0."""
    raw = view(arr, np.dtype([("lo", "<u8"), ("hi", "<i8")]))
    lo, hi = raw["lo"].copy(), raw["hi"].copy()
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        lo[~valid] = 0
        hi[~valid] = 0
    return hi, lo


def from_i128(
    hi: np.ndarray, lo: np.ndarray, valid: np.ndarray | None, scale: int = NUMERIC_SCALE
) -> pa.Array:
    """A decimal128(38, scale) array from unscaled (hi, lo) pairs."""
    rec = np.empty(len(hi), np.dtype([("lo", "<u8"), ("hi", "<i8")]))
    rec["lo"] = lo
    rec["hi"] = hi
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.decimal128(38, scale), len(hi), [validity, pa.py_buffer(rec)])


def neg_i128(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nlo = ~lo + np.uint64(1)
    nhi = ~hi + (nlo == 0).astype(np.int64)
    return nhi, nlo


def from_i64(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sign-extend int64 values to 128 bits."""
    v = v.astype(np.int64, copy=False)
    return v >> 63, v.view(np.uint64)


def fits_i64(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    return hi == (lo.view(np.int64) >> 63)


# -- limbs ----------------------------------------------------------------------------------------


def to_limbs(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, Limbs]:
    """(negative mask, magnitude limbs) of signed 128-bit values."""
    neg = hi < 0
    nhi, nlo = neg_i128(hi, lo)
    mh = np.where(neg, nhi, hi).view(np.uint64)
    ml = np.where(neg, nlo, lo)
    return neg, trim([ml & _M32, ml >> _S32, mh & _M32, mh >> _S32])


def div_pow10(a: Limbs, k: int, mode: str, neg: np.ndarray) -> Limbs:
    """Magnitudes divided by 10**k, rounded by `mode`: round (half away from zero), trunc,
    floor or ceil (the latter two toward -inf / +inf of the signed value)."""
    if k <= 0:
        return a
    q, total, scale = a, np.zeros(len(a[0]), np.uint64), 1
    rem_nonzero = np.zeros(len(a[0]), np.bool_)
    remaining = k
    while remaining:
        step = min(remaining, 9)
        q, r = divmod_small(q, 10**step)
        # keep only the most significant remainder digit pattern needed for rounding decisions
        rem_nonzero |= total != 0
        total = r
        scale = 10**step
        remaining -= step
    # `total` is the remainder of the last (most significant) division; lower ones only matter
    # as "something non-zero below".
    if mode == "round":
        up = total * np.uint64(2) >= np.uint64(scale)
    elif mode == "trunc":
        return q
    else:
        inexact = (total != 0) | rem_nonzero
        up = inexact & (neg if mode == "floor" else ~neg)
    return add_small(q, up.astype(np.uint64))


def mul_pow10(a: Limbs, k: int) -> Limbs:
    while k > 0:
        step = min(k, 9)
        a = mul_small(a, 10**step)
        k -= step
    return a


def from_limbs(neg: np.ndarray, mag: Limbs, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Signed (hi, lo) from magnitudes; magnitudes of 10**38 or more raise 22003."""
    v = full_valid(valid, len(mag[0]))
    limbs = [*mag, *[np.zeros(len(v), np.uint64)] * max(0, 4 - len(mag))]
    if any((limb[v] != 0).any() for limb in limbs[4:]):
        raise NumericOutOfRange(_OVERFLOW)
    lo = limbs[0] | (limbs[1] << _S32)
    hi = limbs[2] | (limbs[3] << _S32)
    ch, cl = np.uint64(_LIMIT >> 64), np.uint64(_LIMIT & (2**64 - 1))
    if (((hi > ch) | ((hi == ch) & (lo >= cl))) & v).any():
        raise NumericOutOfRange(_OVERFLOW)
    shi = hi.view(np.int64)
    nhi, nlo = neg_i128(shi, lo)
    return np.where(neg, nhi, shi), np.where(neg, nlo, lo)


# -- operations -----------------------------------------------------------------------------------


def _check_range(hi: np.ndarray, lo: np.ndarray, valid: np.ndarray | None) -> None:
    neg, mag = to_limbs(hi, lo)
    from_limbs(neg, mag, valid)


def add(a: pa.Array, b: pa.Array) -> pa.Array:
    """Exact sum; 22003 when the result leaves decimal128(38, 10)."""
    return _add(a, b, subtract=False)


def subtract(a: pa.Array, b: pa.Array) -> pa.Array:
    return _add(a, b, subtract=True)


def _add(a: pa.Array, b: pa.Array, *, subtract: bool) -> pa.Array:
    valid = and_valid(a, b)
    ahi, alo = to_i128(a)
    bhi, blo = to_i128(b)
    if subtract:
        bhi, blo = neg_i128(bhi, blo)  # exact: |b| < 10**38
    if fits_i64(ahi, alo).all() and fits_i64(bhi, blo).all():
        x, y = alo.view(np.int64), blo.view(np.int64)
        with np.errstate(over="ignore"):
            z = x + y
        if not (((x < 0) == (y < 0)) & ((z < 0) != (x < 0))).any():  # no int64 wrap-around
            return from_i128(*from_i64(z), valid)
    lo = alo + blo
    hi = ahi + bhi + (lo < alo).astype(np.int64)
    wrapped = ((ahi < 0) == (bhi < 0)) & ((hi < 0) != (ahi < 0))
    if (wrapped & full_valid(valid, len(a))).any():
        raise NumericOutOfRange(_OVERFLOW)
    _check_range(hi, lo, valid)
    return from_i128(hi, lo, valid)


def negate(a: pa.Array) -> pa.Array:
    hi, lo = to_i128(a)
    nhi, nlo = neg_i128(hi, lo)
    return from_i128(nhi, nlo, and_valid(a))


def absolute(a: pa.Array) -> pa.Array:
    hi, lo = to_i128(a)
    nhi, nlo = neg_i128(hi, lo)
    neg = hi < 0
    return from_i128(np.where(neg, nhi, hi), np.where(neg, nlo, lo), and_valid(a))


def multiply(a: pa.Array, b: pa.Array) -> pa.Array:
    """Exact product rounded half away from zero to scale 10."""
    valid = and_valid(a, b)
    ahi, alo = to_i128(a)
    bhi, blo = to_i128(b)
    if fits_i64(ahi, alo).all() and fits_i64(bhi, blo).all():
        x, y = alo.view(np.int64), blo.view(np.int64)
        est = np.rint(x.astype(np.float64) * y.astype(np.float64) / 1e10)
        if (np.abs(est) < 2.0**61).all():
            return from_i128(*from_i64(_mul_i64(x, y, est.astype(np.int64))), valid)
    aneg, am = to_limbs(ahi, alo)
    bneg, bm = to_limbs(bhi, blo)
    prod = mul_limbs(am, bm)
    mag = div_pow10(prod, NUMERIC_SCALE, "round", aneg ^ bneg)
    hi, lo = from_limbs(aneg ^ bneg, mag, valid)
    return from_i128(hi, lo, valid)


def _round_quotient(f: np.ndarray, r: np.ndarray, d: np.ndarray | np.int64) -> np.ndarray:
    """Round half away from zero the value f + r/d (f = floor, 0 <= r < d)."""
    twice = 2 * r
    return f + np.where(f >= 0, twice >= d, twice > d)


def _mul_i64(x: np.ndarray, y: np.ndarray, est: np.ndarray) -> np.ndarray:
    """round(x * y / 10**10) when the result fits 62 bits, exactly, in int64 arithmetic.

    `est` is the float estimate, off by at most 2**12; the residue ``x*y - est*10**10`` is then
    below 2**63, so computing it with wrapping int64 products gives its exact value.
    """
    with np.errstate(over="ignore"):
        resid = x * y - est * _P10
    q, r = np.divmod(resid, _P10)
    return _round_quotient(est + q, r, _P10)


def _nonzero(b: pa.Array) -> None:
    if pc.any(pc.equal(b, pa.scalar(0, b.type))).as_py():
        raise DivisionByZero("division by zero")


def _int_digits(a: pa.Array) -> int:
    """Digits before the point of the largest magnitude (at least 1)."""
    m = pc.max(pc.abs(a)).as_py()
    if m is None or m < 1:
        return 1
    return len(str(int(m)))


def divide(a: pa.Array, b: pa.Array) -> pa.Array:
    """Quotient rounded half away from zero to scale 10.

    Fast path (int64 arithmetic, like `_mul_i64`) when the divisor is below 2**50 unscaled and
    the quotient fits 61 bits. Otherwise Arrow's decimal256 division, which truncates at a scale
    above 10 (enough to round correctly); its precision grows with both operands, so they are
    narrowed to the digits they use. Only beyond decimal256 does Python's decimal run per row.
    """
    _nonzero(b)
    valid = and_valid(a, b)
    ahi, alo = to_i128(a)
    bhi, blo = to_i128(b)
    if fits_i64(ahi, alo).all() and fits_i64(bhi, blo).all():
        x, y = alo.view(np.int64), blo.view(np.int64)
        y = np.where(full_valid(valid, len(y)), y, 1)
        mx, my = np.abs(x), np.abs(y)
        est = np.rint(mx.astype(np.float64) / my.astype(np.float64) * 1e10)
        if (my < 2**50).all() and (est < 2.0**61).all():
            e = est.astype(np.int64)
            with np.errstate(over="ignore"):
                resid = mx * _P10 - e * my
            q, r = np.divmod(resid, my)
            mag = _round_quotient(e + q, r, my)
            out = np.where((x < 0) != (y < 0), -mag, mag)
            return from_i128(*from_i64(out), valid)
    pa_, pb = 10 + _int_digits(a), 10 + _int_digits(b)
    if pa_ + pb + 2 > 76:
        return per_row_decimal(lambda x, y: x / y, [a, b])
    x = a.cast(pa.decimal256(pa_, 10))
    y = b.cast(pa.decimal256(pb, 10))
    q = pc.divide(x, y)
    q = q.cast(pa.decimal256(q.type.precision + 1, q.type.scale))
    q = pc.round(q, ndigits=NUMERIC_SCALE, round_mode="half_towards_infinity")
    try:
        return q.cast(NUM_ARROW)
    except pa.ArrowInvalid:
        raise NumericOutOfRange(_OVERFLOW) from None


def modulus(a: pa.Array, b: pa.Array) -> pa.Array:
    """Remainder with the dividend's sign; same scale, so it is the unscaled integers' remainder."""
    _nonzero(b)
    valid = and_valid(a, b)
    ahi, alo = to_i128(a)
    bhi, blo = to_i128(b)
    if fits_i64(ahi, alo).all() and fits_i64(bhi, blo).all():
        x, y = alo.view(np.int64), blo.view(np.int64)
        y = np.where((y == 0) | (y == -1), 1, y)
        return from_i128(*from_i64(np.fmod(x, y)), valid)
    return per_row_decimal(lambda x, y: x % y, [a, b])  # Decimal's % keeps the dividend's sign


def rescale(a: pa.Array, digits: int, mode: str) -> pa.Array:
    """Round / trunc / floor / ceil to `digits` fraction digits (negative: left of the point)."""
    k = NUMERIC_SCALE - digits
    if k <= 0:
        return a
    valid = and_valid(a)
    hi, lo = to_i128(a)
    if k <= 18 and fits_i64(hi, lo).all():
        x, p = lo.view(np.int64), np.int64(10**k)
        f, r = np.divmod(x, p)
        if mode == "round":
            f = _round_quotient(f, r, p)
        elif mode == "ceil":
            f = f + (r != 0)
        elif mode == "trunc":
            f = f + ((r != 0) & (x < 0))
        if (np.abs(f) < 2**62 // p).all():
            return from_i128(*from_i64(f * p), valid)
    neg, mag = to_limbs(hi, lo)
    q = div_pow10(mag, k, mode, neg)
    back = mul_pow10(q, k)
    iszero = ~np.any(np.stack(back), axis=0)
    hi, lo = from_limbs(neg & ~iszero, back, valid)
    return from_i128(hi, lo, valid)


def apply_typmod(a: pa.Array, precision: int, scale: int) -> pa.Array:
    """A value assigned to NUMERIC(precision, scale): rounded half away from zero to `scale`
    fraction digits; 22003 when its integer part needs more than precision - scale digits."""
    out = rescale(a, scale, "round")
    digits = precision - scale
    if digits < NUMERIC_PRECISION - NUMERIC_SCALE:  # else every value fits
        bound = pa.scalar(decimal.Decimal(10) ** digits, pa.decimal128(38, NUMERIC_SCALE))
        if pc.any(pc.greater_equal(pc.abs(out), bound)).as_py():
            raise NumericOutOfRange(
                "numeric field overflow",
                detail=f"A field with precision {precision}, scale {scale} must round to an "
                f"absolute value less than {f'10^{digits}' if digits else '1'}.",
            )
    return out


def to_integer(a: pa.Array, lo_bound: int, hi_bound: int, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Values rounded half away from zero to int64, checked against [lo_bound, hi_bound]."""
    valid = and_valid(a)
    v = full_valid(valid, len(a))
    hi, lo = to_i128(a)
    if fits_i64(hi, lo).all():
        x = lo.view(np.int64)
        quot, r = np.divmod(x, _P10)
        out = _round_quotient(quot, r, _P10)
        if (((out < lo_bound) | (out > hi_bound)) & v).any():
            raise NumericOutOfRange(f"{what} out of range")
        return out, valid
    neg, mag = to_limbs(hi, lo)
    q = div_pow10(mag, NUMERIC_SCALE, "round", neg)
    if len(q) > 2 and any((limb[v] != 0).any() for limb in q[2:]):
        raise NumericOutOfRange(f"{what} out of range")
    m = q[0] | (q[1] << _S32) if len(q) > 1 else q[0]
    big = (m > np.uint64(2**63)) | ((m == np.uint64(2**63)) & ~neg)
    if (big & v).any():
        raise NumericOutOfRange(f"{what} out of range")
    s = m.view(np.int64)
    out = np.where(neg, -s, s)
    if (((out < lo_bound) | (out > hi_bound)) & v).any():
        raise NumericOutOfRange(f"{what} out of range")
    return out, valid


def from_integer(v: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """int64 values as NUMERIC (times 10**10, exact)."""
    v = v.astype(np.int64, copy=False)
    if (np.abs(v) < 922_337_203).all():  # the scaled value still fits int64
        return from_i128(*from_i64(v * _P10), valid)
    hi, lo = from_i64(v)
    neg, mag = to_limbs(hi, lo)
    hi, lo = from_limbs(neg, mul_pow10(mag, NUMERIC_SCALE), valid)
    return from_i128(hi, lo, valid)


def from_scaled(v: np.ndarray, scale: int, valid: np.ndarray | None) -> pa.Array:
    """NUMERIC from int64 values that carry `scale` implied fraction digits (0 <= scale <= 10)."""
    v = v.astype(np.int64, copy=False)
    k = NUMERIC_SCALE - scale
    if (np.abs(v) < (2**63 - 1) // 10**k).all():
        return from_i128(*from_i64(v * np.int64(10**k)), valid)
    hi, lo = from_i64(v)
    neg, mag = to_limbs(hi, lo)
    hi, lo = from_limbs(neg, mul_pow10(mag, k), valid)
    return from_i128(hi, lo, valid)


def to_float(a: pa.Array) -> pa.Array:
    """Correctly rounded doubles: exact division when the unscaled value fits 53 bits, else
    Arrow's decimal -> text -> double (fast_float rounds correctly) for the other rows."""
    valid = and_valid(a)
    hi, lo = to_i128(a)
    x = lo.view(np.int64)
    whole, frac = np.divmod(x, _P10)
    # exact when the unscaled value has 53 bits, or it is a whole number (one rounding either way)
    small = fits_i64(hi, lo) & ((np.abs(x) < 2**53) | (frac == 0))
    out = np.where(frac == 0, whole.astype(np.float64), x.astype(np.float64) / 1e10)
    if not small.all():
        big = np.flatnonzero(~small)
        exact = a.take(pa.array(big)).cast(pa.string()).cast(pa.float64())
        out[big] = exact.fill_null(0).to_numpy()
    from piestream.expr.functions.vec import from_numpy

    return from_numpy(out, valid, pa.float64())


def checked_numeric(d: decimal.Decimal) -> decimal.Decimal:
    """A Python decimal rounded to NUMERIC's scale, 22003 if it does not fit decimal128(38, 10)."""
    from piestream.common.scalar import normalize_numeric

    if d.is_finite() and d != 0 and d.adjusted() >= 38 - NUMERIC_SCALE:
        raise NumericOutOfRange("numeric field overflow")
    return normalize_numeric(d)


def per_row_decimal(fn: Callable[..., decimal.Decimal], arrays: Sequence[pa.Array]) -> pa.Array:
    """Per-row Python `decimal` (rare paths only), rounded to NUMERIC's scale."""
    ctx = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP)

    def run(*xs: decimal.Decimal) -> decimal.Decimal:
        with decimal.localcontext(ctx):
            out = fn(*xs)
        try:
            return checked_numeric(out)
        except NumericOutOfRange:
            raise NumericOutOfRange(_OVERFLOW) from None

    return per_row(run, arrays, NUMERIC)


# -- issue 14's migration scaffold: a column of the per-value-scale layout goes to numeric_scaled's
# kernel of the same name (PostgreSQL's scales, NaN / ±Infinity), and under that layout the
# producers of new columns too. Goes away with the switch.


def _scaled_columns(args: tuple[object, ...]) -> bool:
    return any(isinstance(a, pa.Array | pa.ChunkedArray) and nm.is_numeric_array(a) for a in args)


def _or_scaled(new: Callable[..., Any], *, produces: bool = False) -> Callable[[_F], _F]:
    def deco(old: _F) -> _F:
        @functools.wraps(old)
        def run(*args: Any, **kwargs: Any) -> Any:
            if produces or _scaled_columns(args):
                return new(*args, **kwargs)
            return old(*args, **kwargs)

        return cast(_F, run)

    return deco


add = _or_scaled(ns.add)(add)
subtract = _or_scaled(ns.subtract)(subtract)
multiply = _or_scaled(ns.multiply)(multiply)
divide = _or_scaled(ns.divide)(divide)
modulus = _or_scaled(ns.modulus)(modulus)
negate = _or_scaled(ns.negate)(negate)
absolute = _or_scaled(ns.absolute)(absolute)
apply_typmod = _or_scaled(ns.apply_typmod)(apply_typmod)
to_integer = _or_scaled(ns.to_integer)(to_integer)
to_float = _or_scaled(ns.to_float)(to_float)
rescale = _or_scaled(ns.rescale_to)(rescale)
from_integer = _or_scaled(ns.from_integer, produces=True)(from_integer)
from_scaled = _or_scaled(ns.from_scaled, produces=True)(from_scaled)
per_row_decimal = _or_scaled(ns.per_row, produces=True)(per_row_decimal)
checked_numeric = _or_scaled(nm.check, produces=True)(checked_numeric)
