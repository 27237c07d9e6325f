"""Window functions over sorted rows, shared by the batch OverWindow and the streaming one.

Calls (`WindowFunctionCall`): ranking (row_number, rank, dense_rank), navigation (lag / lead with
an offset and a default), frame values (first_value, last_value, nth_value) and aggregates over a
frame (count, count(*), sum, avg, min, max, bool_and, bool_or, each with an optional FILTER).

Frames (`WindowFrame`) are PostgreSQL's ROWS and RANGE frames: bounds UNBOUNDED PRECEDING, n
PRECEDING, CURRENT ROW, n FOLLOWING, UNBOUNDED FOLLOWING. A RANGE offset bound compares the single
ORDER BY value with ``value -/+ offset`` (the binder builds those bound expressions, so integer,
numeric, float, date and timestamp orders take PostgreSQL's offset types); rows whose ORDER BY
value is NULL are peers only of each other, as in PostgreSQL. RisingWave's SESSION frame
(``SESSION WITH GAP g``, one ascending ORDER BY value) is the row's session: a partition's rows
split where a value is >= the previous row's value + g (RisingWave's rule), NULLs one session.
The default frame with ORDER BY is RANGE UNBOUNDED PRECEDING .. CURRENT ROW (peers included),
without it the whole partition.

`evaluate` takes the rows of one or more whole partitions sorted in window order (`SortedRows`:
partition starts, peer starts) and computes the calls for chosen target rows only, which is what
lets the streaming executor recompute just the rows a change can reach. Everything is vectorized:
frame bounds are index arithmetic (RANGE offsets a sorted search over dense ranks of memcomparable
keys), counts and sums are prefix sums in an exact domain (Python integers and decimals where
int64 could overflow or round), min / max are running maxima for frames open at one end and a
sparse table otherwise, over dense ranks of the values' memcomparable encoding (SQL order for
every type).
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.chunk import DataChunk
from piestream.common.errors import FeatureNotSupported, NumericOutOfRange
from piestream.common.order import ASC, DESC, OrderType
from piestream.common.types import NUMERIC_SCALE, DataType, TypeKind
from piestream.encoding.memcomparable import encode_columns_arrow
from piestream.expr.expr import Expr
from piestream.expr.functions import numeric_scaled

UNBOUNDED_PRECEDING = "unbounded preceding"
PRECEDING = "preceding"
CURRENT_ROW = "current row"
FOLLOWING = "following"
UNBOUNDED_FOLLOWING = "unbounded following"

RANKING = frozenset({"row_number", "rank", "dense_rank"})
NAVIGATION = frozenset({"lag", "lead"})
FRAME_VALUES = frozenset({"first_value", "last_value", "nth_value"})
AGGREGATES = frozenset({"count", "count_star", "sum", "avg", "min", "max", "bool_and", "bool_or"})
KINDS = RANKING | NAVIGATION | FRAME_VALUES | AGGREGATES


@dataclass(frozen=True)
class FrameBound:
    """One end of a frame. ROWS: `offset` rows; RANGE: `value`, the bound's ORDER BY value as an
    expression over the window's input (``key - offset`` for PRECEDING in ascending order)."""

    kind: str
    offset: int = 0
    value: Expr | None = None

    def __str__(self) -> str:
        if self.kind in (PRECEDING, FOLLOWING):
            return f"{self.value if self.value is not None else self.offset} {self.kind.upper()}"
        return self.kind.upper()


@dataclass(frozen=True)
class WindowFrame:
    """ROWS or RANGE BETWEEN `start` AND `end`. A RANGE frame with offsets also holds the ORDER BY
    value in the bounds' type (`key`) and the ORDER BY direction."""

    mode: str  # "rows" | "range" | "session"
    start: FrameBound
    end: FrameBound
    key: Expr | None = None
    order: OrderType = ASC
    #: a SESSION frame's ``key + gap``: a row whose key reaches the previous row's starts a session
    gap: Expr | None = field(default=None, metadata={"since_format": 4})

    def __str__(self) -> str:
        if self.mode == "session":
            return f"SESSION WITH GAP {self.gap}"
        return f"{self.mode.upper()} BETWEEN {self.start} AND {self.end}"

    @property
    def has_offsets(self) -> bool:
        return any(b.kind in (PRECEDING, FOLLOWING) for b in (self.start, self.end))


DEFAULT_FRAME = WindowFrame("range", FrameBound(UNBOUNDED_PRECEDING), FrameBound(CURRENT_ROW))
WHOLE_PARTITION = WindowFrame("rows", FrameBound(UNBOUNDED_PRECEDING), FrameBound(UNBOUNDED_FOLLOWING))


@dataclass(frozen=True)
class WindowFunctionCall:
    """One window function: `args` are input columns (lag / lead: value, default; nth_value:
    value), `offset` lag / lead's offset or nth_value's n, `filter` a boolean input column."""

    kind: str
    return_type: DataType
    args: tuple[int, ...] = ()
    frame: WindowFrame | None = None
    offset: int = 1
    filter: int | None = None

    def __str__(self) -> str:
        args = ", ".join(f"${a}" for a in self.args)
        if self.kind in NAVIGATION or self.kind == "nth_value":
            args += f", {self.offset}"
        f = f" filter(${self.filter})" if self.filter is not None else ""
        frame = f" {self.frame}" if self.frame is not None and self.kind not in RANKING | NAVIGATION else ""
        return f"{self.kind}({args}){f}{frame}"

    def reach(self) -> tuple[int | None, int | None]:
        """(rows before, rows after) a changed row whose output can change because of it;
        None: up to the partition's edge (or data-dependent: RANGE offsets)."""
        if self.kind in RANKING:
            return 0, None
        if self.kind == "lag":
            return 0, self.offset
        if self.kind == "lead":
            return self.offset, 0
        frame = self.frame or WHOLE_PARTITION
        s, e = frame.start, frame.end
        if frame.mode == "session" or (frame.mode == "range" and frame.has_offsets):
            return None, None
        # a row i's frame is [i - s_off, i + e_off]; it holds a changed row c iff c - e_off <= i <= c + s_off
        s_off = {UNBOUNDED_PRECEDING: None, PRECEDING: s.offset, CURRENT_ROW: 0, FOLLOWING: -s.offset}[s.kind]
        e_off = {UNBOUNDED_FOLLOWING: None, FOLLOWING: e.offset, CURRENT_ROW: 0, PRECEDING: -e.offset}[e.kind]
        before = None if e_off is None else max(e_off, 0)
        after = None if s_off is None else max(s_off, 0)
        # RANGE CURRENT ROW also reaches the changed row's peers, which the caller adds
        return before, after


# -- sorted rows -------------------------------------------------------------------------------------


def starts_of(cols: Sequence[pa.Array], types: Sequence[DataType], n: int) -> np.ndarray:
    """Per row of rows in key order: whether its key differs from the previous row's (SQL
    equality: NULL = NULL, as for partitions and peers)."""
    out = np.ones(n, np.bool_)
    if not cols or n <= 1:
        out[1:] = False if not cols else out[1:]
        return out
    key = encode_columns_arrow(list(cols), list(types), [ASC] * len(cols))
    out[1:] = pc.not_equal(key.slice(1), key.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return out


@dataclass
class SortedRows:
    """Rows of whole partitions in window order, with their partition and peer boundaries."""

    chunk: DataChunk
    types: list[DataType]
    part_start: np.ndarray  # bool per row
    peer_start: np.ndarray  # bool per row (a partition start is a peer start)

    @property
    def n(self) -> int:
        return self.chunk.capacity

    @cached_property
    def pos(self) -> np.ndarray:
        return np.arange(self.n, dtype=np.int64)

    @cached_property
    def part_id(self) -> np.ndarray:
        return np.cumsum(self.part_start).astype(np.int64) - 1

    @cached_property
    def part_first(self) -> np.ndarray:
        return _first(self.part_start, self.pos)

    @cached_property
    def part_last(self) -> np.ndarray:
        return _last(self.part_start, self.pos)

    @cached_property
    def peer_first(self) -> np.ndarray:
        return _first(self.peer_start | self.part_start, self.pos)

    @cached_property
    def peer_last(self) -> np.ndarray:
        return _last(self.peer_start | self.part_start, self.pos)


def _first(start: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return np.maximum.accumulate(np.where(start, pos, 0)) if len(pos) else pos


def _last(start: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The last row of each run (runs begin where `start` is set)."""
    n = len(pos)
    if not n:
        return pos
    nxt = np.append(start[1:], True)  # the row before a start (or the last row) ends a run
    ends = np.where(nxt, pos, n)
    return np.minimum.accumulate(ends[::-1])[::-1]


# -- evaluation ----------------------------------------------------------------------------------------


def evaluate(calls: Sequence[WindowFunctionCall], rows: SortedRows, targets: np.ndarray) -> list[pa.Array]:
    """Each call's value at the `targets` rows (positions in `rows`)."""
    return [_evaluate(c, rows, np.asarray(targets, np.int64)) for c in calls]


def _evaluate(call: WindowFunctionCall, rows: SortedRows, t: np.ndarray) -> pa.Array:
    out = call.return_type.arrow
    k = call.kind
    if k == "row_number":
        return pa.array(t - rows.part_first[t] + 1, pa.int64()).cast(out)
    if k == "rank":
        return pa.array(rows.peer_first[t] - rows.part_first[t] + 1, pa.int64()).cast(out)
    if k == "dense_rank":
        started = np.cumsum(rows.peer_start | rows.part_start).astype(np.int64)
        return pa.array(started[t] - started[rows.part_first[t]] + 1, pa.int64()).cast(out)
    col = rows.chunk.columns
    if k in NAVIGATION:
        src = t - call.offset if k == "lag" else t + call.offset
        inside = (src >= rows.part_first[t]) & (src <= rows.part_last[t])
        values = _take(col[call.args[0]], np.where(inside, src, -1), out)
        if len(call.args) > 1:  # the default where the offset row does not exist
            default = _take(col[call.args[1]], t, out)
            values = nm.on_storage(pc.if_else, pa.array(inside), values, default)
        return values
    start, end = frame_bounds(call.frame or WHOLE_PARTITION, rows, t)
    empty = start > end
    if k in FRAME_VALUES:
        if k == "first_value":
            src = start
        elif k == "last_value":
            src = end
        else:  # nth_value
            src = start + call.offset - 1
            empty |= src > end
        return _take(col[call.args[0]], np.where(empty, -1, src), out)
    return _aggregate(call, rows, start, end, empty)


def _take(arr: pa.Array, idx: np.ndarray, out: pa.DataType) -> pa.Array:
    """`arr` at `idx` (-1: NULL)."""
    taken = arr.take(pa.array(np.maximum(idx, 0), pa.int64(), mask=idx < 0)) if len(idx) else pa.nulls(0, out)
    return taken if taken.type == out else taken.cast(out)


# -- frames --------------------------------------------------------------------------------------------


def frame_bounds(frame: WindowFrame, rows: SortedRows, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last row of each target's frame (start > end: an empty frame)."""
    first, last = rows.part_first[t], rows.part_last[t]
    if frame.mode == "session":
        starts = session_starts(frame, rows)
        return _first(starts, rows.pos)[t], _last(starts, rows.pos)[t]
    search = _RangeSearch(frame, rows, t) if frame.mode == "range" and frame.has_offsets else None
    bounds = []
    for b, is_start in ((frame.start, True), (frame.end, False)):
        if b.kind == UNBOUNDED_PRECEDING:
            v = first
        elif b.kind == UNBOUNDED_FOLLOWING:
            v = last
        elif frame.mode == "rows":
            v = t + {PRECEDING: -b.offset, CURRENT_ROW: 0, FOLLOWING: b.offset}[b.kind]
        elif b.kind == CURRENT_ROW:
            v = rows.peer_first[t] if is_start else rows.peer_last[t]
        else:
            assert search is not None
            v = search.bound(b, is_start)
        bounds.append(v)
    start = np.maximum(bounds[0], first)
    end = np.minimum(bounds[1], last)
    return start, end


def session_starts(frame: WindowFrame, rows: SortedRows) -> np.ndarray:
    """Per row: whether it starts a session (a partition start, or a key >= the previous row's
    key + gap; a NULL key starts one unless the previous key is NULL too)."""
    assert frame.key is not None and frame.gap is not None
    n = rows.n
    starts = rows.part_start.copy()
    if n <= 1:
        return starts
    key = _column(frame.key.eval(rows.chunk))
    reach = _column(frame.gap.eval(rows.chunk)).cast(key.type)
    far = pc.greater_equal(key.slice(1), reach.slice(0, n - 1))
    valid = key.is_valid().to_numpy(zero_copy_only=False)
    both_null = ~valid[1:] & ~valid[:-1]
    apart = pc.fill_null(far, True).to_numpy(zero_copy_only=False).astype(np.bool_)
    starts[1:] |= apart & ~both_null
    return starts


class _RangeSearch:
    """RANGE offset bounds: the first row whose ORDER BY value is >= the bound (a start) or the
    last one <= it (an end), in window order. NULL values sit where the ORDER BY puts them (after
    every value with NULLS LAST, before with NULLS FIRST), as in PostgreSQL; a target whose own
    value is NULL gets its NULL peers."""

    def __init__(self, frame: WindowFrame, rows: SortedRows, t: np.ndarray) -> None:
        assert frame.key is not None
        self.frame, self.rows, self.t = frame, rows, t
        self.order = frame.order
        key = _column(frame.key.eval(rows.chunk))
        self.key_type = frame.key.return_type
        self.key = key
        self.valid = key.is_valid().to_numpy(zero_copy_only=False)
        self.nn = rows.pos  # every row is a candidate: NULLs compare by their placement

    def bound(self, b: FrameBound, is_start: bool) -> np.ndarray:
        rows, t = self.rows, self.t
        assert b.value is not None
        target_vals = _column(b.value.eval(rows.chunk)).take(pa.array(t, pa.int64()))
        keys = self.key.take(pa.array(self.nn, pa.int64()))
        # dense ranks of keys and bounds together, in window order (memcomparable bytes)
        both = pa.concat_arrays([keys, target_vals.cast(keys.type)])
        enc = encode_columns_arrow([both], [self.key_type], [self.order])
        rank = pc.rank(enc, tiebreaker="dense").to_numpy(zero_copy_only=False).astype(np.int64)
        width = int(rank.max()) + 1 if len(rank) else 1
        comp = rows.part_id[self.nn] * width + rank[: len(self.nn)]
        q = rows.part_id[t] * width + rank[len(self.nn) :]
        if is_start:
            i = np.searchsorted(comp, q, side="left")
            ok = i < len(self.nn)
            pos = np.where(ok, self.nn[np.minimum(i, len(self.nn) - 1)] if len(self.nn) else 0, rows.n)
            pos = np.where(ok & (rows.part_id[np.minimum(pos, rows.n - 1)] == rows.part_id[t]), pos, rows.n)
        else:
            i = np.searchsorted(comp, q, side="right") - 1
            ok = i >= 0
            pos = np.where(ok, self.nn[np.maximum(i, 0)] if len(self.nn) else 0, -1)
            pos = np.where(ok & (rows.part_id[np.maximum(pos, 0)] == rows.part_id[t]), pos, -1)
        null_target = ~self.valid[t] | ~target_vals.is_valid().to_numpy(zero_copy_only=False)
        peers = rows.peer_first[t] if is_start else rows.peer_last[t]
        return np.where(null_target, peers, pos)


def _column(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


# -- aggregates over frames -------------------------------------------------------------------------------


def _aggregate(
    call: WindowFunctionCall, rows: SortedRows, start: np.ndarray, end: np.ndarray, empty: np.ndarray
) -> pa.Array:
    k = call.kind
    n = rows.n
    out = call.return_type
    col = rows.chunk.columns
    use = np.ones(n, np.bool_)
    if call.filter is not None:
        use = pc.fill_null(col[call.filter], False).to_numpy(zero_copy_only=False).astype(np.bool_)
    s = np.where(empty, 0, start)
    e1 = np.where(empty, 0, end + 1)  # prefix index one past the frame
    if k == "count_star":
        return pa.array(_window_sum(use.astype(np.int64), s, e1), pa.int64())
    values = col[call.args[0]]
    in_type = _arg_type(rows, call)
    valid = use & values.is_valid().to_numpy(zero_copy_only=False)
    counts = _window_sum(valid.astype(np.int64), s, e1)
    none = counts == 0
    if k == "count":
        return pa.array(counts, pa.int64())
    if k in ("sum", "avg"):
        return _sum_avg(k, values, in_type, valid, s, e1, counts, none, out)
    return _extreme(k, values, in_type, valid, rows, start, end, empty | none, out)


def _arg_type(rows: SortedRows, call: WindowFunctionCall) -> DataType:
    return rows.types[call.args[0]]


def _window_sum(v: np.ndarray, s: np.ndarray, e1: np.ndarray) -> np.ndarray:
    prefix = np.zeros(len(v) + 1, v.dtype)
    np.cumsum(v, out=prefix[1:])
    return prefix[e1] - prefix[s]


_DEC = pa.decimal128(38, NUMERIC_SCALE)


def _sum_avg(
    k: str,
    values: pa.Array,
    t: DataType,
    valid: np.ndarray,
    s: np.ndarray,
    e1: np.ndarray,
    counts: np.ndarray,
    none: np.ndarray,
    out: DataType,
) -> pa.Array:
    if t.kind is TypeKind.INTERVAL:
        raise FeatureNotSupported(f"{k}(interval) as a window function is not supported")
    if t.kind in (TypeKind.REAL, TypeKind.DOUBLE):
        v = np.where(valid, pc.fill_null(values.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False), 0.0)
        sums = _window_sum(v, s, e1)
        res = sums if k == "sum" else sums / np.maximum(counts, 1)
        return pa.array(res, mask=none).cast(out.arrow)
    if t.kind is TypeKind.NUMERIC and nm.is_numeric_array(values):
        return _scaled_sum_avg(k, values, valid, s, e1, counts, none)
    if t.kind is TypeKind.NUMERIC:
        v = np.array(
            [
                x if ok else decimal.Decimal(0)
                for x, ok in zip(values.to_pylist(), valid.tolist(), strict=True)
            ],
            dtype=object,
        )  # per row: Decimal objects (exact sums; no numpy decimal dtype)
        with decimal.localcontext() as ctx:
            ctx.prec = 80
            sums = _window_sum(v, s, e1)
    else:
        ints = np.where(valid, pc.fill_null(values.cast(pa.int64()), 0).to_numpy(zero_copy_only=False), 0)
        bound = int(np.abs(ints).max()) if len(ints) else 0
        if bound * max(len(ints), 1) < 2**62:
            sums = _window_sum(ints.astype(np.int64), s, e1)
        else:  # Python integers: exact beyond 64 bits
            sums = _window_sum(ints.astype(object), s, e1)
    if k == "sum":
        if out.is_integer:
            try:
                if sums.dtype != object:
                    return pa.array(sums, pa.int64(), mask=none).cast(out.arrow)
                return pa.array(sums.tolist(), pa.int64(), mask=none).cast(out.arrow)
            except (OverflowError, pa.ArrowInvalid) as err:
                raise NumericOutOfRange(f"{out.kind.value} out of range") from err
        return _decimals(sums, none, out)
    if nm.is_numeric_type(out.arrow):  # avg of integers on issue 14's layout: select_div_scale
        avg = numeric_scaled.divide_by_counts(_decimals(sums, none, out), np.maximum(counts, 1))
        return nm.on_storage(pc.if_else, pa.array(none), pa.nulls(len(avg), avg.type), avg)
    # avg: exact sum / count rounded half away from zero to NUMERIC_SCALE digits (as GROUP BY's avg)
    dec_sums = _decimals(sums, none, out).cast(pa.decimal256(40, NUMERIC_SCALE))
    q = pc.divide(dec_sums, pa.array(np.maximum(counts, 1)).cast(pa.decimal256(20, 0)))
    q = pc.round(q, ndigits=NUMERIC_SCALE, round_mode="half_towards_infinity")
    try:
        return q.cast(out.arrow)
    except pa.ArrowInvalid as err:
        raise NumericOutOfRange("numeric field overflow") from err


def _range_max(x: np.ndarray, s: np.ndarray, e1: np.ndarray) -> np.ndarray:
    """max(x[s:e1]) per frame (-1 for an empty one) with a sparse table: log2(n) numpy passes."""
    n = len(x)
    levels = [x]
    while (1 << len(levels)) <= n:
        prev, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(prev[:-half], prev[half:]))
    length = np.maximum(e1 - s, 1)
    j = np.floor(np.log2(length)).astype(np.int64)
    out = np.full(len(s), -1, np.int64)
    for lv in np.unique(j[e1 > s]).tolist():
        rows = np.flatnonzero((j == lv) & (e1 > s))
        table = levels[lv]
        out[rows] = np.maximum(table[s[rows]], table[e1[rows] - (1 << lv)])
    return out


def _scaled_sum_avg(
    k: str,
    values: pa.Array,
    valid: np.ndarray,
    s: np.ndarray,
    e1: np.ndarray,
    counts: np.ndarray,
    none: np.ndarray,
) -> pa.Array:
    """sum / avg over frames of per-value-scale NUMERIC (issue 14): the sum has the largest scale
    among the frame's values (not the prefix sums' scale), NaN / ±Infinity as numeric.c, avg
    with select_div_scale."""
    num = na.unpack(values)
    fin = valid & ~num.special
    scales = np.where(fin, num.scale, -1)
    top = _range_max(scales, s, e1)

    def frame_counts(mask: np.ndarray) -> np.ndarray:
        prefix = np.zeros(len(mask) + 1, np.int64)
        np.cumsum(mask, out=prefix[1:])
        return prefix[e1] - prefix[s]

    nan = frame_counts(valid & (num.scale == nm.NAN_SCALE))
    pinf = frame_counts(valid & (num.scale == nm.POS_INF_SCALE))
    ninf = frame_counts(valid & (num.scale == nm.NEG_INF_SCALE))
    v = np.array(
        [x if ok else decimal.Decimal(0) for x, ok in zip(values.to_pylist(), fin.tolist(), strict=True)],
        dtype=object,
    )  # per row: Decimal objects (exact sums; no numpy decimal dtype)
    with decimal.localcontext() as ctx:
        ctx.prec = 120
        sums = _window_sum(v, s, e1)
        out: list[decimal.Decimal | None] = []
        for i, d in enumerate(sums.tolist()):  # per frame: its Decimal sum at the frame's scale
            if none[i]:
                out.append(None)
            elif nan[i] or (pinf[i] and ninf[i]):
                out.append(nm.NAN)
            elif pinf[i] or ninf[i]:
                out.append(nm.POS_INF if pinf[i] else nm.NEG_INF)
            else:
                out.append(nm.check(d.quantize(decimal.Decimal(1).scaleb(-max(int(top[i]), 0)))))
    total = nm.to_arrow(out)
    if k == "sum":
        return total
    avg = numeric_scaled.divide_by_counts(total, np.maximum(counts, 1))
    return nm.on_storage(pc.if_else, pa.array(none), pa.nulls(len(avg), avg.type), avg)


def _decimals(sums: np.ndarray, none: np.ndarray, out: DataType) -> pa.Array:
    """Sums as NUMERIC (per row: Python Decimals, the exact domain of the sums)."""
    vals = [
        None if nn else x if isinstance(x, decimal.Decimal) else decimal.Decimal(int(x))
        for x, nn in zip(sums.tolist(), none.tolist(), strict=True)
    ]
    if nm.is_numeric_type(out.arrow):  # integer sums on issue 14's layout: scale 0
        return nm.to_arrow([None if v is None else nm.check(v) for v in vals])
    try:
        return pa.array(vals, _DEC).cast(out.arrow)
    except (pa.ArrowInvalid, decimal.InvalidOperation) as err:
        raise NumericOutOfRange("numeric field overflow") from err


def _extreme(
    k: str,
    values: pa.Array,
    t: DataType,
    valid: np.ndarray,
    rows: SortedRows,
    start: np.ndarray,
    end: np.ndarray,
    none: np.ndarray,
    out: DataType,
) -> pa.Array:
    """min / max / bool_and / bool_or over each frame, through dense ranks of the values."""
    largest = k in ("max", "bool_or")
    n = rows.n
    enc = encode_columns_arrow([values], [t], [DESC if not largest else ASC])
    rank = pc.rank(enc, tiebreaker="dense").to_numpy(zero_copy_only=False).astype(np.int64)
    r = np.where(valid, rank, 0)  # larger rank = the better value; 0 = no value
    width = int(r.max()) + 1 if n else 1
    best = _window_max(r, rows, start, end, width)
    best = np.where(none, 0, best)
    # a representative row for each rank value
    rep = np.zeros(width, np.int64)
    rep[r[valid]] = np.flatnonzero(valid)
    return _take(values, np.where(best > 0, rep[best], -1), out.arrow)


def _window_max(
    r: np.ndarray, rows: SortedRows, start: np.ndarray, end: np.ndarray, width: int
) -> np.ndarray:
    """max of `r` (>= 0) over [start, end] of each target (arbitrary where the frame is empty)."""
    n = len(r)
    if not n or not len(start):
        return np.zeros(len(start), np.int64)
    s = np.clip(start, 0, n - 1)
    e = np.clip(end, 0, n - 1)
    pid = rows.part_id
    if np.array_equal(s, rows.part_first[s]) and np.all(s <= e):
        # frames open at the start: a running maximum, kept per partition by an offset
        run = np.maximum.accumulate(r + pid * width) - pid * width
        return run[e]
    if np.array_equal(e, rows.part_last[np.minimum(e, n - 1)]):
        rev = (pid.max() - pid)[::-1]
        run = (np.maximum.accumulate(r[::-1] + rev * width) - rev * width)[::-1]
        return run[s]
    # a sparse table up to the longest frame
    length = np.maximum(e - s + 1, 1)
    levels = [r]
    span = 1
    while span * 2 <= int(length.max()):
        prev = levels[-1]
        nxt = prev.copy()
        nxt[: n - span] = np.maximum(prev[: n - span], prev[span:])
        levels.append(nxt)
        span *= 2
    lvl = np.floor(np.log2(length)).astype(np.int64)
    table = np.stack(levels)
    return np.maximum(table[lvl, s], table[lvl, e - (1 << lvl) + 1])


__all__ = [
    "AGGREGATES",
    "CURRENT_ROW",
    "DEFAULT_FRAME",
    "FOLLOWING",
    "FRAME_VALUES",
    "KINDS",
    "NAVIGATION",
    "PRECEDING",
    "RANKING",
    "UNBOUNDED_FOLLOWING",
    "UNBOUNDED_PRECEDING",
    "WHOLE_PARTITION",
    "FrameBound",
    "SortedRows",
    "WindowFrame",
    "WindowFunctionCall",
    "evaluate",
    "starts_of",
]
