"""Filter (NULL is false), union all, limit and max-one-row over committed tables."""

from __future__ import annotations

import random

import pytest
from batch_env import BatchEnv, arrow_of, duck, norm_rows, rows_of, sort_rows
from batch_exprs import And, Cmp, IsNull, Or, col, lit

from piestream.batch import CardinalityViolation, execute
from piestream.batch.plan import (
    BatchFilter,
    BatchLimit,
    BatchMaxOneRow,
    BatchProject,
    BatchScan,
    BatchUnion,
    BatchValues,
)
from piestream.common.errors import PiestreamError
from piestream.common.types import BOOLEAN, INT, VARCHAR
from piestream.expr.expr import FuncCall
from piestream.storage.table.schemas import mv_table

T = mv_table(20, [("id", INT), ("a", INT), ("b", VARCHAR)], [0], name="t")
rng = random.Random(20)
ROWS = [(i, rng.choice([None, 0, 1, 2, 3]), rng.choice([None, "x", "y", "é", "X"])) for i in range(300)]


@pytest.fixture(scope="module")
def env() -> BatchEnv:
    e = BatchEnv()
    e.commit({T: ROWS})
    return e


SCAN = BatchScan(T, (0, 1, 2))
A, B = col(1, INT), col(2, VARCHAR)
PREDICATES = [
    (Cmp(">", A, lit(1, INT)), "a > 1"),
    (Cmp("<>", B, lit("x", VARCHAR)), "b <> 'x'"),
    (And(Cmp(">=", A, lit(1, INT)), Cmp("=", B, lit("y", VARCHAR))), "a >= 1 AND b = 'y'"),
    (Or(Cmp("<", A, lit(1, INT)), Cmp(">", B, lit("x", VARCHAR))), "a < 1 OR b > 'x'"),
    (IsNull(A), "a IS NULL"),
    (Cmp("=", A, lit(None, INT)), "a = NULL"),
    (Or(IsNull(B), Cmp("=", A, lit(None, INT))), "b IS NULL OR a = NULL"),
]


@pytest.mark.parametrize(("pred", "sql"), PREDICATES, ids=[s for _, s in PREDICATES])
def test_filter_matches_duckdb(env: BatchEnv, pred: object, sql: str) -> None:
    plan = BatchFilter(SCAN, pred)  # type: ignore[arg-type]
    got = rows_of(execute(plan, env.ctx()), plan.types)
    want = duck(f"SELECT * FROM t WHERE {sql}", t=arrow_of(T, ROWS))
    assert sort_rows(got) == sort_rows(want)


def test_union_all_keeps_duplicates(env: BatchEnv) -> None:
    plan = BatchUnion((SCAN, BatchFilter(SCAN, IsNull(A)), BatchFilter(SCAN, lit(False, BOOLEAN))))
    got = rows_of(execute(plan, env.ctx()), plan.types)
    want = duck("SELECT * FROM t UNION ALL SELECT * FROM t WHERE a IS NULL", t=arrow_of(T, ROWS))
    assert sort_rows(norm_rows(got)) == sort_rows(norm_rows(want))


def test_limit_offset(env: BatchEnv) -> None:
    full = rows_of(execute(SCAN, env.ctx()), SCAN.types)
    for limit, offset in [(5, 0), (5, 298), (None, 290), (0, 3), (10, 1000)]:
        got = rows_of(execute(BatchLimit(SCAN, limit, offset), env.ctx()), SCAN.types)
        assert got == full[offset : None if limit is None else offset + limit]


def test_max_one_row(env: BatchEnv) -> None:
    one = BatchMaxOneRow(BatchScan(T, (1,), pk_prefix=(5,), point_get=True))
    assert rows_of(execute(one, env.ctx()), one.types) == [(ROWS[5][1],)]
    none = BatchMaxOneRow(BatchScan(T, (1,), pk_prefix=(5000,), point_get=True))
    assert execute(none, env.ctx()).num_rows == 0
    with pytest.raises(CardinalityViolation) as err:
        execute(BatchMaxOneRow(BatchValues(((lit(1, INT),), (lit(2, INT),)))), env.ctx())
    assert isinstance(err.value, PiestreamError)
    assert err.value.sqlstate == "21000"
    assert err.value.message == "more than one row returned by a subquery used as an expression"


def test_with_the_expression_library(env: BatchEnv) -> None:
    """The repo's own `FuncCall` kernels: a filter compacts before the projection above it, so a
    division by zero in a row the WHERE removed never runs (PostgreSQL semantics)."""
    a = col(1, INT)
    pred = FuncCall("greater_than", (a, lit(0, INT)), BOOLEAN)
    exprs = (col(0, INT), FuncCall("divide", (lit(12, INT), a), INT), FuncCall("add", (a, lit(1, INT)), INT))
    plan = BatchProject(BatchFilter(SCAN, pred), exprs)
    got = rows_of(execute(plan, env.ctx()), plan.types)
    want = duck("SELECT id, 12 // a, a + 1 FROM t WHERE a > 0", t=arrow_of(T, ROWS))
    assert sort_rows(got) == sort_rows(want)
    with pytest.raises(PiestreamError) as err:  # ... but it does run on the rows that pass
        execute(BatchProject(SCAN, exprs), env.ctx())
    assert err.value.sqlstate == "22012"
