"""SQL types <-> Spark types and the Arrow conversions both directions need.

Reads: a reader yielding Arrow batches must match Spark's expected Arrow schema *exactly*
(`DATA_SOURCE_RETURN_SCHEMA_MISMATCH` otherwise, spark-notes §1.4), so every column is converted
to the Arrow type `to_arrow_schema(<Spark schema>, timezone="UTC")` gives — list fields named
``element``, TIME and INTERVAL as their PostgreSQL text (Spark has no such types).

Writes: Spark hands Arrow batches in its own layout; values are cast to the table's column types
with piestream's (PostgreSQL) cast rules, and a failure names the column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.errors import InvalidInput, PiestreamError
from piestream.common.types import NUMERIC_SCALE, DataType, TypeKind, from_arrow

if TYPE_CHECKING:
    from pyspark.sql import types as st


def spark_type(t: DataType) -> st.DataType:
    """The Spark type a column of SQL type `t` reads as."""
    from pyspark.sql import types as st

    k = t.kind
    if k is TypeKind.STRUCT:
        return st.StructType([st.StructField(f.name, spark_type(f.data_type), True) for f in t.fields])
    if k is TypeKind.LIST:
        assert t.elem is not None
        return st.ArrayType(spark_type(t.elem), containsNull=True)
    simple: dict[TypeKind, st.DataType] = {
        TypeKind.BOOLEAN: st.BooleanType(),
        TypeKind.SMALLINT: st.ShortType(),
        TypeKind.INT: st.IntegerType(),
        TypeKind.BIGINT: st.LongType(),
        TypeKind.SERIAL: st.LongType(),
        TypeKind.NUMERIC: st.DecimalType(38, NUMERIC_SCALE),
        TypeKind.REAL: st.FloatType(),
        TypeKind.DOUBLE: st.DoubleType(),
        TypeKind.VARCHAR: st.StringType(),
        TypeKind.JSONB: st.StringType(),
        TypeKind.BYTEA: st.BinaryType(),
        TypeKind.DATE: st.DateType(),
        TypeKind.TIMESTAMP: st.TimestampNTZType(),
        TypeKind.TIMESTAMPTZ: st.TimestampType(),
        TypeKind.TIME: st.StringType(),
        TypeKind.INTERVAL: st.StringType(),
    }
    return simple[k]


def spark_schema(columns: list[tuple[str, DataType]]) -> st.StructType:
    from pyspark.sql import types as st

    return st.StructType([st.StructField(name, spark_type(t), True) for name, t in columns])


def expected_arrow_schema(schema: st.StructType) -> pa.Schema:
    """The Arrow schema Spark checks a reader's batches against (plan_data_source_read)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


# -- reads ----------------------------------------------------------------------------------------


def _list_parts(arr: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array | None]:
    """(offsets from 0, the values they index, the null mask) of a possibly sliced list array."""
    offsets = arr.offsets
    first = offsets[0].as_py()
    values = arr.values.slice(first, offsets[-1].as_py() - first)
    mask = arr.is_null() if arr.null_count else None
    return pc.subtract(offsets, pa.scalar(first, offsets.type)), values, mask


def to_spark_arrow(arr: pa.Array, t: DataType, target: pa.DataType) -> pa.Array:
    """A column of SQL type `t` in the Arrow layout Spark expects (`target`)."""
    from piestream.expr.functions.cast import to_text

    k = t.kind
    if k in (TypeKind.TIME, TypeKind.INTERVAL):
        arr = to_text(arr, t)
    elif k is TypeKind.LIST:
        assert t.elem is not None
        offsets, values, mask = _list_parts(arr)
        values = to_spark_arrow(values, t.elem, target.value_type)
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
    elif k is TypeKind.STRUCT:
        children = [
            to_spark_arrow(child, f.data_type, target.field(i).type)
            for i, (child, f) in enumerate(zip(arr.flatten(), t.fields, strict=True))
        ]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    elif nm.is_numeric_array(arr):  # per-value scales (issue 14): Spark's fixed-scale decimal
        arr = na.to_export_decimal(arr)
    return arr if arr.type == target else arr.cast(target)


# -- writes ---------------------------------------------------------------------------------------


def _plain(arr: pa.Array) -> pa.Array:
    """Large string/binary layouts as the regular ones piestream's kernels take."""
    t = arr.type
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return arr.cast(pa.string())
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return arr.cast(pa.binary())
    return arr


def to_table_arrow(arr: pa.Array, t: DataType, column: str) -> pa.Array:
    """A Spark column cast to the table column type `t`; errors name the column."""
    try:
        return _to_table_arrow(_plain(arr), t)
    except PiestreamError as e:
        raise InvalidInput(f'column "{column}" ({t}): {e}', sqlstate=e.sqlstate) from e
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
        raise InvalidInput(f'column "{column}": cannot convert {arr.type} to {t}: {e}') from e


def _to_table_arrow(arr: pa.Array, t: DataType) -> pa.Array:
    from piestream.expr.functions.cast import cast_array

    if arr.type == t.arrow:
        return arr
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), t.arrow)
    if t.kind is TypeKind.LIST and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        assert t.elem is not None
        offsets, values, mask = _list_parts(arr)
        return pa.ListArray.from_arrays(
            offsets.cast(pa.int32()), _to_table_arrow(_plain(values), t.elem), type=t.arrow, mask=mask
        )
    if t.kind is TypeKind.STRUCT and pa.types.is_struct(arr.type):
        by_name = {arr.type.field(i).name: c for i, c in enumerate(arr.flatten())}
        missing = [f.name for f in t.fields if f.name not in by_name]
        if missing:
            raise InvalidInput(f"struct field {missing[0]!r} is missing")
        children = [_to_table_arrow(_plain(by_name[f.name]), f.data_type) for f in t.fields]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(t.arrow), mask=mask)
    if pa.types.is_decimal(arr.type) and t.kind is TypeKind.NUMERIC and arr.type.scale > NUMERIC_SCALE:
        arr = pc.round(arr, ndigits=NUMERIC_SCALE, round_mode="half_towards_infinity")
    if pa.types.is_timestamp(arr.type) and arr.type.unit != "us":
        arr = arr.cast(pa.timestamp("us", arr.type.tz))
    return cast_array(arr, from_arrow(arr.type), t)
