"""GeneralOverWindow: pretty-chunk cases (only the rows a change reaches are re-emitted) and a
randomized differential test against a Python model of the window functions, epoch by epoch with
the actor rebuilt from storage each time."""

from __future__ import annotations

import random
from collections.abc import Sequence

from exec_harness import Harness, apply_changes, pretty_records, records

from piestream.common.order import ASC, DESC, OrderType
from piestream.common.scalar import Row
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, INT
from piestream.expr.bind import bind_call
from piestream.expr.expr import InputRef, Literal
from piestream.expr.window import (
    CURRENT_ROW,
    FOLLOWING,
    PRECEDING,
    UNBOUNDED_FOLLOWING,
    UNBOUNDED_PRECEDING,
    FrameBound,
    WindowFrame,
    WindowFunctionCall,
)
from piestream.plan.general_over_window import GeneralOverWindowNode, build_general_over_window
from piestream.plan.node import ExchangeNode

# id (stream key), g (partition), o (order), v (value)
S = Schema.of(("id", INT), ("g", INT), ("o", INT), ("v", INT))


def rows_frame(lo: tuple[str, int], hi: tuple[str, int]) -> WindowFrame:
    return WindowFrame("rows", FrameBound(*lo), FrameBound(*hi))


def range_frame(lo: tuple[str, int], hi: tuple[str, int], order: OrderType = ASC) -> WindowFrame:
    o = InputRef(2, INT)

    def bound(kind: str, n: int) -> FrameBound:
        if kind not in (PRECEDING, FOLLOWING):
            return FrameBound(kind)
        subtract = (kind == PRECEDING) != order.descending
        return FrameBound(kind, 0, bind_call("-" if subtract else "+", [o, Literal(n, BIGINT)]))

    return WindowFrame("range", bound(*lo), bound(*hi), o, order)


def node(calls: Sequence[WindowFunctionCall], order: OrderType = ASC) -> GeneralOverWindowNode:
    src = ExchangeNode(schema=S, stream_key=(0,), upstream_fragment_id=1)
    return build_general_over_window(
        src,
        partition_by=[1],
        order_by=[(2, order)],
        calls=calls,
        names=[f"w{i}" for i in range(len(calls))],
        table_id=10,
    )


def epoch(h: Harness, header: str, *chunks: str) -> list[tuple[str, Row]]:
    out = []
    for c in chunks:
        out += h.push(" i i i i\n" + c)
    out += h.barrier()
    return records(out)


SUM2 = WindowFunctionCall("sum", BIGINT, (3,), rows_frame((PRECEDING, 2), (CURRENT_ROW, 0)))


def test_an_append_re_emits_nothing_before_it() -> None:
    h = Harness(node([SUM2]))
    rows = "\n".join(f"+ {i} 0 {i} {i}" for i in range(50))
    out = epoch(h, "", rows)
    assert len(out) == 50
    # a row appended at the end: only its own insert (earlier frames do not reach it)
    assert epoch(h, "", "+ 100 0 100 7") == pretty_records(" i i i i I\n+ 100 0 100 7 104")
    # a row in the middle (after row 20: ties in ORDER BY go by the stream key): itself and
    # the two rows whose frames now hold it
    out = epoch(h, "", "+ 101 0 20 1000")
    assert out == pretty_records(
        " i i i i I\n"
        "U- 21 0 21 21 60\nU+ 21 0 21 21 1041\nU- 22 0 22 22 63\nU+ 22 0 22 22 1043\n+ 101 0 20 1000 1039"
    )
    # a delete: its stored row, and the two rows after it
    out = epoch(h, "", "- 101 0 20 1000")
    assert [op for op, _ in out] == ["-", "U-", "U+", "U-", "U+"]
    assert out[0] == ("-", (101, 0, 20, 1000, 1039))
    assert out[2:5:2] == [("U+", (21, 0, 21, 21, 60)), ("U+", (22, 0, 22, 22, 63))]


def test_lag_lead_ranks_and_partition_moves() -> None:
    calls = [
        WindowFunctionCall("lag", INT, (3,), None, 1),
        WindowFunctionCall("lead", INT, (3,), None, 1),
        WindowFunctionCall("row_number", BIGINT),
    ]
    h = Harness(node(calls))
    epoch(h, "", "+ 1 0 1 10\n+ 2 0 2 20\n+ 3 1 1 30")
    # row 2 moves to partition 1: both partitions change; row 1 loses its lead
    out = epoch(h, "", "U- 2 0 2 20\nU+ 2 1 0 20")
    assert sorted(out) == sorted(
        pretty_records(
            " i i i i i i I\n"
            "- 2 0 2 20 10 . 2\n"
            "U- 1 0 1 10 . 20 1\nU+ 1 0 1 10 . . 1\n"
            "U- 3 1 1 30 . . 1\nU+ 3 1 1 30 20 . 2\n"
            "+ 2 1 0 20 . 30 1"
        )
    )


# -- randomized model ------------------------------------------------------------------------------


def model(
    rows: dict[int, tuple[int, int, int]], calls: list[WindowFunctionCall], desc: bool
) -> dict[Row, int]:
    """The expected output multiset: per partition, rows in (o, id) order (id breaks ties, as the
    state key does), each call computed the naive way."""
    out: dict[Row, int] = {}
    parts: dict[int, list[tuple[int, int, int, int]]] = {}
    for i, (g, o, v) in rows.items():
        parts.setdefault(g, []).append((i, g, o, v))
    for part in parts.values():
        part.sort(key=lambda r: ((-r[2] if desc else r[2]), r[0]))
        n = len(part)
        for pos, r in enumerate(part):
            vals: list[object] = [_naive(c, part, pos, n, desc) for c in calls]
            row = (*r, *vals)
            out[row] = out.get(row, 0) + 1
    return out


def _naive(
    c: WindowFunctionCall, part: list[tuple[int, int, int, int]], pos: int, n: int, desc: bool
) -> object:
    if c.kind == "row_number":
        return pos + 1
    if c.kind == "rank":
        return next(i for i in range(n) if part[i][2] == part[pos][2]) + 1
    if c.kind in ("lag", "lead"):
        src = pos - c.offset if c.kind == "lag" else pos + c.offset
        return part[src][3] if 0 <= src < n else None
    assert c.frame is not None
    f = c.frame
    if f.mode == "rows":
        lo = {
            UNBOUNDED_PRECEDING: 0,
            PRECEDING: pos - f.start.offset,
            CURRENT_ROW: pos,
            FOLLOWING: pos + f.start.offset,
        }[f.start.kind]
        hi = {
            UNBOUNDED_FOLLOWING: n - 1,
            FOLLOWING: pos + f.end.offset,
            CURRENT_ROW: pos,
            PRECEDING: pos - f.end.offset,
        }[f.end.kind]
        frame = [part[i] for i in range(max(lo, 0), min(hi, n - 1) + 1)]
    else:
        o = part[pos][2]
        sign = -1 if desc else 1

        def within(x: int) -> bool:
            d = (x - o) * sign  # distance in window order
            ok_lo = f.start.kind == UNBOUNDED_PRECEDING or d >= _off(f.start)
            ok_hi = f.end.kind == UNBOUNDED_FOLLOWING or d <= _off(f.end)
            return ok_lo and ok_hi

        frame = [r for r in part if within(r[2])]
    vs = [r[3] for r in frame]
    if c.kind == "sum":
        return sum(vs) if vs else None
    if c.kind == "count_star":
        return len(vs)
    if c.kind == "min":
        return min(vs) if vs else None
    if c.kind == "max":
        return max(vs) if vs else None
    if c.kind == "first_value":
        return vs[0] if vs else None
    if c.kind == "last_value":
        return vs[-1] if vs else None
    raise AssertionError(c.kind)


def _off(b: FrameBound) -> int:
    if b.kind == CURRENT_ROW:
        return 0
    assert b.value is not None
    lit = b.value.args[1]  # type: ignore[attr-defined]
    n = int(lit.value)
    return {PRECEDING: -n, FOLLOWING: n, CURRENT_ROW: 0}[b.kind]


def _random_calls(r: random.Random, desc: bool) -> list[WindowFunctionCall]:
    calls = [WindowFunctionCall("row_number", BIGINT), WindowFunctionCall("rank", BIGINT)]
    calls.append(WindowFunctionCall(r.choice(["lag", "lead"]), INT, (3,), None, r.randint(1, 3)))
    kinds = [(PRECEDING, r.randint(0, 3)), (CURRENT_ROW, 0), (FOLLOWING, r.randint(0, 3))]
    for kind in ("sum", "min", "max", "first_value", "last_value", "count_star"):
        lo = r.choice([(UNBOUNDED_PRECEDING, 0), kinds[0], kinds[1]])
        hi = r.choice([kinds[1], kinds[2], (UNBOUNDED_FOLLOWING, 0)])
        t = BIGINT if kind in ("sum", "count_star") else INT
        args = () if kind == "count_star" else (3,)
        calls.append(WindowFunctionCall(kind, t, args, rows_frame(lo, hi)))
    lo = r.choice([(PRECEDING, r.randint(0, 4)), (CURRENT_ROW, 0)])
    hi = r.choice([(FOLLOWING, r.randint(0, 4)), (CURRENT_ROW, 0)])
    calls.append(WindowFunctionCall("sum", BIGINT, (3,), range_frame(lo, hi, DESC if desc else ASC)))
    return calls


def test_random_changes_match_the_model() -> None:
    for seed in range(12):
        r = random.Random(seed)
        desc = seed % 2 == 1
        calls = _random_calls(r, desc)
        h = Harness(node(calls, DESC if desc else ASC))
        live: dict[int, tuple[int, int, int]] = {}
        emitted: dict[Row, int] = {}
        next_id = 0
        for _ in range(8):
            lines = []
            for _ in range(r.randint(1, 12)):
                choice = r.random()
                if live and choice < 0.3:  # delete
                    i = r.choice(sorted(live))
                    g, o, v = live.pop(i)
                    lines.append(f"- {i} {g} {o} {v}")
                elif live and choice < 0.55:  # update (maybe moving partition or order)
                    i = r.choice(sorted(live))
                    g, o, v = live[i]
                    new = (
                        r.choice([g, g, r.randint(0, 2)]),
                        r.choice([o, r.randint(0, 15)]),
                        r.randint(-5, 20),
                    )
                    live[i] = new
                    lines.append(f"U- {i} {g} {o} {v}\nU+ {i} {new[0]} {new[1]} {new[2]}")
                else:
                    i = next_id
                    next_id += 1
                    live[i] = (r.randint(0, 2), r.randint(0, 15), r.randint(-5, 20))
                    g, o, v = live[i]
                    lines.append(f"+ {i} {g} {o} {v}")
            chunks = []
            for line in lines:
                chunks += h.push(" i i i i\n" + line)
            chunks += h.barrier()
            emitted = apply_changes(emitted, chunks)
            assert emitted == model(live, calls, desc), f"seed {seed}"
        # the state holds exactly the emitted rows
        assert {row: 1 for row in h.table_rows(h.node.tables()[0])} == emitted
