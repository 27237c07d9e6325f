"""sum and avg of NUMERIC with PostgreSQL's scales, retractable, per chunk (issue 14's layout).

PostgreSQL's sum(numeric) has the largest display scale of the group's values (sum of 1.5 and
2.25 is 3.75, of 1.5 and 2.5 is 4.0), counts NaN and the infinities apart (NaN wins; +Inf and
-Inf together are NaN), and avg is that sum divided by the count with select_div_scale. A
materialized view also retracts values, so the largest scale must come back down when its last
value leaves: `SumState` keeps, per group, a count of the values of each display scale 0..28
(what numeric.c's NumericAggState does with maxScale / maxScaleCount, without having to
recompute when that count reaches zero), the counts of NaN, +Inf and -Inf, and the exact sum of
the finite values at the largest scale present.

Everything is per chunk in numpy: values are aligned to their group's scale, split into 32-bit
limbs and summed with `np.add.at`, then carried back into 128-bit words. Not yet called by the
aggregate executors: NUMERIC columns are decimal128(38, 10) until issue 14's migration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.numeric import NAN_SCALE, NEG_INF_SCALE, NUMERIC_MAX_SCALE, POS_INF_SCALE
from piestream.common.numeric_arrays import Num
from piestream.expr.functions import numeric_scaled

SCALES = NUMERIC_MAX_SCALE + 1
_M32 = np.int64(0xFFFF_FFFF)


@dataclass
class SumState:
    """Per group: the exact sum of its finite values (hi, lo at `scale`), how many values of
    each display scale it holds, and how many NaN, +Infinity and -Infinity."""

    hi: np.ndarray  # int64
    lo: np.ndarray  # uint64
    scale: np.ndarray  # int64: the largest scale with a nonzero count (0 when none)
    scale_counts: np.ndarray  # (groups, 29) int64
    nan: np.ndarray  # int64 counts
    pos_inf: np.ndarray
    neg_inf: np.ndarray

    @classmethod
    def empty(cls, groups: int) -> SumState:
        z = np.zeros(groups, np.int64)
        return cls(
            z.copy(),
            z.view(np.uint64).copy(),
            z.copy(),
            np.zeros((groups, SCALES), np.int64),
            z.copy(),
            z.copy(),
            z.copy(),
        )

    def __len__(self) -> int:
        return len(self.scale)

    def count(self) -> np.ndarray:
        """Non-NULL values per group."""
        return self.scale_counts.sum(axis=1) + self.nan + self.pos_inf + self.neg_inf

    def apply(self, col: pa.Array, groups: np.ndarray, signs: np.ndarray | None = None) -> None:
        """Add (sign +1) or retract (sign -1) each row's value in its group; NULLs are skipped.
        22003 when a group's sum leaves 38 digits."""
        num = na.unpack(col)
        live = num.vmask()
        g = np.asarray(groups, np.int64)[live]
        sign = np.ones(len(g), np.int64) if signs is None else np.asarray(signs, np.int64)[live]
        hi, lo, sc = num.hi[live], num.lo[live], num.scale[live]
        for special, counts in (
            (NAN_SCALE, self.nan),
            (POS_INF_SCALE, self.pos_inf),
            (NEG_INF_SCALE, self.neg_inf),
        ):
            rows = sc == special
            np.add.at(counts, g[rows], sign[rows])
        fin = sc >= 0
        g, sign, hi, lo, sc = g[fin], sign[fin], hi[fin], lo[fin], sc[fin]
        np.add.at(self.scale_counts, (g, sc), sign)
        if (self.scale_counts < 0).any():
            raise ValueError("retracted a NUMERIC value the sum does not hold")
        # align the stored sums and the chunk's values to each group's largest scale so far
        target = self.scale.copy()
        np.maximum.at(target, g, sc)
        touched = np.unique(g)
        sh, sl, fits_s = na.mul_pow10(
            self.hi[touched], self.lo[touched], target[touched] - self.scale[touched]
        )
        vh, vl, fits_v = na.mul_pow10(hi, lo, target[g] - sc)
        if not (fits_s.all() and fits_v.all()):
            raise nm.overflow()
        neg_rows = sign < 0
        vh[neg_rows], vl[neg_rows] = na.negate(vh[neg_rows], vl[neg_rows])
        all_g, all_h, all_l = np.concatenate([touched, g]), np.concatenate([sh, vh]), np.concatenate([sl, vl])
        approx = np.zeros(len(self))  # the 128-bit sums wrap silently: a float bound catches that
        np.add.at(approx, all_g, all_h.astype(np.float64) * 2.0**64 + all_l.astype(np.float64))
        if (np.abs(approx) >= 1.5e38).any():
            raise nm.overflow()
        th, tl = _grouped_sum128(all_g, all_h, all_l, len(self))
        # the largest scale still present (retractions may lower it): an exact rescale down
        present = self.scale_counts[touched] > 0
        new_scale = np.where(present.any(axis=1), SCALES - 1 - np.argmax(present[:, ::-1], axis=1), 0)
        h, low = na.div_pow10(th[touched], tl[touched], target[touched] - new_scale, "trunc")
        if not na.within_limit(h, low).all():
            raise nm.overflow()
        self.hi[touched], self.lo[touched], self.scale[touched] = h, low, new_scale

    def sums(self) -> pa.Array:
        """sum() per group: NULL for a group without values, NaN / ±Infinity per numeric.c."""
        s = np.where(self.nan > 0, NAN_SCALE, self.scale)
        both = (self.pos_inf > 0) & (self.neg_inf > 0)
        s = np.where((self.nan == 0) & both, NAN_SCALE, s)
        s = np.where((self.nan == 0) & ~both & (self.pos_inf > 0), POS_INF_SCALE, s)
        s = np.where((self.nan == 0) & ~both & (self.neg_inf > 0), NEG_INF_SCALE, s)
        special = s < 0
        hi = np.where(special, 0, self.hi)
        lo = np.where(special, np.uint64(0), self.lo)
        return na.pack(Num(hi, lo, s, self.count() > 0))

    def avgs(self) -> pa.Array:
        """avg() per group: the sum divided by the count with select_div_scale (NULL for none)."""
        return numeric_scaled.divide_by_counts(self.sums(), self.count())


def _grouped_sum128(
    groups: np.ndarray, hi: np.ndarray, lo: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Wrapping 128-bit sums of signed (hi, lo) values per group: four 32-bit limbs summed in
    int64 (exact for fewer than 2**31 rows), then carried."""
    acc = np.zeros((4, n), np.int64)
    lo_i = lo.view(np.int64)
    limbs = (lo_i & _M32, (lo_i >> 32) & _M32, hi & _M32, hi >> 32)  # the top limb keeps the sign
    for k, limb in enumerate(limbs):
        np.add.at(acc[k], groups, limb)
    for k in range(3):  # carry (arithmetic shifts: a negative limb sum borrows)
        acc[k + 1] += acc[k] >> 32
        acc[k] &= _M32
    lo_out = (acc[0] | (acc[1] << 32)).view(np.uint64)
    hi_out = acc[2] | (acc[3] << 32)
    return hi_out, lo_out


def extreme_rows(col: pa.Array, groups: np.ndarray, n_groups: int, *, largest: bool) -> np.ndarray:
    """min() / max() per group as row indices into `col` (-1 for a group without values), so the
    chosen value keeps its own display scale: max(1.5, 2.50) is 2.50. Among equal values (1.5
    and 1.50) the first row wins; PostgreSQL's numeric_larger keeps the later one, which an MV
    fed in no fixed order cannot promise either. NaN is the largest value."""
    num = na.unpack(col)
    rows = np.flatnonzero(num.vmask())
    out = np.full(n_groups, -1, np.int64)
    if not len(rows):
        return out
    g = np.asarray(groups, np.int64)[rows]
    keys = na.order_key(Num(num.hi[rows], num.lo[rows], num.scale[rows], None))
    if largest:
        keys = ~keys  # descending by value; the stable sort keeps the first of equal ones
    order = np.lexsort((*[keys[:, i] for i in range(keys.shape[1] - 1, -1, -1)], g))
    first = np.ones(len(order), np.bool_)
    first[1:] = g[order][1:] != g[order][:-1]
    out[g[order][first]] = rows[order][first]
    return out
