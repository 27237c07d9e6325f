"""Non-strict evaluation, constant folding, pickling and the executors' direct FuncCall use."""

from __future__ import annotations

import pickle
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from expr_helpers import Col, bind, evaluate

from piestream.common.chunk import DataChunk
from piestream.common.errors import DivisionByZero, InternalError, InvalidInput, NumericOutOfRange
from piestream.common.scalar import to_arrow
from piestream.common.types import BIGINT, BOOLEAN, INT, INTERVAL, NUMERIC, VARCHAR
from piestream.expr import (
    FuncCall,
    InputRef,
    Literal,
    bind_call,
    cast,
    eval_non_strict,
    fold_constants,
    literal,
)

X = InputRef(0, INT)


def test_eval_non_strict_nulls_only_failing_rows() -> None:
    e = bind_call("/", [literal(100), X])
    values = [1, 0, 5, None, 0, 50] * 100
    _, chunk = bind("is_null", Col(values, INT))
    out, errors = eval_non_strict(e, chunk)
    expected = [None if v in (0, None) else 100 // v for v in values]
    assert out.to_pylist() == expected
    assert len(errors) == 200 and all(isinstance(err, DivisionByZero) for _, err in errors)
    assert [row for row, _ in errors] == [i for i, v in enumerate(values) if v == 0]


def test_eval_non_strict_without_errors_is_one_pass() -> None:
    e = bind_call("+", [X, literal(1)])
    _, chunk = bind("is_null", Col([1, 2, None], INT))
    out, errors = eval_non_strict(e, chunk)
    assert out.to_pylist() == [2, 3, None] and errors == []


def test_eval_non_strict_mixed_errors() -> None:
    s = InputRef(0, VARCHAR)
    e = bind_call("*", [cast(s, INT), literal(2**30)])
    _, chunk = bind("is_null", Col(["1", "x", "3", "-1"], VARCHAR))
    out, errors = eval_non_strict(e, chunk)
    assert out.to_pylist() == [2**30, None, None, -(2**30)]
    assert [(row, type(err)) for row, err in errors] == [(1, InvalidInput), (2, NumericOutOfRange)]


def test_eval_non_strict_raises_bugs() -> None:
    """Only data errors become NULL: a bug (XX000) still raises."""
    e = bind_call("/", [literal(100), X])
    _, chunk = bind("is_null", Col([1, 0], INT))

    class Boom(FuncCall):
        def eval(self, chunk: DataChunk) -> pa.Array:
            raise InternalError("a kernel bug")

    with pytest.raises(InternalError):
        eval_non_strict(Boom("boom", (e,), INT), chunk)


def test_fold_constants() -> None:
    e = bind_call("+", [bind_call("*", [literal(2), literal(3)]), X])
    folded = fold_constants(e)
    assert isinstance(folded, FuncCall) and folded.args[0] == Literal(6, INT)
    assert fold_constants(bind_call("||", [literal("a"), literal(1)])) == Literal("a1", VARCHAR)
    assert fold_constants(bind_call("+", [literal(None), literal(1)])) == Literal(None, INT)
    assert fold_constants(X) == X
    # a failing constant stays unevaluated: it fails only if a row reaches it
    div0 = bind_call("/", [literal(1), literal(0)])
    case = bind_call("case", [bind_call(">", [X, literal(0)]), div0, literal(0)])
    folded_case = fold_constants(case)
    assert folded_case == case
    _, chunk = bind("is_null", Col([-1, -2], INT))
    assert evaluate(folded_case, chunk) == [0, 0]


def test_expressions_pickle() -> None:
    e = bind_call(
        "case",
        [
            bind_call(">", [X, literal(Decimal("1.5"))]),
            bind_call("+", [literal("1 day"), bind_call("now", [])]),
            literal(None),
        ],
    )
    e2 = pickle.loads(pickle.dumps(e))
    assert e2 == e
    assert cast(literal("2 hours"), INTERVAL) == pickle.loads(
        pickle.dumps(cast(literal("2 hours"), INTERVAL))
    )


def test_executor_style_func_calls() -> None:
    """Streaming executors build FuncCalls directly with same-typed arguments."""
    chunk = DataChunk([pa.array([1, 20, None], pa.int32()), pa.array([5, 6, 7], pa.int64())])
    assert FuncCall("greater_than", (InputRef(0, INT), Literal(10, INT)), BOOLEAN).eval(
        chunk
    ).to_pylist() == [
        False,
        True,
        None,
    ]
    mul = FuncCall("multiply", (InputRef(1, BIGINT), Literal(2, BIGINT)), BIGINT)
    assert mul.eval(chunk).to_pylist() == [10, 12, 14]
    assert FuncCall("add", (InputRef(0, INT), InputRef(0, INT)), INT).eval(chunk).to_pylist() == [2, 40, None]
    assert str(mul) == "multiply($1, 2)"


def test_sliced_and_invisible_inputs() -> None:
    base = pa.array(np.arange(10, dtype=np.int32))
    chunk = DataChunk([base.slice(3, 4)])
    assert bind_call("*", [X, literal(2)]).eval(chunk).to_pylist() == [6, 8, 10, 12]
    dec = to_arrow([Decimal(i) for i in range(6)], NUMERIC).slice(2, 3)
    n = InputRef(0, NUMERIC)
    got = bind_call("*", [n, literal(Decimal("0.5"))]).eval(DataChunk([dec]))
    assert [str(v) for v in got.to_pylist()] == ["1.0", "1.5", "2.0"]
    vis = DataChunk([pa.array([1, 0, 2], pa.int32())], visibility=np.array([True, False, True]))
    # every physical row is evaluated; compact first when hidden rows may fail
    assert bind_call("/", [literal(4), X]).eval(vis.compact()).to_pylist() == [4, 2]


def _exprs_over_all_types() -> list:
    import datetime as dt

    from piestream.common.interval import Interval
    from piestream.common.types import (
        DATE,
        DOUBLE,
        TIMESTAMP,
        list_of,
    )

    i, s, f = InputRef(0, INT), InputRef(1, VARCHAR), InputRef(2, DOUBLE)
    ts, d, n, iv = InputRef(3, TIMESTAMP), InputRef(4, DATE), InputRef(5, NUMERIC), InputRef(6, INTERVAL)
    arr = InputRef(7, list_of(INT))
    lit = literal
    calls = [
        ("+", [i, lit(1)]),
        ("/", [i, lit(3)]),
        ("%", [i, lit(3)]),
        ("*", [n, lit(Decimal("1.5"))]),
        ("/", [n, lit(Decimal("3"))]),
        ("+", [f, f]),
        ("<", [f, lit(1.0)]),
        ("=", [s, lit("a")]),
        ("like", [s, lit("a%")]),
        ("ilike", [s, lit("%b")]),
        ("upper", [s]),
        ("substr", [s, lit(2), lit(2)]),
        ("split_part", [s, lit("/"), lit(2)]),
        ("concat_ws", [lit(","), s, i]),
        ("lpad", [s, lit(4)]),
        ("regexp_match", [s, lit("(a)(b)?")]),
        ("regexp_replace", [s, lit("a"), lit("b")]),
        ("to_char", [ts, lit("YYYY-MM-DD HH24:MI")]),
        ("extract", [lit("epoch"), ts]),
        ("date_trunc", [lit("month"), ts]),
        ("+", [ts, lit(Interval(1, 1, 1))]),
        ("-", [ts, ts]),
        ("+", [d, i]),
        ("tumble_start", [ts, lit(Interval(0, 0, 10_000_000))]),
        ("*", [iv, f]),
        ("<", [iv, iv]),
        ("in", [i, lit(1), lit(2)]),
        ("coalesce", [i, lit(0)]),
        ("greatest", [f, lit(0.0)]),
        ("array_access", [arr, lit(1)]),
        ("cardinality", [arr]),
        ("||", [arr, i]),
        ("array_to_string", [arr, lit(",")]),
        ("case", [bind_call(">", [i, lit(0)]), s, lit("x")]),
        ("is_distinct_from", [n, n]),
        ("round", [n, lit(1)]),
        ("sqrt", [f]),
        ("to_timestamp", [f]),
        ("nullif", [i, lit(1)]),
        ("row", [i, s]),
        ("array", [i, i]),
        ("and", [bind_call("<", [i, lit(1)]), lit(None)]),
    ]
    exprs = [bind_call(name, args) for name, args in calls]
    exprs += [cast(x, VARCHAR) for x in (i, f, ts, d, n, iv, arr)]
    exprs.append(cast(s, INT))
    del dt
    return exprs


def test_every_kernel_handles_empty_and_all_null_chunks() -> None:
    from piestream.common.types import DATE, DOUBLE, TIMESTAMP, list_of

    types = [INT, VARCHAR, DOUBLE, TIMESTAMP, DATE, NUMERIC, INTERVAL, list_of(INT)]
    empty = DataChunk([pa.array([], t.arrow) for t in types], length=0)
    nulls = DataChunk([pa.nulls(3, t.arrow) for t in types], length=3)
    for e in _exprs_over_all_types():
        out = e.eval(empty)
        assert len(out) == 0 and out.type == e.return_type.arrow, e
        out = e.eval(nulls)
        assert len(out) == 3 and out.type == e.return_type.arrow, e
        if e.name not in (
            "concat_ws",
            "coalesce",
            "greatest",
            "is_distinct_from",
            "row",
            "array",
            "array_append",
            "case",
            "and",
        ):  # type: ignore[attr-defined]
            assert out.null_count == 3, e
