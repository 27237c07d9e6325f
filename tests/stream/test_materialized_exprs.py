"""MaterializedExprs: a retraction carries the values emitted for its key, whether they were drawn
earlier in the same chunk or in an earlier epoch (read back from the state table, the actor
rebuilt each epoch as a Spark task would)."""

from __future__ import annotations

import random

from exec_harness import Harness, records

from piestream.common.chunk import Op, StreamChunk
from piestream.common.schema import Schema
from piestream.common.types import INT
from piestream.expr.bind import bind_call
from piestream.plan.materialized_exprs import MaterializedExprsNode, build_materialized_exprs
from piestream.plan.node import ExchangeNode

IN = ExchangeNode(schema=Schema.of(("id", INT), ("v", INT)), stream_key=(0,), upstream_fragment_id=1)


def _node() -> MaterializedExprsNode:
    return build_materialized_exprs(IN, [bind_call("random", [])], (0,), table_id=40)


def test_deletes_in_the_same_chunk_and_later_epochs_carry_the_drawn_value() -> None:
    n = _node()
    h = Harness(n)
    out = records(h.push(" i i\n+ 1 10\n+ 2 20\nU- 1 10\nU+ 1 11\n- 2 20\n+ 3 30") + h.barrier())
    ops = [op for op, _ in out]
    assert ops == ["+", "+", "U-", "U+", "-", "+"]
    (i1, i2, d1, u1, d2, i3) = (r for _, r in out)
    assert d1 == i1 and d2 == i2  # retractions equal what was emitted
    assert u1[:2] == (1, 11) and u1[2] != i1[2]  # an update's insert half draws anew
    assert h.table_rows(n.state_table) == sorted([(1, u1[2]), (3, i3[2])])
    out = records(h.push(" i i\n- 1 11\n+ 1 12\n- 3 30") + h.barrier())
    assert [op for op, _ in out] == ["-", "+", "-"]
    (d1, i1b, d3) = (r for _, r in out)
    assert d1 == u1 and d3 == i3 and i1b[:2] == (1, 12)
    assert h.table_rows(n.state_table) == [(1, i1b[2])]


def test_random_chunks_against_a_model() -> None:
    rng = random.Random(7)
    n = _node()
    h = Harness(n)
    emitted: dict[int, tuple[int, float]] = {}  # what the view holds: id -> (v, drawn value)
    for _ in range(12):
        for _ in range(rng.randint(1, 3)):
            rows: list[tuple[Op, list[int]]] = []
            live = dict((k, v) for k, (v, _) in emitted.items())
            for _ in range(rng.randint(1, 30)):
                k = rng.randint(1, 15)
                if k in live and rng.random() < 0.5:
                    rows.append((Op.DELETE, [k, live.pop(k)]))
                elif k in live:
                    nv = rng.randint(0, 99)
                    rows += [(Op.UPDATE_DELETE, [k, live[k]]), (Op.UPDATE_INSERT, [k, nv])]
                    live[k] = nv
                else:
                    live[k] = rng.randint(0, 99)
                    rows.append((Op.INSERT, [k, live[k]]))
            for op, (k, v, x) in records(h.push(StreamChunk.from_rows(rows, [INT, INT]))):
                if op in ("+", "U+"):
                    assert k not in emitted and 0.0 <= x < 1.0
                    emitted[k] = (v, x)
                else:
                    assert emitted.pop(k) == (v, x), "a retraction differs from what was emitted"
        h.barrier()
        assert h.table_rows(n.state_table) == sorted((k, x) for k, (_, x) in emitted.items())
