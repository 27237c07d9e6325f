"""The finishing step of the ordered-set aggregates (PostgreSQL's percentile_cont, percentile_disc
and mode), over a group's non-NULL inputs in their WITHIN GROUP order.

The binder (frontend/binder/ordered_set_aggs.py) writes ``percentile_cont(f) WITHIN GROUP (ORDER BY
x)`` as ``percentile_cont_of(array_agg(x::float8 ORDER BY x) FILTER (WHERE x IS NOT NULL), f)``,
so batch and streaming share array_agg's state (in an MV: the group's materialized input, which
retracts). Each kernel works on the whole list column at once: offsets and lengths as numpy, one
`take` of the flattened values; no per-group Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.errors import NumericOutOfRange
from piestream.expr.expr import FuncCall
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import NOT_CONSTANT, constant_arg


def _lists(a: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray]:
    """(start offsets, lengths, flattened values, valid) of a list column (NULL list: length 0)."""
    lists = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    offsets = np.asarray(lists.offsets.to_numpy(zero_copy_only=False), np.int64)
    valid = np.asarray(lists.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    starts = offsets[:-1]
    lens = np.where(valid, offsets[1:] - starts, 0)
    values = lists.values
    return starts, lens, values, valid & (lens > 0)


def _fractions(call: FuncCall, args: list[pa.Array], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The fraction of each row as float64 and where it is non-NULL; 22003 outside [0, 1]."""
    c = constant_arg(call, 1)
    if c is not NOT_CONSTANT:
        f = np.full(n, 0.0 if c is None else float(c))
        ok = np.full(n, c is not None)
    else:
        arr = args[1].cast(pa.float64())
        ok = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        f = np.asarray(arr.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
    bad = ok & ~((f >= 0.0) & (f <= 1.0))
    if bad.any():
        raise NumericOutOfRange(f"percentile value {f[np.flatnonzero(bad)[0]]:g} is not between 0 and 1")
    return f, ok


@register("percentile_cont_of")
def _percentile_cont(call: FuncCall, args: list[pa.Array], n: int) -> pa.Array:
    """Linear interpolation between the values at floor / ceil of f * (count - 1)."""
    starts, lens, values, has = _lists(args[0])
    f, ok = _fractions(call, args, n)
    has &= ok
    pos = f * np.maximum(lens - 1, 0)
    lo = np.floor(pos)
    hi = np.ceil(pos)
    vals = np.asarray(values.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
    if not len(vals):
        return pa.nulls(n, pa.float64())
    lo_i = np.where(has, starts + lo.astype(np.int64), 0)
    hi_i = np.where(has, starts + hi.astype(np.int64), 0)
    a, b = vals[lo_i], vals[hi_i]
    out = np.where(hi == lo, a, a + (pos - lo) * (b - a))
    return pa.array(out, pa.float64(), mask=~has)


@register("percentile_disc_of")
def _percentile_disc(call: FuncCall, args: list[pa.Array], n: int) -> pa.Array:
    """The first value whose position in the order reaches f of the count (the first for 0)."""
    starts, lens, values, has = _lists(args[0])
    f, ok = _fractions(call, args, n)
    has &= ok
    k = np.maximum(np.ceil(f * lens).astype(np.int64) - 1, 0)
    idx = np.where(has, starts + np.minimum(k, np.maximum(lens - 1, 0)), 0)
    if not len(values):
        return pa.nulls(n, call.return_type.arrow)
    return values.take(pa.array(idx, pa.int64(), mask=~has))


@register("mode_of")
def _mode(call: FuncCall, args: list[pa.Array], n: int) -> pa.Array:
    """The most frequent value; among equally frequent ones the first in the order (PostgreSQL
    scans the sorted input and keeps a value only when a later one is strictly more frequent)."""
    starts, lens, values, has = _lists(args[0])
    if not len(values) or not has.any():
        return pa.nulls(n, call.return_type.arrow)
    group = np.repeat(np.arange(n, dtype=np.int64), lens)
    total = int(lens.sum())
    used = np.arange(total, dtype=np.int64) + np.repeat(starts - (np.cumsum(lens) - lens), lens)
    vals = values.take(pa.array(used, pa.int64()))
    # a run starts at a group's first value or where the value differs from the one before it
    new_run = np.ones(len(vals), np.bool_)
    if len(vals) > 1:
        same = pc.equal(vals.slice(1), vals.slice(0, len(vals) - 1))
        new_run[1:] = ~np.asarray(pc.fill_null(same, False).to_numpy(zero_copy_only=False), np.bool_)
    new_run[1:] |= group[1:] != group[:-1]
    run_start = np.flatnonzero(new_run)
    run_len = np.diff(np.append(run_start, len(vals)))
    run_group = group[run_start]
    # per group: the longest run, the earliest among equals
    order = np.lexsort((run_start, -run_len, run_group))
    first = np.ones(len(order), np.bool_)
    first[1:] = run_group[order[1:]] != run_group[order[:-1]]
    best = order[first]
    idx = np.zeros(n, np.int64)
    idx[run_group[best]] = run_start[best]
    return vals.take(pa.array(idx, pa.int64(), mask=~has))


@register("approx_percentile_of")
def _approx_percentile(call: FuncCall, args: list[pa.Array], n: int) -> pa.Array:
    """RisingWave's approx_percentile, exactly: the value at 1-based rank max(floor(q * count), 1)
    of the order (RisingWave's sketch returns its bucket's bound for that rank)."""
    starts, lens, values, has = _lists(args[0])
    f, ok = _fractions(call, args, n)
    has &= ok
    k = np.maximum(np.floor(f * lens).astype(np.int64) - 1, 0)
    idx = np.where(has, starts + np.minimum(k, np.maximum(lens - 1, 0)), 0)
    if not len(values):
        return pa.nulls(n, pa.float64())
    return values.take(pa.array(idx, pa.int64(), mask=~has)).cast(pa.float64())
