"""Struct fields, ROW, arrays: constructor, subscripts, length, position, concatenation."""

from __future__ import annotations

from decimal import Decimal

from expr_helpers import Col, bind, evaluate, fails, one, run

from piestream.common.types import BIGINT, INT, NUMERIC, VARCHAR, list_of, struct_of
from piestream.expr import InputRef, bind_call, literal

LI = list_of(INT)


def arr(*values: object) -> object:
    return bind_call("array", [literal(v) for v in values])


def test_struct_field_access() -> None:
    st = struct_of(("a", INT), ("b", VARCHAR))
    col = Col([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}], st)
    assert run("field", col, "a") == [1, None, None]
    assert run("field", col, "b") == ["x", None, "y"]
    nested = struct_of(("inner", st), ("n", BIGINT))
    _, chunk = bind("is_null", Col([{"inner": {"a": 7, "b": "q"}, "n": 1}], nested))
    inner = bind_call("field", [InputRef(0, nested), literal("inner")])
    assert evaluate(bind_call("field", [inner, literal("a")]), chunk) == [7]


def test_row_constructor() -> None:
    assert one("row", 1, "x", None) == {"f1": 1, "f2": "x", "f3": None}
    assert run("row", Col([1, 2], INT), Col([None, "b"], VARCHAR)) == [
        {"f1": 1, "f2": None},
        {"f1": 2, "f2": "b"},
    ]


def test_array_constructor_and_access() -> None:
    assert one("array", 1, 2, None) == [1, 2, None]
    assert one("array", 1, Decimal("2.5")) == [Decimal(1), Decimal("2.5")]
    got = run("array", Col([1, None], INT), Col([3, 4], INT))
    assert got == [[1, 3], [None, 4]]
    lists = Col([[10, 20, 30], [], None, [None, 5]], LI)
    assert run("array_access", lists, 1) == [10, None, None, None]
    assert run("array_access", lists, 2) == [20, None, None, 5]
    assert run("array_access", lists, 0) == [None] * 4
    assert run("array_access", lists, Col([3, 1, 1, None], INT)) == [30, None, None, None]
    assert run("array_access", lists, Col([1, 1, 1, 2], BIGINT)) == [10, None, None, 5]
    assert one("array_access", arr(1, 2), -1) is None


def test_array_length_and_cardinality() -> None:
    lists = Col([[1, 2, 3], [], None], LI)
    assert run("array_length", lists, 1) == [3, None, None]  # empty array: NULL, as in PostgreSQL
    assert run("array_length", lists, 2) == [None, None, None]
    assert run("cardinality", lists) == [3, 0, None]
    nested = Col([[[1, 2], [3]], [[], None], None], list_of(LI))
    assert run("cardinality", nested) == [3, 0, None]


def test_array_position() -> None:
    lists = Col([[1, 2, 3, 2], [None, 1], [], None, [5, 6]], LI)
    assert run("array_position", lists, 2) == [2, None, None, None, None]
    assert run("array_position", lists, None) == [None, 1, None, None, None]  # NOT DISTINCT
    assert run("array_position", lists, 2, 3) == [4, None, None, None, None]
    assert run("array_position", lists, Col([3, 1, 1, 1, 6], INT)) == [3, 2, None, None, 2]
    assert one("array_position", arr("a", "b"), "b") == 2


def test_array_concatenation() -> None:
    a = Col([[1], [], None, None], LI)
    b = Col([[2, 3], [4], [5], None], LI)
    assert run("||", a, b) == [[1, 2, 3], [4], [5], None]
    assert run("array_cat", b, a) == [[2, 3, 1], [4], [5], None]
    assert run("||", a, 9) == [[1, 9], [9], [9], [9]]
    assert run("||", 0, a) == [[0, 1], [0], [0], [0]]
    assert run("array_append", a, None) == [[1, None], [None], [None], [None]]
    assert run("array_prepend", Col([7, 8, 9, 10], INT), b) == [[7, 2, 3], [8, 4], [9, 5], [10]]
    assert one("||", arr(1), arr(Decimal("2.5"))) == [Decimal(1), Decimal("2.5")]
    assert one("||", arr(1), "{2,3}") == [1, 2, 3]
    e = bind_call("||", [arr(1), arr(2)])
    assert e.return_type == LI


def test_array_to_string() -> None:
    lists = Col([[1, None, 3], [], None], LI)
    assert run("array_to_string", lists, ",") == ["1,3", "", None]
    assert run("array_to_string", lists, ",", "*") == ["1,*,3", "", None]
    assert one("array_to_string", arr(Decimal("1.50"), Decimal(2)), "|") == "1.50|2"  # PostgreSQL's text


def test_array_comparison_and_errors() -> None:
    assert one("=", arr(1, 2), arr(1, 2)) is True
    assert one("<", arr(1, 2), arr(1, 3)) is True
    assert run("=", Col([[1]], LI), Col([[Decimal(1)]], list_of(NUMERIC))) == [True]
    fails("42P18", bind_call, "array", [])
    fails("42883", bind_call, "cardinality", [literal(1)])
    fails("42804", bind_call, "array", [literal(1), literal(True)])
