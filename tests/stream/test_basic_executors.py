"""Project, Filter, HopWindow, RowIdGen, Values and Materialize in the pretty-chunk style."""

from __future__ import annotations

from exec_harness import Harness, pretty_records, records

from piestream.common.order import ASC
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, BOOLEAN, INT, SERIAL, TIMESTAMP
from piestream.expr.expr import FuncCall, InputRef, Literal
from piestream.plan.filter import FilterNode
from piestream.plan.hop_window import HopWindowNode
from piestream.plan.materialize import ConflictBehavior, MaterializeNode
from piestream.plan.node import ExchangeNode
from piestream.plan.project import ProjectNode
from piestream.plan.row_id_gen import RowIdGenNode
from piestream.plan.values import ValuesNode, values_state_table
from piestream.storage.table.schemas import mv_table

S2 = Schema.from_types([INT, INT])
SRC = ExchangeNode(schema=S2, stream_key=(0,), upstream_fragment_id=1)


def test_project_adds_and_keeps_ops() -> None:
    node = ProjectNode(
        schema=Schema.from_types([INT, INT]),
        stream_key=(0,),
        input=SRC,
        exprs=(InputRef(0, INT), FuncCall("add", (InputRef(0, INT), InputRef(1, INT)), INT)),
    )
    h = Harness(node)
    out = h.push(" i i\n + 1 2\n - 3 4\n U- 5 6\n U+ 5 7")
    assert records(out) == pretty_records(" i i\n + 1 3\n - 3 7\n U- 5 11\n U+ 5 12")


def test_filter_rewrites_broken_update_pairs() -> None:
    pred = FuncCall("greater_than", (InputRef(1, INT), Literal(10, INT)), BOOLEAN)
    h = Harness(FilterNode(schema=S2, stream_key=(0,), input=SRC, predicate=pred))
    out = h.push(
        """ i i
        + 1 20
        + 2 5
        - 3 .
        U- 4 20
        U+ 4 5
        U- 5 5
        U+ 5 20
        U- 6 30
        U+ 6 40
        U- 7 1
        U+ 7 2"""
    )
    assert records(out) == pretty_records(
        """ i i
        + 1 20
        - 4 20
        + 5 20
        U- 6 30
        U+ 6 40"""
    )


def test_hop_window_expands_rows_per_window() -> None:
    schema = Schema.from_types([INT, TIMESTAMP, TIMESTAMP, TIMESTAMP])
    src = ExchangeNode(schema=Schema.from_types([INT, TIMESTAMP]), stream_key=(0,), upstream_fragment_id=1)
    node = HopWindowNode(
        schema=schema, stream_key=(0, 2), input=src, time_col=1, slide_usecs=2_000_000, size_usecs=4_000_000
    )
    h = Harness(node)
    out = h.push(" i TS\n + 1 2021-01-01T00:00:05\n - 2 .")
    got = records(out)
    assert [r[1][2].second for r in got] == [2, 4]
    assert [r[1][3].second for r in got] == [6, 8]
    assert all(op == "+" for op, _ in got)


def test_row_id_gen_unique_owned_and_deterministic() -> None:
    from piestream.common.vnode import VnodeBitmap
    from piestream.encoding.distribution import compute_vnodes

    src = ExchangeNode(schema=Schema.from_types([INT, SERIAL]), stream_key=(1,), upstream_fragment_id=1)
    node = RowIdGenNode(schema=src.schema, stream_key=(1,), input=src, row_id_index=1)
    owned = VnodeBitmap.from_range(10, 20)
    text = " i SRL\n" + "".join(f" + {i} .\n" for i in range(50)) + " - 99 123\n"
    ids = []
    for _ in range(2):  # a re-run of the same epoch's task gives the same ids
        h = Harness(node, vnodes=owned)
        out = h.push(text)
        ids.append([r[1][1] for r in records(out)])
    assert ids[0] == ids[1]
    gen = ids[0][:50]
    assert len(set(gen)) == 50 and ids[0][50] == 123
    import pyarrow as pa

    vn = compute_vnodes([pa.array(gen, pa.int64())], [SERIAL], 256)
    assert set(vn.tolist()) == set(range(10, 20))
    h.barrier()
    later = [r[1][1] for r in records(h.push(" i SRL\n + 1 .\n + 2 ."))]
    assert min(later) > max(gen)  # the next epoch's ids never collide with earlier ones


def test_values_emits_once_across_epochs() -> None:
    schema = Schema.from_types([INT, BIGINT])
    node = ValuesNode(
        schema=schema, stream_key=(), rows=((1, 10), (2, None)), state_table=values_state_table(5)
    )
    h = Harness(node)
    assert records(h.barrier()) == [("+", (1, 10)), ("+", (2, None))]
    assert h.barrier() == []
    assert h.barrier() == []


def _mat(conflict: ConflictBehavior) -> MaterializeNode:
    table = mv_table(7, [("k", INT), ("v", INT)], pk=[0], pk_orders=[ASC])
    return MaterializeNode(schema=S2, stream_key=(0,), input=SRC, table=table, conflict=conflict)


def test_materialize_overwrite_turns_upserts_into_changes() -> None:
    node = _mat(ConflictBehavior.OVERWRITE)
    h = Harness(node)
    out = h.push(" i i\n + 1 10\n + 2 20\n + 1 11")
    assert records(out) == pretty_records(" i i\n + 1 10\n + 2 20\n U- 1 10\n U+ 1 11")
    h.barrier()
    out = h.push(" i i\n + 2 21\n - 1 999\n - 3 30\n + 3 33")
    assert records(out) == pretty_records(" i i\n U- 2 20\n U+ 2 21\n - 1 11\n + 3 33")
    h.barrier()
    assert h.table_rows(node.table) == [(2, 21), (3, 33)]


def test_materialize_ignore_conflict_keeps_first_row() -> None:
    node = _mat(ConflictBehavior.IGNORE_CONFLICT)
    h = Harness(node)
    h.push(" i i\n + 1 10")
    h.barrier()
    out = h.push(" i i\n + 1 11\n + 2 20")
    assert records(out) == pretty_records(" i i\n + 2 20")
    h.barrier()
    assert h.table_rows(node.table) == [(1, 10), (2, 20)]


def test_materialize_no_check_writes_stream_as_is() -> None:
    node = _mat(ConflictBehavior.NO_CHECK)
    h = Harness(node)
    h.push(" i i\n + 1 10\n + 2 20")
    h.barrier()
    h.push(" i i\n U- 1 10\n U+ 1 12\n - 2 20")
    h.barrier()
    assert h.table_rows(node.table) == [(1, 12)]
