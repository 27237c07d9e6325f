"""Differential tests against DuckDB on random inputs, where DuckDB's semantics match PostgreSQL's.

Known differences, so not compared here (each is checked against PostgreSQL's documented
behaviour in the other test modules instead):

* ``/`` on integers is float division in DuckDB (``//`` is compared instead); float division by
  zero and float overflow give infinity in DuckDB, errors in PostgreSQL;
* DECIMAL arithmetic widens the scale in DuckDB; NUMERIC is compared against Python's decimal;
* EXTRACT(second) is an integer in DuckDB; date_trunc century / millennium start at years 2000 /
  2000 in DuckDB, 2001 in PostgreSQL; substring with a start below 1 differs;
* DECIMAL -> text keeps trailing zeros in DuckDB; DuckDB has no initcap;
* LIKE has no default escape character in DuckDB (the queries say ``ESCAPE '\\'``);
* interval - timestamp subtraction: DuckDB does not split the result into days and time, so
  total microseconds are compared.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pg_numeric import pg_div
from piestream.common.chunk import DataChunk
from piestream.common.errors import PiestreamError
from piestream.common.scalar import from_arrow, to_arrow
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    NUMERIC,
    TIMESTAMP,
    VARCHAR,
    DataType,
)
from piestream.expr import Expr, InputRef, bind_call, cast, literal

SEEDS = [1, 2, 3]
N = 400


class Table:
    """Random columns shared by DuckDB (as an Arrow table) and piestream (as a chunk)."""

    def __init__(self, **cols: tuple[list[Any], DataType]) -> None:
        self.names = list(cols)
        self.types = [t for _, t in cols.values()]
        self.arrays = [to_arrow(v, t) for v, t in cols.values()]
        self.chunk = DataChunk(self.arrays)
        self.con = duckdb.connect()
        self.con.register("t", pa.table(dict(zip(self.names, self.arrays, strict=True))))

    def ref(self, name: str) -> InputRef:
        i = self.names.index(name)
        return InputRef(i, self.types[i])

    def duck(self, sql: str) -> list[Any]:
        return self.con.sql(f"SELECT {sql} FROM t").to_arrow_table().column(0).to_pylist()

    def ours(self, e: Expr) -> list[Any]:
        return from_arrow(e.eval(self.chunk), e.return_type)

    def check(self, e: Expr, sql: str) -> None:
        """Same values (NaN equal to NaN) as DuckDB's `sql`."""
        got, want = self.ours(e), self.duck(sql)
        assert [_nan_key(v) for v in got] == [_nan_key(v) for v in want], sql


def _nan_key(v: Any) -> Any:
    return "NaN" if isinstance(v, float) and v != v else v


def _ints(rng: random.Random, lo: int, hi: int, nulls: float = 0.1) -> list[int | None]:
    return [None if rng.random() < nulls else rng.randint(lo, hi) for _ in range(N)]


def _text(rng: random.Random) -> str | None:
    if rng.random() < 0.1:
        return None
    alphabet = string.ascii_letters + "  /,é日%_\\" + "ab"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))


@pytest.mark.parametrize("seed", SEEDS)
def test_integer_arithmetic_and_comparison(seed: int) -> None:
    rng = random.Random(seed)
    t = Table(
        a=(_ints(rng, -(2**15), 2**15), INT),
        b=([v if v != 0 else 7 for v in _ints(rng, -300, 300)], INT),
        c=(_ints(rng, -(2**40), 2**40), BIGINT),
    )
    a, b, c = t.ref("a"), t.ref("b"), t.ref("c")
    cases: list[tuple[str, Expr]] = [
        ("a + b", bind_call("+", [a, b])),
        ("a - c", bind_call("-", [a, c])),
        ("a * b", bind_call("*", [a, b])),
        ("a // b", bind_call("/", [a, b])),
        ("c // b", bind_call("/", [c, b])),
        ("a % b", bind_call("%", [a, b])),
        ("c % b", bind_call("%", [c, b])),
        ("-a", bind_call("-", [a])),
        ("abs(c)", bind_call("abs", [c])),
        ("a < b", bind_call("<", [a, b])),
        ("a >= c", bind_call(">=", [a, c])),
        ("a = b OR b > 0", bind_call("or", [bind_call("=", [a, b]), bind_call(">", [b, literal(0)])])),
        ("a IN (1, 2, b)", bind_call("in", [a, literal(1), literal(2), b])),
        ("coalesce(a, b, 0)", bind_call("coalesce", [a, b, literal(0)])),
        ("greatest(a, b)", bind_call("greatest", [a, b])),
        ("CASE WHEN a > 0 THEN b ELSE c END", bind_call("case", [bind_call(">", [a, literal(0)]), b, c])),
        ("a IS DISTINCT FROM b", bind_call("is_distinct_from", [a, b])),
        ("a::varchar", cast(a, VARCHAR)),
        ("a BETWEEN b AND 100", bind_call("between", [a, b, literal(100)])),
    ]
    for sql, e in cases:
        t.check(e, sql)


@pytest.mark.parametrize(
    ("sql_op", "op", "x", "y", "t"),
    [
        ("+", "+", 2**31 - 1, 1, INT),
        ("-", "-", -(2**31), 1, INT),
        ("*", "*", 2**62, 4, BIGINT),
        ("*", "*", 70000, 70000, INT),
    ],
)
def test_overflow_agrees(sql_op: str, op: str, x: int, y: int, t: DataType) -> None:
    tab = Table(x=([x], t), y=([y], t))
    with pytest.raises(duckdb.OutOfRangeException):
        tab.duck(f"x {sql_op} y")
    with pytest.raises(PiestreamError):
        tab.ours(bind_call(op, [tab.ref("x"), tab.ref("y")]))


def _floats(rng: random.Random) -> list[float | None]:
    special = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0]
    out: list[float | None] = []
    for _ in range(N):
        r = rng.random()
        out.append(None if r < 0.05 else rng.choice(special) if r < 0.25 else rng.uniform(-1e6, 1e6))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_float_comparisons_and_arithmetic(seed: int) -> None:
    rng = random.Random(seed)
    xs, ys = _floats(rng), _floats(rng)
    t = Table(x=(xs, DOUBLE), y=(ys, DOUBLE))
    x, y = t.ref("x"), t.ref("y")
    for op in ("=", "<>", "<", "<=", ">", ">="):
        assert t.ours(bind_call(op, [x, y])) == t.duck(f"x {op} y"), op
    finite = Table(
        x=([v if v is None or np.isfinite(v) else 1.5 for v in xs], DOUBLE),
        y=([v if v is None or (np.isfinite(v) and v != 0) else 2.5 for v in ys], DOUBLE),
    )
    fx, fy = finite.ref("x"), finite.ref("y")
    for op in ("+", "-", "*", "/"):
        assert finite.ours(bind_call(op, [fx, fy])) == finite.duck(f"x {op} y"), op
    for fn in ("abs", "floor", "ceil", "round", "trunc", "sign"):
        assert finite.ours(bind_call(fn, [fx])) == finite.duck(f"{fn}(x)"), fn
    assert finite.ours(cast(fx, BIGINT)) == finite.duck("x::bigint")
    t.check(bind_call("least", [x, y]), "least(x, y)")
    t.check(bind_call("greatest", [x, y]), "greatest(x, y)")


@pytest.mark.parametrize("seed", SEEDS)
def test_string_functions(seed: int) -> None:
    rng = random.Random(seed)
    t = Table(
        s=([_text(rng) for _ in range(N)], VARCHAR),
        u=([_text(rng) for _ in range(N)], VARCHAR),
        k=(_ints(rng, 1, 6), INT),
    )
    s, u, k = t.ref("s"), t.ref("u"), t.ref("k")
    lit = literal
    cases: list[tuple[str, Expr]] = [
        ("s < u", bind_call("<", [s, u])),
        ("s = u", bind_call("=", [s, u])),
        ("lower(s)", bind_call("lower", [s])),
        ("upper(s)", bind_call("upper", [s])),
        ("length(s)", bind_call("length", [s])),
        ("strlen(s)", bind_call("octet_length", [s])),
        ("substring(s, 2, 3)", bind_call("substr", [s, lit(2), lit(3)])),
        ("substring(s, k, 2)", bind_call("substr", [s, k, lit(2)])),
        ("substring(s, 3)", bind_call("substr", [s, lit(3)])),
        ("s || u", bind_call("||", [s, u])),
        ("concat(s, k, u)", bind_call("concat", [s, k, u])),
        ("concat_ws('-', s, u, k)", bind_call("concat_ws", [lit("-"), s, u, k])),
        ("replace(s, 'a', 'XY')", bind_call("replace", [s, lit("a"), lit("XY")])),
        ("strpos(s, 'a')", bind_call("strpos", [s, lit("a")])),
        ("strpos(s, u)", bind_call("strpos", [s, u])),
        ("left(s, 2)", bind_call("left", [s, lit(2)])),
        ("right(s, k)", bind_call("right", [s, k])),
        ("reverse(s)", bind_call("reverse", [s])),
        ("repeat(s, k)", bind_call("repeat", [s, k])),
        ("lpad(s, 5, '*')", bind_call("lpad", [s, lit(5), lit("*")])),
        ("rpad(s, k, 'xy')", bind_call("rpad", [s, k, lit("xy")])),
        ("split_part(s, '/', 2)", bind_call("split_part", [s, lit("/"), lit(2)])),
        ("split_part(s, 'a', k)", bind_call("split_part", [s, lit("a"), k])),
        ("trim(s)", bind_call("trim", [s])),
        ("trim(s, 'ab')", bind_call("btrim", [s, lit("ab")])),
        ("ltrim(s, ' a')", bind_call("ltrim", [s, lit(" a")])),
        ("starts_with(s, 'a')", bind_call("starts_with", [s, lit("a")])),
        ("md5(s)", bind_call("md5", [s])),
        ("s LIKE '%a_' ESCAPE '\\'", bind_call("like", [s, lit("%a_")])),
        ("s LIKE 'a\\%%' ESCAPE '\\'", bind_call("like", [s, lit("a\\%%")])),
        ("s ILIKE '%A%' ESCAPE '\\'", bind_call("ilike", [s, lit("%A%")])),
        ("s NOT LIKE '%b' ESCAPE '\\'", bind_call("not_like", [s, lit("%b")])),
        (
            "regexp_replace(s, '[ab]+', '<\\0>', 'g')",
            bind_call("regexp_replace", [s, lit("[ab]+"), lit("<\\&>"), lit("g")]),
        ),
        ("regexp_replace(s, 'a(.)', '\\1', '')", bind_call("regexp_replace", [s, lit("a(.)"), lit("\\1")])),
        ("nullif(s, u)", bind_call("nullif", [s, u])),
    ]
    for sql, e in cases:
        t.check(e, sql)


def _timestamps(rng: random.Random) -> list[dt.datetime | None]:
    base = dt.datetime(1960, 1, 1)
    return [
        None
        if rng.random() < 0.1
        else base + dt.timedelta(microseconds=rng.randint(0, 80 * 365 * 86_400 * 10**6))
        for _ in range(N)
    ]


@pytest.mark.parametrize("seed", SEEDS)
def test_datetime_functions(seed: int) -> None:
    rng = random.Random(seed)
    ts = _timestamps(rng)
    t = Table(
        ts=(ts, TIMESTAMP),
        ts2=(_timestamps(rng), TIMESTAMP),
        d=([None if v is None else v.date() for v in ts], DATE),
        n=(_ints(rng, -1000, 1000), INT),
    )
    tsr, ts2, d, n = t.ref("ts"), t.ref("ts2"), t.ref("d"), t.ref("n")
    iv = cast(literal("1 mon 2 days 03:04:05.000006"), INTERVAL)
    cases: list[tuple[str, Expr]] = [
        ("d + n", bind_call("+", [d, n])),
        ("d - n", bind_call("-", [d, n])),
        ("ts < ts2", bind_call("<", [tsr, ts2])),
        ("ts + INTERVAL '1 mon 2 days 03:04:05.000006'", bind_call("+", [tsr, iv])),
        ("ts - INTERVAL '1 mon 2 days 03:04:05.000006'", bind_call("-", [tsr, iv])),
        ("ts + INTERVAL '13 months'", bind_call("+", [tsr, cast(literal("13 months"), INTERVAL)])),
        ("d + INTERVAL '1 month'", bind_call("+", [d, cast(literal("1 month"), INTERVAL)])),
        ("d = ts", bind_call("=", [d, tsr])),
        ("ts::date", cast(tsr, DATE)),
        ("d::timestamp", cast(d, TIMESTAMP)),
        ("ts::varchar", cast(tsr, VARCHAR)),
        ("d::varchar", cast(d, VARCHAR)),
        ("strftime(ts, '%Y-%m-%d')", bind_call("to_char", [tsr, literal("YYYY-MM-DD")])),
        ("strftime(ts, '%I:%M')", bind_call("to_char", [tsr, literal("HH:MI")])),
        ("strftime(ts, '%H:%M:%S %p %b %d')", bind_call("to_char", [tsr, literal("HH24:MI:SS AM Mon DD")])),
        ("epoch(ts)", bind_call("date_part", [literal("epoch"), tsr])),
    ]
    fields = ("year", "month", "day", "hour", "minute", "dow", "isodow", "doy", "week", "quarter", "isoyear")
    cases += [(f"extract({f} from ts)::double", bind_call("date_part", [literal(f), tsr])) for f in fields]
    units = ("second", "minute", "hour", "day", "week", "month", "quarter", "year", "decade")
    cases += [(f"date_trunc('{u}', ts)", bind_call("date_trunc", [literal(u), tsr])) for u in units]
    for sql, e in cases:
        t.check(e, sql)
    diff = t.ours(bind_call("-", [tsr, ts2]))
    duck = t.duck("ts - ts2")
    assert [None if v is None else v.total_usecs for v in diff] == [
        None if v is None else (v.months * 30 + v.days) * 86_400_000_000 + v.nanoseconds // 1000 for v in duck
    ]
    dd = t.ours(bind_call("-", [d, cast(ts2, DATE)]))
    assert dd == t.duck("d - ts2::date")


@pytest.mark.parametrize("seed", SEEDS)
def test_casts_from_text(seed: int) -> None:
    rng = random.Random(seed)
    ints = _ints(rng, -(10**9), 10**9)
    t = Table(
        i=([None if v is None else f" {v} " if v % 3 == 0 else str(v) for v in ints], VARCHAR),
        b=([rng.choice(["true", "false", "t", "f", None]) for _ in range(N)], VARCHAR),
    )
    assert t.ours(cast(t.ref("i"), INT)) == t.duck("i::int")
    assert t.ours(cast(t.ref("b"), BOOLEAN)) == t.duck("b::boolean")


# -- NUMERIC against Python's decimal (exact) -----------------------------------------------------

_DIGITS = st.integers(min_value=-(10**17), max_value=10**17)
_SCALES = st.integers(min_value=0, max_value=10)
_NUMS = st.builds(lambda m, s: Decimal(m).scaleb(-s), _DIGITS, _SCALES)


def _num_col(values: list[Decimal | None]) -> Table:
    return Table(x=(values, NUMERIC))


def _oracle(op: str, a: Decimal, b: Decimal) -> Decimal | None:
    """PostgreSQL's result with its display scale (Python's decimal keeps +, -, *, % scales as
    numeric.c does; division is select_div_scale's), or None where piestream's NUMERIC (a 96-bit
    unscaled value, 28 digits after the point: README) must refuse it with 22003."""
    with localcontext(Context(prec=100)):
        if op == "/":
            v = pg_div(a, b)
        else:
            v = {"+": a + b, "-": a - b, "*": a * b, "%": a % b}[op]
    exp = v.as_tuple().exponent
    assert isinstance(exp, int)
    return v if abs(v.scaleb(max(-exp, 0))) < 2**96 and -exp <= 28 else None


def _with_scales(values: Sequence[object]) -> list[object]:
    return [(v, v.as_tuple().exponent) if isinstance(v, Decimal) else v for v in values]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_NUMS, _NUMS), min_size=1, max_size=40))
def test_numeric_matches_python_decimal(pairs: list[tuple[Decimal, Decimal]]) -> None:
    xs = [a for a, _ in pairs]
    ys = [b if b != 0 else Decimal(1) for _, b in pairs]
    t = Table(x=(xs, NUMERIC), y=(ys, NUMERIC))
    x, y = t.ref("x"), t.ref("y")
    for op in ("+", "-", "*", "/", "%"):
        expected = [_oracle(op, a, b) for a, b in zip(xs, ys, strict=True)]
        if any(v is None for v in expected):
            with pytest.raises(PiestreamError):
                t.ours(bind_call(op, [x, y]))
        else:  # value and display scale
            assert _with_scales(t.ours(bind_call(op, [x, y]))) == _with_scales(expected), op
    assert t.ours(bind_call("<", [x, y])) == [a < b for a, b in zip(xs, ys, strict=True)]
    assert t.ours(cast(x, DOUBLE)) == [float(a) for a in xs]
    assert t.ours(cast(x, VARCHAR)) == [format(a, "f") for a in xs]  # the display scale kept


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=50))
def test_int_to_numeric_and_back(values: list[int | None]) -> None:
    t = Table(x=(values, INT))
    as_num = cast(t.ref("x"), NUMERIC)
    assert t.ours(as_num) == [None if v is None else Decimal(v) for v in values]
    half = bind_call("/", [as_num, literal(Decimal(2))])
    expected = [
        None if v is None else int((Decimal(v) / 2).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        for v in values
    ]
    assert t.ours(cast(half, INT)) == expected
