"""Hopping windows (against a brute-force oracle) and ranking window functions (against DuckDB)."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from batch_env import BatchEnv, Duck, arrow_of, norm_rows, rows_of
from batch_exprs import lit

from piestream.batch import execute
from piestream.batch.plan import BatchHopWindow, BatchOverWindow, BatchScan, BatchValues
from piestream.common.order import ASC, DESC, DESC_NULLS_LAST
from piestream.common.types import BIGINT, DATE, INT, TIMESTAMP, TIMESTAMPTZ, VARCHAR
from piestream.expr.window import WindowFunctionCall
from piestream.storage.table.schemas import mv_table

EPOCH0 = dt.datetime(2024, 1, 1)
US = 1_000_000


@pytest.mark.parametrize(
    ("slide", "size", "offset"), [(60, 180, 0), (30, 30, 0), (60, 120, 15), (45, 90, -20)]
)
def test_hop_window_matches_brute_force(slide: int, size: int, offset: int) -> None:
    rng = random.Random(slide * size + offset)
    t = mv_table(70, [("id", INT), ("ts", TIMESTAMP), ("tz", TIMESTAMPTZ)], [0])
    secs = [rng.randint(-500, 500) for _ in range(60)]
    rows = [(i, EPOCH0 + dt.timedelta(seconds=s), None) for i, s in enumerate(secs)] + [(999, None, None)]
    env = BatchEnv()
    env.commit({t: rows})
    plan = BatchHopWindow(BatchScan(t, (0, 1)), 1, slide * US, size * US, offset * US)
    assert plan.schema.names == ["id", "ts", "window_start", "window_end"]
    got = sorted(rows_of(execute(plan, env.ctx()), plan.types))
    want = []
    base = int(EPOCH0.replace(tzinfo=dt.UTC).timestamp())
    for i, s in enumerate(secs):
        ts = base + s
        for start in range(ts - size - slide, ts + slide):  # every window with start <= ts < end
            if (start - offset) % slide == 0 and start <= ts < start + size:
                w0 = dt.datetime.fromtimestamp(start, dt.UTC).replace(tzinfo=None)
                want.append((i, EPOCH0 + dt.timedelta(seconds=s), w0, w0 + dt.timedelta(seconds=size)))
    assert got == sorted(want)


def test_hop_window_types() -> None:
    rows = (
        (
            lit(1, INT),
            lit(dt.datetime(2024, 1, 1, 0, 1, tzinfo=dt.UTC), TIMESTAMPTZ),
            lit(dt.date(2024, 1, 2), DATE),
        ),
    )
    values = BatchValues(rows)
    tz = BatchHopWindow(values, 1, 60 * US, 120 * US)
    assert tz.types[-2:] == [TIMESTAMPTZ, TIMESTAMPTZ]
    got = rows_of(execute(tz, BatchEnv().ctx()), tz.types)
    assert [r[3] for r in got] == [
        dt.datetime(2024, 1, 1, 0, 0, tzinfo=dt.UTC),
        dt.datetime(2024, 1, 1, 0, 1, tzinfo=dt.UTC),
    ]
    day = BatchHopWindow(values, 2, 86400 * US, 86400 * US)
    assert day.types[-2:] == [TIMESTAMP, TIMESTAMP]
    assert rows_of(execute(day, BatchEnv().ctx()), day.types)[0][3:] == (
        dt.datetime(2024, 1, 2),
        dt.datetime(2024, 1, 3),
    )
    with pytest.raises(ValueError):
        BatchHopWindow(values, 1, 60 * US, 90 * US)


T = mv_table(71, [("id", INT), ("p", VARCHAR), ("o", INT)], [0], name="t")
rng = random.Random(71)
ROWS = [(i, rng.choice([None, "x", "y", "z"]), rng.choice([None, 1, 2, 3, 4])) for i in range(250)]


@pytest.fixture(scope="module")
def env() -> BatchEnv:
    e = BatchEnv()
    e.commit({T: ROWS})
    return e


@pytest.fixture(scope="module")
def db() -> Duck:
    return Duck(t=arrow_of(T, ROWS))


CALLS = tuple(WindowFunctionCall(k, BIGINT) for k in ("rank", "dense_rank", "row_number"))


@pytest.mark.parametrize(
    ("partition", "order", "sql"),
    [
        ((1,), ((2, ASC), (0, ASC)), "PARTITION BY p ORDER BY o ASC NULLS LAST, id"),
        ((1,), ((2, DESC), (0, DESC)), "PARTITION BY p ORDER BY o DESC NULLS FIRST, id DESC"),
        ((), ((2, DESC_NULLS_LAST), (0, ASC)), "ORDER BY o DESC NULLS LAST, id"),
        ((1, 2), ((0, ASC),), "PARTITION BY p, o ORDER BY id"),
    ],
)
def test_over_window_matches_duckdb(
    env: BatchEnv, db: Duck, partition: tuple, order: tuple, sql: str
) -> None:  # type: ignore[type-arg]
    plan = BatchOverWindow(BatchScan(T, (0, 1, 2)), partition, order, CALLS)
    assert plan.schema.names == ["id", "p", "o", "rank", "dense_rank", "row_number"]
    got = rows_of(execute(plan, env.ctx()), plan.types)
    want = db.rows(
        f"SELECT *, rank() OVER w, dense_rank() OVER w, row_number() OVER w FROM t WINDOW w AS ({sql})"
    )
    assert sorted(got, key=lambda r: r[0]) == sorted(want, key=lambda r: r[0])


def test_rank_with_ties_and_no_order(env: BatchEnv, db: Duck) -> None:
    # ties on o: rank / dense_rank are exact; row_number is a permutation of 1..n per partition
    plan = BatchOverWindow(BatchScan(T, (0, 1, 2)), (1,), ((2, ASC),), CALLS)
    got = rows_of(execute(plan, env.ctx()), plan.types)
    want = db.rows(
        "SELECT id, p, o, rank() OVER w, dense_rank() OVER w FROM t WINDOW w AS (PARTITION BY p ORDER BY o)"
    )
    assert sorted(r[:5] for r in got) == sorted(want)
    for p in (None, "x", "y", "z"):
        rns = sorted(r[5] for r in got if r[1] == p)
        assert rns == list(range(1, len(rns) + 1))
    # rows come out in (partition, order) order: o is non-decreasing inside a partition
    last: dict[object, float] = {}
    for r in got:
        o = float("inf") if r[2] is None else r[2]
        assert o >= last.get(r[1], -1)
        last[r[1]] = o
    plain = BatchOverWindow(BatchScan(T, (0, 1, 2)), (1,), (), CALLS)
    got = rows_of(execute(plain, env.ctx()), plain.types)
    assert all(r[3] == 1 and r[4] == 1 for r in got)
    assert norm_rows(sorted(r[:3] for r in got if r[1] is not None)) == norm_rows(
        sorted(r for r in ROWS if r[1] is not None)
    )
