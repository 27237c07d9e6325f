"""Type inference, implicit casts, overload resolution, literal folding and binding errors."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from expr_helpers import fails, run

from piestream.common.interval import Interval
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    JSONB,
    NUMERIC,
    REAL,
    SERIAL,
    SMALLINT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    list_of,
    struct_of,
    with_dscale,
)
from piestream.expr import (
    FuncCall,
    InputRef,
    Literal,
    UnknownLiteral,
    bind_call,
    cast,
    coerce_to,
    common_type,
    literal,
)

IV, BI, N, D = InputRef(0, INT), InputRef(1, BIGINT), InputRef(2, NUMERIC), InputRef(3, DOUBLE)


def ref(t):
    return InputRef(0, t)


# -- literals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "t"),
    [
        (True, BOOLEAN),
        (1, INT),
        (2**31 - 1, INT),
        (2**31, BIGINT),
        (-(2**63), BIGINT),
        (2**63, NUMERIC),
        (Decimal("1.5"), NUMERIC),
        (1.5, DOUBLE),
        (dt.date(2021, 1, 1), DATE),
        (dt.datetime(2021, 1, 1), TIMESTAMP),
        (dt.datetime(2021, 1, 1, tzinfo=dt.UTC), TIMESTAMPTZ),
        (dt.time(1, 2), TIME),
        (Interval(0, 1, 0), INTERVAL),
    ],
)
def test_literal_inference(value: object, t: object) -> None:
    lit = literal(value)
    assert lit.return_type == t and not isinstance(lit, UnknownLiteral)


def test_string_and_null_literals_are_unknown() -> None:
    assert isinstance(literal("abc"), UnknownLiteral) and literal("abc").value == "abc"
    null = literal(None)
    assert isinstance(null, UnknownLiteral) and null.value is None
    assert null.return_type == VARCHAR  # evaluates as text until resolved
    assert str(literal(Decimal("1.123456789012345"), NUMERIC).value) == "1.123456789012345"  # as written
    assert literal(5, BIGINT) == Literal(5, BIGINT)
    assert literal("2021-01-02", DATE) == Literal(dt.date(2021, 1, 2), DATE)
    assert literal("1 day", INTERVAL) == Literal(Interval(0, 1, 0), INTERVAL)
    fails("22P02", literal, "x", INT)


# -- return types and inserted casts --------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "a", "b", "ret"),
    [
        ("+", INT, BIGINT, BIGINT),
        ("+", SMALLINT, INT, INT),
        ("+", SMALLINT, SMALLINT, SMALLINT),
        ("/", INT, INT, INT),
        ("*", NUMERIC, DOUBLE, DOUBLE),
        ("+", INT, NUMERIC, NUMERIC),
        ("+", BIGINT, REAL, DOUBLE),
        ("+", INT, REAL, DOUBLE),
        ("+", REAL, REAL, REAL),
        ("+", SERIAL, INT, BIGINT),
        ("%", BIGINT, INT, BIGINT),
        ("+", DATE, INT, DATE),
        ("-", DATE, INT, DATE),
        ("-", DATE, DATE, INT),
        ("+", DATE, INTERVAL, TIMESTAMP),
        ("+", DATE, TIME, TIMESTAMP),
        ("-", TIMESTAMP, TIMESTAMP, INTERVAL),
        ("-", TIMESTAMPTZ, TIMESTAMPTZ, INTERVAL),
        ("+", TIMESTAMP, INTERVAL, TIMESTAMP),
        ("+", INTERVAL, TIMESTAMPTZ, TIMESTAMPTZ),
        ("-", TIMESTAMPTZ, TIMESTAMP, INTERVAL),
        ("+", INTERVAL, INTERVAL, INTERVAL),
        ("*", INTERVAL, INT, INTERVAL),
        ("/", INTERVAL, NUMERIC, INTERVAL),
        ("-", TIME, TIME, INTERVAL),
        ("<", INT, NUMERIC, BOOLEAN),
        ("=", DATE, TIMESTAMP, BOOLEAN),
        ("^", INT, INT, DOUBLE),
        ("||", VARCHAR, INT, VARCHAR),
        ("||", list_of(INT), list_of(NUMERIC), list_of(NUMERIC)),
    ],
)
def test_binary_return_types(op: str, a: object, b: object, ret: object) -> None:
    e = bind_call(op, [InputRef(0, a), InputRef(1, b)])  # type: ignore[arg-type]
    assert e.return_type == ret


def test_casts_are_inserted_on_the_narrower_side() -> None:
    e = bind_call("+", [IV, BI])
    assert isinstance(e, FuncCall) and e.name == "add"
    assert e.args[0] == FuncCall("cast", (IV,), BIGINT) and e.args[1] == BI
    e = bind_call("*", [N, D])
    assert e.args == (FuncCall("cast", (N,), DOUBLE), D)  # type: ignore[attr-defined]
    e = bind_call("=", [ref(DATE), InputRef(1, TIMESTAMPTZ)])
    assert e.args[0] == FuncCall("cast", (ref(DATE),), TIMESTAMPTZ)  # type: ignore[attr-defined]


def test_literal_casts_are_folded() -> None:
    e = bind_call("+", [ref(BIGINT), literal(1)])
    assert e.args[1] == Literal(1, BIGINT)  # type: ignore[attr-defined]
    e = bind_call("*", [literal(Decimal("0.908")), ref(BIGINT)])
    assert e.args[0] == Literal(Decimal("0.908"), with_dscale(NUMERIC, 3))  # type: ignore[attr-defined]
    assert e.args[0] != Literal(Decimal("0.9080"), with_dscale(NUMERIC, 4))  # type: ignore[attr-defined]
    assert e.args[1] == FuncCall("cast", (ref(BIGINT),), NUMERIC)  # type: ignore[attr-defined]
    assert e.return_type == NUMERIC


def test_unknown_literal_takes_the_other_operands_type() -> None:
    e = bind_call(">", [ref(TIMESTAMP), literal("2021-01-01 10:00")])
    assert e.args[1] == Literal(dt.datetime(2021, 1, 1, 10), TIMESTAMP)  # type: ignore[attr-defined]
    e = bind_call("=", [ref(DATE), literal("2021-01-01")])
    assert e.args[1] == Literal(dt.date(2021, 1, 1), DATE)  # type: ignore[attr-defined]
    e = bind_call("+", [ref(TIMESTAMP), literal("1 day")])
    assert e.return_type == TIMESTAMP
    assert e.args[1] == Literal(Interval(0, 1, 0), INTERVAL)  # type: ignore[attr-defined]
    e = bind_call("=", [literal("a"), literal("b")])  # unknown = unknown resolves as text
    assert e.args == (Literal("a", VARCHAR), Literal("b", VARCHAR))  # type: ignore[attr-defined]
    fails("22P02", bind_call, "=", [ref(INT), literal("abc")], match='type integer: "abc"')
    fails("22007", bind_call, "<", [ref(TIMESTAMP), literal("not a time")])


def test_null_literal_coerces_to_anything() -> None:
    e = bind_call("+", [literal(None), literal(1)])
    assert e.return_type == INT and e.args[0] == Literal(None, INT)  # type: ignore[attr-defined]
    assert run("+", None, 1) == [None]
    assert common_type([literal(None), INT]) == INT
    assert bind_call("coalesce", [literal(None), ref(DATE)]).return_type == DATE


def test_interval_literal_folding() -> None:
    assert cast(literal("1 day"), INTERVAL) == Literal(Interval(0, 1, 0), INTERVAL)
    assert cast(literal("1 mon 2 days 00:00:03"), INTERVAL) == Literal(Interval(1, 2, 3_000_000), INTERVAL)
    assert cast(literal(None), INTERVAL) == Literal(None, INTERVAL)
    assert cast(literal(5), BIGINT) == Literal(5, BIGINT)
    assert cast(literal(Decimal("2.5")), INT) == Literal(3, INT)


def test_cast_contexts() -> None:
    col = ref(BIGINT)
    assert cast(col, INT).return_type == INT  # explicit
    assert cast(col, INT, explicit=False).return_type == INT  # assignment allows narrowing
    fails("42846", coerce_to, col, INT, match="cannot cast type bigint to integer")
    assert cast(ref(INT), VARCHAR, explicit=False).return_type == VARCHAR
    fails("42846", coerce_to, ref(INT), VARCHAR)
    fails("42846", cast, ref(VARCHAR), INT, explicit=False)
    assert cast(ref(VARCHAR), INT).return_type == INT
    fails("42846", cast, ref(BIGINT), BOOLEAN, match="cannot cast type bigint to boolean")
    assert cast(ref(INT), BOOLEAN).return_type == BOOLEAN
    fails("42846", cast, ref(DATE), INT)
    assert cast(ref(TIMESTAMPTZ), DATE, explicit=False).return_type == DATE
    assert coerce_to(ref(DATE), TIMESTAMPTZ).return_type == TIMESTAMPTZ
    assert coerce_to(ref(TIME), INTERVAL).return_type == INTERVAL
    fails("42846", coerce_to, ref(INTERVAL), TIME)
    assert cast(ref(JSONB), NUMERIC).return_type == NUMERIC
    assert coerce_to(ref(list_of(INT)), list_of(BIGINT)).return_type == list_of(BIGINT)
    fails("42846", cast, ref(struct_of(("a", INT))), struct_of(("a", INT), ("b", INT)))
    err = fails("22P02", cast, literal("x"), INT, position=17)
    assert err.position == 17


# -- overload resolution --------------------------------------------------------------------------


def test_function_resolution_prefers_preferred_types() -> None:
    assert bind_call("sqrt", [ref(INT)]).return_type == DOUBLE
    assert bind_call("sqrt", [ref(NUMERIC)]).return_type == NUMERIC
    assert bind_call("round", [ref(INT)]).return_type == DOUBLE
    assert bind_call("round", [ref(NUMERIC), literal(2)]).return_type == NUMERIC
    assert bind_call("round", [ref(INT), literal(2)]).return_type == NUMERIC
    assert bind_call("abs", [ref(SMALLINT)]).return_type == SMALLINT
    assert bind_call("date_trunc", [literal("day"), ref(DATE)]).return_type == TIMESTAMPTZ
    assert bind_call("date_trunc", [literal("day"), ref(TIMESTAMP)]).return_type == TIMESTAMP
    assert bind_call("extract", [literal("year"), ref(TIMESTAMP)]).return_type == NUMERIC
    assert bind_call("date_part", [literal("year"), ref(TIMESTAMP)]).return_type == DOUBLE
    assert bind_call("length", [literal("abc")]).return_type == INT
    assert bind_call("substring", [ref(VARCHAR), literal(1), ref(SMALLINT)]).return_type == VARCHAR
    # like PostgreSQL: bigint does not convert implicitly to integer
    fails(
        "42883", bind_call, "substring", [ref(VARCHAR), ref(BIGINT)], match="function substring(text, bigint)"
    )
    assert bind_call("tumble_start", [ref(TIMESTAMPTZ), literal("5 s")]).return_type == TIMESTAMPTZ
    assert bind_call("to_timestamp", [ref(BIGINT)]).return_type == TIMESTAMPTZ
    assert bind_call("now", []).return_type == TIMESTAMPTZ
    assert bind_call("CURRENT_TIMESTAMP", []).return_type == TIMESTAMPTZ
    assert bind_call("regexp_match", [ref(VARCHAR), literal("a")]).return_type == list_of(VARCHAR)


def test_operator_aliases() -> None:
    assert bind_call("!=", [ref(INT), literal(1)]).name == "not_equal"  # type: ignore[attr-defined]
    assert bind_call("neg", [ref(INT)]).name == "neg"  # type: ignore[attr-defined]
    assert bind_call("-", [ref(NUMERIC)]).return_type == NUMERIC
    assert bind_call("+", [ref(INT)]) == ref(INT)  # unary plus is the identity
    assert bind_call("greater_than", [ref(INT), literal(1)]).name == "greater_than"  # type: ignore[attr-defined]
    fails("42883", bind_call, "+", [ref(VARCHAR)], match="operator does not exist: + text")


def test_undefined_function_and_operator_errors() -> None:
    err = fails("42883", bind_call, "foo", [ref(INT)], match="function foo(integer) does not exist")
    assert err.hint is not None
    fails(
        "42883", bind_call, "+", [ref(INT), ref(BOOLEAN)], match="operator does not exist: integer + boolean"
    )
    fails("42883", bind_call, "sqrt", [ref(VARCHAR)], match="function sqrt(text) does not exist")
    fails("42883", bind_call, "||", [ref(INT), ref(INT)], match="integer || integer")
    err = fails("42883", bind_call, "-", [ref(DATE), ref(TIMESTAMP), ref(INT)], position=3)
    assert err.position == 3
    err = fails("42883", bind_call, "+", [ref(INT), ref(BOOLEAN)], position=12)
    assert err.position == 12
    fails(
        "42725",
        bind_call,
        "+",
        [literal("1"), literal("2")],
        match="operator is not unique: unknown + unknown",
    )


def test_boolean_operands() -> None:
    assert bind_call("and", [ref(BOOLEAN), literal("true")]).args[1] == Literal(True, BOOLEAN)  # type: ignore[attr-defined]
    assert bind_call("not", [literal(None)]).args[0] == Literal(None, BOOLEAN)  # type: ignore[attr-defined]
    fails("42804", bind_call, "and", [ref(BOOLEAN), ref(INT)], match="argument of AND must be type boolean")
    fails("42804", bind_call, "is_true", [ref(INT)])
    fails("42804", bind_call, "case", [ref(INT), literal(1), literal(2)], match="CASE/WHEN")


def test_bind_time_validation_of_constant_fields() -> None:
    fails("22023", bind_call, "extract", [literal("fortnight"), ref(TIMESTAMP)], match="not recognized")
    fails(
        "0A000",
        bind_call,
        "extract",
        [literal("hour"), ref(DATE)],
        match='unit "hour" not supported for type date',
    )
    fails("0A000", bind_call, "extract", [literal("dow"), ref(INTERVAL)])
    fails("22023", bind_call, "date_trunc", [literal("fortnight"), ref(TIMESTAMP)])


# -- common types ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        ([INT, INT], INT),
        ([INT, BIGINT], BIGINT),
        ([BIGINT, INT], BIGINT),
        ([INT, NUMERIC, REAL], REAL),
        ([INT, NUMERIC, DOUBLE, SMALLINT], DOUBLE),
        ([None, INT], INT),
        ([None, None], VARCHAR),
        ([DATE, TIMESTAMP], TIMESTAMP),
        ([DATE, TIMESTAMPTZ, TIMESTAMP], TIMESTAMPTZ),
        ([TIMESTAMP, DATE], TIMESTAMP),
        ([SERIAL, INT], BIGINT),
        ([list_of(INT), list_of(BIGINT)], list_of(BIGINT)),
        ([struct_of(("a", INT)), struct_of(("b", DOUBLE))], struct_of(("a", DOUBLE))),
    ],
)
def test_common_type(types: list, expected: object) -> None:
    assert common_type(types) == expected


def test_common_type_errors() -> None:
    fails("42804", common_type, [INT, VARCHAR], "CASE", match="CASE types integer and text cannot be matched")
    fails(
        "42804",
        common_type,
        [BOOLEAN, INT],
        "UNION",
        match="UNION types boolean and integer cannot be matched",
    )
    fails("42846", common_type, [TIMESTAMP, TIME], "COALESCE", match="could not convert type")
    err = fails("42804", common_type, [DATE, INTERVAL], "VALUES", position=9)
    assert err.position == 9


def test_conditional_bindings_use_common_type() -> None:
    e = bind_call("case", [ref(BOOLEAN), literal(1), literal(Decimal("2.5"))])
    assert e.return_type == NUMERIC
    e = bind_call("case", [ref(BOOLEAN), literal(1), literal(None)])
    assert e.return_type == INT
    e = bind_call("case", [ref(BOOLEAN), literal(1)])  # no ELSE
    assert e.return_type == INT and len(e.args) == 3  # type: ignore[attr-defined]
    fails(
        "42804",
        bind_call,
        "case",
        [ref(BOOLEAN), literal(1), ref(VARCHAR)],
        match="CASE types integer and text",
    )
    assert bind_call("coalesce", [ref(INT), literal(Decimal(1))]).return_type == NUMERIC
    assert bind_call("greatest", [ref(INT), ref(DOUBLE)]).return_type == DOUBLE
    assert bind_call("nullif", [literal(1), literal(Decimal("2.2"))]).return_type == NUMERIC
    assert bind_call("nullif", [ref(SMALLINT), literal(1)]).return_type == INT
    e = bind_call("in", [ref(INT), literal(1), literal(Decimal("1.5"))])
    assert e.name == "in" and all(a.return_type == NUMERIC for a in e.args)  # type: ignore[attr-defined]
    e = bind_call("not_in", [ref(INT), literal(1)])
    assert e.name == "not"  # type: ignore[attr-defined]
    e = bind_call("between", [ref(INT), literal(1), literal(5)])
    assert e.name == "and"  # type: ignore[attr-defined]


def test_array_and_struct_bindings() -> None:
    arr = bind_call("array", [literal(1), literal(Decimal("2.5")), literal(None)])
    assert arr.return_type == list_of(NUMERIC)
    assert bind_call("array_access", [arr, literal(1)]).return_type == NUMERIC
    fails("42P18", bind_call, "array", [])
    fails("42804", bind_call, "array_access", [ref(INT), literal(1)])
    row = bind_call("row", [literal(1), literal("x")])
    assert row.return_type == struct_of(("f1", INT), ("f2", VARCHAR))
    assert bind_call("field", [row, literal("f2")]).return_type == VARCHAR
    fails("42703", bind_call, "field", [row, literal("zz")])
    assert bind_call("||", [arr, literal(3)]).name == "array_append"  # type: ignore[attr-defined]
    assert bind_call("||", [literal(3), arr]).name == "array_prepend"  # type: ignore[attr-defined]
    assert bind_call("||", [arr, literal("{4,5}")]).name == "array_cat"  # type: ignore[attr-defined]
    assert bind_call("cardinality", [arr]).return_type == INT
    assert bind_call("array_to_string", [arr, literal(",")]).return_type == VARCHAR
    eq = bind_call("=", [arr, bind_call("array", [literal(1)])])
    assert eq.return_type == BOOLEAN
