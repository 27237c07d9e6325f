"""Per-call aggregate state: input rows -> per-group deltas -> new state -> output value.

Every call describes its deltas (`DeltaSpec`: summed, or min/max'd) so that the executor can
reduce a whole chunk, and later a whole epoch, per group with one Arrow hash aggregation; then
`combine` folds a batch of dirty groups' deltas into their previous states and `output` turns
states into results, both column-at-a-time over all dirty groups (seed 002 value states):

=====================  ======================================  ==============================
call                   state columns (intermediate table)      deltas
=====================  ======================================  ==============================
count, count_star      count                                   +-1 per (filtered) row
sum, sum0, avg         sum, non-NULL count (not for sum0)      signed values, +-1
  of intervals         interval sum, count                     signed months, days, usecs
bool_and, bool_or      trues, falses                           +-1 per true / false
bit_and/_or/_xor       count, one count per bit of the type    +-1 per row, per set bit
min/max, append-only   the extreme                             min/max of inserted keys
min/max, retractable   the last output                         min/max of inserted / deleted
string_agg, array_agg  the last output                         rows written to the input table
=====================  ======================================  ==============================

Min/max compare memcomparable keys (`encode_key`), so their order is SQL's for every type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.chunk import Op, StreamChunk
from piestream.common.errors import NumericOutOfRange, StateConsistencyError
from piestream.common.scalar import Row, columns_to_rows
from piestream.common.types import DataType, TypeKind
from piestream.expr.functions import numeric_scaled
from piestream.expr.functions.datetime_arith import interval_scale
from piestream.expr.functions.vec import interval_parts, make_intervals
from piestream.plan.agg_call import (
    BITWISE,
    EXTREME,
    INT_BITS,
    NUMERIC_SCALES,
    AggCall,
    AggKind,
    agg_state_columns,
    sum_state_type,
)
from piestream.storage.table.state_table import StateTable
from piestream.stream.executors.agg.arrays import (
    NUMERIC_ARROW,
    add_bigint,
    add_numeric,
    decode_key,
    divide_numeric,
    encode_key,
    int64_as_decimal,
    np_bool,
    np_float,
    np_int,
    null_where,
    take_merged,
    zeros,
)
from piestream.stream.executors.group_scan import GroupRows, read_groups

if TYPE_CHECKING:
    from piestream.plan.hash_agg import MaterializedInputTable

Columns = Sequence[pa.Array | None]  # input columns by index; None where a path does not need them
#: a NaN / +-Infinity reaching the sum of a view created before per-value scales
LEGACY_SPECIAL = "a view created before NUMERIC NaN / Infinity existed cannot sum them: counted as NULL"


@dataclass(frozen=True)
class DeltaSpec:
    """One per-group delta column: its Arrow type and how deltas of one group combine."""

    arrow: pa.DataType
    how: str  # "sum" | "min" | "max"

    def identity(self, n: int) -> pa.Array:
        return zeros(n, self.arrow) if self.how == "sum" else pa.nulls(n, self.arrow)


_COUNT = DeltaSpec(pa.int64(), "sum")
_INT64_MIN = np.iinfo(np.int64).min
_BIGINT_ACC = pa.decimal128(38, 0)
#: Summed deltas of per-value-scale NUMERIC values: every value of the layout (38 digits, up to
#: 28 after the point) at scale 28, with room for 10**9 of them (Arrow's sum widens to 76 digits).
_NUMERIC_DELTA = pa.decimal256(75, 28)
_SPECIAL_SCALES = (nm.NAN_SCALE, nm.POS_INF_SCALE, nm.NEG_INF_SCALE)

#: Up to this many groups needing a new extreme read one row each (a limit-1 scan, cheaper than
#: the group's whole input); more read all their groups with one scan.
_FEW_RESCANS = 1


class GroupBatch:
    """The dirty groups being flushed: their key columns and which of them exist afterwards."""

    def __init__(self, key_cols: list[pa.Array], key_types: list[DataType], alive: np.ndarray) -> None:
        self.key_cols = key_cols
        self.key_types = key_types
        self.alive = alive

    def read(self, table: StateTable, rows: np.ndarray) -> GroupRows:
        """Every row of groups `rows` in `table` (keyed by the group key first), one state call."""
        take = pa.array(rows, pa.int64())
        return read_groups(table, [c.take(take) for c in self.key_cols], len(rows))

    def prefixes(self, rows: np.ndarray) -> list[Row]:
        """The keys of groups `rows` as Python tuples (for prefix scans of their state)."""
        if not self.key_cols:
            return [()] * len(rows)
        take = pa.array(rows, pa.int64())
        return columns_to_rows([c.take(take) for c in self.key_cols], self.key_types)


class CallState:
    """How one call reads its input, keeps state and produces its output."""

    specs: tuple[DeltaSpec, ...]

    def __init__(self, call: AggCall, arg_type: DataType | None) -> None:
        self.call = call
        self.arg_type = arg_type
        self.arg = call.args[0] if call.args else -1
        self.table: StateTable | None = None  # the materialized input, if the call reads one
        self.n_states = len(agg_state_columns(call, arg_type))

    def mask(self, cols: Columns, filter_mask: np.ndarray) -> np.ndarray:
        """Rows the call aggregates: FILTER passed and (most aggregates) a non-NULL argument."""
        x = cols[self.arg]
        assert x is not None
        return filter_mask & np_bool(x.is_valid())

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        raise NotImplementedError

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        raise NotImplementedError

    def output(self, state: list[pa.Array]) -> pa.Array:
        raise NotImplementedError


class CountState(CallState):
    specs = (_COUNT,)

    def mask(self, cols: Columns, filter_mask: np.ndarray) -> np.ndarray:
        return filter_mask if self.call.kind is AggKind.COUNT_STAR else super().mask(cols, filter_mask)

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        return [pa.array(signs * mask)]

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        return [add_bigint(prev[0], deltas[0])]

    def output(self, state: list[pa.Array]) -> pa.Array:
        return pc.fill_null(state[0], 0)


class SumState(CallState):
    """sum, sum0 and avg: a running sum plus the count of non-NULL inputs (NULL when 0)."""

    def __new__(cls, call: AggCall, arg_type: DataType | None) -> SumState:
        if cls is SumState and arg_type is not None and arg_type.kind is TypeKind.INTERVAL:
            return super().__new__(IntervalSumState)
        if cls is SumState and arg_type is not None and nm.is_numeric_type(arg_type.arrow):
            return super().__new__(NumericSumState)
        return super().__new__(cls)

    def __init__(self, call: AggCall, arg_type: DataType | None) -> None:
        super().__init__(call, arg_type)
        assert arg_type is not None
        k = arg_type.kind
        if k in (TypeKind.SMALLINT, TypeKind.INT):
            self.acc = pa.int64()  # a chunk's deltas of 32-bit values cannot overflow int64
        elif k in (TypeKind.BIGINT, TypeKind.SERIAL):
            self.acc = _BIGINT_ACC  # 64-bit values could, so sum them as decimals
        elif k is TypeKind.NUMERIC:
            self.acc = NUMERIC_ARROW
        else:
            self.acc = pa.float64()
        self.sum_type = sum_state_type(call.kind, arg_type, call.return_type)
        self.with_count = call.kind is not AggKind.SUM0
        self.specs = (
            (DeltaSpec(self.acc, "sum"), _COUNT) if self.with_count else (DeltaSpec(self.acc, "sum"),)
        )

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        x = cols[self.arg]
        assert x is not None
        if pa.types.is_floating(self.acc):
            total = pa.array(np.where(mask, np_float(x) * signs, 0.0))
        elif pa.types.is_integer(self.acc):
            total = pa.array(np_int(x) * signs * mask)
        elif pa.types.is_int64(x.type) and self.acc == _BIGINT_ACC and not (np_int(x) == _INT64_MIN).any():
            # BIGINT into its decimal accumulator: negated in int64 (only INT64_MIN could overflow)
            total = int64_as_decimal(np_int(x) * signs * mask, self.acc)
        else:
            d = pc.fill_null(x, 0).cast(self.acc)
            d = pc.if_else(pa.array(signs < 0), pc.negate(d), d)
            total = pc.if_else(pa.array(mask), d, pa.scalar(0, pa.int64()).cast(self.acc))
        return [total, pa.array(signs * mask)] if self.with_count else [total]

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        old, d = prev[0], deltas[0]
        k = self.sum_type.kind
        if k is TypeKind.BIGINT:
            if not pa.types.is_integer(d.type):
                try:
                    d = d.cast(pa.int64())
                except pa.ArrowInvalid as e:
                    raise NumericOutOfRange("bigint out of range") from e
            total = add_bigint(old, d)
        elif k is TypeKind.NUMERIC and self.acc == _BIGINT_ACC and nm.is_numeric_type(self.sum_type.arrow):
            # sums of BIGINTs on issue 14's layout: exact integers of scale 0
            wide = pa.decimal256(40, 0)
            total = pc.add(na.to_decimal(old, wide), pc.fill_null(d, 0).cast(wide))
            try:
                total = na.from_decimal(total.cast(_BIGINT_ACC))
            except pa.ArrowInvalid as e:
                raise NumericOutOfRange("numeric field overflow") from e
        elif k is TypeKind.NUMERIC:
            total = add_numeric(old, d)
        else:
            total = pa.array(np_float(old) + np_float(d))
        return [total, add_bigint(prev[1], deltas[1])] if self.with_count else [total]

    def output(self, state: list[pa.Array]) -> pa.Array:
        ret = self.call.return_type.arrow
        total = state[0]
        if not self.with_count:
            return pc.fill_null(total, 0).cast(ret)
        count = np_int(state[1])
        empty = count <= 0
        if self.call.kind is AggKind.AVG:
            if self.sum_type.kind is TypeKind.DOUBLE:
                avg = pa.array(np_float(total) / np.where(empty, 1, count))
            elif nm.is_numeric_type(ret):  # issue 14's layout: select_div_scale
                if not nm.is_numeric_array(total):  # a BIGINT sum of small integers
                    total = na.from_decimal(pc.fill_null(total, 0).cast(_BIGINT_ACC))
                avg = numeric_scaled.divide_by_counts(total, np.where(empty, 1, count))
            else:
                avg = divide_numeric(total, count)
            return null_where(avg.cast(ret), empty)
        return null_where(total.cast(ret), empty)


class NumericSumState(SumState):
    """sum / avg of NUMERIC with per-value display scales (issue 14): PostgreSQL's sum has the
    largest scale among the group's values, so the state counts the values of each scale 0..28
    (after a retraction the largest scale still present is known without a rescan) and of NaN,
    +Infinity and -Infinity (numeric.c's NumericAggState). Deltas are exact decimal256 sums at
    scale 28 (any value of the layout fits), reduced by Arrow like the other sums; the stored
    sum is exact at the group's current largest scale."""

    def __init__(self, call: AggCall, arg_type: DataType | None) -> None:
        CallState.__init__(self, call, arg_type)
        assert arg_type is not None
        self.sum_type = sum_state_type(call.kind, arg_type, call.return_type)
        self.with_count = call.kind is not AggKind.SUM0
        counts = (_COUNT,) * (NUMERIC_SCALES + 3)  # per display scale, then NaN, +Inf, -Inf
        head = (
            (DeltaSpec(_NUMERIC_DELTA, "sum"), _COUNT)
            if self.with_count
            else (DeltaSpec(_NUMERIC_DELTA, "sum"),)
        )
        self.specs = (*head, *counts)

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        x = cols[self.arg]
        assert x is not None
        num = na.unpack(x)
        w = signs * mask
        wide = na.to_decimal(x, _NUMERIC_DELTA)  # NULL and the specials are 0 here
        total = nm.on_storage(pc.if_else, pa.array(w < 0), pc.negate(wide), wide)
        total = pc.if_else(pa.array(w == 0), pa.array(np.zeros(len(w), np.int64)).cast(_NUMERIC_DELTA), total)
        fin = ~num.special
        per_scale = [pa.array(np.where(fin & (num.scale == s), w, 0)) for s in range(NUMERIC_SCALES)]
        specials = [pa.array(np.where(num.scale == sc, w, 0)) for sc in _SPECIAL_SCALES]
        head = [total, pa.array(w)] if self.with_count else [total]
        return [*head, *per_scale, *specials]

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        h = 2 if self.with_count else 1
        counts = [add_bigint(p, d) for p, d in zip(prev[h:], deltas[h:], strict=True)]
        scale_counts = np.stack([np_int(c) for c in counts[:NUMERIC_SCALES]], axis=1)
        if (scale_counts < 0).any() or any((np_int(c) < 0).any() for c in counts[NUMERIC_SCALES:]):
            raise StateConsistencyError("a NUMERIC sum retracted a value it does not hold")
        present = scale_counts > 0
        top = np.where(
            present.any(axis=1), NUMERIC_SCALES - 1 - np.argmax(present[:, ::-1], axis=1), 0
        ).astype(np.int64)
        old = na.to_decimal(prev[0], _NUMERIC_DELTA)
        total = pc.add(old, pc.fill_null(deltas[0], 0).cast(_NUMERIC_DELTA))
        new_sum = na.from_wide_decimal(total, top, None)
        head = [new_sum, add_bigint(prev[1], deltas[1])] if self.with_count else [new_sum]
        return [*head, *counts]

    def output(self, state: list[pa.Array]) -> pa.Array:
        h = 2 if self.with_count else 1
        nan, pinf, ninf = (np_int(c) for c in state[h + NUMERIC_SCALES :])
        num = na.unpack(state[0])
        both = (pinf > 0) & (ninf > 0)
        special = np.where(
            (nan > 0) | both,
            nm.NAN_SCALE,
            np.where(pinf > 0, nm.POS_INF_SCALE, np.where(ninf > 0, nm.NEG_INF_SCALE, 0)),
        )
        is_special = special < 0
        total = na.pack(
            na.Num(
                np.where(is_special, 0, num.hi),
                np.where(is_special, np.uint64(0), num.lo),
                np.where(is_special, special, num.scale),
                None,
            )
        )
        if not self.with_count:
            return total
        count = np_int(state[1])
        empty = count <= 0
        if self.call.kind is AggKind.AVG:
            total = numeric_scaled.divide_by_counts(total, np.where(empty, 1, count))
        return null_where(total, empty)


class LegacyNumericSumState(SumState):
    """sum / avg of NUMERIC in a materialized view created before per-value scales (its state
    table has no per-scale counts): the old semantics on the new layout, so its state keeps
    reading and writing the same bytes. Values are summed at 10 fraction digits (rounded half
    away from zero, as they were stored) and results shown without trailing zeros. NaN and
    +-Infinity, which such a state cannot hold, count as NULL and are handed to `on_special`
    (the executor records them as errors: streaming never wedges); without it they are 22003.
    Recreating the view gives PostgreSQL's scales and specials."""

    def __init__(self, call: AggCall, arg_type: DataType | None) -> None:
        super().__init__(call, arg_type)
        self.n_states = 2 if self.with_count else 1
        self.on_special: Callable[[np.ndarray, Columns], None] | None = None

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        x = cols[self.arg]
        assert x is not None
        finite, rows = na.specials_to_null(x)
        hit = rows[mask[rows]]
        if len(hit):
            if self.on_special is None:
                raise NumericOutOfRange(LEGACY_SPECIAL)
            self.on_special(hit, cols)
            mask = mask.copy()
            mask[hit] = False  # counted as NULL: neither summed nor counted
        fixed = list(cols)
        fixed[self.arg] = na.to_export_decimal(finite)
        return super().deltas(signs, mask, fixed)

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        old = [_as_decimal(prev[0]), *prev[1:]]
        new = super().combine(old, deltas, groups)
        return [_normalized(new[0]), *new[1:]]

    def output(self, state: list[pa.Array]) -> pa.Array:
        if self.call.kind is not AggKind.AVG:
            return super().output(state)
        count = np_int(state[1])
        empty = count <= 0
        avg = divide_numeric(_as_decimal(state[0]), count)
        return null_where(_normalized(avg), empty)


def _as_decimal(col: pa.Array) -> pa.Array:
    """A legacy sum state as decimal128(38, 10), from either layout (new groups start empty)."""
    return na.to_export_decimal(col) if nm.is_numeric_array(col) else col


def _normalized(dec: pa.Array) -> pa.Array:
    """A decimal128(38, 10) column on the per-value-scale layout, without trailing zeros."""
    return na.pack(na.normalize(na.unpack(na.from_decimal(dec))))


class IntervalSumState(SumState):
    """sum / avg of INTERVAL: months, days and microseconds are summed apart (PostgreSQL's
    interval_pl), the state is the INTERVAL sum; avg is PostgreSQL's interval_div(sum, count)."""

    def __init__(self, call: AggCall, arg_type: DataType | None) -> None:
        CallState.__init__(self, call, arg_type)
        self.with_count = call.kind is not AggKind.SUM0
        parts = (_COUNT,) * 3  # months, days, usecs: each an int64 sum of signed deltas
        self.specs = (*parts, _COUNT) if self.with_count else parts

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        x = cols[self.arg]
        assert x is not None
        w = signs * mask  # garbage under NULLs is multiplied by 0
        parts = [pa.array(np.where(mask, p, 0) * w) for p in interval_parts(x)]
        return [*parts, pa.array(w)] if self.with_count else parts

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        old = prev[0]
        has_old = np_bool(old.is_valid())
        olds = [np.where(has_old, p, 0) for p in interval_parts(old)]
        m, d, u = (o + np_int(x) for o, x in zip(olds, deltas[:3], strict=True))
        total = make_intervals(m, d, u, None)
        return [total, add_bigint(prev[1], deltas[3])] if self.with_count else [total]

    def output(self, state: list[pa.Array]) -> pa.Array:
        total = state[0]
        if not self.with_count:
            return total
        count = np_int(state[1])
        empty = count <= 0
        if self.call.kind is AggKind.AVG:
            total = interval_scale(total, np.where(empty, 1, count).astype(np.float64), None, divide=True)
        return null_where(total, empty)


class BoolState(CallState):
    """bool_and / bool_or from the counts of true and false inputs."""

    specs = (_COUNT, _COUNT)

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        x = cols[self.arg]
        assert x is not None
        v = np_bool(x)
        return [pa.array(signs * (mask & v)), pa.array(signs * (mask & ~v))]

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        return [add_bigint(prev[0], deltas[0]), add_bigint(prev[1], deltas[1])]

    def output(self, state: list[pa.Array]) -> pa.Array:
        t, f = np_int(state[0]), np_int(state[1])
        res = f == 0 if self.call.kind is AggKind.BOOL_AND else t > 0
        return null_where(pa.array(res), t + f == 0)


class BitState(CallState):
    """bit_and / bit_or / bit_xor from how many non-NULL inputs have each bit set, so deletes
    retract: a bit of bit_and is set when every input has it, of bit_or when one has, of bit_xor
    when an odd number have. One (rows x bits) numpy array per chunk."""

    def __init__(self, call: AggCall, arg_type: DataType | None) -> None:
        super().__init__(call, arg_type)
        assert arg_type is not None
        self.bits = INT_BITS[arg_type.kind]
        self.specs = (_COUNT,) * (1 + self.bits)

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        x = cols[self.arg]
        assert x is not None
        w = signs * mask
        set_bits = (np_int(x)[:, None] >> np.arange(self.bits, dtype=np.int64)) & 1
        per_bit = set_bits * w[:, None]
        return [pa.array(w), *(pa.array(per_bit[:, b]) for b in range(self.bits))]

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        return [add_bigint(p, d) for p, d in zip(prev, deltas, strict=True)]

    def output(self, state: list[pa.Array]) -> pa.Array:
        count = np_int(state[0])
        per_bit = np.stack([np_int(s) for s in state[1:]], axis=1) if len(count) else np.zeros((0, self.bits))
        kind = self.call.kind
        if kind is AggKind.BIT_AND:
            on = per_bit == count[:, None]
        elif kind is AggKind.BIT_OR:
            on = per_bit > 0
        else:
            on = per_bit % 2 == 1
        weights = np.left_shift(np.uint64(1), np.arange(self.bits, dtype=np.uint64))
        value = (on.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
        signed = value.astype(f"uint{self.bits}").view(f"int{self.bits}")
        return pa.array(signed, self.call.return_type.arrow, mask=count <= 0)


class MaterializedState(CallState):
    """A call that reads its group's materialized input (written here as the input arrives)."""

    def __init__(self, call: AggCall, arg_type: DataType | None, mat: MaterializedInputTable) -> None:
        super().__init__(call, arg_type)
        self.mat = mat

    def write_input(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> None:
        """Insert the aggregated rows that arrive, delete those that retract."""
        idx = np.flatnonzero(mask)
        if not len(idx):
            return
        assert self.table is not None
        take = pa.array(idx)
        ops = np.where(signs[idx] > 0, Op.INSERT, Op.DELETE).astype(np.int8)
        table_cols = []
        for c in self.mat.input_cols:
            col = cols[c]
            assert col is not None
            table_cols.append(col.take(take))
        self.table.write_chunk(StreamChunk(ops, table_cols))

    def output(self, state: list[pa.Array]) -> pa.Array:
        return state[0]


class ExtremeState(CallState):
    """min/max over an append-only input: the extreme itself is the state."""

    def __init__(self, call: AggCall, arg_type: DataType | None) -> None:
        super().__init__(call, arg_type)
        assert arg_type is not None
        self.t = arg_type
        self.how = "min" if call.kind is AggKind.MIN else "max"
        self.specs = (DeltaSpec(pa.binary(), self.how),)
        self.pick: Callable[..., pa.Array] = pc.min_element_wise if self.how == "min" else pc.max_element_wise

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        if (mask & (signs < 0)).any():
            raise StateConsistencyError(f"{self.call}: an append-only input retracted a row")
        x = cols[self.arg]
        assert x is not None
        return [null_where(encode_key(x, self.t), ~mask)]

    def _improved(self, old: pa.Array, candidate: pa.Array) -> pa.Array:
        """`old` where `candidate` (memcomparable keys) does not beat it, else the candidate."""
        old_key = encode_key(old, self.t)
        better = pc.less(candidate, old_key) if self.how == "min" else pc.greater(candidate, old_key)
        wins = np_bool(candidate.is_valid()) & (np_bool(old_key.is_null()) | np_bool(better))
        rows = np.flatnonzero(wins)
        return take_merged(old, rows, decode_key(candidate.take(pa.array(rows)), self.t))

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        return [self._improved(prev[0], deltas[0])]

    def output(self, state: list[pa.Array]) -> pa.Array:
        return state[0]


class RetractableExtremeState(MaterializedState, ExtremeState):
    """min/max over a retractable input: the materialized input ordered by the value, plus the
    last output. Inserts alone only improve the extreme; a group needs a rescan only when a
    deleted value reaches its old extreme (min: deleted <= old min)."""

    def __init__(self, call: AggCall, arg_type: DataType | None, mat: MaterializedInputTable) -> None:
        ExtremeState.__init__(self, call, arg_type)
        self.mat = mat
        self.specs = (DeltaSpec(pa.binary(), self.how),) * 2

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        x = cols[self.arg]
        assert x is not None
        key = encode_key(x, self.t)
        return [null_where(key, ~(mask & (signs > 0))), null_where(key, ~(mask & (signs < 0)))]

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        inserted, deleted = deltas
        old_key = encode_key(prev[0], self.t)
        reaches = pc.less_equal(deleted, old_key) if self.how == "min" else pc.greater_equal(deleted, old_key)
        rescan = np_bool(deleted.is_valid()) & (np_bool(old_key.is_null()) | np_bool(reaches)) & groups.alive
        new = self._improved(prev[0], inserted)
        rows = np.flatnonzero(rescan)
        if len(rows) > _FEW_RESCANS:
            # one scan of the groups' materialized input, each group's first row taken
            assert self.table is not None
            g = groups.read(self.table, rows)
            col = g.chunk.columns[self.mat.value_col].cast(self.t.arrow)
            empty = g.counts == 0
            firsts = (
                col.take(pa.array(np.where(empty, 0, g.starts), mask=empty))
                if len(col)
                else pa.nulls(len(rows), self.t.arrow)
            )
            new = take_merged(new, rows, firsts)
        elif len(rows):
            # one group lost a row at its extreme: a limit-1 prefix scan reads one row instead of
            # the group's whole input (at most _FEW_RESCANS state calls)
            firsts = [self._first(prefix) for prefix in groups.prefixes(rows)]
            new = take_merged(new, rows, pa.concat_arrays(firsts))
        return [new]

    def _first(self, prefix: Row) -> pa.Array:
        assert self.table is not None
        for chunk in self.table.iter_chunks_with_prefix(prefix, limit=1):
            return chunk.columns[self.mat.value_col].slice(0, 1).cast(self.t.arrow)
        return pa.nulls(1, self.t.arrow)


class OrderedInputState(MaterializedState):
    """string_agg / array_agg: recomputed from the whole (ordered) group when it changed."""

    specs = (_COUNT,)  # rows written to the materialized input

    def mask(self, cols: Columns, filter_mask: np.ndarray) -> np.ndarray:
        # array_agg keeps NULL elements; string_agg skips NULL values
        return filter_mask if self.call.kind is AggKind.ARRAY_AGG else super().mask(cols, filter_mask)

    def deltas(self, signs: np.ndarray, mask: np.ndarray, cols: Columns) -> list[pa.Array]:
        return [pa.array(mask.astype(np.int64))]

    def combine(self, prev: list[pa.Array], deltas: list[pa.Array], groups: GroupBatch) -> list[pa.Array]:
        rows = np.flatnonzero((np_int(deltas[0]) != 0) & groups.alive)
        if not len(rows):
            return [prev[0]]
        assert self.table is not None
        # each changed group's whole input, in its ORDER BY order, with one state call
        g = groups.read(self.table, rows)
        values = [g.chunk.columns[self.mat.value_col]]
        delims = [g.chunk.columns[self.mat.delimiter_col]] if self.mat.delimiter_col is not None else []
        lens = g.counts
        assert self.arg_type is not None
        elem = self.arg_type.arrow
        vals = pa.concat_arrays([v.cast(elem) for v in values]) if values else pa.array([], elem)
        offsets = pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
        empty = pa.array(lens == 0)
        if self.call.kind is AggKind.ARRAY_AGG:
            result = pa.ListArray.from_arrays(offsets, vals, mask=empty)
        else:
            result = self._joined(vals, delims, lens, offsets, empty)
        return [take_merged(prev[0], rows, result)]

    def _joined(
        self, vals: pa.Array, delims: list[pa.Array], lens: np.ndarray, offsets: pa.Array, empty: pa.Array
    ) -> pa.Array:
        """Each group's values joined, a value's delimiter in front of every value but the first."""
        n = len(vals)
        if delims:
            sep = pc.fill_null(pa.concat_arrays([d.cast(vals.type) for d in delims]), "")
        else:
            sep = pa.array([self.call.delimiter or ""] * n, vals.type) if n else pa.array([], vals.type)
        first = np.zeros(n, np.bool_)
        starts = (np.cumsum(lens) - lens)[lens > 0]
        first[starts] = True
        sep = pc.if_else(pa.array(first), pa.scalar("", vals.type), sep)
        pieces = pc.binary_join_element_wise(sep, vals, pa.scalar("", vals.type))
        return pc.binary_join(pa.ListArray.from_arrays(offsets, pieces, mask=empty), pa.scalar("", vals.type))


def _state_class(call: AggCall, materialized: bool) -> type[CallState]:
    kind = call.kind
    if kind in (AggKind.COUNT, AggKind.COUNT_STAR):
        return CountState
    if kind in (AggKind.SUM, AggKind.SUM0, AggKind.AVG):
        return SumState
    if kind in (AggKind.BOOL_AND, AggKind.BOOL_OR):
        return BoolState
    if kind in BITWISE:
        return BitState
    if kind in EXTREME:
        return RetractableExtremeState if materialized else ExtremeState
    return OrderedInputState


def make_call_state(
    call: AggCall, input_types: Sequence[DataType], mat: MaterializedInputTable | None
) -> CallState:
    arg = input_types[call.args[0]] if call.args else None
    cls = _state_class(call, mat is not None)
    if issubclass(cls, MaterializedState):
        assert mat is not None
        return cls(call, arg, mat)
    return cls(call, arg)
