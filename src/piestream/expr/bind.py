"""The binder's entry points into the expression layer: literals, casts, calls, common types.

`bind_call` resolves an operator or function by name as PostgreSQL does (overload resolution
over the signatures in `signatures`, implicit casts inserted around the arguments, unknown
literals typed from context), and returns a typed `Expr`. `cast` / `coerce_to` convert one
expression (casts of literals are folded at once, so ``'1 day'::interval`` is a Literal).

The untyped literals of SQL (``'2021-01-01'``, ``NULL``) are `UnknownLiteral`s: `literal(str)` and
`literal(None)` make them; they become typed when a call, cast or common type needs them.
`common_type` takes types or expressions; an UnknownLiteral or None in its input is "unknown".
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as dt
from collections.abc import Sequence
from decimal import Decimal

from piestream.common.chunk import DataChunk
from piestream.common.errors import (
    DatatypeMismatch,
    PiestreamError,
    UndefinedFunction,
)
from piestream.common.interval import Interval
from piestream.common.scalar import Datum, from_arrow, to_arrow
from piestream.common.text import parse_datum
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    NUMERIC,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    DataType,
    TypeKind,
    with_dscale,
    without_typmod,
)
from piestream.expr.agg import agg_signature
from piestream.expr.coercion import CastContext, cast_level, normalize, select_common_type, type_name
from piestream.expr.display_scale import decimal_dscale, text_dscale, type_dscale, with_call_dscale
from piestream.expr.evaluate import eval_non_strict, fold_constants
from piestream.expr.expr import Expr, FuncCall, Literal, UnknownLiteral
from piestream.expr.resolve import Ambiguous, resolve
from piestream.expr.signatures import ALIASES, CATALOG, OPERATOR_SYMBOLS, OPERATORS

__all__ = [
    "UnknownLiteral",
    "agg_signature",
    "arg_type",
    "bind_call",
    "cast",
    "coerce_to",
    "common_type",
    "eval_non_strict",
    "fold_constants",
    "literal",
]

_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)


# -- literals -------------------------------------------------------------------------------------


def literal(value: Datum, t: DataType | None = None) -> Literal:
    """A constant. Without `t` the type is inferred: bool -> boolean; int -> integer, bigint or
    numeric by size; Decimal -> numeric; float -> double; date/time/Interval/bytes -> their
    types; str and None -> an UnknownLiteral, typed later from context (NULL coerces to any
    type, and alone it is text, as in PostgreSQL)."""
    if t is not None:
        if value is None:
            return Literal(None, t)
        if isinstance(value, str) and t.kind not in (TypeKind.VARCHAR, TypeKind.JSONB):
            return Literal(parse_datum(value, t), t)  # text of a typed literal: DATE '2021-01-01'
        return Literal(from_arrow(to_arrow([value], t), t)[0], t)
    if value is None or isinstance(value, str):
        return UnknownLiteral(value)
    if isinstance(value, bool):
        return Literal(value, BOOLEAN)
    if isinstance(value, int):
        if _I32[0] <= value <= _I32[1]:
            return Literal(value, INT)
        if _I64[0] <= value <= _I64[1]:
            return Literal(value, BIGINT)
        return literal(Decimal(value), with_dscale(NUMERIC, 0))
    if isinstance(value, Decimal):
        return literal(value, with_dscale(NUMERIC, decimal_dscale(value)))
    if isinstance(value, float):
        return Literal(value, DOUBLE)
    if isinstance(value, dt.datetime):
        return literal(value, TIMESTAMPTZ if value.tzinfo is not None else TIMESTAMP)
    if isinstance(value, dt.date):
        return Literal(value, DATE)
    if isinstance(value, dt.time):
        return Literal(value, TIME)
    if isinstance(value, Interval):
        return Literal(value, INTERVAL)
    if isinstance(value, bytes | bytearray):
        return Literal(bytes(value), BYTEA)
    raise DatatypeMismatch(f"cannot infer the SQL type of {value!r}")


def is_unknown(e: Expr) -> bool:
    return isinstance(e, UnknownLiteral)


def arg_type(e: Expr) -> DataType | None:
    """The type overload resolution sees: None for an untyped literal."""
    return None if is_unknown(e) else normalize(e.return_type)


# -- casts ----------------------------------------------------------------------------------------


def cast(
    e: Expr,
    target: DataType,
    *,
    explicit: bool = True,
    position: int | None = None,
    context: CastContext | None = None,
) -> Expr:
    """Convert `e` to `target`: an explicit CAST / ``::`` by default, or with ``explicit=False``
    an assignment (what INSERT / UPDATE allow: bigint -> int, numeric -> int, anything -> text);
    `context` picks any of the three contexts. Casts of literals are evaluated now (bad text is
    22P02 and friends, out of range 22003); an impossible cast is 42846."""
    ctx = context if context is not None else (CastContext.EXPLICIT if explicit else CastContext.ASSIGNMENT)
    try:
        return _cast(e, target, ctx)
    except PiestreamError as err:
        if err.position is None:
            err.position = position
        raise


def _cast(e: Expr, target: DataType, ctx: CastContext) -> Expr:
    if isinstance(e, UnknownLiteral):
        if e.value is None:
            return Literal(None, target)
        if target.kind is TypeKind.NUMERIC and target.typmod is None:  # '1.50'::numeric shows 1.50
            target = with_dscale(target, text_dscale(e.value))
        value = Literal(parse_datum(e.value, target), target)
        return value if not target.has_typmod else constant_value(FuncCall("cast", (value,), target))
    if (
        ctx is CastContext.EXPLICIT
        and e.return_type.has_typmod
        and not target.has_typmod
        and e.return_type == target
    ):
        # PostgreSQL (14+) relabels ``p::numeric`` to typmod -1 while each value keeps its scale
        node = FuncCall("cast", (e,), without_typmod(e.return_type, keep_scale=True))
        return constant_value(node) if isinstance(e, Literal) else node
    if e.return_type == target and (not target.has_typmod or str(e.return_type) == str(target)):
        return e
    level = cast_level(e.return_type, target)
    if level is None or level > ctx:
        raise DatatypeMismatch(
            f"cannot cast type {type_name(e.return_type)} to {type_name(target)}", sqlstate="42846"
        )
    if target.kind is TypeKind.NUMERIC and target.typmod is None:  # int -> numeric: dscale 0
        target = with_dscale(target, type_dscale(e.return_type))
    node = FuncCall("cast", (e,), target)
    if isinstance(e, Literal) and not _keeps_numeric_constant(e, target, ctx):
        return constant_value(node)
    return node


def _keeps_numeric_constant(e: Literal, target: DataType, ctx: CastContext) -> bool:
    """An implicit cast of a NUMERIC literal to a float stays a cast until the optimizer folds
    it: ``1.0`` and ``1.00`` fold to the same double, but PostgreSQL compares the constants under
    the cast, so ``f * 1.0`` does not stand for ``GROUP BY f * 1.00`` (42803)."""
    return (
        ctx is CastContext.IMPLICIT
        and e.return_type.kind is TypeKind.NUMERIC
        and target.kind in (TypeKind.REAL, TypeKind.DOUBLE)
    )


def constant_value(e: Expr) -> Literal:
    """Evaluate an expression without column references to a Literal."""
    arr = e.eval(DataChunk([], length=1))
    return Literal(from_arrow(arr, e.return_type)[0], e.return_type)


def coerce_to(e: Expr, t: DataType) -> Expr:
    """Implicit coercion (function arguments, CASE / UNION branches after `common_type`)."""
    return cast(e, t, context=CastContext.IMPLICIT)


def common_type(
    types: Sequence[DataType | Expr | None], context: str = "", *, position: int | None = None
) -> DataType:
    """PostgreSQL's UNION / CASE type resolution. Entries may be types, expressions, or None;
    an UnknownLiteral or None counts as unknown. Raises 42804 "CASE types integer and text
    cannot be matched" (or 42846 when a type cannot be converted)."""
    resolved: list[DataType | None] = []
    for t in types:
        if isinstance(t, Expr):
            resolved.append(arg_type(t))
        else:
            resolved.append(t)
    return select_common_type(resolved, context, position=position)


# -- calls ----------------------------------------------------------------------------------------


#: The name the user wrote, for error messages ("function substring(...)" not "substr(...)").
_DISPLAY: contextvars.ContextVar[str | None] = contextvars.ContextVar("bind_display_name", default=None)


def canonical_name(name: str) -> str:
    key = name.lower()
    for _ in range(3):
        if key not in ALIASES:
            break
        key = ALIASES[key]
    return key


def bind_call(
    name: str, args: Sequence[Expr], *, position: int | None = None, display: str | None = None
) -> Expr:
    """A typed call of the scalar function or operator `name` (see module doc); messages call
    it `display` (the name the user wrote) when given."""
    from piestream.expr.bind_special import SPECIAL_BINDERS

    key = canonical_name(name)
    token = _DISPLAY.set(display or (key if key in OPERATOR_SYMBOLS else name.lower()))
    try:
        if key == "+" and len(args) == 1:
            return SPECIAL_BINDERS["unary_plus"](key, list(args))
        if key in SPECIAL_BINDERS:
            return SPECIAL_BINDERS[key](key, list(args))
        out = bind_generic(key, list(args))
        if isinstance(out, FuncCall | Literal) and out.return_type.has_typmod:  # abs(p), p + 1: numeric
            out = dataclasses.replace(out, return_type=without_typmod(out.return_type))
        return with_call_dscale(out)
    except PiestreamError as err:
        if err.position is None:
            err.position = position
        raise
    finally:
        _DISPLAY.reset(token)


def signature_text(name: str, args: Sequence[Expr]) -> str:
    names = [type_name(arg_type(a)) for a in args]
    if name in OPERATOR_SYMBOLS:
        if len(names) == 1:
            return f"{name} {names[0]}"
        return f"{names[0]} {name} {names[1]}"
    return f"{name}({', '.join(names)})"


def no_such(name: str, args: Sequence[Expr]) -> UndefinedFunction:
    name = _DISPLAY.get() or name
    what = "operator" if name in OPERATOR_SYMBOLS else "function"
    sig = signature_text(name, args)
    message = f"operator does not exist: {sig}" if what == "operator" else f"function {sig} does not exist"
    return UndefinedFunction(
        message,
        hint=f"No {what} matches the given name and argument types. "
        "You might need to add explicit type casts.",
    )


def bind_generic(name: str, args: list[Expr]) -> Expr:
    """Overload resolution over the catalog, then implicit casts of the arguments."""
    cands = CATALOG.get(name)
    if cands is None:
        raise no_such(name, args)
    types = [arg_type(a) for a in args]
    try:
        sig = resolve(cands, types, operator=name in OPERATORS)
    except Ambiguous:
        shown = _DISPLAY.get() or name
        what = "operator" if shown in OPERATOR_SYMBOLS else "function"
        raise UndefinedFunction(
            f"{what} is not unique: {signature_text(shown, args)}",
            sqlstate="42725",
            hint=f"Could not choose a best candidate {what}. You might need to add explicit type casts.",
        ) from None
    if sig is None:
        raise no_such(name, args)
    cast_args = tuple(coerce_to(a, t) for a, t in zip(args, sig.args, strict=True))
    call = FuncCall(sig.impl, cast_args, sig.ret)
    _validate(call)
    return call


#: Kernels whose constant arguments (a field name, a unit) are checked at bind time.
_VALIDATE = frozenset({"extract", "date_part", "date_trunc"})


def _validate(call: FuncCall) -> None:
    """Run a kernel once on a NULL row so a bad constant argument fails while binding."""
    if call.name not in _VALIDATE or not isinstance(call.args[0], Literal):
        return
    probe = FuncCall(call.name, (call.args[0], Literal(None, call.args[1].return_type)), call.return_type)
    probe.eval(DataChunk([], length=1))
