"""HashJoin: pretty-chunk cases per join type, state layout, and a randomized differential test
against a from-scratch join (plus the stream-key invariant), with and without actor rebuilds."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Sequence

import pyarrow as pa
import pytest
from exec_harness import Harness, apply_changes, pretty_records, records

from piestream.common.chunk import Op, StreamChunk
from piestream.common.scalar import Row
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, BOOLEAN, INT, VARCHAR
from piestream.expr.expr import Expr, FuncCall, InputRef
from piestream.plan.hash_join import HashJoinNode, JoinType, SideKind, build_hash_join
from piestream.plan.node import ExchangeNode, StreamNode

L, R = "fragment:1", "fragment:2"
LS = Schema.of(("lid", INT), ("lk", INT), ("lv", INT))
RS = Schema.of(("rid", INT), ("rk", INT), ("rv", INT))
LEFT = ExchangeNode(schema=LS, stream_key=(0,), upstream_fragment_id=1)
RIGHT = ExchangeNode(schema=RS, stream_key=(0,), upstream_fragment_id=2)
# a right input keyed by its join key (at most one row per key)
RIGHT_BY_KEY = ExchangeNode(
    schema=Schema.of(("rk", INT), ("rv", INT)), stream_key=(0,), upstream_fragment_id=2
)
# residual condition lv < rv over left ++ right
LV_LT_RV = FuncCall("less_than", (InputRef(2, INT), InputRef(5, INT)), BOOLEAN)

_table_ids = itertools.count(1000)


def join(
    jt: JoinType,
    *,
    left: StreamNode = LEFT,
    right: StreamNode = RIGHT,
    left_keys: Sequence[int] = (1,),
    right_keys: Sequence[int] = (1,),
    condition: Expr | None = None,
    null_safe: Sequence[bool] | None = None,
    output_indices: Sequence[int] | None = None,
) -> HashJoinNode:
    return build_hash_join(
        left,
        right,
        jt,
        left_keys,
        right_keys,
        next_table_id=lambda: next(_table_ids),
        condition=condition,
        null_safe=null_safe,
        output_indices=output_indices,
    )


def push(h: Harness, port: str, text: str) -> list[tuple[str, Row]]:
    return records(h.push(" i i i\n" + text, port))


def expect(text: str) -> list[tuple[str, Row]]:
    """Expected records of a left ++ right output (six INT columns)."""
    return pretty_records(" i i i i i i\n" + text) if text.strip() else []


def expect3(text: str) -> list[tuple[str, Row]]:
    """Expected records of a semi/anti output (three INT columns)."""
    return pretty_records(" i i i\n" + text) if text.strip() else []


# -- inner ------------------------------------------------------------------------------------------


def test_inner_matches_appear_and_disappear_in_both_orders() -> None:
    h = Harness(join(JoinType.INNER))
    assert push(h, L, "+ 1 10 100\n + 2 20 200") == []
    assert push(h, R, "+ 7 10 70") == expect("+ 1 10 100 7 10 70")
    h.barrier()
    assert push(h, L, "- 1 10 100") == expect("- 1 10 100 7 10 70")
    assert push(h, R, "+ 8 20 80\n - 7 10 70") == expect("+ 2 20 200 8 20 80")
    h.barrier()
    # right first, then left
    assert push(h, R, "+ 9 30 90") == []
    assert push(h, L, "+ 3 30 300") == expect("+ 3 30 300 9 30 90")
    assert push(h, R, "- 9 30 90") == expect("- 3 30 300 9 30 90")
    h.barrier()


def test_inner_multiple_matches_per_key() -> None:
    h = Harness(join(JoinType.INNER))
    push(h, R, "+ 7 10 70\n + 8 10 80\n + 9 20 90")
    assert push(h, L, "+ 1 10 100\n + 2 10 200\n + 3 20 300") == expect(
        """+ 1 10 100 7 10 70
           + 1 10 100 8 10 80
           + 2 10 200 7 10 70
           + 2 10 200 8 10 80
           + 3 20 300 9 20 90"""
    )
    h.barrier()
    assert push(h, R, "- 8 10 80\n + 6 10 60") == expect(
        """- 1 10 100 8 10 80
           - 2 10 200 8 10 80
           + 1 10 100 6 10 60
           + 2 10 200 6 10 60"""
    )


def test_null_keys_never_match_and_are_not_stored() -> None:
    node = join(JoinType.INNER)
    h = Harness(node)
    assert push(h, L, "+ 1 . 100") == []
    assert push(h, R, "+ 7 . 70") == []
    assert push(h, L, "- 1 . 100") == []
    h.barrier()
    assert h.table_rows(node.left_table) == []
    assert h.table_rows(node.right_table) == [] and h.table_rows(node.right_degree_table) == []


def test_null_safe_keys_match_nulls() -> None:
    h = Harness(join(JoinType.INNER, null_safe=[True]))
    push(h, L, "+ 1 . 100\n + 2 10 200")
    assert push(h, R, "+ 7 . 70\n + 8 10 80") == expect("+ 1 . 100 7 . 70\n + 2 10 200 8 10 80")
    h.barrier()
    assert push(h, L, "- 1 . 100") == expect("- 1 . 100 7 . 70")


def test_multi_column_keys_mixed_null_safety() -> None:
    node = join(JoinType.INNER, left_keys=(1, 2), right_keys=(1, 2), null_safe=[False, True])
    h = Harness(node)
    push(h, L, "+ 1 10 . \n + 2 10 5\n + 3 . .")
    assert push(h, R, "+ 7 10 .\n + 8 10 6\n + 9 . .") == expect("+ 1 10 . 7 10 .")
    assert push(h, R, "+ 6 10 5") == expect("+ 2 10 5 6 10 5")


def test_residual_condition_filters_pairs() -> None:
    h = Harness(join(JoinType.INNER, condition=LV_LT_RV))
    push(h, R, "+ 7 10 50\n + 8 10 150\n + 9 10 .")
    assert push(h, L, "+ 1 10 100\n + 2 10 10") == expect(
        """+ 1 10 100 8 10 150
           + 2 10 10 7 10 50
           + 2 10 10 8 10 150"""
    )
    h.barrier()
    assert push(h, R, "- 8 10 150\n + 5 10 5") == expect("- 1 10 100 8 10 150\n - 2 10 10 8 10 150")


def test_update_changing_join_key() -> None:
    h = Harness(join(JoinType.INNER))
    push(h, R, "+ 7 10 70\n + 8 20 80")
    push(h, L, "+ 1 10 100")
    h.barrier()
    assert push(h, L, "U- 1 10 100\n U+ 1 20 101") == expect("- 1 10 100 7 10 70\n + 1 20 101 8 20 80")
    assert push(h, R, "U- 8 20 80\n U+ 8 10 81") == expect("- 1 20 101 8 20 80")
    assert push(h, R, "U- 7 10 70\n U+ 7 20 71") == expect("+ 1 20 101 7 20 71")


def test_insert_and_delete_of_one_row_in_a_chunk_and_across_epochs() -> None:
    node = join(JoinType.FULL_OUTER)
    h = Harness(node)
    assert push(h, R, "+ 7 10 70") == expect("+ . . . 7 10 70")
    assert push(h, L, "+ 1 10 100\n - 1 10 100\n + 1 10 100") == expect(
        """- . . . 7 10 70
           + 1 10 100 7 10 70
           - 1 10 100 7 10 70
           + . . . 7 10 70
           - . . . 7 10 70
           + 1 10 100 7 10 70"""
    )
    h.barrier()
    assert h.table_rows(node.left_degree_table) == [(10, 1, 1)]
    assert h.table_rows(node.right_degree_table) == [(10, 7, 1)]
    assert push(h, L, "- 1 10 100") == expect("- 1 10 100 7 10 70\n + . . . 7 10 70")
    h.barrier()
    assert push(h, R, "- 7 10 70\n + 7 10 70") == expect("- . . . 7 10 70\n + . . . 7 10 70")
    h.barrier()
    assert h.table_rows(node.left_table) == [] and h.table_rows(node.left_degree_table) == []
    assert h.table_rows(node.right_degree_table) == [(10, 7, 0)]


# -- outer ------------------------------------------------------------------------------------------


def test_left_outer_padding_retracted_and_reemitted() -> None:
    node = join(JoinType.LEFT_OUTER)
    h = Harness(node)
    assert push(h, L, "+ 1 10 100\n + 2 . 200") == expect("+ 1 10 100 . . .\n + 2 . 200 . . .")
    h.barrier()
    assert push(h, R, "+ 7 10 70") == expect("- 1 10 100 . . .\n + 1 10 100 7 10 70")
    assert push(h, R, "+ 8 10 80") == expect("+ 1 10 100 8 10 80")
    h.barrier()
    assert h.table_rows(node.left_degree_table) == [(10, 1, 2)]
    assert push(h, R, "- 7 10 70") == expect("- 1 10 100 7 10 70")
    assert push(h, R, "- 8 10 80") == expect("- 1 10 100 8 10 80\n + 1 10 100 . . .")
    assert push(h, L, "- 2 . 200\n - 1 10 100") == expect("- 2 . 200 . . .\n - 1 10 100 . . .")
    h.barrier()
    assert h.table_rows(node.left_degree_table) == []
    assert h.table_rows(node.right_degree_table) == []  # the inner side keeps no degrees


def test_left_outer_degree_counts_only_rows_passing_the_condition() -> None:
    h = Harness(join(JoinType.LEFT_OUTER, condition=LV_LT_RV))
    assert push(h, L, "+ 1 10 100") == expect("+ 1 10 100 . . .")
    assert push(h, R, "+ 7 10 50") == []  # key matches, condition fails: stays padded
    assert push(h, R, "+ 8 10 150") == expect("- 1 10 100 . . .\n + 1 10 100 8 10 150")
    h.barrier()
    assert push(h, R, "U- 8 10 150\n U+ 8 10 60") == expect("- 1 10 100 8 10 150\n + 1 10 100 . . .")
    assert push(h, L, "U- 1 10 100\n U+ 1 10 55") == expect("- 1 10 100 . . .\n + 1 10 55 8 10 60")


def test_right_outer_padding() -> None:
    h = Harness(join(JoinType.RIGHT_OUTER))
    assert push(h, R, "+ 7 10 70\n + 8 . 80") == expect("+ . . . 7 10 70\n + . . . 8 . 80")
    assert push(h, L, "+ 1 10 100\n + 2 10 200") == expect(
        "- . . . 7 10 70\n + 1 10 100 7 10 70\n + 2 10 200 7 10 70"
    )
    h.barrier()
    assert push(h, L, "- 1 10 100") == expect("- 1 10 100 7 10 70")
    assert push(h, L, "U- 2 10 200\n U+ 2 20 200") == expect("- 2 10 200 7 10 70\n + . . . 7 10 70")


def test_full_outer_both_paddings() -> None:
    h = Harness(join(JoinType.FULL_OUTER))
    assert push(h, L, "+ 1 10 100") == expect("+ 1 10 100 . . .")
    assert push(h, R, "+ 7 20 70") == expect("+ . . . 7 20 70")
    h.barrier()
    assert push(h, R, "U- 7 20 70\n U+ 7 10 70") == expect(
        "- . . . 7 20 70\n - 1 10 100 . . .\n + 1 10 100 7 10 70"
    )
    assert push(h, L, "U- 1 10 100\n U+ 1 20 100") == expect(
        "- 1 10 100 7 10 70\n + . . . 7 10 70\n + 1 20 100 . . ."
    )


# -- semi / anti ------------------------------------------------------------------------------------


def test_left_semi_and_anti_transitions() -> None:
    semi, anti = Harness(join(JoinType.LEFT_SEMI)), Harness(join(JoinType.LEFT_ANTI))
    steps = [
        (L, "+ 1 10 100\n + 2 . 200", "", "+ 1 10 100\n + 2 . 200"),
        (R, "+ 7 10 70", "+ 1 10 100", "- 1 10 100"),
        (R, "+ 8 10 80", "", ""),
        (L, "+ 3 10 300", "+ 3 10 300", ""),
        (R, "- 7 10 70", "", ""),
        (R, "- 8 10 80", "- 1 10 100\n - 3 10 300", "+ 1 10 100\n + 3 10 300"),
        (L, "- 2 . 200", "", "- 2 . 200"),
    ]
    for port, text, want_semi, want_anti in steps:
        assert push(semi, port, text) == expect3(want_semi)
        assert push(anti, port, text) == expect3(want_anti)
        semi.barrier()
        anti.barrier()


def test_right_semi_and_anti_transitions_within_one_chunk() -> None:
    semi, anti = Harness(join(JoinType.RIGHT_SEMI)), Harness(join(JoinType.RIGHT_ANTI))
    steps = [
        (R, "+ 7 10 70\n + 8 20 80", "", "+ 7 10 70\n + 8 20 80"),
        # two left rows for key 10 arrive and leave in one chunk: 0 -> 1 -> 2 -> 1 -> 0
        (
            L,
            "+ 1 10 100\n + 2 10 200\n - 1 10 100\n - 2 10 200",
            "+ 7 10 70\n - 7 10 70",
            "- 7 10 70\n + 7 10 70",
        ),
        (L, "+ 3 20 300", "+ 8 20 80", "- 8 20 80"),
        (R, "- 8 20 80", "- 8 20 80", ""),
    ]
    for port, text, want_semi, want_anti in steps:
        assert push(semi, port, text) == expect3(want_semi)
        assert push(anti, port, text) == expect3(want_anti)


def test_semi_with_condition() -> None:
    h = Harness(join(JoinType.LEFT_SEMI, condition=LV_LT_RV))
    push(h, L, "+ 1 10 100")
    assert push(h, R, "+ 7 10 50\n + 8 10 .") == []
    assert push(h, R, "+ 9 10 500") == expect3("+ 1 10 100")
    h.barrier()
    assert push(h, R, "- 7 10 50\n - 9 10 500") == expect3("- 1 10 100")


# -- layout, keys, types ----------------------------------------------------------------------------


def test_stream_keys_follow_the_reference() -> None:
    # internal = lid lk lv rid rk rv; keys: lid, rid, then the join keys the type names
    assert join(JoinType.INNER).stream_key == (0, 3, 1)
    assert join(JoinType.LEFT_OUTER).stream_key == (0, 3, 1)
    assert join(JoinType.RIGHT_OUTER).stream_key == (0, 3, 4)
    assert join(JoinType.FULL_OUTER).stream_key == (0, 3, 1, 4)
    assert join(JoinType.LEFT_SEMI).stream_key == (0, 1)
    assert join(JoinType.RIGHT_ANTI).stream_key == (0, 1)
    node = join(JoinType.INNER, output_indices=(5, 1, 3, 0))
    assert node.stream_key == (3, 2, 1) and node.schema.names == ["rv", "lk", "rid", "lid"]
    with pytest.raises(ValueError, match="stream-key"):
        join(JoinType.INNER, output_indices=(0, 2, 3))


def test_state_table_layouts() -> None:
    node = join(JoinType.LEFT_OUTER)
    lt, ld = node.left_table, node.left_degree_table
    assert lt.pk == (1, 0) and lt.dist_key == (1,) and lt.read_prefix_len_hint == 1
    assert ld.column_names == ["lk", "lid", "_degree"] and ld.value_indices == (2,)
    assert len({t.table_id for t in node.tables()}) == 4
    assert node.uses_degree_table(0) and not node.uses_degree_table(1)


def test_other_side_unique_per_key_needs_no_degree_table() -> None:
    # right's stream key is its join key: at most one right row per key, degrees are recomputed
    right = RIGHT_BY_KEY
    node = join(
        JoinType.LEFT_OUTER,
        right=right,
        right_keys=(0,),
        condition=FuncCall("less_than", (InputRef(2, INT), InputRef(4, INT)), BOOLEAN),
    )
    assert not node.uses_degree_table(0)
    h = Harness(node)
    assert push(h, L, "+ 1 10 100\n + 2 10 200") == pretty_records(
        " i i i i i\n + 1 10 100 . .\n + 2 10 200 . ."
    )
    assert records(h.push(" i i\n + 10 150", R)) == pretty_records(
        " i i i i i\n - 1 10 100 . .\n + 1 10 100 10 150"
    )
    h.barrier()
    assert records(h.push(" i i\n U- 10 150\n U+ 10 250", R)) == pretty_records(
        """ i i i i i
            - 1 10 100 10 150
            + 1 10 100 . .
            - 1 10 100 . .
            - 2 10 200 . .
            + 1 10 100 10 250
            + 2 10 200 10 250"""
    )
    h.barrier()
    assert h.table_rows(node.left_degree_table) == []


def test_output_types_match_the_schema() -> None:
    ls, rs = Schema.of(("id", BIGINT), ("name", VARCHAR)), Schema.of(("id", BIGINT), ("n", INT))
    left = ExchangeNode(schema=ls, stream_key=(0,), upstream_fragment_id=1)
    right = ExchangeNode(schema=rs, stream_key=(0,), upstream_fragment_id=2)
    node = join(
        JoinType.FULL_OUTER, left=left, right=right, left_keys=(0,), right_keys=(0,), output_indices=(1, 0, 2)
    )
    h = Harness(node)
    out = h.push(" I T\n + 1 a\n + 2 b", L) + h.push(" I i\n + 2 20\n + 3 30", R)
    want = pa.schema([(f.name, f.data_type.arrow) for f in node.schema])
    for chunk in out:
        assert [c.type for c in chunk.columns] == list(want.types)
    assert records(out)[-1] == ("+", (None, None, 3))


def test_explain() -> None:
    node = join(JoinType.LEFT_OUTER, condition=LV_LT_RV, null_safe=[True])
    assert node.explain() == (
        "HashJoin { type: left_outer, predicate: $1 IS NOT DISTINCT FROM $4 AND less_than($2, $5), "
        "output: [$0, $1, $2, $3, $4, $5] }"
    )


# -- randomized differential ------------------------------------------------------------------------

KEYS = [0, 1, 2, None]


def _sql_eq(a: object, b: object, null_safe: bool) -> bool:
    return a == b if null_safe else (a is not None and b is not None and a == b)


def reference_join(
    jt: JoinType,
    left: Sequence[Row],
    right: Sequence[Row],
    keys: Sequence[tuple[int, int]],
    null_safe: Sequence[bool],
    cond: Callable[[Row], bool] | None,
    widths: tuple[int, int],
) -> Counter[Row]:
    """The join of the current inputs, from scratch (SQL semantics, nested loops)."""

    def match(lr: Row, rr: Row) -> bool:
        if not all(_sql_eq(lr[a], rr[b], ns) for (a, b), ns in zip(keys, null_safe, strict=True)):
            return False
        return cond is None or cond(lr + rr)

    out: Counter[Row] = Counter()
    lpad, rpad = (None,) * widths[0], (None,) * widths[1]
    right_matched = [False] * len(right)
    for lr in left:
        hits = [j for j, rr in enumerate(right) if match(lr, rr)]
        for j in hits:
            right_matched[j] = True
        if jt.emits_joined_rows:
            out.update(lr + right[j] for j in hits)
        if jt.side_kind(0) is SideKind.OUTER and not hits:
            out[lr + rpad] += 1
        if (jt is JoinType.LEFT_SEMI and hits) or (jt is JoinType.LEFT_ANTI and not hits):
            out[lr] += 1
    for j, rr in enumerate(right):
        if jt.side_kind(1) is SideKind.OUTER and not right_matched[j]:
            out[lpad + rr] += 1
        hit = right_matched[j]
        if (jt is JoinType.RIGHT_SEMI and hit) or (jt is JoinType.RIGHT_ANTI and not hit):
            out[rr] += 1
    return out


class StreamKeyChecker:
    """Per output stream key: inserts and deletes alternate and a delete carries the live row."""

    def __init__(self, key: Sequence[int]) -> None:
        self.key = list(key)
        self.live: dict[Row, Row] = {}

    def feed(self, chunks: Sequence[StreamChunk]) -> None:
        for c in chunks:
            for op, row in c.to_records():
                k = tuple(row[i] for i in self.key)
                if op.is_insert:
                    assert k not in self.live, f"insert of live key {k}: {row}"
                    self.live[k] = row
                else:
                    assert self.live.get(k) == row, f"delete {row} but key {k} holds {self.live.get(k)}"
                    del self.live[k]


class RandomSide:
    """Random consistent changes to one input: inserts, deletes, updates (possibly moving the
    join key), and rows inserted and deleted within one chunk. `key_is_pk`: rows are (k, v)
    keyed by k (at most one row per join key), else (id, k, v)."""

    def __init__(self, rng: random.Random, key_is_pk: bool = False) -> None:
        self.rng = rng
        self.key_is_pk = key_is_pk
        self.live: dict[int, Row] = {}
        self.next_id = itertools.count()

    def _new(self, pk: int | None = None) -> Row:
        v = self.rng.choice([None, *range(6)])
        if self.key_is_pk:
            return (pk, v)
        return (pk if pk is not None else next(self.next_id), self.rng.choice(KEYS), v)

    def chunk(self, n_ops: int) -> str:
        lines = []
        for _ in range(n_ops):
            r = self.rng.random()
            if self.key_is_pk:
                free = [k for k in range(4) if k not in self.live]
                if free and (r < 0.45 or not self.live):
                    row = self._new(self.rng.choice(free))
                    self.live[row[0]] = row
                    lines.append(("+", row))
                    continue
            elif r < 0.4 or not self.live:
                row = self._new()
                self.live[row[0]] = row
                lines.append(("+", row))
                continue
            pk = self.rng.choice(sorted(self.live))
            old = self.live[pk]
            if r < 0.65:
                del self.live[pk]
                lines.append(("-", old))
            elif r < 0.9:
                new = self._new(pk)
                self.live[pk] = new
                lines += [("U-", old), ("U+", new)]
            elif not self.key_is_pk:
                tmp = self._new()
                lines += [("+", tmp), ("-", tmp)]
        header = " i i\n" if self.key_is_pk else " i i i\n"
        fmt = lambda v: "." if v is None else str(v)  # noqa: E731
        return header + "".join(f"{op} {' '.join(fmt(v) for v in row)}\n" for op, row in lines)


CONFIGS = [
    # (join type, condition, null_safe, right key_is_pk)
    *[(jt, False, False, False) for jt in JoinType],
    *[(jt, True, False, False) for jt in JoinType],
    (JoinType.FULL_OUTER, True, True, False),
    (JoinType.LEFT_ANTI, False, True, False),
    (JoinType.INNER, True, True, False),
    (JoinType.FULL_OUTER, True, False, True),
    (JoinType.LEFT_SEMI, True, False, True),
    (JoinType.LEFT_ANTI, False, False, True),
    (JoinType.RIGHT_SEMI, False, False, True),
    (JoinType.RIGHT_ANTI, True, False, True),
]


def _run_random(
    jt: JoinType, with_cond: bool, null_safe: bool, key_is_pk: bool, seed: int, *, rebuild: bool, epochs: int
) -> list[list[tuple[str, Row]]]:
    rng = random.Random(seed)
    if key_is_pk:
        right, rkey, rv = RIGHT_BY_KEY, 0, 4
    else:
        right, rkey, rv = RIGHT, 1, 5
    cond = FuncCall("less_than", (InputRef(2, INT), InputRef(rv, INT)), BOOLEAN) if with_cond else None

    def cond_fn(row: Row) -> bool:
        return row[2] is not None and row[rv] is not None and row[2] < row[rv]

    node = join(jt, right=right, right_keys=(rkey,), condition=cond, null_safe=[null_safe])
    h = Harness(node, rebuild_each_epoch=rebuild)
    lside, rside = RandomSide(rng), RandomSide(rng, key_is_pk)
    checker = StreamKeyChecker(node.stream_key)
    view: dict[Row, int] = {}
    per_epoch: list[list[tuple[str, Row]]] = []
    for _ in range(epochs):
        out: list[StreamChunk] = []
        for _ in range(rng.randint(1, 3)):
            src, port = (lside, L) if rng.random() < 0.5 else (rside, R)
            out += h.push(src.chunk(rng.randint(1, 6)), port)
        out += h.barrier()
        checker.feed(out)
        apply_changes(view, out)
        want = reference_join(
            jt,
            list(lside.live.values()),
            list(rside.live.values()),
            [(1, rkey)],
            [null_safe],
            cond_fn if with_cond else None,
            (len(LS), len(right.schema)),
        )
        assert view == dict(want), f"epoch {len(per_epoch)}"
        per_epoch.append(records(out))
    return per_epoch


@pytest.mark.parametrize(("jt", "with_cond", "null_safe", "key_is_pk"), CONFIGS)
def test_random_against_reference(jt: JoinType, with_cond: bool, null_safe: bool, key_is_pk: bool) -> None:
    for seed in range(4):
        _run_random(jt, with_cond, null_safe, key_is_pk, seed, rebuild=True, epochs=8)


@pytest.mark.parametrize("jt", [JoinType.FULL_OUTER, JoinType.LEFT_SEMI, JoinType.RIGHT_ANTI])
def test_same_output_with_and_without_rebuild(jt: JoinType) -> None:
    for seed in range(3):
        rebuilt = _run_random(jt, True, False, False, 100 + seed, rebuild=True, epochs=6)
        kept = _run_random(jt, True, False, False, 100 + seed, rebuild=False, epochs=6)
        assert rebuilt == kept


def test_large_output_is_split_into_chunks() -> None:
    h = Harness(join(JoinType.INNER))
    push(h, R, "".join(f"+ {i} 1 {i}\n" for i in range(40)))
    out = h.push(" i i i\n" + "".join(f"+ {i} 1 {i}\n" for i in range(40)), L)
    assert sum(c.cardinality for c in out) == 1600 and len(out) == 2
    assert all(int(o) in (Op.INSERT, Op.DELETE) for c in out for o in c.ops)
