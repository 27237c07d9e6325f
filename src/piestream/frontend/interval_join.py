"""Interval joins: the time band of a join's ON condition between two watermarked time columns.

RisingWave plans ``a JOIN b ON a.k = b.k AND b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t`` as
its hash join with an "interval join" condition: the inequalities bound ``b.t - a.t`` from both
sides, and with watermarks on both time columns each side's state below the other side's
watermark minus the band can never match again and is cleaned (`plan.hash_join.IntervalBand`).

Recognised conjuncts (each side a time column of one input, optionally ± a fixed interval):
``x <op> y`` with <op> one of ``< <= > >=``, and ``x BETWEEN y1 AND y2`` (bound as two of
them). Anything else (OR, NOT BETWEEN, BETWEEN SYMMETRIC, month intervals, days on timestamptz,
casts) is not a band: it stays an ordinary residual condition and nothing is cleaned by it,
which is the plain join.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.expr.expr import Expr, FuncCall, InputRef
from piestream.frontend.watermark_derive import WATERMARK_TYPES, Watermarks, fixed_usecs
from piestream.plan.hash_join import IntervalBand, interval_band

#: comparison -> whether its left argument is the larger one
_LARGER_LEFT = {
    "greater_than": True,
    "greater_than_or_equal": True,
    "less_than": False,
    "less_than_or_equal": False,
}


@dataclass(frozen=True)
class _Bound:
    """``right.t - left.t >= usecs`` (lower) or ``<= usecs`` (upper) for one pair of columns."""

    left_col: int
    right_col: int  # logical index (>= nl)
    lower: bool
    usecs: int


def _term(e: Expr) -> tuple[int, int] | None:
    """``col ± fixed interval`` (any nesting) as (column, offset in µs)."""
    if isinstance(e, InputRef):
        return (e.index, 0) if e.return_type in WATERMARK_TYPES else None
    if not (isinstance(e, FuncCall) and e.name in ("add", "subtract") and len(e.args) == 2):
        return None
    a, b = e.args
    if e.name == "add" and _term(a) is None:
        a, b = b, a
    inner = _term(a)
    us = fixed_usecs(b, e.return_type)
    if inner is None or us is None:
        return None
    return inner[0], inner[1] + (us if e.name == "add" else -us)


def _comparisons(c: Expr) -> list[tuple[Expr, Expr]]:
    """A conjunct as ``(larger, smaller)`` pairs (``larger >= smaller`` or ``>``); the binder
    has made ``x BETWEEN lo AND hi`` two conjuncts already."""
    if isinstance(c, FuncCall) and c.name in _LARGER_LEFT and len(c.args) == 2:
        a, b = c.args
        return [(a, b)] if _LARGER_LEFT[c.name] else [(b, a)]
    return []


def _bounds(conjuncts: Sequence[Expr], nl: int) -> list[_Bound]:
    out = []
    for c in conjuncts:
        for big, small in _comparisons(c):
            tb, ts = _term(big), _term(small)
            if tb is None or ts is None or big.return_type != small.return_type:
                continue
            (cb, ob), (cs, os_) = tb, ts
            if cs < nl <= cb:  # r + ob >= l + os  =>  r - l >= os - ob
                out.append(_Bound(cs, cb, True, os_ - ob))
            elif cb < nl <= cs:  # l + ob >= r + os  =>  r - l <= ob - os
                out.append(_Bound(cb, cs, False, ob - os_))
    return out


def derive_band(
    conjuncts: Sequence[Expr],
    nl: int,
    left_wms: Watermarks,
    right_wms: Watermarks,
    *,
    left_append_only: bool,
    right_append_only: bool,
) -> IntervalBand | None:
    """The band of the first pair of watermarked time columns (left, right) the conjuncts bound
    from both sides, else from one side (then only one side is cleaned); None: no band.
    Conjuncts use the join's logical columns (left 0..nl-1, right nl..); so does `left_wms`,
    `right_wms` are the right input's own positions."""
    pairs: dict[tuple[int, int], list[_Bound]] = {}
    for b in _bounds(conjuncts, nl):
        if b.left_col in left_wms and b.right_col - nl in right_wms:
            pairs.setdefault((b.left_col, b.right_col), []).append(b)
    if not pairs:
        return None
    both = [p for p, bs in pairs.items() if len({b.lower for b in bs}) == 2]
    lc, rc = both[0] if both else next(iter(pairs))
    lowers = [b.usecs for b in pairs[(lc, rc)] if b.lower]
    uppers = [b.usecs for b in pairs[(lc, rc)] if not b.lower]
    return interval_band(
        lc,
        rc - nl,
        max(lowers) if lowers else None,  # the tightest of each
        min(uppers) if uppers else None,
        left_wm=left_wms[lc],
        right_wm=right_wms[rc - nl],
        left_append_only=left_append_only,
        right_append_only=right_append_only,
    )
