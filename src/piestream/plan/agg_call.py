"""Aggregate calls of a HashAgg / SimpleAgg node: which function, over which input columns, with
which result type, and which columns its state takes in the intermediate table (seed 002).

Result types follow PostgreSQL: count -> BIGINT; sum(smallint/int) -> BIGINT, sum(bigint/numeric)
-> NUMERIC, sum(real) -> REAL, sum(double) -> DOUBLE; avg of integers/numeric -> NUMERIC, of floats
-> DOUBLE; sum/avg of INTERVAL -> INTERVAL; min/max -> the argument's type; string_agg -> VARCHAR
(BYTEA for bytea); array_agg -> a LIST of the argument's type; bool_and/bool_or -> BOOLEAN;
bit_and/bit_or/bit_xor -> the argument's type (smallint, integer, bigint).
`sum0` is internal (a sum that is 0, not NULL, over no rows, e.g. to add up partial counts).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.errors import FeatureNotSupported, UndefinedFunction
from piestream.common.order import OrderType
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INTERVAL,
    NUMERIC,
    REAL,
    DataType,
    TypeKind,
    list_of,
)
from piestream.expr.expr import Expr


class AggKind(enum.StrEnum):
    COUNT = "count"
    COUNT_STAR = "count_star"
    SUM = "sum"
    SUM0 = "sum0"
    AVG = "avg"
    MIN = "min"
    MAX = "max"
    STRING_AGG = "string_agg"
    ARRAY_AGG = "array_agg"
    BOOL_AND = "bool_and"
    BOOL_OR = "bool_or"
    BIT_AND = "bit_and"
    BIT_OR = "bit_or"
    BIT_XOR = "bit_xor"


#: Aggregates whose result a duplicate input changes, so DISTINCT needs the dedup table.
DISTINCT_SENSITIVE = frozenset(
    {
        AggKind.COUNT,
        AggKind.SUM,
        AggKind.SUM0,
        AggKind.AVG,
        AggKind.STRING_AGG,
        AggKind.ARRAY_AGG,
        AggKind.BIT_XOR,
    }
)
BITWISE = frozenset({AggKind.BIT_AND, AggKind.BIT_OR, AggKind.BIT_XOR})
#: bits of the integer types bit_and / bit_or / bit_xor take (PostgreSQL: int2, int4, int8)
INT_BITS = {TypeKind.SMALLINT: 16, TypeKind.INT: 32, TypeKind.BIGINT: 64}
#: Aggregates computed from the group's materialized input when the input is not append-only.
EXTREME = frozenset({AggKind.MIN, AggKind.MAX})
ORDERED_INPUT = frozenset({AggKind.STRING_AGG, AggKind.ARRAY_AGG})

_SMALL_INTS = frozenset({TypeKind.SMALLINT, TypeKind.INT})
_WIDE_INTS = frozenset({TypeKind.BIGINT, TypeKind.SERIAL})


def _no_function(kind: AggKind, arg_types: Sequence[DataType]) -> UndefinedFunction:
    return UndefinedFunction(f"function {kind}({', '.join(str(t) for t in arg_types)}) does not exist")


def agg_return_type(kind: AggKind | str, arg_types: Sequence[DataType]) -> DataType:
    """The PostgreSQL result type of `kind` over arguments of `arg_types`."""
    kind = AggKind(kind)
    if kind is AggKind.COUNT_STAR or kind is AggKind.COUNT:
        return BIGINT
    if not arg_types:
        raise _no_function(kind, arg_types)
    t = arg_types[0]
    k = t.kind
    if kind in (AggKind.SUM, AggKind.SUM0):
        if k in _SMALL_INTS or (kind is AggKind.SUM0 and k in _WIDE_INTS):
            return BIGINT
        if k in _WIDE_INTS or k is TypeKind.NUMERIC:
            return NUMERIC
        if k in (TypeKind.REAL, TypeKind.DOUBLE):
            return t if k is TypeKind.DOUBLE else REAL
        if k is TypeKind.INTERVAL:
            return INTERVAL
        raise _no_function(kind, arg_types)
    if kind is AggKind.AVG:
        if k in _SMALL_INTS or k in _WIDE_INTS or k is TypeKind.NUMERIC:
            return NUMERIC
        if k in (TypeKind.REAL, TypeKind.DOUBLE):
            return DOUBLE
        if k is TypeKind.INTERVAL:
            return INTERVAL
        raise _no_function(kind, arg_types)
    if kind in EXTREME:
        if t.kind is TypeKind.JSONB:
            raise _no_function(kind, arg_types)
        return t
    if kind is AggKind.STRING_AGG:
        if k not in (TypeKind.VARCHAR, TypeKind.BYTEA):
            raise _no_function(kind, arg_types)
        return t
    if kind is AggKind.ARRAY_AGG:
        return list_of(t)
    if kind in (AggKind.BOOL_AND, AggKind.BOOL_OR):
        if k is not TypeKind.BOOLEAN:
            raise _no_function(kind, arg_types)
        return BOOLEAN
    if kind in BITWISE:
        if k not in INT_BITS:
            raise _no_function(kind, arg_types)
        return t
    raise _no_function(kind, arg_types)  # pragma: no cover - every kind is handled above


@dataclass(frozen=True)
class AggCall:
    """One aggregate of a HashAgg / SimpleAgg.

    `args` are input column indices; string_agg's are (value, delimiter), or just (value,) with
    the constant `delimiter`. `filter` is the FILTER (WHERE ...) predicate over the input chunk
    (NULL counts as false). `order_by` orders string_agg / array_agg input: (column, order).
    """

    kind: AggKind
    args: tuple[int, ...]
    return_type: DataType
    distinct: bool = False
    filter: Expr | None = None
    order_by: tuple[tuple[int, OrderType], ...] = ()
    delimiter: str | None = None
    #: planned before per-value-scale NUMERIC (plan format <= 2): the old NUMERIC state and
    #: rounding (`piestream.plan.numeric_rules`)
    decimal_rules: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", AggKind(self.kind))
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "order_by", tuple((int(c), o) for c, o in self.order_by))
        want = {AggKind.COUNT_STAR: (0, 0), AggKind.STRING_AGG: (1, 2)}.get(self.kind, (1, 1))
        if not want[0] <= len(self.args) <= want[1]:
            raise UndefinedFunction(f"function {self.kind} takes {want[1]} argument(s), got {len(self.args)}")
        if self.kind is AggKind.COUNT_STAR and self.distinct:
            raise FeatureNotSupported("count(DISTINCT *) is not a valid aggregate")
        if self.order_by and self.kind not in ORDERED_INPUT:
            raise FeatureNotSupported(f"ORDER BY inside {self.kind} is not supported")
        if self.kind is AggKind.STRING_AGG and len(self.args) == 1 and self.delimiter is None:
            raise UndefinedFunction("function string_agg needs a delimiter")
        if self.effective_distinct and self.kind in ORDERED_INPUT:
            if any(c != self.args[0] for c, _ in self.order_by):
                raise FeatureNotSupported(
                    "in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list"
                )
            if len(self.args) > 1:
                raise FeatureNotSupported(f"{self.kind}(DISTINCT ...) needs a constant delimiter")

    @classmethod
    def create(
        cls,
        kind: AggKind | str,
        args: Sequence[int],
        input_types: Sequence[DataType],
        *,
        distinct: bool = False,
        filter: Expr | None = None,
        order_by: Sequence[tuple[int, OrderType]] = (),
        delimiter: str | None = None,
    ) -> AggCall:
        """A call whose return type is derived from the input column types (PostgreSQL rules)."""
        k = AggKind(kind)
        rt = agg_return_type(k, [input_types[a] for a in args[:1]])
        return cls(k, tuple(args), rt, distinct, filter, tuple(order_by), delimiter)

    @property
    def effective_distinct(self) -> bool:
        """DISTINCT only matters to aggregates a duplicate changes (not min/max/bool_*)."""
        return self.distinct and self.kind in DISTINCT_SENSITIVE

    def __str__(self) -> str:
        name = "count" if self.kind is AggKind.COUNT_STAR else str(self.kind)
        args = ", ".join(f"${a}" for a in self.args) or "*"
        if self.kind is AggKind.STRING_AGG and len(self.args) == 1:
            args += f", {self.delimiter!r}"
        if self.distinct:
            args = "DISTINCT " + args
        if self.order_by:
            args += " ORDER BY " + ", ".join(f"${c} {o}" for c, o in self.order_by)
        s = f"{name}({args})"
        if self.filter is not None:
            s += f" FILTER (WHERE {self.filter})"
        return s


#: Display scales 0..28 of the per-value-scale NUMERIC layout (`piestream.common.numeric`).
NUMERIC_SCALES = 29


def sum_state_type(kind: AggKind, arg: DataType, ret: DataType) -> DataType:
    """sum/sum0 keep their result type (REAL accumulates in DOUBLE); avg keeps BIGINT for small
    integers and NUMERIC for bigint / numeric; INTERVAL sums stay INTERVAL."""
    if arg.kind in (TypeKind.REAL, TypeKind.DOUBLE):
        return DOUBLE
    if arg.kind is TypeKind.INTERVAL:
        return INTERVAL
    if kind is AggKind.AVG:
        return BIGINT if arg.kind in (TypeKind.SMALLINT, TypeKind.INT) else NUMERIC
    return ret


def agg_state_columns(call: AggCall, arg_type: DataType | None) -> list[tuple[str, DataType]]:
    """(name suffix, type) of the call's columns in the intermediate (value-state) table: count
    keeps a count; sum / sum0 / avg a sum (and a non-NULL count, but for sum0); bool_and / bool_or
    the trues and falses; bit_and / bit_or / bit_xor the non-NULL count and, per bit of the type,
    how many inputs have it set; min / max, string_agg, array_agg their (last) output."""
    kind = call.kind
    if kind in (AggKind.COUNT, AggKind.COUNT_STAR):
        return [("", BIGINT)]
    if kind in (AggKind.SUM, AggKind.SUM0, AggKind.AVG):
        assert arg_type is not None
        cols = [("_sum", sum_state_type(kind, arg_type, call.return_type))]
        cols += [("_count", BIGINT)] if kind is not AggKind.SUM0 else []
        if arg_type.kind is TypeKind.NUMERIC:
            # issue 14's per-value scales: how many values of each display scale (the sum's scale
            # is the largest present, also after retractions) and of NaN, +Infinity, -Infinity
            cols += [(f"_scale{s}", BIGINT) for s in range(NUMERIC_SCALES)]
            cols += [("_nan", BIGINT), ("_pinf", BIGINT), ("_ninf", BIGINT)]
        return cols
    if kind in (AggKind.BOOL_AND, AggKind.BOOL_OR):
        return [("_true", BIGINT), ("_false", BIGINT)]
    if kind in BITWISE:
        assert arg_type is not None
        return [("_count", BIGINT)] + [(f"_bit{b}", BIGINT) for b in range(INT_BITS[arg_type.kind])]
    return [("", call.return_type)]  # the (last) output: rebuilds U- / Delete after a restart
