"""NUMERIC values as PostgreSQL has them: a decimal with a display scale of its own.

A value is ``unscaled * 10**-scale``: ``1.50`` is (150, 2) and prints with two fraction digits,
``1.5`` is (15, 1); they are equal values. The Python datum is a `decimal.Decimal` whose exponent
is minus the scale (``Decimal('1.50')``), or ``Decimal('NaN')``, ``Decimal('Infinity')``,
``Decimal('-Infinity')``. |unscaled| < 2**96 (`STORABLE`) and a scale of at most 28, what the
stored value encoding (rust_decimal) holds, so every value an expression accepts can be written
to a table or a view; PostgreSQL keeps far more, and anything beyond is 22003, never silently
rounded. Intermediate results inside the kernels may reach 10**38 (`LIMIT`).

In Arrow a column is the extension type `NUMERIC_VALUE_ARROW` (`NumericType`, registered as
``piestream.numeric``) over the storage `NUMERIC_STORAGE`: the unscaled integer as a
decimal128(38, 0) and the scale as an int8; the specials use the reserved scales below with
unscaled 0. `piestream.common.numeric_arrays` works on whole columns of this layout.

Why an extension type and not the bare struct: a consumer that does not know the layout must fail
loudly, never be silently wrong. Arrow's compute kernels (compare, sort, hash group-by and join
keys, unique, is_in, min_max, casts, if_else) refuse an extension type, whereas over a bare struct
some of them would run and order or group (unscaled, scale) pairs, which is not numeric order
(1.50 is (150, 2)). `take`, `filter`, concatenation and IPC keep working, and `to_pylist` gives
Decimals with their display scale (`NumericArray`), also inside lists and structs.

NUMERIC columns have this layout (issue 14). Where the scale must not matter it does not:
memcomparable keys (`piestream.encoding.numeric_value.key_bytes`) are those of the normalized
value (1.5 and 1.50 share a key, NaN sorts last; a key decodes to the normalized value, so a
key-only column loses the scale), vnode hashing normalizes first, batch grouping / joins / DISTINCT
compare by key. Value payloads keep the scale. Data and plans written before the layout (catalog
RELATION_FORMAT 3, PLAN_FORMAT 2) hold values normalized at 10 fraction digits: they read as they
are, and views planned then keep their NUMERIC rules (`piestream.plan.numeric_rules`). Outside
decimals (Parquet, Delta, Iceberg, Spark) are decimal128(38, 10) (`numeric_arrays.EXPORT_DECIMAL`).
"""

from __future__ import annotations

import contextlib
import decimal
import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import pyarrow as pa

from piestream.common.errors import InvalidInput, NumericOutOfRange
from piestream.common.types import NUMERIC_MAX_SCALE, NUMERIC_PRECISION

__all__ = ["NUMERIC_MAX_SCALE"]  # re-exported: the kernels take it from here
#: The storage of one NUMERIC value in Arrow: its unscaled integer and its display scale.
NUMERIC_STORAGE = pa.struct(
    [pa.field("unscaled", pa.decimal128(NUMERIC_PRECISION, 0)), pa.field("scale", pa.int8())]
)

#: Reserved scales of the special values (unscaled is 0).
NAN_SCALE = -1
POS_INF_SCALE = -2
NEG_INF_SCALE = -3
LIMIT = 10**NUMERIC_PRECISION  # |unscaled| of intermediate results stays below this
#: |unscaled| of every NUMERIC value stays below this: what the value encoding (rust_decimal's
#: 96-bit mantissa) stores, so a value an expression accepts can always be written to a table or
#: a view (a larger one would fail the epoch instead of being one row's error).
STORABLE = 2**96

NAN = Decimal("NaN")
POS_INF = Decimal("Infinity")
NEG_INF = Decimal("-Infinity")

_OVERFLOW_DETAIL = (
    f"piestream's NUMERIC holds at most {NUMERIC_PRECISION} digits and at most "
    f"{NUMERIC_MAX_SCALE} of them after the decimal point."
)


def overflow() -> NumericOutOfRange:
    """PostgreSQL's error for a value the numeric format cannot hold (22003)."""
    return NumericOutOfRange("value overflows numeric format", detail=_OVERFLOW_DETAIL)


def parts_of(d: Decimal) -> tuple[int, int]:
    """(unscaled, scale) of a Decimal, the scale being its display scale (0 for an exponent
    above 0: 1E+3 is 1000); specials give (0, reserved scale). 22003 beyond `STORABLE`."""
    if not d.is_finite():
        if d.is_nan():
            return 0, NAN_SCALE
        return 0, NEG_INF_SCALE if d.is_signed() else POS_INF_SCALE
    sign, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    scale = max(-exp, 0)
    if scale > NUMERIC_MAX_SCALE or len(digits) + max(exp, 0) > NUMERIC_PRECISION + 1:
        raise overflow()
    unscaled = int("".join(map(str, digits))) * 10 ** max(exp, 0)
    if unscaled >= STORABLE:
        raise overflow()
    return (-unscaled if sign else unscaled), scale


def value_of(unscaled: int, scale: int) -> Decimal:
    """The Decimal of (unscaled, scale) (no negative zero: PostgreSQL has none)."""
    if scale < 0:
        return {NAN_SCALE: NAN, POS_INF_SCALE: POS_INF, NEG_INF_SCALE: NEG_INF}[scale]
    return Decimal((1 if unscaled < 0 else 0, tuple(int(c) for c in str(abs(unscaled))), -scale))


def check(d: Decimal | int) -> Decimal:
    """`d` as a NUMERIC datum (an int becomes scale 0), 22003 if it does not fit."""
    if isinstance(d, int):
        d = Decimal(d)
    return value_of(*parts_of(d))


def to_arrow(values: Iterable[Decimal | int | None]) -> pa.Array:
    """A NUMERIC Arrow column of Python values (Decimals keep their display scale)."""
    us: list[int] = []
    ss: list[int] = []
    nulls: list[bool] = []
    for v in values:  # per value: the Python boundary (DML literals, tests)
        if v is None:
            us.append(0)
            ss.append(0)
            nulls.append(True)
            continue
        if isinstance(v, bool) or not isinstance(v, Decimal | int):
            raise InvalidInput(f"invalid input for type numeric: {v!r}")
        u, s = parts_of(v if isinstance(v, Decimal) else Decimal(v))
        us.append(u)
        ss.append(s)
        nulls.append(False)
    unscaled = pa.array([Decimal(u) for u in us], pa.decimal128(NUMERIC_PRECISION, 0))
    mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
    scales = pa.array(ss, pa.int8())
    return wrap(pa.StructArray.from_arrays([unscaled, scales], fields=list(NUMERIC_STORAGE), mask=mask))


def from_arrow(arr: pa.Array | pa.ChunkedArray) -> list[Decimal | None]:
    """The Python values of a NUMERIC Arrow column (the extension array or its storage)."""
    st = storage_of(arr)
    if len(st) == 0:
        return []
    unscaled, scale = st.flatten()
    out: list[Decimal | None] = []
    for valid, u, s in zip(st.is_valid().to_pylist(), unscaled.to_pylist(), scale.to_pylist(), strict=True):
        out.append(value_of(int(u), int(s)) if valid else None)  # per value: the Python boundary
    return out


# -- the Arrow extension type ----------------------------------------------------------------------


class NumericScalar(pa.ExtensionScalar):
    """One NUMERIC value: `as_py` is its Decimal with the display scale."""

    def as_py(self, **_: object) -> Decimal | None:
        v = self.value
        if v is None or not v.is_valid:
            return None
        return value_of(int(v["unscaled"].as_py()), int(v["scale"].as_py()))


class NumericArray(pa.ExtensionArray):
    """A NUMERIC column: `to_pylist` gives Decimals with their display scale."""

    def to_pylist(self, **_: object) -> list[Decimal | None]:
        return from_arrow(self)


class NumericType(pa.ExtensionType):
    """PostgreSQL's NUMERIC with a display scale per value (storage: `NUMERIC_STORAGE`)."""

    def __init__(self) -> None:
        super().__init__(NUMERIC_STORAGE, "piestream.numeric")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> NumericType:
        if storage_type != NUMERIC_STORAGE:
            raise TypeError(f"piestream.numeric over {storage_type}, expected {NUMERIC_STORAGE}")
        return NumericType()

    def __arrow_ext_scalar_class__(self) -> type:
        return NumericScalar

    def __arrow_ext_class__(self) -> type:
        return NumericArray

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return NumericType, ()


#: A NUMERIC column's Arrow type.
NUMERIC_VALUE_ARROW = NumericType()

# once per process: IPC readers (exchanges, Spark workers) then rebuild the extension type; a
# module reload finds it registered already
with contextlib.suppress(pa.ArrowKeyError):
    pa.register_extension_type(NUMERIC_VALUE_ARROW)


def is_numeric_array(arr: pa.Array | pa.ChunkedArray) -> bool:
    """Whether `arr` is a NUMERIC column of this layout (the extension type)."""
    return isinstance(arr.type, NumericType)


def is_numeric_type(t: pa.DataType) -> bool:
    """Whether `t` is this layout's Arrow type."""
    return isinstance(t, NumericType)


def wrap(storage: pa.Array) -> pa.Array:
    """The NUMERIC column over a `NUMERIC_STORAGE` struct array."""
    return pa.ExtensionArray.from_storage(NUMERIC_VALUE_ARROW, storage)


def storage_of(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The `NUMERIC_STORAGE` struct array of a NUMERIC column (chunks combined); a bare struct of
    that type is taken as it is. Anything else is a programming error, raised loudly."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(arr.type, NumericType):
        return arr.storage
    if arr.type == NUMERIC_STORAGE:
        return arr
    raise TypeError(f"not a NUMERIC column of the per-value-scale layout: {arr.type}")


# -- text ------------------------------------------------------------------------------------------

_SYNTAX = re.compile(r"\s*([+-]?)(?:(\d+)(?:\.(\d*))?|\.(\d+))(?:[eE]([+-]?\d+))?\s*")
_SPECIALS = {"nan": NAN, "infinity": POS_INF, "+infinity": POS_INF, "inf": POS_INF, "+inf": POS_INF}
_SPECIALS |= {"-infinity": NEG_INF, "-inf": NEG_INF}


def parse(text: str) -> Decimal:
    """numeric_in: decimal text with an optional exponent, or NaN / [+-]Infinity / [+-]inf (any
    case); the display scale is the fraction digits written minus the exponent (at least 0)."""
    special = _SPECIALS.get(text.strip().lower())
    if special is not None:
        return special
    m = _SYNTAX.fullmatch(text)
    if m is None:
        raise InvalidInput(f'invalid input syntax for type numeric: "{text}"')
    sign, whole, frac, only_frac, exp_text = m.groups()
    frac = only_frac if only_frac is not None else (frac or "")
    digits = (whole or "") + frac
    exp = int(exp_text) if exp_text else 0
    if abs(exp) > 1000:  # numeric_in's own bound on the exponent
        raise InvalidInput(f'invalid input syntax for type numeric: "{text}"')
    scale = max(len(frac) - exp, 0)
    stripped = digits.lstrip("0")
    if len(stripped) - len(frac) + exp > NUMERIC_PRECISION or scale > NUMERIC_MAX_SCALE:
        raise overflow()
    shift = scale - len(frac) + exp  # digits * 10**shift is the unscaled value (shift >= 0)
    unscaled = int(digits or "0") * 10**shift
    if unscaled >= STORABLE:
        raise overflow()
    return value_of(-unscaled if sign == "-" else unscaled, scale)


def format_numeric(d: Decimal) -> str:
    """numeric_out: every digit of the display scale, no exponent; NaN, Infinity, -Infinity."""
    if not d.is_finite():
        return "NaN" if d.is_nan() else ("-Infinity" if d.is_signed() else "Infinity")
    text = format(d, "f")
    return text[1:] if text.startswith("-") and not d else text  # no negative zero


# -- typmods ---------------------------------------------------------------------------------------


def apply_typmod(d: Decimal, precision: int, scale: int) -> Decimal:
    """A value assigned to NUMERIC(precision, scale): rounded half away from zero to `scale`
    digits; 22003 if its integer part needs more than precision - scale digits."""
    if d.is_nan():
        return d
    if d.is_infinite():
        raise NumericOutOfRange(
            "numeric field overflow",
            detail=f"A field with precision {precision}, scale {scale} cannot hold an infinite value.",
        )
    q = d.quantize(Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP, context=_WIDE)
    if q and q.adjusted() >= precision - scale:
        raise typmod_overflow(precision, scale)
    return q


def typmod_overflow(precision: int, scale: int) -> NumericOutOfRange:
    digits = precision - scale
    bound = f"10^{digits}" if digits else "1"
    return NumericOutOfRange(
        "numeric field overflow",
        detail=(
            f"A field with precision {precision}, scale {scale} must round to an absolute value "
            f"less than {bound}."
        ),
    )


_WIDE = decimal.Context(prec=200, Emax=10**6, Emin=-(10**6))


def on_storage(kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An Arrow selection kernel (`if_else`, `coalesce`, `case_when`, ...) over arguments that may
    be NUMERIC columns or scalars: it runs on their storage, which selection cannot get wrong
    (whole values move together), and a result of the storage type is a NUMERIC column again.
    Arguments of other types pass through, so callers use it for every type."""
    wrapped = False

    def bare(a: Any) -> Any:
        nonlocal wrapped
        if isinstance(a, pa.ChunkedArray | pa.Array) and isinstance(a.type, NumericType):
            wrapped = True
            return storage_of(a)
        if isinstance(a, pa.Scalar) and isinstance(a.type, NumericType):
            wrapped = True
            return a.value if a.is_valid else pa.scalar(None, NUMERIC_STORAGE)
        return a

    out = kernel(*[bare(a) for a in args], **kwargs)
    if wrapped and isinstance(out, pa.Array) and out.type == NUMERIC_STORAGE:
        return wrap(out)
    return out
