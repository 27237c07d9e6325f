"""Binders for the calls that are not a fixed list of signatures: boolean connectives, IS
predicates, comparisons of composites, BETWEEN, IN, CASE, COALESCE, NULLIF, GREATEST / LEAST,
``||`` and concat, struct fields, and the polymorphic array functions (PostgreSQL's anyelement /
anyarray rules: the element type is resolved with `common_type`)."""

from __future__ import annotations

from collections.abc import Callable

from piestream.common.errors import (
    DatatypeMismatch,
    FeatureNotSupported,
    PiestreamError,
    UndefinedColumn,
    UndefinedFunction,
)
from piestream.common.types import (
    BOOLEAN,
    DOUBLE,
    INT,
    JSONB,
    VARCHAR,
    DataType,
    TypeKind,
    list_of,
    struct_of,
)
from piestream.expr.bind import (
    arg_type,
    bind_generic,
    cast,
    coerce_to,
    common_type,
    is_unknown,
    no_such,
)
from piestream.expr.coercion import CastContext, can_cast, type_name
from piestream.expr.expr import Expr, FuncCall, Literal, UnknownLiteral

Binder = Callable[[str, list[Expr]], Expr]
SPECIAL_BINDERS: dict[str, Binder] = {}

_COMPOSITE = (TypeKind.LIST, TypeKind.STRUCT)
_CMP_IMPL = {
    "=": "equal",
    "<>": "not_equal",
    "<": "less_than",
    "<=": "less_than_or_equal",
    ">": "greater_than",
    ">=": "greater_than_or_equal",
}


def binder(*names: str) -> Callable[[Binder], Binder]:
    def deco(fn: Binder) -> Binder:
        for n in names:
            SPECIAL_BINDERS[n] = fn
        return fn

    return deco


def _arity(name: str, args: list[Expr], lo: int, hi: int | None = None) -> None:
    if len(args) < lo or (hi is not None and len(args) > hi):
        raise no_such(name, args)


def _call(name: str, args: list[Expr], ret: DataType) -> FuncCall:
    return FuncCall(name, tuple(args), ret)


# -- booleans -------------------------------------------------------------------------------------

_BOOL_LABEL = {
    "and": "AND",
    "or": "OR",
    "not": "NOT",
    "is_true": "IS TRUE",
    "is_false": "IS FALSE",
    "is_not_true": "IS NOT TRUE",
    "is_not_false": "IS NOT FALSE",
}


def as_boolean(e: Expr, what: str) -> Expr:
    """A boolean operand: unknown literals are read as booleans, other types are 42804."""
    if is_unknown(e):
        return cast(e, BOOLEAN)
    if e.return_type != BOOLEAN:
        raise DatatypeMismatch(
            f"argument of {what} must be type boolean, not type {type_name(e.return_type)}"
        )
    return e


@binder("and", "or")
def _junction(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 1)
    ops = [as_boolean(a, _BOOL_LABEL[name]) for a in args]
    return ops[0] if len(ops) == 1 else _call(name, ops, BOOLEAN)


@binder("not", "is_true", "is_false", "is_not_true", "is_not_false")
def _bool_unary(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 1, 1)
    return _call(name, [as_boolean(args[0], _BOOL_LABEL[name])], BOOLEAN)


@binder("is_null", "is_not_null")
def _null_test(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 1, 1)
    return _call(name, [coerce_to(args[0], VARCHAR) if is_unknown(args[0]) else args[0]], BOOLEAN)


@binder("unary_plus")
def _unary_plus(name: str, args: list[Expr]) -> Expr:
    t = arg_type(args[0])
    if t is None or not (t.is_numeric or t.kind is TypeKind.INTERVAL):
        raise no_such("+", args)
    return args[0]


# -- comparisons ----------------------------------------------------------------------------------


def _is_composite(e: Expr) -> bool:
    t = arg_type(e)
    return t is not None and t.kind in _COMPOSITE


def _composite_operands(args: list[Expr], what: str) -> list[Expr]:
    t = common_type(args, what)
    return [coerce_to(a, t) for a in args]


@binder("=", "<>", "<", "<=", ">", ">=")
def _comparison(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 2)
    if any(_is_composite(a) for a in args):
        try:
            ops = _composite_operands(args, "")
        except PiestreamError:
            raise no_such(name, args) from None
        return _call(_CMP_IMPL[name], ops, BOOLEAN)
    return bind_generic(name, args)


def comparison_operands(args: list[Expr]) -> list[Expr]:
    """The two operands as the ``=`` operator would take them (casts inserted)."""
    eq = _comparison("=", args)
    assert isinstance(eq, FuncCall)
    return list(eq.args)


@binder("is_distinct_from", "is_not_distinct_from")
def _distinct(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 2)
    return _call(name, comparison_operands(args), BOOLEAN)


@binder("between", "not_between")
def _between(name: str, args: list[Expr]) -> Expr:
    """x BETWEEN lo AND hi is x >= lo AND x <= hi (NOT BETWEEN: x < lo OR x > hi)."""
    from piestream.expr.bind import bind_call

    _arity(name, args, 3, 3)
    x, lo, hi = args
    if name == "between":
        return bind_call("and", [bind_call(">=", [x, lo]), bind_call("<=", [x, hi])])
    return bind_call("or", [bind_call("<", [x, lo]), bind_call(">", [x, hi])])


@binder("in", "not_in")
def _in(name: str, args: list[Expr]) -> Expr:
    """x IN (v1, ...): one common type if there is one, else an OR of ``=`` comparisons."""
    from piestream.expr.bind import bind_call

    _arity(name, args, 2)
    try:
        t = common_type(args, "IN")
        out: Expr = _call("in", [coerce_to(a, t) for a in args], BOOLEAN)
    except PiestreamError:
        out = bind_call("or", [bind_call("=", [args[0], v]) for v in args[1:]])
    return _call("not", [out], BOOLEAN) if name == "not_in" else out


# -- conditionals ---------------------------------------------------------------------------------


@binder("case")
def _case(name: str, args: list[Expr]) -> Expr:
    """args = [cond1, value1, ..., else]; without an odd count the ELSE is NULL."""
    if len(args) < 2:
        raise no_such(name, args)
    if len(args) % 2 == 0:
        args = [*args, UnknownLiteral(None)]
    conds = [as_boolean(args[i], "CASE/WHEN") for i in range(0, len(args) - 1, 2)]
    values = [*args[1:-1:2], args[-1]]
    t = common_type(values, "CASE")
    vals = [coerce_to(v, t) for v in values]
    out: list[Expr] = []
    for c, v in zip(conds, vals[:-1], strict=True):
        out += [c, v]
    return _call("case", [*out, vals[-1]], t)


@binder("coalesce", "greatest", "least")
def _uniform(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 1)
    t = common_type(args, name.upper())
    ops = [coerce_to(a, t) for a in args]
    return _call(name, ops, t)


@binder("nullif")
def _nullif(name: str, args: list[Expr]) -> Expr:
    """NULLIF(a, b): the result is the first operand of the implied ``a = b``."""
    from piestream.expr.bind import bind_call

    _arity(name, args, 2, 2)
    eq = bind_call("=", args)
    assert isinstance(eq, FuncCall)
    value = eq.args[0]
    return _call("nullif", [value, eq], value.return_type)


# -- strings --------------------------------------------------------------------------------------


def _text(e: Expr) -> Expr:
    """Any value as text (PostgreSQL's anynonarray -> text output conversion)."""
    return cast(e, VARCHAR, context=CastContext.EXPLICIT)


@binder("||")
def _concat_op(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 2)
    a, b = args
    ta, tb = arg_type(a), arg_type(b)
    if (ta is not None and ta.kind is TypeKind.LIST) or (tb is not None and tb.kind is TypeKind.LIST):
        return _array_concat(a, b)
    if JSONB in (ta, tb) and (ta in (JSONB, None)) and (tb in (JSONB, None)):
        return _call("jsonb_concat", [coerce_to(a, JSONB), coerce_to(b, JSONB)], JSONB)
    text_like = (ta is None or ta == VARCHAR, tb is None or tb == VARCHAR)
    if not any(text_like):
        raise no_such(name, args)
    return _call("concat_op", [_text(a), _text(b)], VARCHAR)


def _array_concat(a: Expr, b: Expr) -> Expr:
    ta, tb = arg_type(a), arg_type(b)
    if ta is not None and tb is not None and ta.kind is TypeKind.LIST and tb.kind is TypeKind.LIST:
        t = common_type([a, b], "ARRAY")
        return _call("array_cat", [coerce_to(a, t), coerce_to(b, t)], t)
    if ta is not None and ta.kind is TypeKind.LIST:
        if (
            tb is None
            and isinstance(b, UnknownLiteral)
            and b.value is not None
            and b.value.lstrip().startswith("{")
        ):
            return _call("array_cat", [a, coerce_to(b, ta)], ta)
        return _array_append("array_append", [a, b])
    assert tb is not None
    if (
        ta is None
        and isinstance(a, UnknownLiteral)
        and a.value is not None
        and a.value.lstrip().startswith("{")
    ):
        return _call("array_cat", [coerce_to(a, tb), b], tb)
    return _array_prepend("array_prepend", [a, b])


@binder("concat")
def _concat(name: str, args: list[Expr]) -> Expr:
    return _call("concat", [_text(a) for a in args], VARCHAR)


@binder("concat_ws")
def _concat_ws(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 1)
    return _call("concat_ws", [coerce_to(args[0], VARCHAR), *[_text(a) for a in args[1:]]], VARCHAR)


# -- structs and arrays ---------------------------------------------------------------------------


@binder("field")
def _field(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 2)
    s, f = args
    t = arg_type(s)
    if not isinstance(f, Literal) or not isinstance(f.value, str):
        raise DatatypeMismatch("field name must be a string constant")
    if t is None or t.kind is not TypeKind.STRUCT:
        raise DatatypeMismatch(
            f"column notation .{f.value} applied to type {type_name(t)}, which is not a composite type"
        )
    for fld in t.fields:
        if fld.name == f.value:
            return _call("field", [s, Literal(f.value, VARCHAR)], fld.data_type)
    raise UndefinedColumn(f'column "{f.value}" not found in data type {type_name(t)}')


def _list_type(e: Expr, fn: str) -> DataType:
    t = arg_type(e)
    if t is None or t.kind is not TypeKind.LIST:
        raise UndefinedFunction(
            f"function {fn}({type_name(t)}) does not exist"
            if t
            else f"cannot determine type of {fn} argument"
        )
    return t


def _int_arg(e: Expr, what: str) -> Expr:
    t = arg_type(e)
    if t is not None and not can_cast(t, INT, CastContext.IMPLICIT) and t.kind is not TypeKind.BIGINT:
        raise DatatypeMismatch(f"{what} must have type integer")
    if t is not None and t.kind is TypeKind.BIGINT:
        return cast(e, INT, context=CastContext.ASSIGNMENT)
    return coerce_to(e, INT)


@binder("array_access")
def _array_access(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 2)
    t = arg_type(args[0])
    if t is None or t.kind is not TypeKind.LIST:
        raise DatatypeMismatch(
            f"cannot subscript type {type_name(t)} because it does not support subscripting"
        )
    assert t.elem is not None
    return _call("array_access", [args[0], _int_arg(args[1], "array subscript")], t.elem)


@binder("array")
def _array(name: str, args: list[Expr]) -> Expr:
    if not args:
        raise DatatypeMismatch("cannot determine type of empty array", sqlstate="42P18")
    t = common_type(args, "ARRAY")
    return _call("array", [coerce_to(a, t) for a in args], list_of(t))


@binder("row")
def _row(name: str, args: list[Expr]) -> Expr:
    if not args:
        raise DatatypeMismatch("ROW() needs at least one field")
    ops = [coerce_to(a, VARCHAR) if is_unknown(a) else a for a in args]
    t = struct_of(*[(f"f{i + 1}", a.return_type) for i, a in enumerate(ops)])
    return _call("row", ops, t)


@binder("array_length", "cardinality")
def _array_length(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 1, 1 if name == "cardinality" else 2)
    _list_type(args[0], name)
    rest = [_int_arg(a, "array dimension") for a in args[1:]]
    return _call(name, [args[0], *rest], INT)


def _elem_of(e: Expr, fn: str) -> DataType:
    t = _list_type(e, fn)
    assert t.elem is not None
    return t.elem


@binder("array_position")
def _array_position(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 3)
    elem = _elem_of(args[0], name)
    t = common_type([elem, args[1]], name)
    arr = coerce_to(args[0], list_of(t))
    rest = [_int_arg(a, "array position start") for a in args[2:]]
    return _call(name, [arr, coerce_to(args[1], t), *rest], INT)


@binder("op_any", "op_all")
def _quantified(name: str, args: list[Expr]) -> Expr:
    """``x op ANY (array)`` / ``x op ALL (array)``; args = [x, array, literal op]. An untyped
    array literal ('{1,2}') takes x's type, as PostgreSQL resolves it."""
    _arity(name, args, 3, 3)
    lhs, arr, op = args
    if not isinstance(op, Literal) or op.value not in _CMP_IMPL:
        raise no_such(name, args)
    if is_unknown(arr):
        arr = coerce_to(arr, list_of(VARCHAR if is_unknown(lhs) else lhs.return_type))
    label = "ANY/ALL (array)"
    elem = _elem_of(arr, label)
    t = common_type([lhs, elem], label)
    if t.kind in _COMPOSITE:
        raise FeatureNotSupported(f"{op.value} {name[3:].upper()} over arrays of {type_name(t)}")
    impl = Literal(_CMP_IMPL[op.value], VARCHAR)
    return _call(name, [coerce_to(lhs, t), coerce_to(arr, list_of(t)), impl], BOOLEAN)


@binder("array_append")
def _array_append(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 2)
    elem = _elem_of(args[0], name)
    t = common_type([elem, args[1]], "ARRAY")
    lt = list_of(t)
    return _call(name, [coerce_to(args[0], lt), coerce_to(args[1], t)], lt)


@binder("array_prepend")
def _array_prepend(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 2)
    elem = _elem_of(args[1], name)
    t = common_type([args[0], elem], "ARRAY")
    lt = list_of(t)
    return _call(name, [coerce_to(args[0], t), coerce_to(args[1], lt)], lt)


@binder("array_cat")
def _array_cat(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 2)
    for a in args:
        if not is_unknown(a):
            _list_type(a, name)
    t = common_type(args, "ARRAY")
    return _call(name, [coerce_to(a, t) for a in args], t)


@binder("array_to_string")
def _array_to_string(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 2, 3)
    _list_type(args[0], name)
    return _call(name, [args[0], *[coerce_to(a, VARCHAR) for a in args[1:]]], VARCHAR)


# -- jsonb ----------------------------------------------------------------------------------------


@binder("jsonb_extract_path", "jsonb_extract_path_text")
def _jsonb_extract_path(name: str, args: list[Expr]) -> Expr:
    """jsonb_extract_path(j, VARIADIC text[]): `#>` / `#>>` with the path as an array."""
    _arity(name, args, 1)
    j = coerce_to(args[0], JSONB) if is_unknown(args[0]) else args[0]
    if j.return_type != JSONB:
        raise no_such(name, args)
    path = _call("array", [coerce_to(a, VARCHAR) for a in args[1:]], list_of(VARCHAR))
    return _call(name, [j, path], JSONB if name == "jsonb_extract_path" else VARCHAR)


@binder("@>", "<@")
def _containment(name: str, args: list[Expr]) -> Expr:
    """jsonb containment; the array operators of the same spelling are not implemented."""
    if any((t := arg_type(a)) is not None and t.kind is TypeKind.LIST for a in args):
        raise FeatureNotSupported(f"array containment ({name}) is not supported")
    return bind_generic(name, args)


def _jsonb_arg(name: str, e: Expr) -> Expr:
    """An argument of to_jsonb / jsonb_build_*: unknown literals are text, jsonb passes as is."""
    from piestream.expr.functions.jsonb import TO_JSONB_KINDS

    if is_unknown(e):
        return coerce_to(e, VARCHAR)
    t = e.return_type
    inner = t
    while inner.kind is TypeKind.LIST and inner.elem is not None:
        inner = inner.elem
    if inner.kind not in TO_JSONB_KINDS:
        raise FeatureNotSupported(f"{name} of type {type_name(t)} is not supported")
    return e


@binder("to_jsonb")
def _to_jsonb(name: str, args: list[Expr]) -> Expr:
    _arity(name, args, 1, 1)
    if is_unknown(args[0]):
        raise UndefinedFunction(
            "could not determine polymorphic type because input has type unknown", sqlstate="42804"
        )
    arg = _jsonb_arg(name, args[0])
    return arg if arg.return_type == JSONB else _call(name, [arg], JSONB)


@binder("jsonb_build_array")
def _jsonb_build_array(name: str, args: list[Expr]) -> Expr:
    return _call(name, [_jsonb_arg(name, a) for a in args], JSONB)


@binder("jsonb_build_object")
def _jsonb_build_object(name: str, args: list[Expr]) -> Expr:
    if len(args) % 2:
        raise PiestreamError(
            "argument list must have even number of elements",
            sqlstate="22023",
            hint="The arguments of jsonb_build_object() must consist of alternating keys and values.",
        )
    bound: list[Expr] = []
    for i, a in enumerate(args):
        if i % 2 == 0:
            key = _jsonb_arg(name, a)
            if key.return_type.kind in (TypeKind.LIST, TypeKind.JSONB):
                raise PiestreamError(
                    "key value must be scalar, not array, composite, or json", sqlstate="22023"
                )
            bound.append(_text(key))
        else:
            bound.append(_jsonb_arg(name, a))
    return _call(name, bound, JSONB)


@binder("jsonb_object_of_pairs")
def _jsonb_object_of_pairs(name: str, args: list[Expr]) -> Expr:
    """jsonb_object_agg's conversion (frontend/binder/jsonb_aggs.py): a list of (text, value) rows."""
    _arity(name, args, 1, 1)
    t = arg_type(args[0])
    pair = t.elem if t is not None and t.kind is TypeKind.LIST else None
    if pair is None or pair.kind is not TypeKind.STRUCT or len(pair.fields) != 2:
        raise no_such(name, args)
    _jsonb_arg("jsonb_object_agg", Literal(None, pair.fields[1].data_type))
    return _call(name, args, JSONB)


@binder("jsonb_path_exists")
def _jsonb_path_exists(name: str, args: list[Expr]) -> Expr:
    from piestream.expr.table_function import _jsonpath_args

    return _call(name, list(_jsonpath_args(name, args)), BOOLEAN)


# -- ordered-set aggregates' finishing step (expr/functions/ordered_set.py) -----------------------


@binder("percentile_cont_of", "percentile_disc_of", "mode_of")
def _ordered_set_finish(name: str, args: list[Expr]) -> Expr:
    """(list of the group's ordered inputs [, fraction]): percentile_cont gives float8, the others
    the element type; the fraction is float8."""
    _arity(name, args, 1 if name == "mode_of" else 2, 1 if name == "mode_of" else 2)
    t = arg_type(args[0])
    elem = t.elem if t is not None and t.kind is TypeKind.LIST else None
    if elem is None:
        raise no_such(name, args)
    rest = [coerce_to(a, DOUBLE) for a in args[1:]]
    ret = DOUBLE if name == "percentile_cont_of" else elem
    if name == "percentile_cont_of":
        if elem.kind is TypeKind.INTERVAL:
            raise FeatureNotSupported("percentile_cont of interval is not supported")
        if not can_cast(elem, DOUBLE, CastContext.IMPLICIT):
            raise UndefinedFunction(f"function percentile_cont({type_name(elem)}) does not exist")
        args = [cast(args[0], list_of(DOUBLE))]
    return _call(name, [args[0], *rest], ret)


@binder("approx_percentile_of")
def _approx_percentile_finish(name: str, args: list[Expr]) -> Expr:
    """(list of the group's float8 inputs, quantile, relative error): float8. The relative error
    must be a constant in (0, 1), as RisingWave's; the answer is exact, so within it."""
    _arity(name, args, 3, 3)
    t = arg_type(args[0])
    elem = t.elem if t is not None and t.kind is TypeKind.LIST else None
    if elem is None:
        raise no_such(name, args)
    if not can_cast(elem, DOUBLE, CastContext.IMPLICIT) or elem.kind is TypeKind.INTERVAL:
        raise UndefinedFunction(f"function approx_percentile({type_name(elem)}) does not exist")
    err = args[2]
    if not isinstance(err, Literal) or err.value is None or not 0.0 < float(err.value) < 1.0:
        raise PiestreamError(
            "approx_percentile's relative_error must be a constant between 0 and 1", sqlstate="22023"
        )
    values = cast(args[0], list_of(DOUBLE))
    return _call(name, [values, coerce_to(args[1], DOUBLE), coerce_to(err, DOUBLE)], DOUBLE)
