"""sqlglot type nodes to piestream `DataType`s, for column definitions.

sqlglot already knows PostgreSQL's type spellings (``double precision``, ``int8``, ``timestamp
with time zone``, ``varchar(10)[]``, ``struct<a int>``); this maps its type enum onto ours. NUMERIC's
precision and scale are kept (`DataType.typmod`); other type modifiers (lengths, a float's
precision beyond real / double) are accepted and ignored, as RisingWave does.
"""

from __future__ import annotations

from sqlglot import exp

from piestream.common import types as t
from piestream.common.errors import FeatureNotSupported, InvalidInput, PiestreamError
from piestream.frontend.parser.names import identifier_name

_T = exp.DType

_SCALARS: dict[exp.DType, t.DataType] = {
    _T.BOOLEAN: t.BOOLEAN,
    _T.SMALLINT: t.SMALLINT,
    _T.INT: t.INT,
    _T.BIGINT: t.BIGINT,
    _T.SERIAL: t.SERIAL,
    _T.DECIMAL: t.NUMERIC,
    _T.FLOAT: t.REAL,
    _T.DOUBLE: t.DOUBLE,
    _T.VARCHAR: t.VARCHAR,
    _T.TEXT: t.VARCHAR,
    _T.VARBINARY: t.BYTEA,
    _T.DATE: t.DATE,
    _T.TIME: t.TIME,
    _T.TIMESTAMP: t.TIMESTAMP,
    _T.TIMESTAMPTZ: t.TIMESTAMPTZ,
    _T.INTERVAL: t.INTERVAL,
    _T.JSONB: t.JSONB,
}


class UndefinedType(PiestreamError):
    """A type name PostgreSQL would not know either (42704 undefined_object)."""

    sqlstate = "42704"


def convert_type(node: exp.Expression, position: int | None = None) -> t.DataType:
    """The piestream type a parsed type node denotes.

    Raises `UndefinedType` for names that are no type at all and `FeatureNotSupported` for real
    PostgreSQL types piestream lacks (uuid, json, char(n), ...), both at `position`.
    """
    if isinstance(node, exp.Interval):  # INTERVAL DAY TO SECOND and friends
        return t.INTERVAL
    if not isinstance(node, exp.DataType):
        raise FeatureNotSupported(f"type {node.sql('postgres')} is not supported", position=position)
    kind = node.this
    if isinstance(kind, exp.Interval):  # INTERVAL DAY TO SECOND inside a column list
        return t.INTERVAL
    if kind == _T.ARRAY:
        inner = node.expressions[0] if node.expressions else None
        if inner is None:
            raise FeatureNotSupported("arrays need an element type", position=position)
        return t.list_of(convert_type(inner, position))
    if kind == _T.STRUCT:
        fields: list[t.Field] = []
        for f in node.expressions:
            if not isinstance(f, exp.ColumnDef) or f.args.get("kind") is None:
                raise FeatureNotSupported(f"type {node.sql('postgres')} is not supported", position=position)
            fields.append(t.Field(identifier_name(f.this), convert_type(f.args["kind"], position)))
        if not fields:
            raise FeatureNotSupported("a struct needs at least one field", position=position)
        return t.struct_of(*fields)
    precision = _float_precision(node)
    if kind == _T.DOUBLE and precision is not None and precision <= 24:
        return t.REAL  # float(p) with p <= 24 is real, as in PostgreSQL
    if kind == _T.DECIMAL and node.expressions:
        return _numeric_typmod(node, position)
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == _T.USERDEFINED:
        name = node.sql("postgres")
        try:  # names only our own type parser knows (RisingWave's `string`, ...)
            return t.parse_type(name)
        except InvalidInput:
            raise UndefinedType(f'type "{name.strip(chr(34))}" does not exist', position=position) from None
    raise FeatureNotSupported(f"type {node.sql('postgres').lower()} is not supported", position=position)


def _numeric_typmod(node: exp.DataType, position: int | None) -> t.DataType:
    """numeric(p) / numeric(p, s): kept and applied to the values assigned to the column."""
    mods: list[int] = []
    for param in node.expressions:
        value = param.this if isinstance(param, exp.DataTypeParam) else param
        text = value.name if isinstance(value, exp.Literal) else ""
        if not text.lstrip("-").isdigit():
            raise UndefinedType(f'type "{node.sql("postgres").lower()}" does not exist', position=position)
        mods.append(int(text))
    if len(mods) > 2:
        raise InvalidInput("invalid NUMERIC type modifier", sqlstate="22023", position=position)
    try:
        return t.numeric_of(*mods)
    except PiestreamError as err:
        err.position = err.position or position
        raise


def _float_precision(node: exp.DataType) -> int | None:
    if not node.expressions:
        return None
    param = node.expressions[0]
    value = param.this if isinstance(param, exp.DataTypeParam) else param
    return int(value.name) if isinstance(value, exp.Literal) and value.name.isdigit() else None
