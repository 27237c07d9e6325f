"""Hash aggregation against DuckDB (values) and PostgreSQL's rules (types, NULLs, NaN, exactness)."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pytest
from batch_env import BatchEnv, Duck, arrow_of, norm_rows, rows_of, sort_rows
from batch_exprs import Cmp, col, lit

from pg_numeric import pg_div
from piestream.batch import execute
from piestream.batch.plan import BatchAggCall, BatchFilter, BatchHashAgg, BatchProject, BatchScan, BatchValues
from piestream.common.errors import NumericOutOfRange
from piestream.common.interval import Interval
from piestream.common.order import ASC, DESC, DESC_NULLS_LAST
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DOUBLE,
    INT,
    INTERVAL,
    NUMERIC,
    REAL,
    SMALLINT,
    VARCHAR,
    list_of,
    struct_of,
)
from piestream.storage.table.schemas import mv_table

COLS = [
    ("id", INT),
    ("g", INT),
    ("s", VARCHAR),
    ("x", INT),
    ("y", BIGINT),
    ("f", DOUBLE),
    ("d", NUMERIC),
    ("b", BOOLEAN),
    ("w", DOUBLE),
]
T = mv_table(50, COLS, [0], name="t")
ID, G, S, X, Y, F, D, B, Wc = range(9)
rng = random.Random(50)
ROWS = [
    (
        i,
        rng.choice([None, 1, 2, 3, 4]),
        rng.choice([None, "a", "b", "ab", "é", "Z", ""]),
        rng.choice([None, -3, 0, 1, 2, 7, 100]),
        rng.choice([None, 2**62, -(2**61), 5, 2**40]),
        rng.choice([None, 1.5, -2.25, math.nan, 0.0, 1e10]),
        rng.choice([None, Decimal("1.25"), Decimal("-0.0000000001"), Decimal("123456789.5")]),
        rng.choice([None, True, False]),
        rng.choice([None, 1.0, 2.5, -4.0, 10.0]),
    )
    for i in range(400)
]


@pytest.fixture(scope="module")
def env() -> BatchEnv:
    e = BatchEnv()
    e.commit({T: ROWS})
    return e


@pytest.fixture(scope="module")
def db() -> Duck:
    return Duck(t=arrow_of(T, ROWS))


SCAN = BatchScan(T, tuple(range(len(COLS))))
SEP = len(COLS)  # a constant ',' column: the delimiter argument of string_agg
INPUT = BatchProject(SCAN, (*(col(i, t) for i, (_, t) in enumerate(COLS)), lit(",", VARCHAR)))
x_gt_1 = Cmp(">", col(X, INT), lit(1, INT))

# (call, DuckDB expression)
CALLS: list[tuple[BatchAggCall, str]] = [
    (BatchAggCall("count_star", (), BIGINT), "count(*)"),
    (BatchAggCall("count", (X,), BIGINT), "count(x)"),
    (BatchAggCall("count", (S,), BIGINT, distinct=True), "count(DISTINCT s)"),
    (BatchAggCall("sum", (X,), BIGINT), "sum(x)"),
    (BatchAggCall("sum", (Y,), NUMERIC), "sum(y)"),
    (BatchAggCall("sum", (F,), DOUBLE), "sum(f)"),
    (BatchAggCall("sum", (D,), NUMERIC), "sum(d)"),
    (BatchAggCall("sum", (X,), BIGINT, distinct=True), "sum(DISTINCT x)"),
    (BatchAggCall("avg", (X,), NUMERIC), "avg(x)"),
    (BatchAggCall("avg", (Y,), NUMERIC), "avg(y)"),
    (BatchAggCall("avg", (D,), NUMERIC), "avg(d)"),
    (BatchAggCall("avg", (Wc,), DOUBLE), "avg(w)"),
    (BatchAggCall("min", (X,), INT), "min(x)"),
    (BatchAggCall("max", (Y,), BIGINT), "max(y)"),
    (BatchAggCall("min", (F,), DOUBLE), "min(f)"),
    (BatchAggCall("max", (F,), DOUBLE), "max(f)"),
    (BatchAggCall("min", (S,), VARCHAR), "min(s)"),
    (BatchAggCall("max", (S,), VARCHAR), "max(s)"),
    (BatchAggCall("max", (D,), NUMERIC), "max(d)"),
    (BatchAggCall("bool_and", (B,), BOOLEAN), "bool_and(b)"),
    (BatchAggCall("bool_or", (B,), BOOLEAN), "bool_or(b)"),
    (BatchAggCall("count_star", (), BIGINT, filter=x_gt_1), "count(*) FILTER (WHERE x > 1)"),
    (BatchAggCall("sum", (Y,), NUMERIC, filter=x_gt_1), "sum(y) FILTER (WHERE x > 1)"),
    (
        BatchAggCall("string_agg", (S, SEP), VARCHAR, order_by=((S, DESC), (ID, ASC))),
        "string_agg(s, ',' ORDER BY s DESC NULLS FIRST, id)",
    ),
    (
        BatchAggCall("string_agg", (S, SEP), VARCHAR, order_by=((ID, DESC),)),
        "string_agg(s, ',' ORDER BY id DESC)",
    ),
    (
        BatchAggCall("array_agg", (X,), list_of(INT), order_by=((X, DESC_NULLS_LAST), (ID, ASC))),
        "array_agg(x ORDER BY x DESC NULLS LAST, id)",
    ),
    (
        BatchAggCall("array_agg", (F,), list_of(DOUBLE), filter=x_gt_1, order_by=((ID, ASC),)),
        "array_agg(f ORDER BY id) FILTER (WHERE x > 1)",
    ),
    (BatchAggCall("string_agg", (S, SEP), VARCHAR, distinct=True), "string_agg(DISTINCT s, ',' ORDER BY s)"),
    (BatchAggCall("array_agg", (X,), list_of(INT), distinct=True), "array_agg(DISTINCT x ORDER BY x)"),
    (BatchAggCall("var_pop", (X,), NUMERIC), "var_pop(x)"),
    (BatchAggCall("var_samp", (X,), NUMERIC), "var_samp(x)"),
    (BatchAggCall("stddev_samp", (D,), NUMERIC), "stddev_samp(d)"),
    (BatchAggCall("stddev_pop", (Wc,), DOUBLE), "stddev_pop(w)"),
    (BatchAggCall("var_samp", (Wc,), DOUBLE), "var_samp(w)"),
]


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("group_key", [(G,), (G, S), ()], ids=["g", "g_s", "none"])
def test_aggregates_match_duckdb(env: BatchEnv, db: Duck, group_key: tuple[int, ...]) -> None:
    plan = BatchHashAgg(INPUT, group_key, tuple(c for c, _ in CALLS))
    got = rows_of(execute(plan, env.ctx()), plan.types)
    keys = ", ".join(COLS[k][0] for k in group_key)
    select = ", ".join([keys] * bool(keys) + [sql for _, sql in CALLS])
    want = db.rows(f"SELECT {select} FROM t" + (f" GROUP BY {keys}" if keys else ""))
    got_n, want_n = sort_rows(norm_rows(got)), sort_rows(norm_rows(want))
    assert len(got_n) == len(want_n)
    for g, w in zip(got_n, want_n, strict=True):
        for i, (a, b) in enumerate(zip(g, w, strict=True)):
            assert _close(a, b), (plan.schema.names[i], a, b, g[: len(group_key)])


def test_result_types_are_the_calls(env: BatchEnv) -> None:
    plan = BatchHashAgg(INPUT, (G,), tuple(c for c, _ in CALLS))
    out = execute(plan, env.ctx())
    assert [f.type for f in out.schema] == [INT.arrow] + [c.return_type.arrow for c, _ in CALLS]


def test_empty_input() -> None:
    env = BatchEnv()
    env.commit({T: ROWS[:3]})
    empty = BatchFilter(INPUT, lit(False, BOOLEAN))
    calls = tuple(c for c, _ in CALLS)
    one = execute(BatchHashAgg(empty, (), calls), env.ctx())
    assert one.num_rows == 1
    for c, column in zip(calls, one.columns, strict=True):
        assert column.to_pylist() == [0 if c.kind in ("count", "count_star") else None], c
    assert execute(BatchHashAgg(empty, (G,), calls), env.ctx()).num_rows == 0


def test_exact_integer_sums_and_averages() -> None:
    big = 2**63 - 1
    rows = [(i, 1, None, None, big, None, None, None, None) for i in range(4)] + [
        (10, 2, None, None, -big - 1, None, None, None, None),
        (11, 2, None, None, -1, None, None, None, None),
    ]
    env = BatchEnv()
    env.commit({T: rows})
    calls = (BatchAggCall("sum", (Y,), NUMERIC), BatchAggCall("avg", (Y,), NUMERIC))
    plan = BatchHashAgg(SCAN, (G,), calls)
    got = {r[0]: r[1:] for r in rows_of(execute(plan, env.ctx()), plan.types)}
    assert got[1] == (Decimal(4 * big), Decimal(big))
    assert got[2][0] == Decimal(-(2**63) - 1)
    assert str(got[2][1]) == "-4611686018427387905"  # select_div_scale gives scale 0: PostgreSQL's
    assert str(got[2][1]) == str(pg_div(-(2**63) - 1, 2))
    with pytest.raises(NumericOutOfRange):  # ((2**63 - 1) / 2) ** 2 ~ 2e37: beyond a NUMERIC's 2**96
        execute(BatchHashAgg(SCAN, (G,), (BatchAggCall("var_pop", (Y,), NUMERIC),)), env.ctx())
    with pytest.raises(NumericOutOfRange):
        execute(BatchHashAgg(SCAN, (G,), (BatchAggCall("sum", (Y,), BIGINT),)), env.ctx())


def test_numeric_average_rounds_half_away_from_zero() -> None:
    vals = [Decimal(1), Decimal(2), Decimal(2)]  # 5/3 at select_div_scale: 1.666666666666666|67
    values = BatchValues(tuple((lit(v, NUMERIC), lit(-v, NUMERIC), lit(int(v), SMALLINT)) for v in vals))
    calls = (
        BatchAggCall("avg", (0,), NUMERIC),
        BatchAggCall("avg", (1,), NUMERIC),
        BatchAggCall("avg", (2,), NUMERIC),
        BatchAggCall("sum", (2,), BIGINT),
        BatchAggCall("stddev_samp", (2,), NUMERIC),
    )
    got = rows_of(
        execute(BatchHashAgg(values, (), calls), BatchEnv().ctx()), [NUMERIC] * 3 + [BIGINT, NUMERIC]
    )
    want = [
        ("1.6666666666666667", "-1.6666666666666667", "1.6666666666666667", "5", "0.57735026918962576451")
    ]
    assert [tuple(map(str, r)) for r in got] == want  # PostgreSQL's text (stddev: numeric.c's scale)


def test_min_max_of_other_types() -> None:
    """Intervals compare by their total (1 mon = 30 days), lists and structs element-wise,
    bytea by bytes, real NaN largest; sum / avg of intervals."""
    iv = [Interval(1, 0, 0), Interval(0, 29, 0), Interval(0, 0, 10**6), Interval(0, 31, 0)]
    lists = [[1, 2], [1], [None], [0, 5]]
    structs = [{"a": 2}, {"a": None}, {"a": 1}, {"a": 3}]
    st = struct_of(("a", INT))
    rows = tuple(
        (lit(i, INTERVAL), lit(li, list_of(INT)), lit(s, st), lit(bytes([200 - n]), BYTEA), lit(r, REAL))
        for n, (i, li, s, r) in enumerate(
            zip(iv, lists, structs, [1.0, float("nan"), -1.0, 2.0], strict=True)
        )
    )
    values = BatchValues(rows)
    calls = []
    for c, t in enumerate([INTERVAL, list_of(INT), st, BYTEA, REAL]):
        calls += [BatchAggCall("min", (c,), t), BatchAggCall("max", (c,), t)]
    calls += [BatchAggCall("sum", (0,), INTERVAL), BatchAggCall("avg", (0,), INTERVAL)]
    plan = BatchHashAgg(values, (), tuple(calls))
    (got,) = rows_of(execute(plan, BatchEnv().ctx()), plan.types)
    assert got[0] == Interval(0, 0, 10**6) and got[1] == Interval(0, 31, 0)
    assert got[2] == [0, 5] and got[3] == [None]  # NULL elements sort last
    assert got[4] == {"a": 1} and got[5] == {"a": None}
    assert got[6] == bytes([197]) and got[7] == bytes([200])
    assert got[8] == -1.0 and math.isnan(got[9])
    assert got[10] == Interval(1, 60, 10**6)
    assert got[11] == Interval(0, 22, 43_200_250_000)  # PostgreSQL: '1 mon 60 days 1 sec' / 4


def test_group_key_semantics() -> None:
    """NULLs form one group; NaN is one group; -0.0 and 0.0 are one group."""
    rows = tuple((lit(v, DOUBLE),) for v in [None, float("nan"), 0.0, -0.0, None, float("nan"), 1.0])
    plan = BatchHashAgg(BatchValues(rows), (0,), (BatchAggCall("count_star", (), BIGINT),))
    got = rows_of(execute(plan, BatchEnv().ctx()), plan.types)
    assert sorted(norm_rows(got), key=str) == sorted([(None, 2), ("NaN", 2), (0.0, 2), (1.0, 1)], key=str)


def test_large_input_types() -> None:
    """Arrow result types stay exact on a chunked, multi-block input (no accidental float)."""
    env = BatchEnv()
    many = [(i, i % 7, None, i, i * 1000, None, Decimal(i) / 8, i % 2 == 0, None) for i in range(5000)]
    env.commit({T: many})
    plan = BatchHashAgg(SCAN, (G,), (BatchAggCall("sum", (Y,), NUMERIC), BatchAggCall("avg", (D,), NUMERIC)))
    out = execute(plan, env.ctx())
    assert out.schema.field(1).type == NUMERIC.arrow  # the per-value-scale NUMERIC column
    got = {r[0]: r[1:] for r in rows_of(out, plan.types)}
    for g in range(7):
        ys = [r[4] for r in many if r[1] == g]
        ds = [r[6] for r in many if r[1] == g]
        assert got[g][0] == sum(ys)
        assert str(got[g][1]) == str(pg_div(sum(ds), len(ds)))


def test_string_agg_delimiters_and_bytea() -> None:
    """Each value but a group's first is preceded by its own row's delimiter; a NULL delimiter
    adds nothing; NULL values are skipped; bytea concatenates bytes."""
    rows = [
        ("a", ",", b"\x01"),
        (None, ";", b"\x02"),
        ("b", None, None),
        ("c", "|", b"\x03"),
        ("d", "-", b""),
    ]
    values = BatchValues(tuple((lit(v, VARCHAR), lit(d, VARCHAR), lit(b, BYTEA)) for v, d, b in rows))
    calls = (
        BatchAggCall("string_agg", (0, 1), VARCHAR),
        BatchAggCall("string_agg", (2, 1), BYTEA),
        BatchAggCall("string_agg", (0, 1), VARCHAR, order_by=((0, DESC),)),
        BatchAggCall("bool_or", (0,), BOOLEAN, filter=lit(False, BOOLEAN)),
    )
    plan = BatchHashAgg(BatchProject(values, (col(0, VARCHAR), col(1, VARCHAR), col(2, BYTEA))), (), calls)
    got = rows_of(execute(plan, BatchEnv().ctx()), plan.types)
    assert got == [("ab|c-d", b"\x01;\x02|\x03-", "d|cb,a", None)]


def test_output_in_chunks() -> None:
    from piestream.batch import BatchContext, execute_to_chunks

    env = BatchEnv()
    env.commit({T: ROWS})
    ctx = env.ctx()
    small = BatchContext(ctx.storage, ctx.epoch, chunk_rows=64)
    chunks = list(execute_to_chunks(SCAN, small))
    assert len(chunks) == 7 and all(c.cardinality <= 64 for c in chunks)
    assert sum(c.cardinality for c in chunks) == len(ROWS)


def test_plan_validation() -> None:
    with pytest.raises(ValueError):
        BatchAggCall("median", (0,), INT)
    with pytest.raises(ValueError):
        BatchAggCall("string_agg", (0,), VARCHAR)
    with pytest.raises(ValueError):
        BatchAggCall("count", (0,), INT)
    with pytest.raises(ValueError):
        BatchHashAgg(SCAN, (99,), ())
    with pytest.raises(ValueError):
        BatchHashAgg(SCAN, (G,), (BatchAggCall("sum", (X,), BIGINT),), schema=SCAN.schema)
