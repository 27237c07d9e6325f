"""DynamicFilter: pretty-chunk cases and randomized differential tests against a Python model."""

from __future__ import annotations

import random

import pytest
from exec_harness import Harness, apply_changes, pretty_records, records

from piestream.common.chunk import Op, StreamChunk
from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.scalar import Row
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, DOUBLE, INT, VARCHAR
from piestream.plan.dynamic_filter import DynamicFilterNode, build_dynamic_filter
from piestream.plan.node import ExchangeNode

# left: id (stream key), k (compared), p; right: one column, the RHS (a SimpleAgg's output)
LS = Schema.of(("id", INT), ("k", INT), ("p", VARCHAR))
LH = " i i T\n"
RH = " i\n"
LEFT = ExchangeNode(schema=LS, stream_key=(0,), upstream_fragment_id=1)
RIGHT = ExchangeNode(schema=Schema.of(("rhs", INT)), stream_key=(), upstream_fragment_id=2)
L, R = "fragment:1", "fragment:2"


def node(op: str, left: ExchangeNode = LEFT, right: ExchangeNode = RIGHT) -> DynamicFilterNode:
    return build_dynamic_filter(left, right, key_col=1, comparator=op, left_table_id=30, right_table_id=31)


def epoch(h: Harness, *pushes: tuple[str, str]) -> list[tuple[str, Row]]:
    """Push (port, pretty rows) pairs in order, end the epoch, return everything emitted."""
    out = []
    for port, text in pushes:
        out += h.push((LH if port == L else RH) + text, port)
    out += h.barrier()
    return records(out)


def expect(text: str, scanned: str = "") -> list[tuple[str, Row]]:
    """Rows filtered per chunk (in order), then rows of the barrier's range scan (in vnode order,
    so they are compared sorted)."""
    return pretty_records(LH + text) + (sorted(pretty_records(LH + scanned)) if scanned else [])


def scan_sorted(got: list[tuple[str, Row]], n_chunk_rows: int = 0) -> list[tuple[str, Row]]:
    return got[:n_chunk_rows] + sorted(got[n_chunk_rows:])


def test_rhs_moves_up_and_down() -> None:
    n = node(">")
    h = Harness(n)
    # the first RHS arrives with the rows: they were filtered against "no RHS" (nothing passes)
    got = epoch(h, (L, "+ 1 5 a\n+ 2 10 b\n+ 3 15 c\n+ 4 . d"), (R, "+ 8"))
    assert scan_sorted(got) == expect("", "+ 2 10 b\n+ 3 15 c")
    assert epoch(h, (R, "U- 8\nU+ 12")) == expect("- 2 10 b")
    assert scan_sorted(epoch(h, (R, "U- 12\nU+ 4"))) == expect("", "+ 1 5 a\n+ 2 10 b")
    assert epoch(h, (R, "U- 4\nU+ 4")) == []  # unchanged value
    assert epoch(h, (R, "U- 4\nU+ 10"), (R, "U- 10\nU+ 5")) == expect("- 1 5 a")  # only the last value counts
    # rows with NULL keys are never stored
    assert h.table_rows(n.left_table) == [(1, 5, "a"), (2, 10, "b"), (3, 15, "c")]
    assert h.table_rows(n.right_table) == [(5,)]


def test_left_changes_before_and_after_rhs_change() -> None:
    h = Harness(node(">="))
    assert epoch(h, (R, "+ 4")) == []
    # left rows are filtered against the committed RHS (4) while the new one (7) is staged
    got = epoch(h, (L, "+ 1 5 a\n+ 2 3 b"), (R, "U- 4\nU+ 7"), (L, "+ 3 6 c\n+ 4 9 d\n+ 5 4 e"))
    assert scan_sorted(got, 4) == expect("+ 1 5 a\n+ 3 6 c\n+ 4 9 d\n+ 5 4 e", "- 5 4 e\n- 1 5 a\n- 3 6 c")
    # deletes and updates of stored rows retract exactly what was emitted
    got = epoch(h, (L, "- 4 9 d\n- 2 3 b\nU- 1 5 a\nU+ 1 8 a\nU- 3 6 c\nU+ 3 . c"))
    assert got == expect("- 4 9 d\n+ 1 8 a")
    got = epoch(h, (L, "U- 1 8 a\nU+ 1 9 z"), (R, "U- 7\nU+ 2"))
    assert got == expect("U- 1 8 a\nU+ 1 9 z\n+ 5 4 e")


def test_null_rhs_lets_nothing_pass() -> None:
    h = Harness(node("<"))
    assert epoch(h, (L, "+ 1 5 a\n+ 2 10 b\n+ 3 . c"), (R, "+ 9")) == expect("+ 1 5 a")
    assert epoch(h, (R, "U- 9\nU+ .")) == expect("- 1 5 a")
    assert epoch(h, (L, "+ 4 1 d")) == []
    assert scan_sorted(epoch(h, (R, "U- .\nU+ 11"))) == expect("", "+ 4 1 d\n+ 1 5 a\n+ 2 10 b")
    assert scan_sorted(epoch(h, (R, "- 11"))) == expect("", "- 4 1 d\n- 1 5 a\n- 2 10 b")
    assert epoch(h, (L, "+ 5 0 e")) == []
    assert epoch(h, (R, "+ 1")) == expect("+ 5 0 e")


@pytest.mark.parametrize(
    ("op", "passing"),
    [
        ("<", [-1.0]),
        ("<=", [-1.0, -0.0, 0.0]),
        (">", [1.0, float("nan")]),
        (">=", [-0.0, 0.0, 1.0, float("nan")]),
    ],
)
def test_float_keys_follow_sql_order(op: str, passing: list[float]) -> None:
    """NaN is larger than every number and -0.0 equals 0.0, in the filter and in the range scan."""
    left = ExchangeNode(schema=Schema.of(("id", INT), ("k", DOUBLE)), stream_key=(0,), upstream_fragment_id=1)
    right = ExchangeNode(schema=Schema.of(("rhs", DOUBLE)), stream_key=(), upstream_fragment_id=2)
    h = Harness(node(op, left, right))
    keys = [-1.0, -0.0, 0.0, 1.0, float("nan"), None]
    rows = [(Op.INSERT, (i, k)) for i, k in enumerate(keys)]
    h.push(StreamChunk.from_rows([(Op.INSERT, (0.0,))], [DOUBLE]), R)
    h.barrier()  # RHS 0.0 committed
    out = records(h.push(StreamChunk.from_rows(rows, left.schema.types)) + h.barrier())
    assert [str(r[1]) for _, r in out] == [str(k) for k in passing]
    h.push(StreamChunk.from_rows([(Op.DELETE, (0.0,))], [DOUBLE]), R)
    out = records(h.barrier())  # every passing row leaves, via the range scan
    assert sorted(str(r[1]) for _, r in out) == sorted(str(k) for k in passing)


def test_node_validation() -> None:
    with pytest.raises(FeatureNotSupported):
        node("=")
    bigint_rhs = ExchangeNode(schema=Schema.of(("rhs", BIGINT)), stream_key=(), upstream_fragment_id=2)
    with pytest.raises(InternalError, match="cast"):
        node(">", right=bigint_rhs)
    assert "DynamicFilter" in node(">").explain()
    assert node(">").tables()[1].is_singleton


# -- randomized differential tests ----------------------------------------------------------------

_CMP = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def run_differential(op: str, seed: int, n_epochs: int, rebuild: bool) -> list[list[tuple[str, Row]]]:
    rng = random.Random(seed)
    n = node(op)
    h = Harness(n, rebuild_each_epoch=rebuild)
    live: dict[int, Row] = {}
    rhs: Row | None = None  # the right input's current row
    next_id = 0
    view: dict[Row, int] = {}
    emitted: dict[int, Row] = {}  # output stream key -> row
    outputs = []

    def key() -> int | None:
        return rng.choice([None, *range(10)])

    for _ in range(n_epochs):
        out = []
        for _ in range(rng.randrange(0, 5)):
            if rng.random() < 0.3:  # a right chunk: insert, update or delete the single row
                r = rng.random()
                recs: list[tuple[Op, Row]]
                if rhs is None:
                    rhs = (key(),)
                    recs = [(Op.INSERT, rhs)]
                elif r < 0.85:
                    new_rhs = (key(),)
                    recs = [(Op.UPDATE_DELETE, rhs), (Op.UPDATE_INSERT, new_rhs)]
                    rhs = new_rhs
                else:
                    recs = [(Op.DELETE, rhs)]
                    rhs = None
                out += h.push(StreamChunk.from_rows(recs, [INT]), R)
                continue
            recs = []
            for _ in range(rng.randrange(1, 10)):
                r = rng.random()
                if r < 0.5 or not live:
                    row = (next_id, key(), rng.choice(["a", "b"]))
                    next_id += 1
                    live[row[0]] = row
                    recs.append((Op.INSERT, row))
                elif r < 0.75:
                    recs.append((Op.DELETE, live.pop(rng.choice(sorted(live)))))
                else:
                    i = rng.choice(sorted(live))
                    old, new = live[i], (i, key(), rng.choice(["a", "b"]))
                    live[i] = new
                    recs += [(Op.UPDATE_DELETE, old), (Op.UPDATE_INSERT, new)]
            out += h.push(StreamChunk.from_rows(recs, LS.types), L)
        out += h.barrier()
        for c in out:  # output stream key (left's) alternates
            for o, row in c.to_records():
                if o.is_insert:
                    assert row[0] not in emitted
                    emitted[row[0]] = row
                else:
                    assert emitted.pop(row[0]) == row
        apply_changes(view, out)
        v = None if rhs is None else rhs[0]
        want = {r: 1 for r in live.values() if r[1] is not None and v is not None and _CMP[op](r[1], v)}
        assert view == want
        outputs.append(records(out))
    return outputs


@pytest.mark.parametrize("op", ["<", "<=", ">", ">="])
def test_differential(op: str) -> None:
    for seed in range(6):
        run_differential(op, seed, 15, rebuild=True)


@pytest.mark.parametrize("op", ["<=", ">"])
def test_rebuild_and_long_lived_executors_agree(op: str) -> None:
    for seed in range(2):
        assert run_differential(op, 70 + seed, 12, True) == run_differential(op, 70 + seed, 12, False)
