"""Aggregate kernels: (values, group ids) -> one value per group, PostgreSQL's results and types.

Every kernel works on whole arrays: numpy segment reductions over the rows sorted by group,
Arrow's hash aggregates where their semantics are PostgreSQL's, decimal256 arithmetic for exact
NUMERIC averages. Integer sums are exact (an int64 fast path when no overflow is possible, a
split high/low-word path otherwise). Empty groups give NULL (count gives 0).
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.batch.keys import sort_key
from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.errors import DatetimeOutOfRange, FeatureNotSupported, NumericOutOfRange
from piestream.common.order import ASC, DESC
from piestream.common.types import NUMERIC_SCALE, DataType, TypeKind
from piestream.expr.functions import numeric_agg, numeric_scaled
from piestream.expr.functions.datetime_arith import interval_scale

_DEC = pa.decimal128(38, NUMERIC_SCALE)
_FLOATS = frozenset({TypeKind.REAL, TypeKind.DOUBLE})
#: min/max through Arrow's hash_min_max (its order is SQL order for these types; strings by bytes).
_ARROW_MINMAX = frozenset(
    {
        TypeKind.BOOLEAN,
        TypeKind.SMALLINT,
        TypeKind.INT,
        TypeKind.BIGINT,
        TypeKind.SERIAL,
        TypeKind.VARCHAR,
        TypeKind.BYTEA,
        TypeKind.DATE,
        TypeKind.TIME,
        TypeKind.TIMESTAMP,
        TypeKind.TIMESTAMPTZ,
    }
)
_MDN = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])


def _scaled_sum_state(inp: AggInput) -> numeric_agg.SumState:
    """The per-group sums of a per-value-scale NUMERIC argument (issue 14's layout)."""
    state = numeric_agg.SumState.empty(inp.groups)
    state.apply(inp.values[0], inp.g)
    return state


_USECS_PER_DAY = 86_400_000_000


@dataclass
class AggInput:
    """The rows one aggregate call sees (already filtered, de-duplicated and ordered)."""

    values: list[pa.Array]  # argument columns
    types: list[DataType]  # their SQL types
    g: np.ndarray  # group of each row, int64
    groups: int  # number of groups (some may have no rows here)

    @cached_property
    def counts(self) -> np.ndarray:
        return np.bincount(self.g, minlength=self.groups).astype(np.int64)

    @cached_property
    def order(self) -> np.ndarray:
        """Rows sorted by group; stable, so an ordered aggregate's order survives."""
        return np.argsort(self.g, kind="stable")

    @cached_property
    def starts(self) -> np.ndarray:
        out = np.zeros(self.groups + 1, np.int64)
        np.cumsum(self.counts, out=out[1:])
        return out

    @property
    def empty(self) -> np.ndarray:
        return self.counts == 0

    def reduce(self, ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        """ufunc-reduction of `values` (one per row) per group; empty groups hold 0."""
        out = np.zeros(self.groups, values.dtype)
        ne = ~self.empty
        if ne.any():
            out[ne] = ufunc.reduceat(values[self.order], self.starts[:-1][ne])
        return out

    def arrow_agg(self, fn: str, values: pa.Array | None = None) -> pa.Array:
        """An Arrow hash aggregate per group (NULL for groups without rows)."""
        v = self.values[0] if values is None else values
        t = pa.table({"g": pa.array(self.g, pa.int64()), "v": v})
        res = t.group_by("g", use_threads=False).aggregate([("v", fn)])
        return scatter(res.column("g").to_numpy(), res.column(1).combine_chunks(), self.groups)


def scatter(positions: np.ndarray, values: pa.Array, n: int) -> pa.Array:
    """An array of `n` slots holding `values` at `positions`, NULL elsewhere."""
    inv = np.full(n, -1, np.int64)
    inv[np.asarray(positions, np.int64)] = np.arange(len(positions))
    return values.take(pa.array(inv, pa.int64(), mask=inv < 0))


def numpy_values(arr: pa.Array, dtype: np.dtype | type) -> np.ndarray:
    """A NULL-free array's values in numpy."""
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype)


def _masked(values: np.ndarray, null: np.ndarray, t: pa.DataType) -> pa.Array:
    return pa.array(values, mask=null).cast(t) if len(values) else pa.nulls(0, t)


def compute(kind: str, inp: AggInput, out: DataType) -> pa.Array:
    """The aggregate `kind` of every group, as an array of `out`'s Arrow type."""
    fn = _KERNELS[kind]
    res = fn(inp, out)
    return res if res.type == out.arrow else res.cast(out.arrow)


# ---------------------------------------------------------------------------------------------
# count, bool_and / bool_or, bit_and / bit_or / bit_xor
# ---------------------------------------------------------------------------------------------


def _count(inp: AggInput, out: DataType) -> pa.Array:
    return pa.array(inp.counts, pa.int64())


def _bool(inp: AggInput, out: DataType, every: bool) -> pa.Array:
    v = numpy_values(inp.values[0], np.bool_)
    trues = np.bincount(inp.g[v], minlength=inp.groups)
    res = trues == inp.counts if every else trues > 0
    return pa.array(res, pa.bool_(), mask=inp.empty)


def _bits(inp: AggInput, out: DataType, ufunc: np.ufunc) -> pa.Array:
    """bit_and / bit_or / bit_xor per group, one reduceat over the rows sorted by group."""
    v = numpy_values(inp.values[0], np.int64)
    return _masked(inp.reduce(ufunc, v), inp.empty, out.arrow)


# ---------------------------------------------------------------------------------------------
# sum / avg
# ---------------------------------------------------------------------------------------------


def _int_sums(inp: AggInput) -> pa.Array:
    """Exact integer sums per group as decimal128(38, 0) (NULL for empty groups)."""
    v = numpy_values(inp.values[0], np.int64)
    if not len(v):
        return pa.nulls(inp.groups, pa.decimal128(38, 0))
    bound = max(abs(int(v.min())), abs(int(v.max())))
    if bound * len(v) < 2**63:  # no partial sum can overflow int64
        return _masked(inp.reduce(np.add, v), inp.empty, pa.decimal128(38, 0))
    hi = inp.reduce(np.add, v >> 32)  # each half sums without overflow for < 2**31 rows
    lo = inp.reduce(np.add, v & 0xFFFFFFFF)
    # one Python int per group: the only exact way to combine the halves beyond 64 bits
    totals = [None if e else (int(h) << 32) + int(low) for h, low, e in zip(hi, lo, inp.empty, strict=True)]
    return pa.array(totals, pa.decimal128(38, 0))


def _sum(inp: AggInput, out: DataType) -> pa.Array:
    t = inp.types[0]
    if t.kind is TypeKind.INTERVAL:
        return _interval_sum(inp)
    if out.kind in _FLOATS or t.kind in _FLOATS:
        v = numpy_values(inp.values[0].cast(pa.float64()), np.float64)
        return _masked(inp.reduce(np.add, v), inp.empty, out.arrow)
    if t.kind is TypeKind.NUMERIC and nm.is_numeric_array(inp.values[0]):
        return _scaled_sum_state(inp).sums()
    if t.kind is TypeKind.NUMERIC:
        return inp.arrow_agg("sum")
    sums = _int_sums(inp)
    if out.is_integer:
        try:
            return sums.cast(out.arrow)
        except (pa.ArrowInvalid, OverflowError) as e:
            raise NumericOutOfRange(f"{out.kind.value} out of range") from e
    if nm.is_numeric_type(out.arrow):
        return na.from_decimal(sums)
    return sums.cast(_DEC)


def _avg(inp: AggInput, out: DataType) -> pa.Array:
    t = inp.types[0]
    if t.kind is TypeKind.INTERVAL:
        return _interval_avg(inp)
    if out.kind in _FLOATS:
        v = numpy_values(inp.values[0].cast(pa.float64()), np.float64)
        sums = inp.reduce(np.add, v)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _masked(sums / np.maximum(inp.counts, 1), inp.empty, out.arrow)
    if t.kind is TypeKind.NUMERIC and nm.is_numeric_array(inp.values[0]):
        return _scaled_sum_state(inp).avgs()  # select_div_scale, as PostgreSQL
    if nm.is_numeric_type(out.arrow):  # avg of integers: their exact sum / count, select_div_scale
        return numeric_scaled.divide_by_counts(na.from_decimal(_int_sums(inp)), inp.counts)
    # exact: sum / count in decimal256, rounded half away from zero to NUMERIC_SCALE digits
    if t.kind is TypeKind.NUMERIC:
        sums = inp.arrow_agg("sum").cast(pa.decimal256(40, NUMERIC_SCALE))
    else:
        sums = _int_sums(inp).cast(pa.decimal256(40, 0))
    counts = pa.array(np.maximum(inp.counts, 1)).cast(pa.decimal256(20, 0))
    q = pc.round(pc.divide(sums, counts), ndigits=NUMERIC_SCALE, round_mode="half_towards_infinity")
    try:
        return q.cast(_DEC)
    except pa.ArrowInvalid as e:
        raise NumericOutOfRange("numeric field overflow") from e


# ---------------------------------------------------------------------------------------------
# intervals
# ---------------------------------------------------------------------------------------------


def _interval_fields(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(months, days, usecs) of a NULL-free interval array, as int64."""
    buf = arr.buffers()[1]
    rec = np.frombuffer(buf, _MDN, count=arr.offset + len(arr))[arr.offset :] if buf else np.zeros(0, _MDN)
    return rec["months"].astype(np.int64), rec["days"].astype(np.int64), rec["nanos"] // 1000


def _make_intervals(months: np.ndarray, days: np.ndarray, usecs: np.ndarray, null: np.ndarray) -> pa.Array:
    lim = 2**31
    bad = ~null & ((np.abs(months) >= lim) | (np.abs(days) >= lim) | (np.abs(usecs) > (2**63 - 1) // 1000))
    if bad.any():
        raise DatetimeOutOfRange("interval out of range")
    rec = np.zeros(len(months), _MDN)
    rec["months"] = np.where(null, 0, months)
    rec["days"] = np.where(null, 0, days)
    rec["nanos"] = np.where(null, 0, usecs) * 1000
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
    return pa.Array.from_buffers(pa.month_day_nano_interval(), len(rec), [validity, pa.py_buffer(rec)])


def _interval_sums(inp: AggInput) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    months, days, usecs = _interval_fields(inp.values[0])
    return inp.reduce(np.add, months), inp.reduce(np.add, days), inp.reduce(np.add, usecs)


def _interval_sum(inp: AggInput) -> pa.Array:
    return _make_intervals(*_interval_sums(inp), inp.empty)


def _interval_avg(inp: AggInput) -> pa.Array:
    """PostgreSQL's interval_div(sum, count) (the same kernel as the streaming avg)."""
    sums = _make_intervals(*_interval_sums(inp), inp.empty)
    n = np.maximum(inp.counts, 1).astype(np.float64)
    return interval_scale(sums, n, np.asarray(~inp.empty), divide=True)


# ---------------------------------------------------------------------------------------------
# min / max
# ---------------------------------------------------------------------------------------------


def _extreme(inp: AggInput, out: DataType, largest: bool) -> pa.Array:
    t = inp.types[0]
    v = inp.values[0]
    if t.kind in _FLOATS:  # NaN is the largest value (PostgreSQL), -0.0 equals 0.0
        x = numpy_values(v.cast(pa.float64()), np.float64)
        res = inp.reduce(np.maximum if largest else np.fmin, x)  # maximum propagates NaN, fmin skips it
        return _masked(res, inp.empty, out.arrow)
    if t.kind in _ARROW_MINMAX:
        return inp.arrow_agg("max" if largest else "min")
    if nm.is_numeric_array(v):  # the chosen value keeps its display scale: max(1.5, 2.50) = 2.50
        rows = numeric_agg.extreme_rows(v, inp.g, inp.groups, largest=largest)
        return v.take(pa.array(rows, pa.int64(), mask=rows < 0))
    # any other type: the first row of each group in memcomparable order
    if not len(v):
        return pa.nulls(inp.groups, out.arrow)
    key = sort_key([v], [t], [DESC if largest else ASC])
    order = pc.sort_indices(
        pa.table({"g": pa.array(inp.g, pa.int64()), "k": key}),
        sort_keys=[("g", "ascending"), ("k", "ascending")],
    )
    ordered_g = inp.g[order.to_numpy()]
    first = np.flatnonzero(np.concatenate([[True], ordered_g[1:] != ordered_g[:-1]]))
    return scatter(ordered_g[first], v.take(order.take(pa.array(first, pa.int64()))), inp.groups)


# ---------------------------------------------------------------------------------------------
# string_agg / array_agg (rows arrive in the call's ORDER BY order)
# ---------------------------------------------------------------------------------------------


def _group_lists(inp: AggInput, values: pa.Array, list_type: pa.DataType) -> pa.Array:
    """One list per group holding its rows in order; NULL for groups without rows."""
    o = pa.array(inp.order, pa.int64())
    offsets = pa.array(inp.starts, pa.int32())
    return pa.ListArray.from_arrays(offsets, values.take(o), type=list_type, mask=pa.array(inp.empty))


def _array_agg(inp: AggInput, out: DataType) -> pa.Array:
    return _group_lists(inp, inp.values[0], out.arrow)


def _string_agg(inp: AggInput, out: DataType) -> pa.Array:
    value, delim = inp.values
    if not len(value):
        return pa.nulls(inp.groups, out.arrow)
    empty = pa.scalar(b"" if pa.types.is_binary(value.type) else "", value.type)
    delim = pc.fill_null(delim.cast(value.type), empty)
    joined = pc.binary_join_element_wise(delim, value, empty)  # delimiter before every value ...
    first = np.zeros(len(value), np.bool_)
    first[inp.order[inp.starts[:-1][~inp.empty]]] = True  # ... except each group's first
    pieces = pc.if_else(pa.array(first), value, joined)
    lists = _group_lists(inp, pieces, pa.list_(value.type))
    return pc.binary_join(lists, empty)


# ---------------------------------------------------------------------------------------------
# variance / standard deviation
# ---------------------------------------------------------------------------------------------


def _variance(inp: AggInput, out: DataType, sample: bool, root: bool) -> pa.Array:
    t = inp.types[0]
    too_few = inp.counts < (2 if sample else 1)
    if out.kind in _FLOATS or t.kind in _FLOATS:
        x = numpy_values(inp.values[0].cast(pa.float64()), np.float64)
        n = np.maximum(inp.counts, 1).astype(np.float64)
        mean = inp.reduce(np.add, x) / n
        dev = x - mean[inp.g]  # two passes: no cancellation of large sums of squares
        ss = inp.reduce(np.add, dev * dev)
        with np.errstate(invalid="ignore", divide="ignore"):
            var = ss / np.maximum(n - (1 if sample else 0), 1)
            res = np.sqrt(var) if root else var
        return _masked(res, too_few, out.arrow)
    if out.kind is not TypeKind.NUMERIC:
        raise FeatureNotSupported(f"variance returning {out}")
    if nm.is_numeric_type(out.arrow):
        return _scaled_variance(inp, sample, root, too_few)
    return _exact_variance(inp, sample, root, too_few)


def _scaled_variance(inp: AggInput, sample: bool, root: bool, too_few: np.ndarray) -> pa.Array:
    """numeric.c's numeric_stddev_internal on issue 14's layout: the exact numerator
    N * sum(x*x) - sum(x)**2 (0 when it is not positive), divided by N * (N - 1) (or N * N) with
    select_div_scale, the square root rounded half away from zero to the same scale; NaN when a
    group holds NaN or an infinity. The sums are exact Python Decimals (per row: numpy has no
    decimal type, and N * sum(x*x) can exceed the 128 bits of a column), the rest one step per
    group, as `_exact_variance` does."""
    v = inp.values[0]
    xs = nm.from_arrow(v) if nm.is_numeric_array(v) else [decimal.Decimal(int(i)) for i in v.to_pylist()]
    ctx = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)
    nums: list[decimal.Decimal | None] = []
    dens: list[decimal.Decimal | None] = []
    special = np.zeros(inp.groups, np.bool_)
    sx = [decimal.Decimal(0)] * inp.groups
    sxx = [decimal.Decimal(0)] * inp.groups
    for g, x in zip(inp.g.tolist(), xs, strict=True):  # per row: exact Decimal sums
        assert x is not None
        if not x.is_finite():
            special[g] = True
            continue
        sx[g] = ctx.add(sx[g], x)
        sxx[g] = ctx.add(sxx[g], ctx.multiply(x, x))
    for g, n in enumerate(inp.counts.tolist()):  # per group
        if too_few[g] or special[g]:
            nums.append(None)
            dens.append(None)
            continue
        num = ctx.subtract(ctx.multiply(decimal.Decimal(n), sxx[g]), ctx.multiply(sx[g], sx[g]))
        nums.append(num if num > 0 else decimal.Decimal(0))
        dens.append(decimal.Decimal(n * (n - 1 if sample else n)))
    out: list[decimal.Decimal | None] = []
    for g, (top, den) in enumerate(zip(nums, dens, strict=True)):  # per group
        if special[g] and not too_few[g]:
            out.append(nm.NAN)
        elif top is None or den is None:
            out.append(None)
        elif not top:
            out.append(decimal.Decimal(0))  # numeric.c: make_result(&const_zero)
        else:
            quantum = decimal.Decimal(1).scaleb(-_div_scale(top, den))
            q = ctx.divide(top, den).quantize(quantum, context=ctx)
            out.append(nm.check(ctx.sqrt(q).quantize(quantum, context=ctx) if root else q))
    return nm.to_arrow(out)


def _div_scale(num: decimal.Decimal, den: decimal.Decimal) -> int:
    """numeric.c's select_div_scale of two finite nonzero values (numerators here can exceed
    the 38 digits a column holds, so this is the scalar form of `numeric_scaled`'s)."""
    w1, d1 = numeric_scaled.weight_digits(num)
    w2, d2 = numeric_scaled.weight_digits(den)
    qweight = w1 - w2 - (1 if d1 <= d2 else 0)
    rscale = numeric_scaled.MIN_SIG_DIGITS - qweight * 4
    return min(max(rscale, numeric_scaled.dscale(num), numeric_scaled.dscale(den), 0), 1000)


def _exact_values(arr: pa.Array, t: DataType) -> tuple[np.ndarray, int]:
    """Unscaled values as Python ints in an object array (exact squares), and their scale."""
    if t.kind is TypeKind.NUMERIC:
        words = np.frombuffer(arr.buffers()[1], np.int64, count=2 * (arr.offset + len(arr)))
        words = words.reshape(-1, 2)[arr.offset :]
        lo = words[:, 0].view(np.uint64).astype(object)
        hi = words[:, 1].astype(object)
        return hi * (1 << 64) + lo, NUMERIC_SCALE
    return numpy_values(arr, np.int64).astype(object), 0


def _exact_variance(inp: AggInput, sample: bool, root: bool, too_few: np.ndarray) -> pa.Array:
    """NUMERIC variance of integers / numerics, exact up to the final rounding."""
    x, scale = _exact_values(inp.values[0], inp.types[0])
    sx = inp.reduce(np.add, x) if len(x) else np.zeros(inp.groups, object)
    sxx = inp.reduce(np.add, x * x) if len(x) else np.zeros(inp.groups, object)
    ctx = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP)
    quantum = decimal.Decimal(1).scaleb(-NUMERIC_SCALE)
    unit = decimal.Decimal(10) ** (2 * scale)
    out: list[decimal.Decimal | None] = []
    # one Decimal computation per group (not per row): exact NUMERIC division and square root
    for n, s1, s2, few in zip(inp.counts.tolist(), sx, sxx, too_few.tolist(), strict=True):
        if few:
            out.append(None)
            continue
        num = decimal.Decimal(n * int(s2) - int(s1) * int(s1))
        den = decimal.Decimal(n * (n - 1 if sample else n)) * unit
        var = ctx.divide(num, den)
        res = ctx.sqrt(var) if root else var
        out.append(res.quantize(quantum, context=ctx))
    try:
        return pa.array(out, _DEC)
    except pa.ArrowInvalid as e:  # beyond NUMERIC's 38 digits (PostgreSQL's numeric has no limit)
        raise NumericOutOfRange("numeric field overflow") from e


_KERNELS = {
    "count": _count,
    "count_star": _count,
    "sum": _sum,
    "avg": _avg,
    "min": lambda i, o: _extreme(i, o, False),
    "max": lambda i, o: _extreme(i, o, True),
    "bool_and": lambda i, o: _bool(i, o, True),
    "bool_or": lambda i, o: _bool(i, o, False),
    "bit_and": lambda i, o: _bits(i, o, np.bitwise_and),
    "bit_or": lambda i, o: _bits(i, o, np.bitwise_or),
    "bit_xor": lambda i, o: _bits(i, o, np.bitwise_xor),
    "string_agg": _string_agg,
    "array_agg": _array_agg,
    "var_pop": lambda i, o: _variance(i, o, False, False),
    "var_samp": lambda i, o: _variance(i, o, True, False),
    "stddev_pop": lambda i, o: _variance(i, o, False, True),
    "stddev_samp": lambda i, o: _variance(i, o, True, True),
}
