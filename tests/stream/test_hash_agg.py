"""HashAgg / SimpleAgg in the pretty-chunk style: emission rules, NULLs, FILTER, DISTINCT,
ordered aggregates, min/max retraction, append-only value state, types and plans."""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from exec_harness import Harness, pretty_records, records

from pg_numeric import pg_int_avg
from piestream.common.chunk import Op, StreamChunk
from piestream.common.errors import NumericOutOfRange, StateConsistencyError, UndefinedFunction
from piestream.common.order import ASC, DESC
from piestream.common.scalar import Row
from piestream.common.schema import Schema
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INT,
    NUMERIC,
    REAL,
    SMALLINT,
    TIMESTAMP,
    VARCHAR,
    DataType,
    list_of,
)
from piestream.expr.expr import FuncCall, InputRef, Literal
from piestream.plan.agg_call import AggCall, AggKind, agg_return_type
from piestream.plan.hash_agg import HashAggNode, hash_agg_node
from piestream.plan.node import ExchangeNode
from piestream.stream.executors.agg import hash_agg as hash_agg_module
from piestream.stream.executors.agg.dirty import DirtyGroups
from piestream.stream.executors.agg.states import DeltaSpec

# k (group), v (value), s (string), id (stream key)
TYPES = [INT, INT, VARCHAR, BIGINT]
K, V, S, ID = range(4)


def call(kind: str, *args: int, types: Sequence[DataType] = TYPES, **kw: object) -> AggCall:
    return AggCall.create(kind, args, types, **kw)  # type: ignore[arg-type]


def agg(
    *calls: AggCall,
    group_key: Sequence[int] = (K,),
    types: Sequence[DataType] = TYPES,
    append_only: bool = False,
) -> HashAggNode:
    src = ExchangeNode(
        schema=Schema.from_types(types),
        stream_key=(len(types) - 1,),
        append_only=append_only,
        upstream_fragment_id=1,
    )
    ids = itertools.count(10)
    return hash_agg_node(src, group_key, calls, lambda: next(ids))


def epoch(h: Harness, chunk: str) -> list[tuple[str, Row]]:
    """Push one chunk, check nothing is emitted before the barrier, return the barrier's output."""
    assert h.push(chunk) == []
    return records(h.barrier())


HEADER = " i i T I\n"  # k v s id


# -- emission -----------------------------------------------------------------------------------


def test_groups_appear_change_and_disappear() -> None:
    h = Harness(agg(call("count_star"), call("sum", V)))
    out = epoch(h, HEADER + " + 1 10 a 1\n + 1 20 b 2\n + 2 5 c 3")
    assert out == pretty_records(" i I I\n + 1 2 30\n + 2 1 5")
    out = epoch(h, HEADER + " - 1 10 a 1\n + 3 7 d 4\n - 2 5 c 3")
    assert out == pretty_records(" i I I\n U- 1 2 30\n U+ 1 1 20\n - 2 1 5\n + 3 1 7")
    out = epoch(h, HEADER + " U- 1 20 b 2\n U+ 3 1 b 2")  # an update moves a row to another group
    assert out == pretty_records(" i I I\n - 1 1 20\n U- 3 1 7\n U+ 3 2 8")
    assert records(h.barrier()) == []


def test_unchanged_output_emits_nothing() -> None:
    h = Harness(agg(call("sum", V), call("max", V)))
    assert epoch(h, HEADER + " + 1 10 a 1") == pretty_records(" i I i\n + 1 10 10")
    # the group gains a row, but neither sum nor max changes
    assert epoch(h, HEADER + " + 1 0 b 2") == []
    # a group inserted and deleted within one epoch never shows up
    assert epoch(h, HEADER + " + 2 1 c 3\n - 2 1 c 3") == []
    assert epoch(h, HEADER + " - 1 0 b 2") == []
    assert epoch(h, HEADER + " - 1 10 a 1") == pretty_records(" i I i\n - 1 10 10")


def test_delete_carries_the_row_emitted_epochs_ago() -> None:
    """The old output is rebuilt from stored state (the harness rebuilds executors every epoch)."""
    h = Harness(agg(call("count", V), call("avg", V), call("min", V), call("string_agg", S, delimiter="-")))
    epoch(h, HEADER + " + 1 1 a 1\n + 1 2 b 2")
    for _ in range(3):
        assert records(h.barrier()) == []
    out = epoch(h, HEADER + " - 1 1 a 1\n - 1 2 b 2")
    assert out == pretty_records(" i I N i T\n - 1 2 1.5 1 a-b")


# -- NULLs, FILTER, types -------------------------------------------------------------------------


def test_aggregates_ignore_null_inputs_and_null_is_a_group() -> None:
    h = Harness(
        agg(
            call("count_star"),
            call("count", V),
            call("sum", V),
            call("avg", V),
            call("min", V),
            call("max", S),
        )
    )
    out = epoch(h, HEADER + " + 1 . . 1\n + . 3 x 2\n + . . y 3")
    assert out == pretty_records(" i I I I N i T\n + 1 1 0 . . . .\n + . 2 1 3 3 3 y")
    out = epoch(h, HEADER + " + 1 4 a 4\n - . 3 x 2")
    assert out == pretty_records(
        """ i I I I N i T
        U- 1 1 0 . . . .
        U+ 1 2 1 4 4 4 a
        U- . 2 1 3 3 3 y
        U+ . 1 0 . . . y"""
    )


def test_filter_clause_selects_rows_but_not_group_existence() -> None:
    big = FuncCall("greater_than", (InputRef(V, INT), Literal(10, INT)), BOOLEAN)
    h = Harness(agg(call("count_star", filter=big), call("sum", V, filter=big), call("count_star")))
    out = epoch(h, HEADER + " + 1 5 a 1\n + 1 20 b 2\n + 2 3 c 3\n + 2 . d 4")
    # group 2 exists (row count 2) although FILTER rejects all of its rows (NULL counts as false)
    assert out == pretty_records(" i I I I\n + 1 1 20 2\n + 2 0 . 2")
    out = epoch(h, HEADER + " U- 2 3 c 3\n U+ 2 30 c 3")
    assert out == pretty_records(" i I I I\n U- 2 0 . 2\n U+ 2 1 30 2")


def test_sum_and_avg_types_follow_postgres_without_overflow() -> None:
    types = [INT, SMALLINT, BIGINT, NUMERIC, REAL, DOUBLE, BIGINT]
    calls = [call(k, c, types=types) for c in range(1, 6) for k in ("sum", "avg")]
    node = agg(*calls, types=types)
    assert [f.data_type for f in node.schema][1:] == [
        BIGINT, NUMERIC, NUMERIC, NUMERIC, NUMERIC, NUMERIC, REAL, DOUBLE, DOUBLE, DOUBLE,
    ]  # fmt: skip
    h = Harness(node)
    big = 2**62
    h.push(f" i i2 I N f F I\n + 1 1 {big} 0.5 1.5 0.25 1\n + 1 2 {big} 0.25 1 0.5 2\n + 1 2 {big} 1 1 1 3")
    out = h.barrier()
    assert [c.type for c in out[0].columns] == [t.arrow for t in node.schema.types]
    assert records(out) == [
        ("+", (1, 5, Decimal("1.6666666666666667"), Decimal(3 * big), Decimal(big), Decimal("1.75"),
               Decimal("0.58333333333333333333"), 3.5, 3.5 / 3, 1.75, 1.75 / 3)),  # select_div_scale
    ]  # fmt: skip


def test_integer_overflow_raises_instead_of_wrapping() -> None:
    types = [INT, BIGINT, BIGINT]
    h = Harness(agg(call("sum0", 1, types=types), types=types))
    h.push(f" i I I\n + 1 {2**62} 1\n + 1 {2**62} 2")
    with pytest.raises(NumericOutOfRange):
        h.barrier()


def test_bool_and_bool_or() -> None:
    types = [INT, BOOLEAN, BIGINT]
    h = Harness(agg(call("bool_and", 1, types=types), call("bool_or", 1, types=types), types=types))
    assert records(_barrier_after(h, " i B I\n + 1 t 1\n + 1 . 2\n + 2 . 3")) == pretty_records(
        " i B B\n + 1 t t\n + 2 . ."
    )
    assert records(_barrier_after(h, " i B I\n + 1 f 4\n - 1 t 1")) == pretty_records(
        " i B B\n U- 1 t t\n U+ 1 f f"
    )


def _barrier_after(h: Harness, chunk: str) -> list[StreamChunk]:
    h.push(chunk)
    return h.barrier()


def test_float_group_keys_zero_and_negative_zero_are_one_group() -> None:
    types = [DOUBLE, INT, BIGINT]
    h = Harness(agg(call("count_star"), types=types))
    out = records(_barrier_after(h, " F i I\n + 0.0 1 1\n + -0.0 1 2"))
    assert len(out) == 1 and out[0][0] == "+" and out[0][1][1] == 2


# -- DISTINCT -----------------------------------------------------------------------------------


def test_distinct_counts_each_value_once() -> None:
    pos = FuncCall("greater_than", (InputRef(V, INT), Literal(0, INT)), BOOLEAN)
    node = agg(
        call("count", V, distinct=True),
        call("sum", V, distinct=True),
        call("count", V, distinct=True, filter=pos),
        call("count", V),
    )
    assert len(node.state_tables.distinct) == 1  # one dedup table for the three calls on v
    h = Harness(node)
    out = epoch(h, HEADER + " + 1 5 a 1\n + 1 5 b 2\n + 1 -1 c 3\n + 1 . d 4")
    assert out == pretty_records(" i I I I I\n + 1 2 4 1 3")
    assert epoch(h, HEADER + " - 1 5 a 1") == pretty_records(" i I I I I\n U- 1 2 4 1 3\n U+ 1 2 4 1 2")
    assert epoch(h, HEADER + " - 1 5 b 2") == pretty_records(" i I I I I\n U- 1 2 4 1 2\n U+ 1 1 -1 0 1")
    dedup = node.state_tables.distinct[0].table
    assert h.table_rows(dedup) == [(1, -1, 1, 1, 0)]  # group | value | a count per distinct call


def test_distinct_string_agg_and_array_agg() -> None:
    node = agg(
        call("string_agg", S, distinct=True, delimiter=",", order_by=[(S, DESC)]),
        call("array_agg", V, distinct=True),
    )
    h = Harness(node)
    out = epoch(h, HEADER + " + 1 2 a 1\n + 1 . b 2\n + 1 2 a 3\n + 1 1 a 4")
    assert out == [("+", (1, "b,a", [1, 2, None]))]
    out = epoch(h, HEADER + " - 1 2 a 1\n - 1 1 a 4")
    assert out == [("U-", (1, "b,a", [1, 2, None])), ("U+", (1, "b,a", [2, None]))]


# -- materialized input: string_agg / array_agg, min / max ----------------------------------------


def test_string_agg_and_array_agg_follow_order_by() -> None:
    types = [INT, INT, VARCHAR, VARCHAR, BIGINT]  # k v s delimiter id
    node = agg(
        call("string_agg", 2, 3, types=types, order_by=[(1, DESC)]),
        call("array_agg", 1, types=types, order_by=[(2, ASC)]),
        types=types,
    )
    h = Harness(node)
    h.push(' i i T T I\n + 1 1 a , 1\n + 1 3 c ; 2\n + 1 2 . , 3\n + 1 . b "" 4')
    # string_agg skips the NULL value, puts each row's delimiter before its value (not the
    # first's) and sorts NULL v first (DESC); array_agg keeps NULLs and sorts NULL s last (ASC)
    assert records(h.barrier()) == [("+", (1, "b;c,a", [1, None, 3, 2]))]
    h.push(" i i T T I\n - 1 3 c ; 2\n + 1 0 z - 5")
    assert records(h.barrier()) == [
        ("U-", (1, "b;c,a", [1, None, 3, 2])),
        ("U+", (1, "b,a-z", [1, None, 0, 2])),
    ]


def test_min_max_rescan_when_the_extreme_is_deleted() -> None:
    node = agg(call("min", V), call("max", V), call("count_star"))
    assert all(m is not None for m in node.state_tables.materialized[:2])
    h = Harness(node)
    out = epoch(h, HEADER + " + 1 5 a 1\n + 1 1 b 2\n + 1 9 c 3\n + 1 1 d 4")
    assert out == pretty_records(" i i i I\n + 1 1 9 4")
    # one of two rows holding the min goes: still 1; max goes: rescan finds 5
    out = epoch(h, HEADER + " - 1 1 b 2\n - 1 9 c 3")
    assert out == pretty_records(" i i i I\n U- 1 1 9 4\n U+ 1 1 5 2")
    # the last min row goes, and a row inserted and deleted within the epoch never counts
    out = epoch(h, HEADER + " - 1 1 d 4\n + 1 0 e 5\n - 1 0 e 5")
    assert out == pretty_records(" i i i I\n U- 1 1 5 2\n U+ 1 5 5 1")
    # a NULL value leaves min/max NULL while the group exists
    out = epoch(h, HEADER + " - 1 5 a 1\n + 1 . f 6")
    assert out == pretty_records(" i i i I\n U- 1 5 5 1\n U+ 1 . . 1")
    min_table = node.state_tables.materialized[0]
    assert min_table is not None and h.table_rows(min_table.table) == []


def test_min_max_on_append_only_input_keep_only_value_state() -> None:
    node = agg(call("min", V), call("max", S), call("count", V), append_only=True)
    assert node.state_tables.materialized == (None, None, None)
    assert node.tables() == [node.state_tables.value]
    h = Harness(node)
    assert epoch(h, HEADER + " + 1 5 b 1\n + 1 . c 2") == pretty_records(" i i T I\n + 1 5 c 1")
    assert epoch(h, HEADER + " + 1 7 a 3") == pretty_records(" i i T I\n U- 1 5 c 1\n U+ 1 5 c 2")
    assert epoch(h, HEADER + " + 1 -7 z 4") == pretty_records(" i i T I\n U- 1 5 c 2\n U+ 1 -7 z 3")
    assert [r[2:4] for r in h.table_rows(node.state_tables.value)] == [(-7, "z")]  # the extremes themselves
    with pytest.raises(StateConsistencyError):
        h.push(HEADER + " - 1 7 a 3")


# -- SimpleAgg ----------------------------------------------------------------------------------


def test_simple_agg_always_has_exactly_one_row() -> None:
    node = agg(call("count_star"), call("sum", V), call("max", S), call("array_agg", V), group_key=())
    assert node.stream_key == () and node.explain().startswith("SimpleAgg")
    h = Harness(node)
    assert records(h.barrier()) == [("+", (0, None, None, None))]  # the first barrier, no input
    assert records(h.barrier()) == []
    out = epoch(h, HEADER + " + 1 5 a 1\n + 2 6 b 2")
    assert out == [("U-", (0, None, None, None)), ("U+", (2, 11, "b", [5, 6]))]
    out = epoch(h, HEADER + " - 1 5 a 1\n - 2 6 b 2")
    assert out == [("U-", (2, 11, "b", [5, 6])), ("U+", (0, None, None, None))]  # never a Delete
    assert records(h.barrier()) == []


def test_simple_agg_first_barrier_with_input_inserts() -> None:
    h = Harness(agg(call("count", V), call("min", V), group_key=()))
    assert epoch(h, HEADER + " + 1 5 a 1\n + 2 3 b 2\n - 1 5 a 1") == pretty_records(" I i\n + 1 3")


# -- planning -----------------------------------------------------------------------------------


def test_return_types_and_unknown_signatures() -> None:
    assert agg_return_type("count_star", []) == BIGINT
    assert agg_return_type("sum", [INT]) == BIGINT
    assert agg_return_type("sum", [BIGINT]) == NUMERIC
    assert agg_return_type("sum", [REAL]) == REAL
    assert agg_return_type("avg", [SMALLINT]) == NUMERIC
    assert agg_return_type("avg", [REAL]) == DOUBLE
    assert agg_return_type("max", [VARCHAR]) == VARCHAR
    assert agg_return_type("array_agg", [INT]) == list_of(INT)
    assert agg_return_type(AggKind.SUM0, [BIGINT]) == BIGINT
    with pytest.raises(UndefinedFunction):
        agg_return_type("sum", [VARCHAR])
    with pytest.raises(UndefinedFunction):
        agg_return_type("bool_and", [INT])


def test_plan_tables_layout_and_explain() -> None:
    node = agg(call("count_star"), call("max", V), call("string_agg", S, delimiter=",", order_by=[(V, DESC)]))
    assert (
        node.explain()
        == "HashAgg { group_key: [$0], aggs: [count(*), max($1), string_agg($2, ',' ORDER BY $1 DESC)] }"
    )
    value, mx, sagg = node.tables()
    assert [t.table_id for t in node.tables()] == [10, 11, 12]
    assert value.pk == (0,) and value.types[1:] == [BIGINT, BIGINT, INT, VARCHAR]  # row count first
    assert [value.columns[i].name for i in value.pk] == ["c0"]
    # max: group key ASC | value DESC | stream key ASC — the first row of a prefix scan is the max
    assert mx.column_names == ["c0", "c1", "c3"] and mx.pk_orders == (ASC, DESC, ASC)
    # string_agg: group key | ORDER BY | stream key | value
    assert sagg.column_names == ["c0", "c1", "c3", "c2"] and sagg.pk_orders == (ASC, DESC, ASC)
    assert node.schema.names == ["c0", "count_star", "max", "string_agg"]
    assert pickle.loads(pickle.dumps(node)) == node  # plan nodes ship to Spark workers


@pytest.mark.parametrize("append_only", [False, True])
def test_min_max_follow_sql_order_for_other_types(append_only: bool) -> None:
    """NaN is larger than every number (PostgreSQL), NUMERIC and timestamps compare by value."""
    types = [INT, DOUBLE, NUMERIC, TIMESTAMP, BIGINT]
    calls = [call(k, c, types=types) for c in (1, 2, 3) for k in ("min", "max")]
    h = Harness(agg(*calls, types=types, append_only=append_only))
    h.push(
        """ i F N TS I
        + 1 NaN 10.5 2021-01-02T00:00:00 1
        + 1 -1.5 -3 2020-12-31T23:59:59 2
        + 1 2.0 10.25 . 3"""
    )
    (op, row), *rest = records(h.barrier())
    assert op == "+" and not rest
    assert row[1] == -1.5 and math.isnan(row[2])
    assert row[3:5] == (Decimal(-3), Decimal("10.5"))
    assert row[5:] == (datetime(2020, 12, 31, 23, 59, 59), datetime(2021, 1, 2))


def test_many_groups_split_output_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # the barrier's output is cut at EMIT_CHUNK_ROWS (64K); lowered here to see the cuts
    monkeypatch.setattr(hash_agg_module, "EMIT_CHUNK_ROWS", 1024)
    node = agg(call("count_star"), call("max", V))
    h = Harness(node, sanity_check_storage=False)
    n = 3000
    chunk = StreamChunk.from_rows([(Op.INSERT, (i, i, "x", i)) for i in range(n)], TYPES)
    assert h.push(chunk) == []
    out = h.barrier()
    assert len(out) == 3 and all(c.cardinality <= 1024 for c in out)
    assert records(out) == [("+", (i, 1, i)) for i in range(n)]
    h.push(StreamChunk.from_rows([(Op.DELETE, (i, i, "x", i)) for i in range(0, n, 2)], TYPES))
    assert records(h.barrier()) == [("-", (i, 1, i)) for i in range(0, n, 2)]


def test_dirty_groups_reduce_while_buffering() -> None:
    """Deltas are reduced per group when the buffer fills, and again when the barrier takes them."""
    spec = DeltaSpec(pa.int64(), "sum")
    dirty = DirtyGroups([INT], [spec, DeltaSpec(pa.binary(), "min")])
    total = 0
    for i in range(70):
        keys = pa.array(np.arange(1024, dtype=np.int32) % 7)
        mins = pa.array([str(i % 10).encode()] * 1024, pa.binary())
        dirty.add([keys], [pa.array(np.ones(1024, np.int64)), mins], 1024)
        total += 1024
    groups = dirty.take()
    assert groups is not None and groups.n == 7
    assert groups.key_cols[0].to_pylist() == list(range(7))
    assert sum(groups.deltas[0].to_pylist()) == total
    assert groups.deltas[1].to_pylist() == [b"0"] * 7
    assert dirty.take() is None


def test_dirty_groups_wide_decimal_sums_keep_their_type_across_reductions() -> None:
    """NUMERIC sum deltas (decimal256(75, 28)) too large for the int64 fast path are reduced by
    Arrow's hash sum, which widens to decimal256(76, 28): the reduced part must keep the spec's
    type, or the next reduction cannot concatenate it with new parts (an MV's backfill of a
    table whose values have 20 fraction digits failed its epoch with ArrowInvalid)."""
    wide = pa.decimal256(75, 28)
    dirty = DirtyGroups([INT], [DeltaSpec(wide, "sum")])
    value = Decimal("123.45000000000000000000")  # scale 28 inside the delta: beyond int64
    n = 1 << 15
    for _ in range(6):  # past _REDUCE_AT (2^16) twice: a reduced part meets new parts
        keys = pa.array(np.arange(n, dtype=np.int32) % 7)
        dirty.add([keys], [pa.array([value] * n, wide)], n)
    groups = dirty.take()
    assert groups is not None and groups.n == 7 and groups.deltas[0].type == wide
    counts = np.bincount(np.arange(n) % 7) * 6
    assert groups.deltas[0].to_pylist() == [value * int(c) for c in counts]


def test_bigint_sums_match_exact_arithmetic_across_the_int64_fast_path() -> None:
    """sum/avg of BIGINT add in int64 while every value fits and in decimals once one does not
    (values near ±2^63, states past 2^62): the outputs equal exact integer arithmetic."""
    types = [INT, BIGINT, BIGINT]
    h = Harness(agg(call("sum", 1, types=types), call("avg", 1, types=types), types=types))
    rng = np.random.default_rng(5)
    extremes = [2**63 - 1, -(2**63), 2**62, -(2**62) - 7, 10**18]
    live: dict[int, list[int]] = {}  # row id -> [group, value]
    next_id = 0
    shown: dict[int, tuple[int, Decimal]] = {}
    for e in range(8):
        rows = []
        for _ in range(60):
            if live and rng.random() < 0.3:
                rid = int(rng.choice(list(live)))
                g, v = live.pop(rid)
                rows.append((Op.DELETE, (g, v, rid)))
            else:
                g = int(rng.integers(0, 12))
                big = e >= 4 and rng.random() < 0.2
                v = int(rng.choice(extremes)) if big else int(rng.integers(-1000, 1000))
                live[next_id] = [g, v]
                rows.append((Op.INSERT, (g, v, next_id)))
                next_id += 1
        h.push(StreamChunk.from_rows(rows, types))
        for op, row in records(h.barrier()):
            if op in ("+", "U+"):
                shown[row[0]] = (row[1], row[2])
            else:
                shown.pop(row[0], None)
        want: dict[int, list[int]] = {}
        for g, v in live.values():
            want.setdefault(g, []).append(v)
        assert sorted(shown) == sorted(want)
        for g, vs in want.items():
            total = sum(vs)
            assert shown[g][0] == total, (e, g)
            avg = pg_int_avg(total, len(vs))
            assert str(shown[g][1]) == str(avg), (e, g)  # value and display scale
