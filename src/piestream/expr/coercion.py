"""PostgreSQL's type system rules the binder needs: names, categories, cast contexts, common types.

A cast from one type to another is allowed in one of three contexts (PostgreSQL's pg_cast):
*implicit* (anywhere, e.g. an int argument to a numeric parameter), *assignment* (also when
storing into a column: bigint -> int, anything -> text) and *explicit* (only ``CAST`` / ``::``:
text -> anything, int <-> boolean). `cast_level` answers which context a conversion needs.

Types are grouped in categories with one preferred type each (numeric: double precision,
string: text, datetime: timestamptz, timespan: interval, boolean: boolean); overload resolution
and `common_type` use them exactly as PostgreSQL's parser does.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from piestream.common.errors import DatatypeMismatch
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INTERVAL,
    TIMESTAMPTZ,
    VARCHAR,
    DataType,
    Field,
    TypeKind,
    list_of,
    struct_of,
    with_dscale,
    without_typmod,
)


class CastContext(enum.IntEnum):
    """Where a conversion may happen; a higher context allows everything a lower one does."""

    IMPLICIT = 0
    ASSIGNMENT = 1
    EXPLICIT = 2


_NAMES = {
    TypeKind.BOOLEAN: "boolean",
    TypeKind.SMALLINT: "smallint",
    TypeKind.INT: "integer",
    TypeKind.BIGINT: "bigint",
    TypeKind.SERIAL: "bigint",
    TypeKind.NUMERIC: "numeric",
    TypeKind.REAL: "real",
    TypeKind.DOUBLE: "double precision",
    TypeKind.VARCHAR: "text",
    TypeKind.BYTEA: "bytea",
    TypeKind.DATE: "date",
    TypeKind.TIME: "time without time zone",
    TypeKind.TIMESTAMP: "timestamp without time zone",
    TypeKind.TIMESTAMPTZ: "timestamp with time zone",
    TypeKind.INTERVAL: "interval",
    TypeKind.JSONB: "jsonb",
}


def type_name(t: DataType | None) -> str:
    """PostgreSQL's ``format_type`` name (``None`` is the type of an untyped literal: unknown).

    VARCHAR is named ``text``: piestream has one string type serving both.
    """
    if t is None:
        return "unknown"
    if t.kind is TypeKind.LIST:
        return f"{type_name(t.elem)}[]"
    if t.kind is TypeKind.STRUCT:
        return "struct<" + ", ".join(f"{f.name} {type_name(f.data_type)}" for f in t.fields) + ">"
    return _NAMES[t.kind]


def normalize(t: DataType) -> DataType:
    """SERIAL behaves as BIGINT in expressions."""
    return BIGINT if t.kind is TypeKind.SERIAL else t


# -- categories -----------------------------------------------------------------------------------

_CATEGORY = {
    TypeKind.BOOLEAN: "B",
    TypeKind.SMALLINT: "N",
    TypeKind.INT: "N",
    TypeKind.BIGINT: "N",
    TypeKind.SERIAL: "N",
    TypeKind.NUMERIC: "N",
    TypeKind.REAL: "N",
    TypeKind.DOUBLE: "N",
    TypeKind.VARCHAR: "S",
    TypeKind.BYTEA: "U",
    TypeKind.JSONB: "U",
    TypeKind.DATE: "D",
    TypeKind.TIME: "D",
    TypeKind.TIMESTAMP: "D",
    TypeKind.TIMESTAMPTZ: "D",
    TypeKind.INTERVAL: "T",
    TypeKind.LIST: "A",
    TypeKind.STRUCT: "C",
}
_PREFERRED = {BOOLEAN, DOUBLE, VARCHAR, TIMESTAMPTZ, INTERVAL}


def category(t: DataType) -> str:
    """PostgreSQL's typcategory letter."""
    return _CATEGORY[t.kind]


def is_preferred(t: DataType) -> bool:
    return t in _PREFERRED


# -- casts ----------------------------------------------------------------------------------------

#: Numeric widening order: a cast up this list is implicit, down it needs assignment.
_NUMERIC_RANK = {
    TypeKind.SMALLINT: 0,
    TypeKind.INT: 1,
    TypeKind.BIGINT: 2,
    TypeKind.SERIAL: 2,
    TypeKind.NUMERIC: 3,
    TypeKind.REAL: 4,
    TypeKind.DOUBLE: 5,
}

_I, _A, _E = CastContext.IMPLICIT, CastContext.ASSIGNMENT, CastContext.EXPLICIT

#: Other built-in casts (pg_cast) between scalar kinds and the context each needs.
_CASTS: dict[tuple[TypeKind, TypeKind], CastContext] = {
    (TypeKind.DATE, TypeKind.TIMESTAMP): _I,
    (TypeKind.DATE, TypeKind.TIMESTAMPTZ): _I,
    (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ): _I,
    (TypeKind.TIMESTAMPTZ, TypeKind.TIMESTAMP): _A,
    (TypeKind.TIMESTAMP, TypeKind.DATE): _A,
    (TypeKind.TIMESTAMPTZ, TypeKind.DATE): _A,
    (TypeKind.TIMESTAMP, TypeKind.TIME): _A,
    (TypeKind.TIMESTAMPTZ, TypeKind.TIME): _A,
    (TypeKind.TIME, TypeKind.INTERVAL): _I,
    (TypeKind.INTERVAL, TypeKind.TIME): _A,
    (TypeKind.INT, TypeKind.BOOLEAN): _E,
    (TypeKind.BOOLEAN, TypeKind.INT): _E,
    (TypeKind.JSONB, TypeKind.BOOLEAN): _E,
    (TypeKind.JSONB, TypeKind.SMALLINT): _E,
    (TypeKind.JSONB, TypeKind.INT): _E,
    (TypeKind.JSONB, TypeKind.BIGINT): _E,
    (TypeKind.JSONB, TypeKind.NUMERIC): _E,
    (TypeKind.JSONB, TypeKind.REAL): _E,
    (TypeKind.JSONB, TypeKind.DOUBLE): _E,
}


def cast_level(src: DataType, dst: DataType) -> CastContext | None:
    """The least context in which `src` converts to `dst`, or None if no cast exists."""
    s, d = normalize(src), normalize(dst)
    if s == d:
        return _I
    sk, dk = s.kind, d.kind
    if sk in _NUMERIC_RANK and dk in _NUMERIC_RANK:
        return _I if _NUMERIC_RANK[sk] < _NUMERIC_RANK[dk] else _A
    if sk is TypeKind.LIST and dk is TypeKind.LIST:
        assert s.elem is not None and d.elem is not None
        return cast_level(s.elem, d.elem)
    if sk is TypeKind.STRUCT and dk is TypeKind.STRUCT:
        if len(s.fields) != len(d.fields):
            return None
        levels = [cast_level(a.data_type, b.data_type) for a, b in zip(s.fields, d.fields, strict=True)]
        if any(lv is None for lv in levels):
            return None
        return max(lv for lv in levels if lv is not None)
    if (sk, dk) in _CASTS:
        return _CASTS[(sk, dk)]
    if dk is TypeKind.VARCHAR:  # output function into a string type: assignment
        return _A
    if sk is TypeKind.VARCHAR:  # input function from a string: explicit only
        return _E
    return None


def can_cast(src: DataType, dst: DataType, context: CastContext) -> bool:
    level = cast_level(src, dst)
    return level is not None and level <= context


def can_coerce(src: DataType | None, dst: DataType) -> bool:
    """Implicit coercion; an unknown (None) converts to anything."""
    return src is None or can_cast(src, dst, _I)


# -- common types ---------------------------------------------------------------------------------


def _mismatch(message: str, position: int | None, sqlstate: str = "42804") -> DatatypeMismatch:
    return DatatypeMismatch(message, sqlstate=sqlstate, position=position)


def select_common_type(
    types: Sequence[DataType | None], context: str = "", *, position: int | None = None
) -> DataType:
    """PostgreSQL's select_common_type (CASE, COALESCE, UNION, VALUES, IN, ARRAY, ...).

    `None` entries are unknown-typed literals: they take whatever the others agree on; if all
    inputs are unknown the result is text. Otherwise all known inputs must share a category; the
    first type is kept unless a later one is one it implicitly converts to (and not back), or it
    is the category's preferred type.
    """
    prefix = f"{context} " if context else ""
    known = [normalize(t) for t in types if t is not None]
    if not known:
        return VARCHAR
    ptype = known[0]
    for t in known[1:]:
        if t == ptype:
            continue
        if category(t) != category(ptype):
            raise _mismatch(
                f"{prefix}types {type_name(ptype)} and {type_name(t)} cannot be matched", position
            )
        if not is_preferred(ptype) and can_cast(ptype, t, _I) and not can_cast(t, ptype, _I):
            ptype = t
    ptype = _merge_composites(ptype, known, context, position)
    for t in known:
        if not can_cast(t, ptype, _I):
            raise _mismatch(
                f"{prefix}could not convert type {type_name(t)} to {type_name(ptype)}", position, "42846"
            )
    if ptype.has_typmod and (None in types or any(str(t) != str(ptype) for t in known)):
        ptype = without_typmod(ptype)  # select_common_typmod: kept only when all inputs agree
    if ptype.kind is TypeKind.NUMERIC and ptype.typmod is None:
        # one display scale only if every input has it (an untyped '1.5' or NULL may not)
        scales = {
            t.display_scale if t.kind is TypeKind.NUMERIC else 0 if t.is_integer else None for t in known
        }
        one = len(scales) == 1 and None not in types
        ptype = with_dscale(ptype, scales.pop() if one else None)
    return ptype


def _merge_composites(
    ptype: DataType, known: Sequence[DataType], context: str, position: int | None
) -> DataType:
    """Lists and structs resolve element- / field-wise (``ARRAY[1] || ARRAY[1.5]`` is numeric[]);
    struct field names come from the first input."""
    if ptype.kind is TypeKind.LIST and all(t.kind is TypeKind.LIST for t in known):
        elems = [t.elem for t in known]
        return list_of(select_common_type(elems, context, position=position))
    if ptype.kind is TypeKind.STRUCT and all(
        t.kind is TypeKind.STRUCT and len(t.fields) == len(ptype.fields) for t in known
    ):
        fields = [
            Field(
                f.name, select_common_type([t.fields[i].data_type for t in known], context, position=position)
            )
            for i, f in enumerate(known[0].fields)
        ]
        return struct_of(*fields)
    return ptype
