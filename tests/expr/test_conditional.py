"""CASE / COALESCE (lazy per-row branches), NULLIF, GREATEST, LEAST."""

from __future__ import annotations

from decimal import Decimal

from expr_helpers import Col, bind, evaluate, fails, one, run

from piestream.common.types import DOUBLE, INT, INTERVAL, VARCHAR, list_of
from piestream.expr import InputRef, bind_call, cast, literal

X = InputRef(0, INT)


def _chunk(values: list) -> object:
    return bind("+", Col(values, INT), 1)[1]


def test_case_picks_first_true_branch() -> None:
    e = bind_call(
        "case",
        [
            bind_call("<", [X, literal(0)]),
            literal("neg"),
            bind_call("=", [X, literal(0)]),
            literal("zero"),
            literal("pos"),
        ],
    )
    assert e.return_type == VARCHAR
    assert evaluate(e, _chunk([-1, 0, 1, None])) == ["neg", "zero", "pos", "pos"]


def test_case_without_else_is_null() -> None:
    e = bind_call("case", [bind_call(">", [X, literal(0)]), X])
    assert evaluate(e, _chunk([-1, 2, None])) == [None, 2, None]


def test_case_branch_errors_only_for_rows_taking_it() -> None:
    ten_div_x = bind_call("/", [literal(10), X])
    e = bind_call("case", [bind_call("<>", [X, literal(0)]), ten_div_x, literal(-1)])
    assert evaluate(e, _chunk([0, 5, 0, None, 2])) == [-1, 2, -1, -1, 5]
    # the ELSE branch and later conditions are lazy too
    e = bind_call("case", [bind_call("=", [X, literal(0)]), literal(0), ten_div_x])
    assert evaluate(e, _chunk([0, 5])) == [0, 2]
    e = bind_call(
        "case",
        [
            bind_call("=", [X, literal(0)]),
            literal(0),
            bind_call(">", [ten_div_x, literal(1)]),
            literal(1),
            literal(2),
        ],
    )
    assert evaluate(e, _chunk([0, 5, 20])) == [0, 1, 2]
    # a row that does take the failing branch raises
    bad = bind_call("case", [bind_call(">=", [X, literal(0)]), ten_div_x, literal(-1)])
    fails("22012", evaluate, bad, _chunk([1, 0]))


def test_case_with_bad_cast_in_untaken_branch() -> None:
    s = InputRef(0, VARCHAR)
    e = bind_call("case", [bind_call("regexp_like", [s, literal("^[0-9]+$")]), cast(s, INT), literal(None)])
    chunk = bind("||", Col(["12", "abc", None], VARCHAR), "x")[1]
    assert evaluate(e, chunk) == [12, None, None]


def test_case_common_type_and_values() -> None:
    e = bind_call("case", [bind_call(">", [X, literal(0)]), X, literal(Decimal("0.5"))])
    assert evaluate(e, _chunk([3, -3])) == [Decimal(3), Decimal("0.5")]
    e = bind_call(
        "case", [literal(True), literal("1 day"), bind_call("-", [cast(literal("2 days"), INTERVAL)])]
    )
    assert e.return_type == INTERVAL


def test_coalesce() -> None:
    assert run("coalesce", Col([None, 1, None], INT), Col([2, 3, None], INT), 9) == [2, 1, 9]
    assert run("coalesce", Col([None, None], INT), Col([None, None], INT)) == [None, None]
    assert one("coalesce", None, "x") == "x"
    assert run("coalesce", Col([None, 1], INT), 2.5) == [2.5, 1.0]


def test_coalesce_is_lazy() -> None:
    e = bind_call("coalesce", [X, bind_call("/", [literal(1), X])])
    assert evaluate(e, _chunk([0, 5, None])) == [0, 5, None]
    fails(
        "22012", evaluate, bind_call("coalesce", [bind_call("/", [literal(1), X]), literal(0)]), _chunk([0])
    )
    safe = bind_call("coalesce", [X, bind_call("/", [literal(1), bind_call("-", [X, X])])])
    assert evaluate(safe, _chunk([0, 5])) == [0, 5]  # 1 / (x - x) never runs: x is not NULL


def test_nullif() -> None:
    assert run("nullif", Col([1, 2, None], INT), 1) == [None, 2, None]
    assert run("nullif", Col(["a", "b"], VARCHAR), Col(["a", None], VARCHAR)) == [None, "b"]
    assert one("nullif", 1, Decimal("2.2")) == Decimal(1)


def test_greatest_least() -> None:
    a = Col([1, None, 5, None], INT)
    b = Col([3, 2, None, None], INT)
    assert run("greatest", a, b) == [3, 2, 5, None]
    assert run("least", a, b) == [1, 2, 5, None]
    g = run("greatest", Col([float("nan")], DOUBLE), 2)[0]
    assert g != g  # NaN is the greatest double
    assert one("least", "b", "a", "c") == "a"
    assert run("greatest", Col([[1, 2]], list_of(INT)), Col([[1, 3]], list_of(INT))) == [[1, 3]]
