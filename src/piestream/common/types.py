"""SQL data types of seed 004, their Arrow layouts and their PostgreSQL names and OIDs.

Every column is nullable. A `DataType` is a small immutable value; composite types (STRUCT, LIST)
carry their field / element types. The Arrow layout is what rows look like inside chunks; the
PostgreSQL OID is what pgwire reports for a result column.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

from piestream.common.errors import FeatureNotSupported, InvalidInput

#: NUMERIC's digits: 38 significant digits in Arrow (decimal128(38, 0) unscaled values), at most 28
#: significant digits in the value encoding (96-bit mantissas, reference §2.1).
NUMERIC_PRECISION = 38
#: The fixed scale of the decimal128(38, 10) layout before per-value scales (issue 14): what data
#: and plans written before it hold, and the scale of NUMERIC columns exported to Parquet / Delta
#: / Iceberg / Spark.
NUMERIC_SCALE = 10
#: The largest display scale of a per-value-scale NUMERIC: the value encoding's (rust_decimal
#: keeps 28 fraction digits).
NUMERIC_MAX_SCALE = 28


class TypeKind(enum.Enum):
    """The kinds of SQL types piestream knows."""

    BOOLEAN = "boolean"
    SMALLINT = "smallint"
    INT = "integer"
    BIGINT = "bigint"
    SERIAL = "serial"
    NUMERIC = "numeric"
    REAL = "real"
    DOUBLE = "double precision"
    VARCHAR = "character varying"
    BYTEA = "bytea"
    DATE = "date"
    TIME = "time without time zone"
    TIMESTAMP = "timestamp without time zone"
    TIMESTAMPTZ = "timestamp with time zone"
    INTERVAL = "interval"
    JSONB = "jsonb"
    STRUCT = "struct"
    LIST = "list"


# (pg OID, array OID, pg type name, typlen) per scalar kind.
_PG_INFO: dict[TypeKind, tuple[int, int, str, int]] = {
    TypeKind.BOOLEAN: (16, 1000, "bool", 1),
    TypeKind.SMALLINT: (21, 1005, "int2", 2),
    TypeKind.INT: (23, 1007, "int4", 4),
    TypeKind.BIGINT: (20, 1016, "int8", 8),
    TypeKind.SERIAL: (20, 1016, "int8", 8),
    TypeKind.NUMERIC: (1700, 1231, "numeric", -1),
    TypeKind.REAL: (700, 1021, "float4", 4),
    TypeKind.DOUBLE: (701, 1022, "float8", 8),
    TypeKind.VARCHAR: (1043, 1015, "varchar", -1),
    TypeKind.BYTEA: (17, 1001, "bytea", -1),
    TypeKind.DATE: (1082, 1182, "date", 4),
    TypeKind.TIME: (1083, 1183, "time", 8),
    TypeKind.TIMESTAMP: (1114, 1115, "timestamp", 8),
    TypeKind.TIMESTAMPTZ: (1184, 1185, "timestamptz", 8),
    TypeKind.INTERVAL: (1186, 1187, "interval", 16),
    TypeKind.JSONB: (3802, 3807, "jsonb", -1),
    TypeKind.STRUCT: (2249, 2287, "record", -1),
}

#: Kinds whose values have a fixed byte width in both encodings.
FIXED_WIDTH_KINDS = frozenset(
    {
        TypeKind.BOOLEAN,
        TypeKind.SMALLINT,
        TypeKind.INT,
        TypeKind.BIGINT,
        TypeKind.SERIAL,
        TypeKind.REAL,
        TypeKind.DOUBLE,
        TypeKind.DATE,
        TypeKind.TIME,
        TypeKind.TIMESTAMP,
        TypeKind.TIMESTAMPTZ,
        TypeKind.INTERVAL,
    }
)

INTEGER_KINDS = frozenset({TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT, TypeKind.SERIAL})
NUMERIC_KINDS = INTEGER_KINDS | {TypeKind.NUMERIC, TypeKind.REAL, TypeKind.DOUBLE}


@dataclass(frozen=True)
class Field:
    """A named, typed member of a STRUCT (or a column of a schema)."""

    name: str
    data_type: DataType

    def __str__(self) -> str:
        return f"{self.name} {self.data_type}"


@dataclass(frozen=True)
class DataType:
    """A SQL data type. Use the module constants (`INT`, `VARCHAR`, ...) or `struct_of` / `list_of`."""

    kind: TypeKind
    fields: tuple[Field, ...] = ()
    elem: DataType | None = None
    #: NUMERIC(precision, scale): a value assigned to it is rounded to `scale` fraction digits
    #: and must have at most precision - scale integer digits. Not part of the type's identity,
    #: as in PostgreSQL: numeric(10,2) and numeric are one type (equal and hashed alike).
    typmod: tuple[int, int] | None = field(default=None, compare=False)
    #: A plain NUMERIC expression's display scale when PostgreSQL's rules fix it for every value
    #: (``bigint * 0.908`` has 3, ``round(x, 4)`` has 4; see expr/display_scale.py), else None
    #: (shown without trailing zeros). Values are stored alike either way (decimal128(38, 10));
    #: only their text differs. Not part of the identity, nor of `__str__` or atttypmod (PostgreSQL's
    #: typmod of such an expression is -1); durable type text keeps it (`type_text`).
    dscale: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind is TypeKind.LIST and self.elem is None:
            raise ValueError("LIST needs an element type")
        if self.kind is TypeKind.STRUCT and not self.fields:
            raise ValueError("STRUCT needs at least one field")

    # -- classification -------------------------------------------------------------------------
    @property
    def is_fixed_width(self) -> bool:
        return self.kind in FIXED_WIDTH_KINDS

    @property
    def is_integer(self) -> bool:
        return self.kind in INTEGER_KINDS

    @property
    def is_numeric(self) -> bool:
        return self.kind in NUMERIC_KINDS

    @property
    def is_composite(self) -> bool:
        return self.kind in (TypeKind.STRUCT, TypeKind.LIST)

    # -- Arrow ----------------------------------------------------------------------------------
    @cached_property
    def arrow(self) -> pa.DataType:
        """The Arrow type a column of this SQL type has inside a chunk."""
        return _to_arrow(self)

    # -- PostgreSQL -----------------------------------------------------------------------------
    @property
    def pg_oid(self) -> int:
        if self.kind is TypeKind.LIST:
            assert self.elem is not None
            return _PG_INFO.get(self.elem.kind, (0, 0, "", 0))[1] or 2277  # anyarray
        return _PG_INFO[self.kind][0]

    @property
    def pg_typname(self) -> str:
        if self.kind is TypeKind.LIST:
            assert self.elem is not None
            return "_" + self.elem.pg_typname
        return _PG_INFO[self.kind][2]

    @property
    def pg_typmod(self) -> int:
        """atttypmod: ((precision << 16) | scale) + 4 for numeric(p, s) and its arrays, else -1."""
        mod = self.elem.typmod if self.kind is TypeKind.LIST and self.elem is not None else self.typmod
        return -1 if mod is None else ((mod[0] << 16) | mod[1]) + 4

    @property
    def display_scale(self) -> int | None:
        """Fraction digits a value of this type shows (zeros are only ever added): the typmod's
        scale, else the static display scale, else None (no trailing zeros)."""
        return self.typmod[1] if self.typmod is not None else self.dscale

    @property
    def pg_typlen(self) -> int:
        if self.kind is TypeKind.LIST:
            return -1
        return _PG_INFO[self.kind][3]

    # -- names ----------------------------------------------------------------------------------
    @cached_property
    def has_typmod(self) -> bool:
        """A NUMERIC(p, s) anywhere in the type (itself, an array's element, a struct field)."""
        if self.typmod is not None:
            return True
        return (self.elem is not None and self.elem.has_typmod) or any(
            f.data_type.has_typmod for f in self.fields
        )

    def __str__(self) -> str:
        if self.kind is TypeKind.LIST:
            return f"{self.elem}[]"
        if self.typmod is not None:
            return f"{self.kind.value}({self.typmod[0]},{self.typmod[1]})"
        if self.kind is TypeKind.STRUCT:
            return "struct<" + ", ".join(str(f) for f in self.fields) + ">"
        return self.kind.value

    def __repr__(self) -> str:
        return f"DataType({self})"


def struct_of(*fields: tuple[str, DataType] | Field) -> DataType:
    """STRUCT<name type, ...>."""
    fs = tuple(f if isinstance(f, Field) else Field(f[0], f[1]) for f in fields)
    return DataType(TypeKind.STRUCT, fields=fs)


def list_of(elem: DataType) -> DataType:
    """elem[]."""
    return DataType(TypeKind.LIST, elem=elem)


BOOLEAN = DataType(TypeKind.BOOLEAN)
SMALLINT = DataType(TypeKind.SMALLINT)
INT = DataType(TypeKind.INT)
BIGINT = DataType(TypeKind.BIGINT)
SERIAL = DataType(TypeKind.SERIAL)
NUMERIC = DataType(TypeKind.NUMERIC)
REAL = DataType(TypeKind.REAL)
DOUBLE = DataType(TypeKind.DOUBLE)
VARCHAR = DataType(TypeKind.VARCHAR)
BYTEA = DataType(TypeKind.BYTEA)
DATE = DataType(TypeKind.DATE)
TIME = DataType(TypeKind.TIME)
TIMESTAMP = DataType(TypeKind.TIMESTAMP)
TIMESTAMPTZ = DataType(TypeKind.TIMESTAMPTZ)
INTERVAL = DataType(TypeKind.INTERVAL)
JSONB = DataType(TypeKind.JSONB)

SCALAR_TYPES: tuple[DataType, ...] = (
    BOOLEAN,
    SMALLINT,
    INT,
    BIGINT,
    SERIAL,
    NUMERIC,
    REAL,
    DOUBLE,
    VARCHAR,
    BYTEA,
    DATE,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    INTERVAL,
    JSONB,
)

_SCALAR_ARROW: dict[TypeKind, pa.DataType] = {
    TypeKind.BOOLEAN: pa.bool_(),
    TypeKind.SMALLINT: pa.int16(),
    TypeKind.INT: pa.int32(),
    TypeKind.BIGINT: pa.int64(),
    TypeKind.SERIAL: pa.int64(),
    TypeKind.NUMERIC: pa.decimal128(NUMERIC_PRECISION, NUMERIC_SCALE),
    TypeKind.REAL: pa.float32(),
    TypeKind.DOUBLE: pa.float64(),
    TypeKind.VARCHAR: pa.string(),
    TypeKind.BYTEA: pa.binary(),
    TypeKind.DATE: pa.date32(),
    TypeKind.TIME: pa.time64("us"),
    TypeKind.TIMESTAMP: pa.timestamp("us"),
    TypeKind.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    TypeKind.INTERVAL: pa.month_day_nano_interval(),
    TypeKind.JSONB: pa.string(),
}


def numeric_of(precision: int, scale: int = 0) -> DataType:
    """NUMERIC(precision, scale). PostgreSQL's bounds are 22023; a scale beyond the 28 fraction
    digits piestream keeps, or outside 0..precision (PostgreSQL 15 allows both), is 0A000: its
    values could not be kept as PostgreSQL keeps them."""
    if not 1 <= precision <= 1000:
        raise InvalidInput(f"NUMERIC precision {precision} must be between 1 and 1000", sqlstate="22023")
    if not -1000 <= scale <= 1000:
        raise InvalidInput(f"NUMERIC scale {scale} must be between -1000 and 1000", sqlstate="22023")
    if not 0 <= scale <= precision:
        raise FeatureNotSupported(
            f"NUMERIC scale {scale} outside 0..{precision} (the precision) is not supported"
        )
    if scale > NUMERIC_MAX_SCALE:
        raise FeatureNotSupported(
            f"NUMERIC scale {scale} is not supported: piestream keeps at most {NUMERIC_MAX_SCALE} "
            "fraction digits"
        )
    return DataType(TypeKind.NUMERIC, typmod=(precision, scale))


def without_typmod(t: DataType, *, keep_scale: bool = False) -> DataType:
    """`t` with every NUMERIC(p, s) inside it made plain NUMERIC (what an expression computed
    from such values has: PostgreSQL's typmod -1). With `keep_scale` it shows s fraction digits
    still: the type of an aggregate or window function returning such values unchanged (min, max,
    array_agg, lag, first_value ...), whose exprTypmod in PostgreSQL is -1 while each value keeps
    the scale it was stored with."""
    if not t.has_typmod:
        return t
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return list_of(without_typmod(t.elem, keep_scale=keep_scale))
    if t.kind is TypeKind.STRUCT:
        fields = tuple(Field(f.name, without_typmod(f.data_type, keep_scale=keep_scale)) for f in t.fields)
        return DataType(t.kind, fields)
    return DataType(t.kind, dscale=t.display_scale if keep_scale else None)


def with_dscale(t: DataType, dscale: int | None) -> DataType:
    """Plain NUMERIC showing `dscale` fraction digits (capped at the NUMERIC_SCALE digits kept);
    `t` itself when it is not plain NUMERIC."""
    if t.kind is not TypeKind.NUMERIC or t.typmod is not None:
        return t
    d = None if dscale is None else max(0, min(dscale, NUMERIC_SCALE))
    return t if t.dscale == d else DataType(TypeKind.NUMERIC, dscale=d)


def type_text(t: DataType) -> str:
    """The durable spelling of `t` (catalog entries, stored plans): `str(t)` plus a plain
    NUMERIC's display scale as ``numeric dscale 3``, which `parse_type` reads back. Text without
    it (written before display scales existed) reads as display scale None."""
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return f"{type_text(t.elem)}[]"
    if t.kind is TypeKind.STRUCT:
        return "struct<" + ", ".join(f"{f.name} {type_text(f.data_type)}" for f in t.fields) + ">"
    if t.kind is TypeKind.NUMERIC and t.typmod is None and t.dscale is not None:
        return f"numeric dscale {t.dscale}"
    return str(t)


def _to_arrow(t: DataType) -> pa.DataType:
    if t.kind is TypeKind.STRUCT:
        return pa.struct([pa.field(f.name, f.data_type.arrow) for f in t.fields])
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return pa.list_(t.elem.arrow)
    if t.kind is TypeKind.NUMERIC:
        from piestream.common.numeric import NUMERIC_VALUE_ARROW  # a cycle: numeric imports this module

        return NUMERIC_VALUE_ARROW
    return _SCALAR_ARROW[t.kind]


# ---------------------------------------------------------------------------------------------
# Parsing type names (SQL spelling and the short codes used by chunk pretty-forms)
# ---------------------------------------------------------------------------------------------

_NAMES: dict[str, DataType] = {
    "boolean": BOOLEAN,
    "bool": BOOLEAN,
    "smallint": SMALLINT,
    "int2": SMALLINT,
    "int": INT,
    "integer": INT,
    "int4": INT,
    "bigint": BIGINT,
    "int8": BIGINT,
    "serial": SERIAL,
    "numeric": NUMERIC,
    "decimal": NUMERIC,
    "real": REAL,
    "float4": REAL,
    "double precision": DOUBLE,
    "double": DOUBLE,
    "float8": DOUBLE,
    "float": DOUBLE,
    "varchar": VARCHAR,
    "character varying": VARCHAR,
    "text": VARCHAR,
    "string": VARCHAR,
    "bytea": BYTEA,
    "date": DATE,
    "time": TIME,
    "time without time zone": TIME,
    "timestamp": TIMESTAMP,
    "timestamp without time zone": TIMESTAMP,
    "timestamptz": TIMESTAMPTZ,
    "timestamp with time zone": TIMESTAMPTZ,
    "interval": INTERVAL,
    "jsonb": JSONB,
}

#: Short codes for chunk pretty-forms (like RisingWave's `from_pretty` headers).
SHORT_CODES: dict[str, DataType] = {
    "B": BOOLEAN,
    "i2": SMALLINT,
    "i": INT,
    "I": BIGINT,
    "SRL": SERIAL,
    "N": NUMERIC,
    "f": REAL,
    "F": DOUBLE,
    "T": VARCHAR,
    "BY": BYTEA,
    "D": DATE,
    "TM": TIME,
    "TS": TIMESTAMP,
    "TZ": TIMESTAMPTZ,
    "IV": INTERVAL,
    "J": JSONB,
}


def parse_type(text: str) -> DataType:
    """Parse a SQL type name such as ``int``, ``varchar(10)``, ``numeric(10,2)``, ``int[]``,
    ``struct<a int, b varchar>`` or a pretty-form short code (``I``, ``T``, ...)."""
    parser = _TypeParser(text)
    t = parser.parse()
    parser.expect_end()
    return t


class _TypeParser:
    _TOKEN = re.compile(r"\s*(\[\]|[A-Za-z_][A-Za-z_0-9]*|\d+|[<>(),\[\]])")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _peek(self) -> str | None:
        m = self._TOKEN.match(self.text, self.pos)
        return m.group(1) if m else None

    def _next(self) -> str:
        m = self._TOKEN.match(self.text, self.pos)
        if not m:
            raise InvalidInput(f'type "{self.text}" does not exist')
        self.pos = m.end()
        return m.group(1)

    def expect_end(self) -> None:
        if self.text[self.pos :].strip():
            raise InvalidInput(f'type "{self.text}" does not exist')

    def parse(self) -> DataType:
        word = self._next()
        if word in SHORT_CODES:
            base = SHORT_CODES[word]
        elif word.lower() == "struct":
            base = self._parse_struct()
        else:
            name = word.lower()
            # multi-word names
            for tail in (("precision",), ("varying",), ("without", "time", "zone"), ("with", "time", "zone")):
                save = self.pos
                words = []
                for _ in tail:
                    w = self._peek()
                    if w is None:
                        break
                    words.append(self._next().lower())
                if tuple(words) == tail:
                    name = name + " " + " ".join(tail)
                    break
                self.pos = save
            if name not in _NAMES:
                raise InvalidInput(f'type "{self.text.strip()}" does not exist')
            base = _NAMES[name]
            if self._peek() == "(":  # typmods: numeric(10, 2) is kept; varchar(10) is accepted
                self._next()
                mods: list[str] = []
                while (tok := self._next()) != ")":
                    if tok != ",":
                        mods.append(tok)
                if base.kind is TypeKind.NUMERIC:
                    if len(mods) > 2:
                        raise InvalidInput("invalid NUMERIC type modifier", sqlstate="22023")
                    if not mods or not all(m.isdigit() for m in mods):
                        raise InvalidInput(f'type "{self.text.strip()}" does not exist')
                    base = numeric_of(int(mods[0]), int(mods[1]) if len(mods) > 1 else 0)
            elif base.kind is TypeKind.NUMERIC and self._peek() == "dscale":  # type_text's spelling
                self._next()
                scale = self._next()
                if not scale.isdigit():
                    raise InvalidInput(f'type "{self.text.strip()}" does not exist')
                base = with_dscale(base, int(scale))
        while self._peek() == "[]" or self._peek() == "[":
            tok = self._next()
            if tok == "[" and self._next() != "]" and self._next() != "]":  # int[3] is int[]
                raise InvalidInput(f'type "{self.text}" does not exist')
            base = list_of(base)
        return base

    def _parse_struct(self) -> DataType:
        if self._next() != "<":
            raise InvalidInput(f'type "{self.text}" does not exist')
        fields: list[Field] = []
        while True:
            name = self._next()
            t = self.parse()
            fields.append(Field(name, t))
            tok = self._next()
            if tok == ">":
                break
            if tok != ",":
                raise InvalidInput(f'type "{self.text}" does not exist')
        return struct_of(*fields)


def from_arrow(t: pa.DataType) -> DataType:
    """The SQL type whose Arrow layout is `t` (VARCHAR for strings; JSONB needs field metadata)."""
    if isinstance(t, pa.ExtensionType) and t.extension_name == "piestream.numeric":
        return NUMERIC
    if pa.types.is_struct(t):
        return struct_of(*[(t.field(i).name, from_arrow(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return list_of(from_arrow(t.value_type))
    if pa.types.is_large_string(t) or pa.types.is_string(t):
        return VARCHAR
    if pa.types.is_large_binary(t) or pa.types.is_binary(t):
        return BYTEA
    if pa.types.is_decimal(t):
        return NUMERIC
    if pa.types.is_timestamp(t):
        return TIMESTAMPTZ if t.tz is not None else TIMESTAMP
    if pa.types.is_time(t):
        return TIME
    if pa.types.is_int8(t):
        return SMALLINT
    for kind, at in _SCALAR_ARROW.items():
        if at == t and kind not in (TypeKind.SERIAL, TypeKind.JSONB):
            return DataType(kind)
    raise InvalidInput(f"Arrow type {t} has no SQL equivalent")


# The NUMERIC extension type is registered in every process that knows the SQL types, so an Arrow
# IPC reader (an exchange, a Spark worker) rebuilds it instead of handing back its bare storage.
from piestream.common import numeric as _numeric  # noqa: E402, F401 (numeric imports this module)
