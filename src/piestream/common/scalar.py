"""Python scalars of each SQL type and their conversion to and from Arrow arrays.

Python form of a value (a "datum"; ``None`` is NULL):

=============  ======================================================
BOOLEAN        bool
SMALLINT..     int (SMALLINT, INT, BIGINT, SERIAL)
NUMERIC        decimal.Decimal (its display scale; NaN, +-Infinity)
REAL, DOUBLE   float
VARCHAR        str
BYTEA          bytes
DATE           datetime.date
TIME           datetime.time
TIMESTAMP      datetime.datetime without tzinfo
TIMESTAMPTZ    datetime.datetime with tzinfo (UTC when produced by piestream)
INTERVAL       piestream.common.interval.Interval
JSONB          str holding the JSON text
STRUCT         dict field name -> datum
LIST           list of datums
=============  ======================================================
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from piestream.common import numeric as nm
from piestream.common.errors import InvalidInput, NumericOutOfRange
from piestream.common.interval import Interval
from piestream.common.types import DataType, TypeKind

Datum = Any
Row = tuple[Datum, ...]

_INT_RANGES = {
    TypeKind.SMALLINT: (-(2**15), 2**15 - 1),
    TypeKind.INT: (-(2**31), 2**31 - 1),
    TypeKind.BIGINT: (-(2**63), 2**63 - 1),
    TypeKind.SERIAL: (-(2**63), 2**63 - 1),
}


def check_int(value: int, t: DataType) -> int:
    """`value` if it fits the integer type `t`, else 22003 out of range."""
    lo, hi = _INT_RANGES[t.kind]
    if not lo <= value <= hi:
        raise NumericOutOfRange(f"{t.kind.value} out of range")
    return value


def normalize_numeric(value: decimal.Decimal | int | float | str) -> decimal.Decimal:
    """The value as a NUMERIC datum: its own display scale, NaN / +-Infinity kept; 22003 beyond
    what a NUMERIC holds (`piestream.common.numeric`)."""
    d = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    return nm.check(d)


def _convert_datum(v: Datum, t: DataType) -> Datum:
    """Validate / convert one Python datum into what pyarrow accepts for `t.arrow`."""
    if v is None:
        return None
    k = t.kind
    if k in _INT_RANGES:
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidInput(f"invalid input for type {k.value}: {v!r}")
        return check_int(v, t)
    if k is TypeKind.NUMERIC:
        if isinstance(v, bool):
            raise InvalidInput(f"invalid input for type numeric: {v!r}")
        return normalize_numeric(v)
    if k is TypeKind.INTERVAL:
        if not isinstance(v, Interval):
            raise InvalidInput(f"invalid input for type interval: {v!r}")
        return pa.MonthDayNano([v.months, v.days, v.usecs * 1000])
    if k is TypeKind.TIMESTAMPTZ:
        if not isinstance(v, dt.datetime):
            raise InvalidInput(f"invalid input for type timestamp with time zone: {v!r}")
        return v if v.tzinfo is not None else v.replace(tzinfo=dt.UTC)
    if k is TypeKind.TIMESTAMP:
        if not isinstance(v, dt.datetime) or v.tzinfo is not None:
            raise InvalidInput(f"invalid input for type timestamp without time zone: {v!r}")
        return v
    if k is TypeKind.DATE:
        if isinstance(v, dt.datetime) or not isinstance(v, dt.date):
            raise InvalidInput(f"invalid input for type date: {v!r}")
        return v
    if k is TypeKind.STRUCT:
        if not isinstance(v, dict):
            raise InvalidInput(f"invalid input for type {t}: {v!r}")
        return {f.name: _convert_datum(v.get(f.name), f.data_type) for f in t.fields}
    if k is TypeKind.LIST:
        if not isinstance(v, list | tuple):
            raise InvalidInput(f"invalid input for type {t}: {v!r}")
        assert t.elem is not None
        return [_convert_datum(e, t.elem) for e in v]
    if k in (TypeKind.REAL, TypeKind.DOUBLE):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise InvalidInput(f"invalid input for type {k.value}: {v!r}")
        return float(v)
    if k in (TypeKind.VARCHAR, TypeKind.JSONB) and not isinstance(v, str):
        raise InvalidInput(f"invalid input for type {k.value}: {v!r}")
    if k is TypeKind.BYTEA and not isinstance(v, bytes | bytearray | memoryview):
        raise InvalidInput(f"invalid input for type bytea: {v!r}")
    if k is TypeKind.BOOLEAN and not isinstance(v, bool):
        raise InvalidInput(f"invalid input for type boolean: {v!r}")
    return v


def constant_array(v: Datum, t: DataType, n: int) -> pa.Array:
    """`n` copies of datum `v` as an Arrow column of type `t` (one conversion, one gather)."""
    if v is None:
        return pa.nulls(n, t.arrow)
    return to_arrow([v], t).take(pa.array(np.zeros(n, np.int64)))


def to_arrow(values: Iterable[Datum], t: DataType) -> pa.Array:
    """Build the Arrow column of type `t` from Python datums, checking ranges and types."""
    vals = list(values)
    try:
        if t.kind is not TypeKind.VARCHAR:  # validate each datum; DML inserts are not a hot path
            vals = [_convert_datum(v, t) for v in vals]
        if _has_numeric(t):
            return _build(vals, t)
        return pa.array(vals, type=t.arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as e:
        raise InvalidInput(f"invalid input for type {t}: {e}") from e


def _has_numeric(t: DataType) -> bool:
    if t.kind is TypeKind.NUMERIC:
        return True
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return _has_numeric(t.elem)
    return any(_has_numeric(f.data_type) for f in t.fields)


def _build(vals: list[Datum], t: DataType) -> pa.Array:
    """`pa.array(vals, t.arrow)` for types holding NUMERIC's extension type, which pyarrow cannot
    build from Python values: NUMERIC via `numeric.to_arrow`, lists and structs from their
    children (converted datums in, per datum: the Python boundary)."""
    if t.kind is TypeKind.NUMERIC:
        return nm.to_arrow(vals)
    mask = pa.array([v is None for v in vals], pa.bool_()) if None in vals else None
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        offsets = [0]
        flat: list[Datum] = []
        for v in vals:
            flat.extend(v or ())
            offsets.append(len(flat))
        return pa.ListArray.from_arrays(
            pa.array(offsets, pa.int32()), _build(flat, t.elem), type=t.arrow, mask=mask
        )
    if t.kind is TypeKind.STRUCT:
        children = [_build([None if v is None else v[f.name] for v in vals], f.data_type) for f in t.fields]
        return pa.StructArray.from_arrays(children, fields=list(t.arrow), mask=mask)
    return pa.array(vals, type=t.arrow)


def from_arrow(arr: pa.Array | pa.ChunkedArray, t: DataType) -> list[Datum]:
    """Python datums of an Arrow column of type `t`."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    vals = arr.to_pylist()
    if _has_interval(t) or t.kind is TypeKind.TIMESTAMPTZ:
        return [_from_py(v, t) for v in vals]
    return vals


def _has_interval(t: DataType) -> bool:
    if t.kind is TypeKind.INTERVAL:
        return True
    if t.kind is TypeKind.STRUCT:
        return any(_has_interval(f.data_type) for f in t.fields)
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return _has_interval(t.elem)
    return False


def _from_py(v: Datum, t: DataType) -> Datum:
    if v is None:
        return None
    k = t.kind
    if k is TypeKind.INTERVAL:
        return Interval(v.months, v.days, v.nanoseconds // 1000)
    if k is TypeKind.TIMESTAMPTZ:
        return v.astimezone(dt.UTC)
    if k is TypeKind.STRUCT:
        return {f.name: _from_py(v[f.name], f.data_type) for f in t.fields}
    if k is TypeKind.LIST:
        assert t.elem is not None
        return [_from_py(e, t.elem) for e in v]
    return v


def rows_to_columns(rows: Sequence[Sequence[Datum]], types: Sequence[DataType]) -> list[pa.Array]:
    """Transpose Python rows into Arrow columns of the given types."""
    n = len(types)
    for r in rows:
        if len(r) != n:
            raise InvalidInput(f"row has {len(r)} values, expected {n}")
    return [to_arrow([r[i] for r in rows], t) for i, t in enumerate(types)]


def columns_to_rows(columns: Sequence[pa.Array], types: Sequence[DataType]) -> list[Row]:
    """Transpose Arrow columns into Python row tuples."""
    if not columns:
        return []
    cols = [from_arrow(c, t) for c, t in zip(columns, types, strict=True)]
    return list(zip(*cols, strict=True))
