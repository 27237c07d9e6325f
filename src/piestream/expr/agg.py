"""Aggregate signatures: the return type of an aggregate call and the types its inputs must be
cast to, as PostgreSQL's pg_aggregate defines them (sum(int4) is bigint, avg(int) is numeric...).
"""

from __future__ import annotations

from collections.abc import Sequence

from piestream.common.errors import UndefinedFunction
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DOUBLE,
    INTERVAL,
    NUMERIC,
    VARCHAR,
    DataType,
    TypeKind,
    list_of,
    with_dscale,
    without_typmod,
)
from piestream.expr.coercion import normalize, type_name

_INTS = (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT)
_ALIASES = {"stddev": "stddev_samp", "variance": "var_samp", "every": "bool_and"}
#: Types with an ordering min / max accept (PostgreSQL: numbers, strings, date/times,
#: intervals, and arrays of those; RisingWave also bytea, by its bytes).
_ORDERED = frozenset(
    {
        TypeKind.BYTEA,
        TypeKind.SMALLINT,
        TypeKind.INT,
        TypeKind.BIGINT,
        TypeKind.NUMERIC,
        TypeKind.REAL,
        TypeKind.DOUBLE,
        TypeKind.VARCHAR,
        TypeKind.DATE,
        TypeKind.TIME,
        TypeKind.TIMESTAMP,
        TypeKind.TIMESTAMPTZ,
        TypeKind.INTERVAL,
    }
)


def _undefined(kind: str, arg_types: Sequence[DataType]) -> UndefinedFunction:
    names = ", ".join(type_name(t) for t in arg_types)
    return UndefinedFunction(
        f"function {kind}({names}) does not exist",
        hint="No function matches the given name and argument types. "
        "You might need to add explicit type casts.",
    )


def _ordered(t: DataType) -> bool:
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return _ordered(t.elem)
    return t.kind in _ORDERED


def agg_signature(
    kind: str, arg_types: Sequence[DataType], *, distinct: bool = False
) -> tuple[DataType, list[DataType]]:
    """(return type, argument types to cast the inputs to) of aggregate `kind`.

    Supported: count, count_star, sum, avg, min, max, string_agg, array_agg, bool_and, bool_or
    (every), bit_and / bit_or / bit_xor (smallint, integer, bigint), stddev_pop / stddev_samp
    (stddev), var_pop / var_samp (variance), approx_count_distinct. `distinct` does not change
    types. Unsupported argument types are 42883 like PostgreSQL's "function sum(text) does not
    exist".
    """
    k = _ALIASES.get(kind.lower(), kind.lower())
    types = [normalize(t) for t in arg_types]
    if k == "count_star":
        if types:
            raise _undefined("count", arg_types)
        return BIGINT, []
    if k in ("count", "approx_count_distinct"):
        if len(types) != 1:
            raise _undefined(k, arg_types)
        return BIGINT, list(types)
    if k == "string_agg":
        if len(types) == 2 and all(t == VARCHAR for t in types):
            return VARCHAR, [VARCHAR, VARCHAR]
        if len(types) == 2 and all(t == BYTEA for t in types):
            return BYTEA, [BYTEA, BYTEA]
        raise _undefined(k, arg_types)
    if len(types) != 1:
        raise _undefined(k, arg_types)
    (t,) = types
    if k == "array_agg":
        return list_of(without_typmod(t, keep_scale=True)), [t]  # exprTypmod of an Aggref: -1
    if k in ("bool_and", "bool_or"):
        if t != BOOLEAN:
            raise _undefined(k, arg_types)
        return BOOLEAN, [BOOLEAN]
    if k in ("bit_and", "bit_or", "bit_xor"):
        if t.kind not in _INTS:
            raise _undefined(k, arg_types)
        return t, [t]
    if k in ("min", "max"):
        if not _ordered(t):
            raise _undefined(k, arg_types)
        return without_typmod(t, keep_scale=True), [t]
    if k == "sum":
        if t.kind in (TypeKind.SMALLINT, TypeKind.INT):
            return BIGINT, [t]
        if t.kind is TypeKind.BIGINT:  # PostgreSQL's sum keeps its argument's display scale
            return with_dscale(NUMERIC, 0), [t]
        if t.kind is TypeKind.NUMERIC:
            return with_dscale(NUMERIC, t.display_scale), [t]
        if t.kind in (TypeKind.REAL, TypeKind.DOUBLE, TypeKind.INTERVAL):
            return t, [t]
        raise _undefined(k, arg_types)
    if k == "avg":
        if t.kind in _INTS or t.kind is TypeKind.NUMERIC:
            return NUMERIC, [t]
        if t.kind in (TypeKind.REAL, TypeKind.DOUBLE):
            return DOUBLE, [t]
        if t.kind is TypeKind.INTERVAL:
            return INTERVAL, [t]
        raise _undefined(k, arg_types)
    if k in ("stddev_pop", "stddev_samp", "var_pop", "var_samp"):
        if t.kind in _INTS or t.kind is TypeKind.NUMERIC:
            return NUMERIC, [t]
        if t.kind in (TypeKind.REAL, TypeKind.DOUBLE):
            return DOUBLE, [t]
        raise _undefined(k, arg_types)
    raise UndefinedFunction(f"function {kind} does not exist")
