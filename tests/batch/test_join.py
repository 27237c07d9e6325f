"""Joins against DuckDB: every kind, with and without residual conditions, NULL and null-safe
keys, on randomized tables; payload columns of every Arrow layout; nested-loop joins."""

from __future__ import annotations

import itertools
import random
from decimal import Decimal

import pytest
from batch_env import BatchEnv, Duck, arrow_of, rows_of, sort_rows
from batch_exprs import Add, Cmp, IsNull, Or, col

from piestream.batch import execute, join
from piestream.batch.plan import JOIN_KINDS, BatchHashJoin, BatchNestedLoopJoin, BatchScan
from piestream.common.interval import Interval
from piestream.common.types import BIGINT, DOUBLE, INT, INTERVAL, NUMERIC, VARCHAR, list_of
from piestream.expr.expr import Expr
from piestream.storage.table.schemas import mv_table

COLS = [
    ("id", INT),
    ("k1", INT),
    ("k2", VARCHAR),
    ("v", INT),
    ("n", NUMERIC),
    ("iv", INTERVAL),
    ("arr", list_of(INT)),
]
L = mv_table(30, COLS, [0], name="l")
R = mv_table(31, COLS, [0], name="r")
W = len(COLS)


def _rows(rng: random.Random, n: int, base: int) -> list[tuple]:
    return [
        (
            base + i,
            rng.choice([None, 0, 1, 2, 3, 4]),
            rng.choice([None, "a", "b"]),
            rng.choice([None, 0, 1, 2, 3, 4, 5]),
            Decimal(rng.randint(-999, 999)) / 100,
            Interval(rng.randint(0, 2), rng.randint(0, 40), rng.randint(0, 10**9)),
            [rng.randint(0, 9), None],
        )
        for i in range(n)
    ]


def _env(seed: int) -> tuple[BatchEnv, list[tuple], list[tuple], Duck]:
    rng = random.Random(seed)
    lrows, rrows = _rows(rng, rng.randint(0, 45), 0), _rows(rng, rng.randint(0, 35), 1000)
    env = BatchEnv()
    env.commit({L: lrows, R: rrows})
    return env, lrows, rrows, Duck(l=arrow_of(L, lrows), r=arrow_of(R, rrows))


LV, RV = col(3, INT), col(W + 3, INT)
CONDITIONS: list[tuple[Expr | None, str]] = [
    (None, ""),
    (Cmp("<", LV, RV), "l.v < r.v"),
    (
        Or(Cmp(">", Add(LV, RV, BIGINT), col(W + 1, INT)), IsNull(col(2, VARCHAR))),
        "(l.v + r.v > r.k1 OR l.k2 IS NULL)",
    ),
]
KEYS = [((1,), (False,)), ((1, 2), (False, False)), ((1, 2), (False, True)), ((2,), (True,))]
SQL_KIND = {"inner": "INNER", "left": "LEFT", "right": "RIGHT", "full": "FULL"}
OUT = [0, 1, 2, 3, W, W + 1, W + 2, W + 3]  # compared with DuckDB: id, k1, k2, v of both sides


def _on(keys: tuple[int, ...], null_safe: tuple[bool, ...], cond: str) -> str:
    names = {1: "k1", 2: "k2"}
    parts = [
        f"l.{names[k]} {'IS NOT DISTINCT FROM' if ns else '='} r.{names[k]}"
        for k, ns in zip(keys, null_safe, strict=True)
    ]
    return " AND ".join(parts + ([cond] if cond else [])) or "TRUE"


def _duck_join(db: Duck, kind: str, on: str) -> list[tuple]:
    if kind in SQL_KIND:
        sql = f"SELECT l.id, l.k1, l.k2, l.v, r.id, r.k1, r.k2, r.v FROM l {SQL_KIND[kind]} JOIN r ON {on}"
    else:
        neg = "NOT " if kind == "left_anti" else ""
        sql = f"SELECT l.id, l.k1, l.k2, l.v FROM l WHERE {neg}EXISTS (SELECT 1 FROM r WHERE {on})"
    return db.rows(sql)


def _ours(env: BatchEnv, plan: BatchHashJoin | BatchNestedLoopJoin, lrows: list, rrows: list) -> list[tuple]:
    rows = rows_of(execute(plan, env.ctx()), plan.types)
    by_id = {r[0]: r for r in lrows + rrows}
    for r in rows:  # payload columns (decimal, interval, list) travel with their rows
        for side in (0, W) if len(r) > W else (0,):
            if r[side] is not None:
                assert r[side : side + W] == by_id[r[side]]
            else:
                assert all(v is None for v in r[side : side + W])
    cols = OUT if plan.kind in SQL_KIND else OUT[:4]
    return [tuple(r[c] for c in cols) for r in rows]


@pytest.mark.parametrize("seed", range(4))
def test_hash_join_matches_duckdb(seed: int) -> None:
    env, lrows, rrows, db = _env(seed)
    scan_l, scan_r = BatchScan(L, tuple(range(W))), BatchScan(R, tuple(range(W)))
    for kind, (cond, cond_sql), (keys, null_safe) in itertools.product(JOIN_KINDS, CONDITIONS, KEYS):
        plan = BatchHashJoin(scan_l, scan_r, kind, keys, keys, null_safe, cond)  # type: ignore[arg-type]
        got = _ours(env, plan, lrows, rrows)
        want = _duck_join(db, kind, _on(keys, null_safe, cond_sql))
        assert sort_rows(got) == sort_rows(want), (kind, cond_sql, keys, null_safe)


@pytest.mark.parametrize("seed", range(2))
def test_nested_loop_join_matches_duckdb(seed: int) -> None:
    env, lrows, rrows, db = _env(100 + seed)
    scan_l, scan_r = BatchScan(L, tuple(range(W))), BatchScan(R, tuple(range(W)))
    conds = [*CONDITIONS, (Cmp("<", col(1, INT), col(W + 1, INT)), "l.k1 < r.k1")]
    for kind, (cond, cond_sql) in itertools.product(JOIN_KINDS, conds):
        plan = BatchNestedLoopJoin(scan_l, scan_r, kind, cond)  # type: ignore[arg-type]
        got = _ours(env, plan, lrows, rrows)
        want = _duck_join(db, kind, cond_sql or "TRUE")
        assert sort_rows(got) == sort_rows(want), (kind, cond_sql)


def test_blocks_of_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many-to-many and cross joins gathered in several small blocks give the same answer."""
    env, lrows, rrows, _ = _env(7)
    scan_l, scan_r = BatchScan(L, tuple(range(W))), BatchScan(R, tuple(range(W)))
    plans = [
        BatchHashJoin(scan_l, scan_r, "full", (2,), (2,), (True,), CONDITIONS[1][0]),
        BatchNestedLoopJoin(scan_l, scan_r, "left", CONDITIONS[2][0]),
    ]
    before = [sort_rows(_ours(env, p, lrows, rrows)) for p in plans]
    monkeypatch.setattr(join, "PAIR_BLOCK", 7)
    assert [sort_rows(_ours(env, p, lrows, rrows)) for p in plans] == before


def test_key_semantics() -> None:
    """Float keys: NaN = NaN and -0.0 = 0.0 (PostgreSQL); integer keys of different widths."""
    a = mv_table(40, [("id", INT), ("f", DOUBLE), ("i", INT)], [0])
    b = mv_table(41, [("id", INT), ("f", DOUBLE), ("i", BIGINT)], [0])
    env = BatchEnv()
    nan = float("nan")
    env.commit(
        {a: [(1, nan, 1), (2, -0.0, 2), (3, None, 3)], b: [(10, nan, 1), (11, 0.0, 2), (12, None, 2**40)]}
    )
    sa, sb = BatchScan(a, (0, 1, 2)), BatchScan(b, (0, 1, 2))
    got = rows_of(
        execute(BatchHashJoin(sa, sb, "inner", (1,), (1,)), env.ctx()),
        [INT, DOUBLE, INT, INT, DOUBLE, BIGINT],
    )
    assert sorted((r[0], r[3]) for r in got) == [(1, 10), (2, 11)]
    plan = BatchHashJoin(sa, sb, "left_semi", (2,), (2,))
    assert sorted(r[0] for r in rows_of(execute(plan, env.ctx()), plan.types)) == [1, 2]
    plan = BatchHashJoin(sa, sb, "left_anti", (1,), (1,), (True,))
    assert [r[0] for r in rows_of(execute(plan, env.ctx()), plan.types)] == []


def test_empty_sides() -> None:
    env, lrows, _, _ = _env(3)
    scan_l = BatchScan(L, tuple(range(W)))
    other = mv_table(32, COLS, [0])
    empty_r = BatchScan(other, tuple(range(W)))
    for kind in JOIN_KINDS:
        plan = BatchHashJoin(scan_l, empty_r, kind, (1,), (1,))  # type: ignore[arg-type]
        n = execute(plan, env.ctx()).num_rows
        assert n == (len(lrows) if kind in ("left", "full", "left_anti") else 0), kind
        plan2 = BatchHashJoin(empty_r, scan_l, kind, (1,), (1,))  # type: ignore[arg-type]
        n = execute(plan2, env.ctx()).num_rows
        assert n == (len(lrows) if kind in ("right", "full") else 0), kind
