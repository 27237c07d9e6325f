"""Batch scans over real committed tables: pushdown shapes, column pruning, snapshots, VALUES."""

from __future__ import annotations

import datetime as dt
import pickle
from decimal import Decimal

import pytest
from batch_env import BatchEnv, rows_of, sort_rows
from batch_exprs import Add, col, lit

from piestream.batch import execute, execute_to_chunks
from piestream.batch.plan import BatchProject, BatchScan, BatchUnion, BatchValues, explain_tree
from piestream.common.interval import Interval
from piestream.common.order import ASC, DESC
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    JSONB,
    NUMERIC,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    list_of,
    struct_of,
)
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.key_range import Bound
from piestream.storage.table.schemas import mv_table

# pk (g ASC, k DESC, id ASC), distributed by g
T = TableDesc(
    7,
    (ColumnDesc("g", INT), ColumnDesc("k", VARCHAR), ColumnDesc("id", BIGINT), ColumnDesc("v", DOUBLE)),
    pk=(0, 1, 2),
    pk_orders=(ASC, DESC, ASC),
    dist_key=(0,),
    read_prefix_len_hint=1,
    name="t",
)
ROWS = [
    (g, k, i, float(i) / 2)
    for i, (g, k) in enumerate((g, k) for g in range(6) for k in ("a", "b", "c", None))
]


@pytest.fixture(scope="module")
def env() -> BatchEnv:
    e = BatchEnv()
    e.commit({T: ROWS})
    return e


def run(env: BatchEnv, plan: BatchScan, epoch: int | None = None) -> list[tuple]:
    return rows_of(execute(plan, env.ctx(epoch)), plan.schema.types)


def test_full_scan_and_column_pruning(env: BatchEnv) -> None:
    assert sort_rows(run(env, BatchScan(T, (0, 1, 2, 3)))) == sort_rows(ROWS)
    plan = BatchScan(T, (3, 0))
    assert plan.schema.names == ["v", "g"]
    assert sort_rows(run(env, plan)) == sort_rows([(r[3], r[0]) for r in ROWS])
    assert execute(BatchScan(T, ()), env.ctx()).num_rows == len(ROWS)  # SELECT count(*) shape


def test_prefix_scan_on_one_vnode_in_pk_order(env: BatchEnv) -> None:
    # g covers the distribution key: one vnode, rows in pk order (k DESC: NULL first)
    got = run(env, BatchScan(T, (1, 2), pk_prefix=(3,)))
    assert got == [(None, 15), ("c", 14), ("b", 13), ("a", 12)]
    got = run(env, BatchScan(T, (2,), pk_prefix=(3, "b")))
    assert got == [(13,)]
    assert run(env, BatchScan(T, (2,), pk_prefix=(3, None))) == [(15,)]
    assert run(env, BatchScan(T, (2,), pk_prefix=(99,))) == []


def test_range_on_next_pk_column(env: BatchEnv) -> None:
    # k is DESC: bounds in pk order, so (from "c" down to "b")
    got = run(env, BatchScan(T, (1,), pk_prefix=(2,), pk_range=(Bound.inc("c"), Bound.inc("b"))))
    assert got == [("c",), ("b",)]
    got = run(env, BatchScan(T, (1,), pk_prefix=(2,), pk_range=(Bound.exc("c"), None)))
    assert got == [("b",), ("a",)]
    # a range on the first pk column: every vnode, filtered by key range
    got = run(env, BatchScan(T, (0,), pk_range=(Bound.inc(4), Bound.exc(5))))
    assert sorted(got) == [(4,)] * 4


def test_point_get(env: BatchEnv) -> None:
    assert run(env, BatchScan(T, (3,), pk_prefix=(1, "a", 4), point_get=True)) == [(2.0,)]
    assert run(env, BatchScan(T, (3,), pk_prefix=(1, "a", 5), point_get=True)) == []
    assert run(env, BatchScan(T, (2,), pk_prefix=(1, None, 7), point_get=True)) == [(7,)]
    with pytest.raises(ValueError):
        BatchScan(T, (3,), pk_prefix=(1, "a"), point_get=True)


def test_vnode_ranges_partition_a_full_scan(env: BatchEnv) -> None:
    parts = [BatchScan(T, (0, 1, 2, 3), vnodes=(lo, lo + 64)) for lo in range(0, 256, 64)]
    got = run(env, BatchUnion(tuple(parts)))  # type: ignore[arg-type]
    assert sort_rows(got) == sort_rows(ROWS)
    assert all(len(run(env, p)) < len(ROWS) for p in parts)


def test_snapshot_reads_at_pinned_epochs() -> None:
    env = BatchEnv()
    t = mv_table(3, [("id", INT), ("v", VARCHAR)], [0], name="s")
    e1 = env.commit({t: [(1, "a"), (2, "b"), (3, "c")]})
    old_ctx = env.ctx(e1)  # a query pinned at e1 that is still running
    e2 = env.commit({t: [(2, "B"), (4, "d")]}, deletes={t: [(2, "b"), (3, "c")]})
    e3 = env.commit(deletes={t: [(1, "a")]})
    scan = BatchScan(t, (0, 1))
    assert sorted(rows_of(execute(scan, old_ctx), scan.types)) == [(1, "a"), (2, "b"), (3, "c")]
    assert sorted(run(env, scan, e1)) == [(1, "a"), (2, "b"), (3, "c")]
    assert sorted(run(env, scan, e2)) == [(1, "a"), (2, "B"), (4, "d")]
    assert sorted(run(env, scan, e3)) == [(2, "B"), (4, "d")]
    point = BatchScan(t, (1,), pk_prefix=(3,), point_get=True)
    assert run(env, point, e1) == [("c",)] and run(env, point, e2) == []


def test_every_type_round_trips() -> None:
    env = BatchEnv()
    s = struct_of(("x", INT), ("y", VARCHAR))
    types = [BOOLEAN, NUMERIC, DATE, TIMESTAMP, TIMESTAMPTZ, INTERVAL, JSONB, BYTEA, list_of(INT), s]
    t = mv_table(4, [("id", INT)] + [(f"c{i}", ty) for i, ty in enumerate(types)], [0])
    row = (
        1,
        True,
        Decimal("12.5"),
        dt.date(2024, 2, 29),
        dt.datetime(2024, 1, 1, 12, 30),
        dt.datetime(2024, 1, 1, 12, 30, tzinfo=dt.UTC),
        Interval(1, 2, 3_000_000),
        '{"a": 1}',
        b"\x00\xff",
        [1, None, 3],
        {"x": 5, "y": "z"},
    )
    nulls = (2, *([None] * len(types)))
    env.commit({t: [row, nulls]})
    plan = BatchScan(t, tuple(range(len(types) + 1)))
    got = sorted(rows_of(execute(plan, env.ctx()), plan.types), key=lambda r: r[0])
    assert got[0][:2] == row[:2] and got[0][2] == Decimal("12.5")
    assert got[0][3:] == row[3:]
    assert got[1] == nulls
    assert execute(plan, env.ctx()).schema.field("c1").metadata[b"sql_type"] == b"numeric"


def test_values_and_project() -> None:
    rows = (
        (lit(1, INT), lit("a", VARCHAR)),
        (lit(None, INT), lit("b", VARCHAR)),
        (lit(3, INT), lit(None, VARCHAR)),
    )
    values = BatchValues(rows)
    assert values.schema.names == ["column1", "column2"]
    env = BatchEnv()
    assert rows_of(execute(values, env.ctx()), values.types) == [(1, "a"), (None, "b"), (3, None)]
    proj = BatchProject(values, (Add(col(0, INT), lit(10, INT), BIGINT), col(1, VARCHAR)))
    assert proj.schema.names == ["expr0", "column2"] and proj.types == [BIGINT, VARCHAR]
    assert rows_of(execute(proj, env.ctx()), proj.types) == [(11, "a"), (None, "b"), (13, None)]
    chunks = list(execute_to_chunks(proj, env.ctx()))
    assert sum(c.cardinality for c in chunks) == 3
    empty = BatchValues((), schema=proj.schema)
    assert execute(empty, env.ctx()).num_rows == 0


def test_plans_pickle_and_explain() -> None:
    plan = BatchProject(
        BatchScan(T, (0, 3), pk_prefix=(1,), pk_range=(Bound.inc("c"), None)), (col(1, DOUBLE),)
    )
    assert pickle.loads(pickle.dumps(plan)) == plan
    text = explain_tree(plan)
    assert (
        text.splitlines()[1].strip()
        == "BatchScan { table: t, columns: [g, v], prefix: [1], range: [['c'], +inf }"
    )
    with pytest.raises(ValueError):
        BatchProject(BatchScan(T, (0,)), (col(0, INT),), schema=BatchScan(T, (1,)).schema)  # wrong types
