"""Executor state-table layouts (seed 000's table, seed 002, reference §6).

Each helper's pk columns and orders, distribution key, prefix hint and value indices are checked
against the layout the docstrings and reference §6 give, and every layout is exercised through a
real StateTable. The extreme-state layout is checked behaviourally: after random inserts and
deletes the first row of a group's prefix scan is the group's min (ASC) or max (DESC).
"""

from __future__ import annotations

import random

import pytest
from table_env import TableEnv

from piestream.common.order import ASC, DESC
from piestream.common.types import BIGINT, DOUBLE, INT, TIMESTAMP, VARCHAR
from piestream.common.vnode import VNODE_COUNT
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.schemas import (
    AggStateKind,
    agg_extreme_table,
    agg_state_kind,
    agg_value_table,
    distinct_dedup_table,
    join_degree_table,
    join_table,
    mv_table,
    top_n_table,
)

INPUT = [("a", INT), ("b", VARCHAR), ("c", BIGINT), ("d", DOUBLE), ("_row_id", BIGINT)]


def _roundtrip(desc: TableDesc) -> None:
    assert TableDesc.from_json(desc.to_json()) == desc
    assert str(desc.table_id) in desc.describe()


# ---------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------


def test_mv_table() -> None:
    d = mv_table(1, INPUT, pk=[2, 4], pk_orders=[DESC, ASC], dist_key=[4], name="mv")
    assert d.pk == (2, 4) and d.pk_orders == (DESC, ASC)
    assert d.dist_key == (4,) and d.dist_key_in_pk == (1,)
    assert d.value_indices is None and d.value_cols == (0, 1, 2, 3, 4)  # value = the whole row
    assert d.read_prefix_len_hint == 2 and d.vnode_count == VNODE_COUNT
    d2 = mv_table(2, INPUT, pk=[4])
    assert d2.pk_orders == (ASC,) and d2.dist_key == (4,)
    assert mv_table(3, INPUT, pk=[4], append_only=True).append_only
    _roundtrip(d)


def test_top_n_table() -> None:
    # group by a, order by d desc, c asc; input stream key (_row_id)
    d = top_n_table(1, INPUT, group_key=[0], order_by=[(3, DESC), (2, ASC)], input_stream_key=[4])
    assert d.pk == (0, 3, 2, 4)
    assert d.pk_orders == (ASC, DESC, ASC, ASC)
    assert d.dist_key == (0,) and d.read_prefix_len_hint == 1
    assert d.value_indices is None  # all input columns stored
    # ORDER BY / stream key columns already in the pk are not repeated
    d2 = top_n_table(2, INPUT, group_key=[0], order_by=[(0, DESC), (3, ASC)], input_stream_key=[3, 4])
    assert d2.pk == (0, 3, 4) and d2.pk_orders == (ASC, ASC, ASC)
    # plain TopN (no group): a singleton table without a prefix hint
    d3 = top_n_table(3, INPUT, group_key=[], order_by=[(2, DESC)], input_stream_key=[4])
    assert d3.pk == (2, 4) and d3.pk_orders == (DESC, ASC)
    assert d3.is_singleton and d3.vnode_count == 1 and d3.read_prefix_len_hint == 0
    for x in (d, d2, d3):
        _roundtrip(x)


def test_join_table_and_degree_table() -> None:
    # join key (b, a), input stream key (_row_id, a)
    side = join_table(1, INPUT, join_key=[1, 0], input_stream_key=[4, 0])
    assert side.pk == (1, 0, 4)  # join key ++ stream key minus join-key columns
    assert side.pk_orders == (ASC, ASC, ASC)
    assert side.dist_key == (1, 0) and side.read_prefix_len_hint == 2
    assert side.value_indices is None
    deg = join_degree_table(2, side)
    assert [c.name for c in deg.columns] == ["b", "a", "_row_id", "_degree"]
    assert [c.data_type for c in deg.columns] == [VARCHAR, INT, BIGINT, BIGINT]
    assert deg.columns[-1].hidden
    assert deg.pk == (0, 1, 2) and deg.pk_orders == side.pk_orders
    assert deg.value_indices == (3,)  # the degree only
    assert deg.dist_key == (0, 1) and deg.read_prefix_len_hint == 2
    # the degree table's dist key picks the same datums as the side's
    row = (7, "x", 1, 0.5, 99)
    deg_row = (row[1], row[0], row[4], 0)
    assert TableEnvLess.vnode(side, row) == TableEnvLess.vnode(deg, deg_row)
    # a cross join (no join key) is a singleton
    cross = join_table(3, INPUT, join_key=[], input_stream_key=[4])
    assert cross.is_singleton and cross.pk == (4,) and cross.read_prefix_len_hint == 0
    for x in (side, deg, cross):
        _roundtrip(x)


class TableEnvLess:
    @staticmethod
    def vnode(desc: TableDesc, row: tuple) -> int:  # type: ignore[type-arg]
        from piestream.storage.table.row_serde import RowSerde

        return RowSerde(desc).vnode_of_row(row)


def test_agg_value_table() -> None:
    d = agg_value_table(1, [("g1", INT), ("g2", VARCHAR)], [("sum", BIGINT), ("count", BIGINT)])
    assert [c.name for c in d.columns] == ["g1", "g2", "sum", "count"]
    assert d.pk == (0, 1) and d.pk_orders == (ASC, ASC)
    assert d.value_indices == (2, 3) and d.dist_key == (0, 1) and d.read_prefix_len_hint == 2
    simple = agg_value_table(2, [], [("count", BIGINT)])
    assert simple.pk == () and simple.is_singleton and simple.vnode_count == 1
    assert simple.value_indices == (0,)
    for x in (d, simple):
        _roundtrip(x)


def test_agg_extreme_table() -> None:
    for kind, order in (("min", ASC), ("max", DESC)):
        d = agg_extreme_table(1, [("g", INT)], ("v", DOUBLE), kind, [("_row_id", BIGINT), ("x", INT)])
        assert [c.name for c in d.columns] == ["g", "v", "_row_id", "x"]
        assert d.pk == (0, 1, 2, 3)
        assert d.pk_orders == (ASC, order, ASC, ASC)
        assert d.dist_key == (0,) and d.read_prefix_len_hint == 1
        _roundtrip(d)
    no_group = agg_extreme_table(2, [], ("v", INT), "max", [("_row_id", BIGINT)])
    assert no_group.is_singleton and no_group.pk_orders == (DESC, ASC) and no_group.read_prefix_len_hint == 0
    with pytest.raises(ValueError):
        agg_extreme_table(3, [("g", INT)], ("v", INT), "sum", [("_row_id", BIGINT)])


def test_distinct_dedup_table() -> None:
    d = distinct_dedup_table(1, [("g", INT)], ("x", VARCHAR), n_calls=2)
    assert [c.name for c in d.columns] == ["g", "x", "_count_0", "_count_1"]
    assert [c.data_type for c in d.columns][2:] == [BIGINT, BIGINT]
    assert d.pk == (0, 1) and d.pk_orders == (ASC, ASC)
    assert d.value_indices == (2, 3) and d.dist_key == (0,) and d.read_prefix_len_hint == 1
    simple = distinct_dedup_table(2, [], ("x", INT))
    assert simple.pk == (0,) and simple.is_singleton and simple.value_indices == (1,)
    for x in (d, simple):
        _roundtrip(x)


# ---------------------------------------------------------------------------------------------
# agg_state_kind (seed 002: the append-only rule)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", ["min", "max"])
def test_extremes_need_materialized_input_unless_append_only(agg: str) -> None:
    assert agg_state_kind(agg, append_only_input=False) is AggStateKind.MATERIALIZED_INPUT
    assert agg_state_kind(agg, append_only_input=True) is AggStateKind.VALUE


@pytest.mark.parametrize("agg", ["sum", "count", "sum0", "bit_and", "bool_or", "approx_count_distinct"])
@pytest.mark.parametrize("append_only", [False, True])
def test_value_state_aggs(agg: str, append_only: bool) -> None:
    assert agg_state_kind(agg, append_only) is AggStateKind.VALUE


@pytest.mark.parametrize(
    "agg",
    [
        "string_agg",
        "array_agg",
        "first_value",
        "last_value",
        # reference §6.1 lists these as materialized-input aggregates too
        "jsonb_agg",
        "jsonb_object_agg",
        "percentile_cont",
        "percentile_disc",
        "mode",
    ],
)
def test_ordered_input_aggs_materialize_their_input(agg: str) -> None:
    assert agg_state_kind(agg, append_only_input=False) is AggStateKind.MATERIALIZED_INPUT


@pytest.mark.parametrize("agg", ["string_agg", "array_agg"])
def test_append_only_rule_is_for_extremes_only(agg: str) -> None:
    """Seed 002's append-only shortcut is about min/max; string_agg still needs every row."""
    assert agg_state_kind(agg, append_only_input=True) is AggStateKind.MATERIALIZED_INPUT


# ---------------------------------------------------------------------------------------------
# behaviour through StateTables
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["min", "max"])
@pytest.mark.parametrize("seed", range(4))
def test_extreme_state_first_row_is_the_answer(kind: str, seed: int) -> None:
    rnd = random.Random(seed)
    desc = agg_extreme_table(5, [("g", INT)], ("v", BIGINT), kind, [("_row_id", BIGINT)])
    env = TableEnv()
    t = env.state_table(desc, spill_threshold=rnd.choice([1 << 30, 2000]))
    live: dict[int, dict[int, int]] = {g: {} for g in range(4)}  # g -> row id -> v
    next_id = 0
    pick = min if kind == "min" else max
    for step in range(500):
        g = rnd.randrange(4)
        if live[g] and rnd.random() < 0.4:
            rid = rnd.choice(list(live[g]))
            t.delete_row((g, live[g].pop(rid), rid))
        else:
            v = rnd.randrange(-50, 50)
            t.insert_row((g, v, next_id))
            live[g][next_id] = v
            next_id += 1
        if rnd.random() < 0.05:
            env.barrier(t)
        if step % 10 == 0:
            for gg in range(4):
                first = list(t.iter_with_prefix((gg,), limit=1))
                if not live[gg]:
                    assert first == []
                    continue
                want = pick(live[gg].values())
                assert first[0][1] == want, (kind, gg, first, want)
                # among equal values the upstream pk breaks ties ascending
                assert first[0][2] == min(r for r, v in live[gg].items() if v == want)
    e = env.barrier(t)
    st = env.storage_table(desc, e)
    for g in range(4):
        rows = list(st.iter_rows((g,)))
        vals = [r[1] for r in rows]
        assert vals == sorted(live[g].values(), reverse=(kind == "max"))


def test_layouts_work_as_state_tables() -> None:
    """Every layout takes writes and reads them back (key-only pk columns included)."""
    env = TableEnv()
    side = join_table(10, INPUT, join_key=[0], input_stream_key=[4])
    layouts = [
        (mv_table(11, INPUT, pk=[4]), (1, "x", 2, 0.5, 77)),
        (top_n_table(12, INPUT, [0], [(3, DESC)], [4]), (1, "x", 2, 0.5, 77)),
        (side, (1, "x", 2, 0.5, 77)),
        (join_degree_table(13, side), (1, 77, 3)),
        (agg_value_table(14, [("g", INT)], [("s", BIGINT), ("c", BIGINT)]), (1, 10, 2)),
        (agg_value_table(15, [], [("c", BIGINT)]), (5,)),
        (agg_extreme_table(16, [("g", INT)], ("v", TIMESTAMP), "max", [("_row_id", BIGINT)]), (1, None, 9)),
        (distinct_dedup_table(17, [("g", INT)], ("x", VARCHAR), 2), (1, "d", 1, 2)),
    ]
    tables = [(env.state_table(d), d, row) for d, row in layouts]
    for t, _, row in tables:
        t.insert_row(row)
    e = env.barrier(*(t for t, _, _ in tables))
    for t, d, row in tables:
        pk = tuple(row[i] for i in d.pk)
        assert t.get_row(pk) == row, d.name or d.table_id
        assert env.storage_table(d, e).get_row(pk) == row
    # a SimpleAgg's single row: update in place across epochs
    t, d, row = tables[5]
    t.update_row(row, (6,))
    env.barrier(*(t for t, _, _ in tables))
    assert t.get_row(()) == (6,)
    assert list(t.scan()) == [(6,)]
