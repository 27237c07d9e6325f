"""Whole NUMERIC columns in numpy: the 128-bit unscaled integers and their per-value scales.

A column is taken apart once (`unpack`: signed (hi int64, lo uint64) words, an int64 scale per
value with the reserved negative scales of NaN / ±Infinity, the validity), worked on with numpy,
and put back together (`pack`). Everything here is per column, never per value:

- magnitudes beyond 64 bits are little-endian 32-bit limbs held in uint64 arrays (a 32x32-bit
  product plus two 32-bit carries fits 64 bits exactly), so multiplication and division by
  powers of ten run as a few numpy passes per limb;
- most columns hold values that fit 63 bits; the operations check that first and then compute
  in int64 (`fits_int64`), which is several times faster.

The SQL semantics (PostgreSQL's scale rules, specials, errors) live in `expr.functions.decimal`;
this module only moves digits exactly and reports where a result does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.errors import NumericOutOfRange
from piestream.common.numeric import (
    LIMIT,
    NAN_SCALE,
    NEG_INF_SCALE,
    NUMERIC_STORAGE,
    POS_INF_SCALE,
    overflow,
    storage_of,
    wrap,
)
from piestream.common.types import NUMERIC_PRECISION

DEC = np.dtype([("lo", "<u8"), ("hi", "<i8")])
M32 = np.uint64(0xFFFFFFFF)
S32 = np.uint64(32)
#: 10**k for k = 0..38 as (high, low) 64-bit words; 10**38 < 2**127.
P10_HI = np.array([(10**k) >> 64 for k in range(NUMERIC_PRECISION + 1)], np.uint64)
P10_LO = np.array([(10**k) & (2**64 - 1) for k in range(NUMERIC_PRECISION + 1)], np.uint64)
P10_I64 = np.array([10**k for k in range(19)], np.int64)
P10_F = np.array([10.0**k for k in range(NUMERIC_PRECISION + 40)])

Limbs = list[np.ndarray]  # little-endian 32-bit limbs of magnitudes, one uint64 array per limb


@dataclass
class Num:
    """A NUMERIC column taken apart. Under NULLs every field is 0 (a valid zero)."""

    hi: np.ndarray  # int64: high word of the two's complement unscaled value
    lo: np.ndarray  # uint64: low word
    scale: np.ndarray  # int64: 0..38, or NAN_SCALE / POS_INF_SCALE / NEG_INF_SCALE
    valid: np.ndarray | None  # None when there are no NULLs

    def __len__(self) -> int:
        return len(self.scale)

    @property
    def special(self) -> np.ndarray:
        return self.scale < 0

    def vmask(self) -> np.ndarray:
        return np.ones(len(self), np.bool_) if self.valid is None else self.valid


def unpack(arr: pa.Array | pa.ChunkedArray) -> Num:
    """The parts of a NUMERIC Arrow column (zeros under NULLs)."""
    arr = storage_of(arr)
    n = len(arr)
    if n == 0:
        z = np.zeros(0, np.int64)
        return Num(z, z.view(np.uint64), z, None)
    unscaled, scale = arr.flatten()
    raw = _view(unscaled, DEC)
    hi, lo = raw["hi"].copy(), raw["lo"].copy()
    sc = _view(scale, np.int8).astype(np.int64)
    valid = None
    bad = np.zeros(n, np.bool_)
    for a in (arr, unscaled, scale):
        if a.null_count:
            bad |= ~np.asarray(a.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    if bad.any():
        hi[bad] = 0
        lo[bad] = 0
        sc[bad] = 0
    return Num(hi, lo, sc, valid)


def _view(arr: pa.Array, dtype: np.dtype | type) -> np.ndarray:
    dt = np.dtype(dtype)
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(len(arr), dt)
    return np.frombuffer(buf, dt, count=arr.offset + len(arr))[arr.offset :]


def pack(num: Num) -> pa.Array:
    """A NUMERIC Arrow column from parts (NULL where `valid` is False)."""
    n = len(num)
    rec = np.empty(n, DEC)
    rec["lo"] = num.lo
    rec["hi"] = num.hi
    valid = num.valid
    mask = None
    if valid is not None and not valid.all():
        rec["lo"][~valid] = 0
        rec["hi"][~valid] = 0
        mask = pa.array(~valid)
    scale = np.where(num.vmask(), num.scale, 0).astype(np.int8)
    unscaled = pa.Array.from_buffers(NUMERIC_STORAGE[0].type, n, [None, pa.py_buffer(rec)])
    scales = pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(scale)])
    return wrap(pa.StructArray.from_arrays([unscaled, scales], fields=list(NUMERIC_STORAGE), mask=mask))


def from_int64(v: np.ndarray, scale: np.ndarray | int, valid: np.ndarray | None) -> Num:
    """Parts of int64 unscaled values."""
    v = np.asarray(v, np.int64)
    sc = np.broadcast_to(np.asarray(scale, np.int64), v.shape).copy()
    return Num(v >> 63, v.view(np.uint64).copy(), sc, valid)


def specials(n: int, scale: int, valid: np.ndarray | None = None) -> Num:
    z = np.zeros(n, np.int64)
    return Num(z, z.view(np.uint64).copy(), np.full(n, scale, np.int64), valid)


# -- 128-bit words ---------------------------------------------------------------------------------


def fits_int64(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Values whose 128-bit form is a sign-extended int64."""
    return hi == (lo.view(np.int64) >> 63)


def negate(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nlo = ~lo + np.uint64(1)
    nhi = ~hi + (nlo == 0).astype(np.int64)
    return nhi, nlo


def magnitude(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(negative, |v| high word, |v| low word) of signed 128-bit values (|v| < 2**127)."""
    neg = hi < 0
    nhi, nlo = negate(hi, lo)
    return neg, np.where(neg, nhi, hi).view(np.uint64), np.where(neg, nlo, lo)


def signed(neg: np.ndarray, mh: np.ndarray, ml: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Signed words from a sign and a magnitude below 2**127."""
    shi = mh.view(np.int64)
    nhi, nlo = negate(shi, ml)
    return np.where(neg, nhi, shi), np.where(neg, nlo, ml)


def below_limit(mh: np.ndarray, ml: np.ndarray) -> np.ndarray:
    """Magnitudes below 10**38 (what NUMERIC holds)."""
    ch, cl = P10_HI[NUMERIC_PRECISION], P10_LO[NUMERIC_PRECISION]
    return (mh < ch) | ((mh == ch) & (ml < cl))


def ge_pow10(mh: np.ndarray, ml: np.ndarray, k: np.ndarray) -> np.ndarray:
    """|v| >= 10**k per row (0 <= k <= 38)."""
    ph, pl = P10_HI[k], P10_LO[k]
    return (mh > ph) | ((mh == ph) & (ml >= pl))


def ndigits(mh: np.ndarray, ml: np.ndarray) -> np.ndarray:
    """Decimal digits of magnitudes below 10**38 (0 for zero): a float estimate, made exact by
    comparing with the powers of ten around it."""
    f = mh.astype(np.float64) * 18446744073709551616.0 + ml.astype(np.float64)
    with np.errstate(divide="ignore"):
        est = np.where(f > 0, np.floor(np.log10(np.maximum(f, 1.0))) + 1, 0).astype(np.int64)
    est = np.clip(est, 0, NUMERIC_PRECISION)
    est = np.where((est > 0) & ~ge_pow10(mh, ml, np.maximum(est - 1, 0)), est - 1, est)
    up = (est < NUMERIC_PRECISION) & ge_pow10(mh, ml, np.minimum(est, NUMERIC_PRECISION))
    return np.where(up & ((mh > 0) | (ml > 0)), est + 1, est)


def add128(ah: np.ndarray, al: np.ndarray, bh: np.ndarray, bl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wrapping 128-bit sum (callers bound the inputs so that it does not wrap)."""
    lo = al + bl
    return ah + bh + (lo < al).astype(np.int64), lo


# -- limbs -----------------------------------------------------------------------------------------


def to_limbs(mh: np.ndarray, ml: np.ndarray) -> Limbs:
    return trim([ml & M32, ml >> S32, mh & M32, mh >> S32])


def from_limbs(limbs: Limbs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(high word, low word, fits 128 bits) of limb magnitudes."""
    n = len(limbs[0])
    z = np.zeros(n, np.uint64)
    ls = [*limbs, *[z] * max(0, 4 - len(limbs))]
    fits = np.ones(n, np.bool_)
    for extra in ls[4:]:
        fits &= extra == 0
    return ls[2] | (ls[3] << S32), ls[0] | (ls[1] << S32), fits


def trim(limbs: Limbs) -> Limbs:
    """Drop top limbs that are zero in every row (keeps at least one)."""
    while len(limbs) > 1 and not limbs[-1].any():
        limbs = limbs[:-1]
    return limbs


def mul_small(a: Limbs, m: np.ndarray | int) -> Limbs:
    """Magnitudes times per-row multipliers below 2**32."""
    mm = np.asarray(m, np.uint64)
    out: Limbs = []
    carry = np.zeros(len(a[0]), np.uint64)
    for limb in a:
        t = limb * mm + carry
        out.append(t & M32)
        carry = t >> S32
    out.append(carry)
    return trim(out)


def divmod_small(a: Limbs, d: np.ndarray | int) -> tuple[Limbs, np.ndarray]:
    """(quotient limbs, remainder) of magnitudes by per-row divisors in 1..2**32-1."""
    dd = np.asarray(d, np.uint64)
    rem = np.zeros(len(a[0]), np.uint64)
    q: Limbs = [rem] * len(a)
    for k in range(len(a) - 1, -1, -1):
        cur = (rem << S32) | a[k]
        qk = cur // dd
        rem = cur - qk * dd
        q[k] = qk
    return trim(q), rem


def add_small(a: Limbs, inc: np.ndarray) -> Limbs:
    """Magnitudes plus a per-row increment below 2**32."""
    out: Limbs = []
    carry = inc.astype(np.uint64)
    for limb in a:
        t = limb + carry
        out.append(t & M32)
        carry = t >> S32
    out.append(carry)
    return trim(out)


def mul_limbs(a: Limbs, b: Limbs) -> Limbs:
    """Schoolbook product of magnitudes."""
    n = len(a[0])
    out = [np.zeros(n, np.uint64) for _ in range(len(a) + len(b))]
    for i, ai in enumerate(a):
        carry = np.zeros(n, np.uint64)
        for j, bj in enumerate(b):
            t = ai * bj + out[i + j] + carry
            out[i + j] = t & M32
            carry = t >> S32
        out[i + len(b)] = carry
    return trim(out)


def mul_pow10_limbs(a: Limbs, k: np.ndarray) -> Limbs:
    """Magnitudes times 10**k per row (k >= 0), exactly."""
    k = np.asarray(k, np.int64).copy()
    while (k > 0).any():
        step = np.minimum(k, 9)
        a = mul_small(a, P10_I64[step].astype(np.uint64))
        k -= step
    return a


def divmod_pow10_limbs(a: Limbs, k: np.ndarray) -> tuple[Limbs, np.ndarray, np.ndarray]:
    """(quotient of magnitudes by 10**k per row, remainder >= half of 10**k, remainder != 0)."""
    k = np.asarray(k, np.int64).copy()
    n = len(a[0])
    half = np.zeros(n, np.bool_)
    inexact = np.zeros(n, np.bool_)
    while (k > 0).any():
        step = np.minimum(k, 9)
        d = P10_I64[step].astype(np.uint64)
        a, r = divmod_small(a, d)
        last = (k > 0) & (k == step)  # this step held the most significant removed digits
        inexact |= (r != 0) & (k > 0)
        half |= last & (r * np.uint64(2) >= d)
        k -= step
    return a, half, inexact


# -- scaling ---------------------------------------------------------------------------------------


def mul_pow10(hi: np.ndarray, lo: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hi, lo, fits) of the signed values times 10**k per row (k >= 0); `fits`: the result is
    below 10**38 in magnitude (elsewhere the words are meaningless)."""
    k = np.asarray(k, np.int64)
    if not k.any():
        return hi, lo, np.ones(len(hi), np.bool_)
    if k.max() <= 18 and fits_int64(hi, lo).all():
        x = lo.view(np.int64)
        bound = np.abs(x).astype(np.float64) * P10_F[k]
        if (bound < 9.0e18).all():
            r = x * P10_I64[k]
            return r >> 63, r.view(np.uint64), np.ones(len(hi), np.bool_)
    neg, mh, ml = magnitude(hi, lo)
    limbs = mul_pow10_limbs(to_limbs(mh, ml), np.minimum(k, 80))
    rh, rl, fits = from_limbs(limbs)
    fits &= below_limit(rh, rl) & (k <= 80)
    h, low = signed(neg, rh, rl)
    return h, low, fits


_MODES = ("round", "trunc", "floor", "ceil")


def div_pow10(hi: np.ndarray, lo: np.ndarray, k: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Signed values divided by 10**k per row (k >= 0), rounded by `mode`: round (half away from
    zero), trunc (toward zero), floor, ceil."""
    assert mode in _MODES
    k = np.asarray(k, np.int64)
    if not k.any():
        return hi, lo
    if k.max() <= 18 and fits_int64(hi, lo).all():
        x = lo.view(np.int64)
        p = P10_I64[k]
        q = np.abs(x) // p
        r = np.abs(x) - q * p
        neg = x < 0
        q = q + _bump(mode, neg, 2 * r >= p, r != 0)
        r64 = np.where(neg, -q, q)
        return r64 >> 63, r64.view(np.uint64)
    neg, mh, ml = magnitude(hi, lo)
    q, half, inexact = divmod_pow10_limbs(to_limbs(mh, ml), np.minimum(k, 80))
    q = add_small(q, _bump(mode, neg, half, inexact).astype(np.uint64))
    rh, rl, _ = from_limbs(q)
    return signed(neg, rh, rl)


def _bump(mode: str, neg: np.ndarray, half: np.ndarray, inexact: np.ndarray) -> np.ndarray:
    if mode == "round":
        return half.astype(np.int64)
    if mode == "trunc":
        return np.zeros(len(neg), np.int64)
    if mode == "floor":
        return (inexact & neg).astype(np.int64)
    return (inexact & ~neg).astype(np.int64)


def rescale(num: Num, target: np.ndarray, mode: str = "round") -> tuple[Num, np.ndarray]:
    """Finite values at scale `target` per row (rounded by `mode` when it drops digits), and the
    rows whose result does not fit 38 digits. Specials and NULLs are kept as they are."""
    fin = ~num.special
    target = np.where(fin, np.asarray(target, np.int64), num.scale)
    up = np.where(fin, np.maximum(target - num.scale, 0), 0)
    down = np.where(fin, np.maximum(num.scale - target, 0), 0)
    hi, lo, fits = mul_pow10(num.hi, num.lo, up)
    hi, lo = div_pow10(hi, lo, down, mode)
    return Num(hi, lo, target, num.valid), ~fits & num.vmask()


def normalize(num: Num) -> Num:
    """The same values without trailing fraction zeros (1.50 -> 1.5, 0.00 -> 0): the canonical
    form equal values share."""
    hi, lo, sc = num.hi.copy(), num.lo.copy(), num.scale.copy()
    zero = (hi == 0) & (lo == 0)
    sc[zero & (sc > 0)] = 0
    small = fits_int64(hi, lo)
    if small.all():
        x = lo.view(np.int64).copy()
        live = np.flatnonzero((sc > 0) & (x % 10 == 0) & ~zero)
        while len(live):  # one pass per trailing zero, over the rows that still have one
            x[live] //= 10
            sc[live] -= 1
            live = live[(sc[live] > 0) & (x[live] % 10 == 0)]
        return Num(x >> 63, x.view(np.uint64), sc, num.valid)
    neg, mh, ml = magnitude(hi, lo)
    limbs = to_limbs(mh, ml)
    live = np.flatnonzero((sc > 0) & ~zero)
    while len(live):
        sub = [limb[live] for limb in limbs]
        q, r = divmod_small(sub, 10)
        strip = r == 0
        rows = live[strip]
        for i in range(len(limbs)):
            limbs[i][rows] = q[i][strip] if i < len(q) else 0
        sc[rows] -= 1
        live = rows[sc[rows] > 0]
    rh, rl, _ = from_limbs(limbs)
    h, low = signed(neg, rh, rl)
    return Num(h, low, sc, num.valid)


# -- comparison ------------------------------------------------------------------------------------

#: The order of the classes: -Infinity < finite < +Infinity < NaN (PostgreSQL's).
_CLASS = {NEG_INF_SCALE: 0, POS_INF_SCALE: 2, NAN_SCALE: 3}


def value_class(scale: np.ndarray) -> np.ndarray:
    return np.select(
        [scale == NEG_INF_SCALE, scale == POS_INF_SCALE, scale == NAN_SCALE], [0, 2, 3], default=1
    ).astype(np.int8)


def compare(a: Num, b: Num) -> np.ndarray:
    """-1 / 0 / 1 per row (NaN equals NaN and is the largest value); NULL rows compare as 0."""
    ca, cb = value_class(a.scale), value_class(b.scale)
    out = np.sign(ca.astype(np.int64) - cb).astype(np.int8)
    both = (ca == 1) & (cb == 1)
    if not both.any():
        return out
    idx = None if both.all() else np.flatnonzero(both)

    def sub(x: np.ndarray) -> np.ndarray:
        return x if idx is None else x[idx]

    ah, al, asc = sub(a.hi), sub(a.lo), sub(a.scale)
    bh, bl, bsc = sub(b.hi), sub(b.lo), sub(b.scale)
    res = _compare_finite(ah, al, asc, bh, bl, bsc)
    if idx is None:
        return res
    out[idx] = res
    return out


def _compare_finite(
    ah: np.ndarray, al: np.ndarray, asc: np.ndarray, bh: np.ndarray, bl: np.ndarray, bsc: np.ndarray
) -> np.ndarray:
    if (asc == bsc).all():
        return _cmp128(ah, al, bh, bl)
    s = np.maximum(asc, bsc)
    xh, xl, fx = mul_pow10(ah, al, s - asc)
    yh, yl, fy = mul_pow10(bh, bl, s - bsc)
    res = _cmp128(xh, xl, yh, yl)
    wide = ~(fx & fy)
    if wide.any():  # aligning overflowed 38 digits: the larger magnitude has more integer digits
        res[wide] = _compare_wide(ah[wide], al[wide], asc[wide], bh[wide], bl[wide], bsc[wide])
    return res


def _compare_wide(
    ah: np.ndarray, al: np.ndarray, asc: np.ndarray, bh: np.ndarray, bl: np.ndarray, bsc: np.ndarray
) -> np.ndarray:
    """Compare by sign, then by the position of the leading digit; values with the same leading
    position align within 38 digits."""
    an, amh, aml = magnitude(ah, al)
    bn, bmh, bml = magnitude(bh, bl)
    sa = np.where((amh == 0) & (aml == 0), 0, np.where(an, -1, 1))
    sb = np.where((bmh == 0) & (bml == 0), 0, np.where(bn, -1, 1))
    ea = ndigits(amh, aml) - asc
    eb = ndigits(bmh, bml) - bsc
    by_pos = np.sign(ea - eb) * np.where(sa < 0, -1, 1)
    out = np.where(sa != sb, np.sign(sa - sb), by_pos)
    tie = (sa == sb) & (sa != 0) & (ea == eb)
    if tie.any():
        s = np.maximum(asc[tie], bsc[tie])
        xh, xl, _ = mul_pow10(ah[tie], al[tie], s - asc[tie])
        yh, yl, _ = mul_pow10(bh[tie], bl[tie], s - bsc[tie])
        out[tie] = _cmp128(xh, xl, yh, yl)
    return out.astype(np.int8)


def _cmp128(ah: np.ndarray, al: np.ndarray, bh: np.ndarray, bl: np.ndarray) -> np.ndarray:
    gt = (ah > bh) | ((ah == bh) & (al > bl))
    lt = (ah < bh) | ((ah == bh) & (al < bl))
    return gt.astype(np.int8) - lt.astype(np.int8)


# -- keys ------------------------------------------------------------------------------------------

KEY_WIDTH = 33  # class byte + a 256-bit fixed-point value


def order_key(num: Num) -> np.ndarray:
    """(n, 33) uint8 rows whose byte order is NUMERIC's order and whose equality is its
    equality (1.5 and 1.50 share a key): the class (-Inf, finite, +Inf, NaN), then the value at
    scale 38 as a 256-bit two's complement integer, sign bit flipped, big-endian. Not durable
    (keys on disk use the memcomparable format); for sorting, grouping and joining in memory."""
    n = len(num)
    out = np.zeros((n, KEY_WIDTH), np.uint8)
    out[:, 0] = value_class(num.scale)
    fin = ~num.special
    neg, mh, ml = magnitude(num.hi, num.lo)
    limbs = mul_pow10_limbs(to_limbs(mh, ml), np.where(fin, NUMERIC_PRECISION - num.scale, 0))
    limbs = [*limbs, *[np.zeros(n, np.uint64)] * (8 - len(limbs))]
    # two's complement of negatives: invert and add one, limb by limb
    carry = neg.astype(np.uint64)
    words = []
    for limb in limbs:
        v = np.where(neg, ~limb & M32, limb) + carry
        words.append(v & M32)
        carry = v >> S32
    words[7] ^= np.uint64(0x80000000)  # sign bit flipped: negatives sort first
    for i, w in enumerate(reversed(words)):
        out[:, 1 + 4 * i : 5 + 4 * i] = w.astype(">u4").view(np.uint8).reshape(n, 4)
    out[~fin, 1:] = 0
    return out


def within_limit(h: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Signed values whose magnitude is below `numeric.STORABLE` (2**96): the NUMERIC values
    (intermediate results may reach 10**38, `below_limit`)."""
    _, mh, _ = magnitude(h, lo)
    return mh < np.uint64(1 << 32)


__all__ = [
    "LIMIT",
    "Num",
    "compare",
    "div_pow10",
    "mul_pow10",
    "ndigits",
    "normalize",
    "order_key",
    "pack",
    "rescale",
    "unpack",
]


def from_decimal(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A NUMERIC column of this layout from an Arrow decimal128(p, s) column (integer sums,
    Spark's and Parquet's decimals): each value keeps the column's scale s (0..38)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_decimal128(arr.type) or not 0 <= arr.type.scale <= NUMERIC_PRECISION:
        raise TypeError(f"not a decimal128 column with a scale in 0..38: {arr.type}")
    raw = _view(arr, DEC)
    valid = (
        None if arr.null_count == 0 else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    )
    return pack(Num(raw["hi"].copy(), raw["lo"].copy(), np.full(len(arr), arr.type.scale, np.int64), valid))


def to_decimal(arr: pa.Array | pa.ChunkedArray, t: pa.DataType) -> pa.Array:
    """The finite values of a NUMERIC column as an Arrow decimal column of type `t` (a scale at
    least every value's, e.g. decimal256(75, 28) for exact sums in Arrow); NULL and the special
    values read as 0. One Arrow cast per distinct display scale (at most 29), never per row."""
    num = unpack(arr)
    n = len(num)
    fin = ~num.special & num.vmask()
    pieces: list[pa.Array] = []
    positions: list[np.ndarray] = []
    for s in np.unique(num.scale[fin]).tolist():
        rows = np.flatnonzero(fin & (num.scale == s))
        rec = np.empty(len(rows), DEC)
        rec["lo"], rec["hi"] = num.lo[rows], num.hi[rows]
        part = pa.Array.from_buffers(
            pa.decimal128(NUMERIC_PRECISION, s), len(rows), [None, pa.py_buffer(rec)]
        )
        pieces.append(part.cast(t))
        positions.append(rows)
    rest = np.flatnonzero(~fin)
    if len(rest):
        pieces.append(pa.array(np.zeros(len(rest), np.int64)).cast(t))
        positions.append(rest)
    if not pieces:
        return pa.nulls(0, t)
    order = np.empty(n, np.int64)
    order[np.concatenate(positions)] = np.arange(n)
    return pa.concat_arrays(pieces).take(pa.array(order))


def from_wide_decimal(arr: pa.Array, scale: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """A NUMERIC column from an Arrow decimal column whose values have at most `scale[i]` fraction
    digits (exact sums of values of those scales): each row rescaled to its `scale` (an Arrow
    cast that refuses to lose digits), 22003 when a value needs more than 38 digits. One cast
    per distinct scale."""
    n = len(arr)
    hi = np.zeros(n, np.int64)
    lo = np.zeros(n, np.uint64)
    live = np.ones(n, np.bool_) if valid is None else valid
    for s in np.unique(scale[live]).tolist():
        rows = np.flatnonzero(live & (scale == s))
        part = arr.take(pa.array(rows, pa.int64())).fill_null(0)
        try:
            narrow = part.cast(pa.decimal256(76, s)).cast(pa.decimal128(NUMERIC_PRECISION, s))
        except pa.ArrowInvalid as e:
            if "data loss" in str(e):
                raise AssertionError(f"a sum has more than {s} fraction digits: {e}") from e
            raise overflow() from e
        raw = _view(narrow, DEC)
        hi[rows], lo[rows] = raw["hi"], raw["lo"]
    return pack(Num(hi, lo, np.where(live, scale, 0).astype(np.int64), valid))


#: The decimal type NUMERIC columns are written as outside piestream (Parquet, Delta, Iceberg,
#: Spark): what decimal128(38, 10) columns always were, so existing targets keep their schema.
EXPORT_SCALE = 10
EXPORT_DECIMAL = pa.decimal128(NUMERIC_PRECISION, EXPORT_SCALE)


def specials_to_null(arr: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """`arr` with NaN / +-Infinity made NULL, and the rows that were (for a streaming writer of
    fixed-scale decimals: NULL plus an error record, never a failed epoch)."""
    num = unpack(arr)
    rows = np.flatnonzero(num.special & num.vmask())
    if not len(rows):
        return pack(num), rows
    keep = num.vmask() & ~num.special
    return pack(Num(num.hi, num.lo, np.where(keep, num.scale, 0), keep)), rows


def to_export_decimal(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A NUMERIC column as `EXPORT_DECIMAL`: rounded half away from zero to 10 fraction digits
    (the column type the reader sees). NaN and ±Infinity have no decimal form: 22003, never a
    silent NULL or 0."""
    num = unpack(arr)
    live = num.vmask()
    if (num.special & live).any():
        raise NumericOutOfRange(
            "cannot write NaN or Infinity to a decimal column",
            detail="Parquet, Delta, Iceberg and Spark decimals hold finite values only.",
        )
    out, bad = rescale(num, np.full(len(num), EXPORT_SCALE, np.int64), "round")
    if (bad & live).any():
        raise overflow()
    rec = np.empty(len(num), DEC)
    rec["lo"] = np.where(live, out.lo, np.uint64(0))
    rec["hi"] = np.where(live, out.hi, 0)
    validity = None if num.valid is None else pa.py_buffer(np.packbits(num.valid, bitorder="little"))
    return pa.Array.from_buffers(EXPORT_DECIMAL, len(num), [validity, pa.py_buffer(rec)])
