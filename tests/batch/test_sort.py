"""ORDER BY and top-N against DuckDB: mixed directions, NULLS FIRST/LAST, NaN, strings by bytes,
stability, OFFSET, group top-N and WITH TIES."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from batch_env import BatchEnv, Duck, arrow_of, norm_rows, rows_of
from batch_exprs import lit

from piestream.batch import execute
from piestream.batch.plan import BatchScan, BatchSort, BatchTopN, BatchValues
from piestream.common.order import ASC, ASC_NULLS_FIRST, DESC, DESC_NULLS_LAST, OrderType
from piestream.common.types import DOUBLE, INT, VARCHAR
from piestream.storage.table.schemas import mv_table

T = mv_table(60, [("id", INT), ("a", INT), ("s", VARCHAR), ("f", DOUBLE)], [0], name="t")
rng = random.Random(60)
ROWS = [
    (
        i,
        rng.choice([None, 1, 2, 3]),
        rng.choice([None, "a", "B", "b", "é", "ab", "", "z"]),
        rng.choice([None, math.nan, math.inf, -math.inf, 0.5, -1.0, 3.0]),
    )
    for i in range(300)
]
SCAN = BatchScan(T, (0, 1, 2, 3))
NAMES = ["id", "a", "s", "f"]


@pytest.fixture(scope="module")
def env() -> BatchEnv:
    e = BatchEnv()
    e.commit({T: ROWS})
    return e


@pytest.fixture(scope="module")
def db() -> Duck:
    return Duck(t=arrow_of(T, ROWS))


def _sql(order: tuple[tuple[int, OrderType], ...]) -> str:
    parts = [
        f"{NAMES[c]} {'DESC' if o.descending else 'ASC'} NULLS {'FIRST' if o.nulls_first else 'LAST'}"
        for c, o in order
    ]
    return ", ".join(parts)


ORDERS = [
    ((1, ASC), (2, DESC), (3, ASC_NULLS_FIRST), (0, ASC)),
    ((3, DESC), (1, DESC_NULLS_LAST), (0, DESC)),
    ((2, ASC_NULLS_FIRST), (3, DESC_NULLS_LAST), (0, ASC)),
    ((3, ASC), (2, ASC), (0, ASC)),
]


@pytest.mark.parametrize("order", ORDERS, ids=[_sql(o) for o in ORDERS])
def test_sort_matches_duckdb(env: BatchEnv, db: Duck, order: tuple) -> None:  # type: ignore[type-arg]
    plan = BatchSort(SCAN, order)
    got = rows_of(execute(plan, env.ctx()), plan.types)
    want = db.rows(f"SELECT * FROM t ORDER BY {_sql(order)}")
    assert norm_rows(got) == norm_rows(want)


def test_sort_is_stable_and_postgres_ordered() -> None:
    vals = [("b", 1), ("a", 2), (None, 3), ("b", 4), ("a", 5), ("é", 6), ("z", 7), ("B", 8)]
    values = BatchValues(tuple((lit(s, VARCHAR), lit(i, INT)) for s, i in vals))
    got = rows_of(execute(BatchSort(values, ((0, ASC),)), BatchEnv().ctx()), values.types)
    assert got == [("B", 8), ("a", 2), ("a", 5), ("b", 1), ("b", 4), ("z", 7), ("é", 6), (None, 3)]
    got = rows_of(execute(BatchSort(values, ((0, DESC),)), BatchEnv().ctx()), values.types)
    assert got[0] == (None, 3) and got[-1] == ("B", 8) and got[-3:-1] == [("a", 2), ("a", 5)]
    floats = BatchValues(tuple((lit(v, DOUBLE),) for v in [1.0, math.nan, None, -math.inf, math.inf, -0.0]))
    got = [r[0] for r in rows_of(execute(BatchSort(floats, ((0, ASC),)), BatchEnv().ctx()), [DOUBLE])]
    assert got[:4] == [-math.inf, -0.0, 1.0, math.inf] and math.isnan(got[4]) and got[5] is None


@pytest.mark.parametrize(("limit", "offset"), [(10, 0), (7, 5), (None, 290), (0, 0), (5, 1000)])
def test_top_n_matches_duckdb(env: BatchEnv, db: Duck, limit: int | None, offset: int) -> None:
    order = ORDERS[1]
    plan = BatchTopN(SCAN, order, limit, offset)
    got = rows_of(execute(plan, env.ctx()), plan.types)
    lim = f" LIMIT {limit}" if limit is not None else ""
    want = db.rows(f"SELECT * FROM t ORDER BY {_sql(order)}{lim} OFFSET {offset}")
    assert norm_rows(got) == norm_rows(want)


@pytest.mark.parametrize(
    ("group", "limit", "offset"), list(itertools.product([(1,), (1, 2)], [1, 3, None], [0, 2]))
)
def test_group_top_n_matches_duckdb(
    env: BatchEnv, db: Duck, group: tuple[int, ...], limit: int | None, offset: int
) -> None:
    order = ((3, DESC), (0, ASC))
    plan = BatchTopN(SCAN, order, limit, offset, group_key=group)
    got = rows_of(execute(plan, env.ctx()), plan.types)
    part = ", ".join(NAMES[g] for g in group)
    upper = f" AND rn <= {offset + limit}" if limit is not None else ""
    want = db.rows(
        f"SELECT id, a, s, f FROM (SELECT *, row_number() OVER (PARTITION BY {part} "
        f"ORDER BY {_sql(order)}) AS rn FROM t) WHERE rn > {offset}{upper} ORDER BY rn"
    )
    # the same rows, and inside each group the same sequence
    assert _by_group(got, group) == _by_group(want, group)
    groups_seen = [k for k, _ in itertools.groupby(got, key=lambda r: tuple(r[g] for g in group))]
    assert len(groups_seen) == len(set(groups_seen))  # each group's rows are contiguous


def _by_group(rows: list[tuple], group: tuple[int, ...]) -> dict[tuple, list[int]]:  # type: ignore[type-arg]
    out: dict[tuple, list[int]] = {}  # type: ignore[type-arg]
    for r in rows:
        out.setdefault(tuple(r[g] for g in group), []).append(r[0])
    return out


def test_top_n_ties_are_deterministic_and_with_ties(env: BatchEnv, db: Duck) -> None:
    order = ((1, ASC),)  # many ties
    first = rows_of(execute(BatchTopN(SCAN, order, 5, 3), env.ctx()), SCAN.types)
    again = rows_of(execute(BatchTopN(SCAN, order, 5, 3), env.ctx()), SCAN.types)
    assert norm_rows(first) == norm_rows(again)
    plan = BatchTopN(SCAN, order, 5, 3, with_ties=True)
    got = rows_of(execute(plan, env.ctx()), plan.types)
    assert all(r[1] == 1 for r in got)
    assert norm_rows(got[:5]) == norm_rows(first)
    ones = sum(1 for r in ROWS if r[1] == 1)
    assert len(got) == ones - 3  # all the a = 1 rows after the offset tie with the 5th
    grouped = BatchTopN(SCAN, ((3, ASC),), 1, 0, group_key=(1,), with_ties=True)
    got = rows_of(execute(grouped, env.ctx()), grouped.types)
    want = db.rows(
        "SELECT * FROM (SELECT *, rank() OVER (PARTITION BY a ORDER BY f ASC NULLS LAST) AS r FROM t) "
        "WHERE r = 1"
    )
    assert sorted(norm_rows(got), key=str) == sorted(norm_rows([w[:4] for w in want]), key=str)
