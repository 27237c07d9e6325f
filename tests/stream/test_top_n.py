"""TopN / GroupTopN: pretty-chunk cases and randomized differential tests against a Python model."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

import pytest
from exec_harness import Harness, apply_changes, pretty_records, records

from piestream.common.chunk import Op, StreamChunk
from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.order import ASC, ASC_NULLS_FIRST, DESC, DESC_NULLS_LAST, OrderType
from piestream.common.scalar import Row
from piestream.common.schema import Schema
from piestream.common.types import INT, VARCHAR
from piestream.plan.node import ExchangeNode
from piestream.plan.top_n import TopNNode, build_top_n
from piestream.stream.cache.keyed_rows import KeyedRows
from piestream.stream.executor import StreamingConfig

# id (stream key), g (group), v, w
S = Schema.of(("id", INT), ("g", INT), ("v", INT), ("w", VARCHAR))
H = " i i i T\n"


def src(append_only: bool = False) -> ExchangeNode:
    return ExchangeNode(schema=S, stream_key=(0,), append_only=append_only, upstream_fragment_id=1)


def top_n(
    *,
    order_by: Sequence[tuple[int, OrderType]] = ((2, ASC),),
    limit: int = 2,
    offset: int = 0,
    group_key: Sequence[int] = (),
    with_ties: bool = False,
    append_only: bool = False,
) -> TopNNode:
    return build_top_n(
        src(append_only),
        group_key=group_key,
        order_by=order_by,
        limit=limit,
        offset=offset,
        with_ties=with_ties,
        table_id=10,
    )


def epoch(h: Harness, *chunks: str) -> list[tuple[str, Row]]:
    """Push pretty chunks (header added), end the epoch, return everything emitted."""
    out = []
    for c in chunks:
        out += h.push(H + c)
    out += h.barrier()
    return records(out)


def expect(text: str) -> list[tuple[str, Row]]:
    return pretty_records(H + text)


# -- pretty-chunk cases ---------------------------------------------------------------------------


def test_insert_beyond_limit_and_delete_pulls_next_in() -> None:
    h = Harness(top_n(limit=2))
    assert epoch(h, "+ 1 0 10 a\n+ 2 0 20 b\n+ 3 0 30 c") == expect("+ 1 0 10 a\n+ 2 0 20 b")
    assert epoch(h, "+ 4 0 40 d") == []  # ranks 4th: no change
    assert epoch(h, "- 1 0 10 a") == expect("- 1 0 10 a\n+ 3 0 30 c")
    assert epoch(h, "+ 5 0 5 e") == expect("- 3 0 30 c\n+ 5 0 5 e")
    assert epoch(h, "- 4 0 40 d") == []  # below the range
    # an update inside the range that keeps its rank: delete + insert of the same key
    assert epoch(h, "U- 2 0 20 b\nU+ 2 0 21 b") == expect("- 2 0 20 b\n+ 2 0 21 b")
    # rows inserted and deleted within one epoch leave no trace
    assert epoch(h, "+ 6 0 1 f", "- 6 0 1 f") == []
    # retractable input keeps every row
    assert h.table_rows(h.node.tables()[0]) == [(2, 0, 21, "b"), (3, 0, 30, "c"), (5, 0, 5, "e")]


def test_offset_skips_rows() -> None:
    h = Harness(top_n(limit=2, offset=1))
    assert epoch(h, "+ 1 0 10 a\n+ 2 0 20 b\n+ 3 0 30 c\n+ 4 0 40 d") == expect("+ 2 0 20 b\n+ 3 0 30 c")
    # a new first row shifts the window: 1 moves into it, 3 moves out
    assert epoch(h, "+ 5 0 5 e") == expect("- 3 0 30 c\n+ 1 0 10 a")
    # deleting a row of the low part [0, offset) shifts the window up again
    assert epoch(h, "- 5 0 5 e") == expect("- 1 0 10 a\n+ 3 0 30 c")
    assert epoch(h, "- 2 0 20 b") == expect("- 2 0 20 b\n+ 4 0 40 d")


def test_ties_broken_by_stream_key() -> None:
    h = Harness(top_n(limit=2))
    assert epoch(h, "+ 3 0 10 c\n+ 1 0 10 a\n+ 2 0 10 b") == expect("+ 1 0 10 a\n+ 2 0 10 b")
    assert epoch(h, "+ 0 0 10 z") == expect("- 2 0 10 b\n+ 0 0 10 z")
    assert epoch(h, "- 1 0 10 a") == expect("- 1 0 10 a\n+ 2 0 10 b")


def test_with_ties_keeps_rows_tied_with_the_last() -> None:
    h = Harness(top_n(limit=2, with_ties=True))
    got = epoch(h, "+ 1 0 10 a\n+ 2 0 20 b\n+ 3 0 20 c\n+ 4 0 30 d")
    assert got == expect("+ 1 0 10 a\n+ 2 0 20 b\n+ 3 0 20 c")
    # a tie with the last row enters the range too
    assert epoch(h, "+ 7 0 20 g") == expect("+ 7 0 20 g")
    # a new first row makes 10 the last value: every 20 leaves
    assert epoch(h, "+ 5 0 5 e") == expect("- 2 0 20 b\n- 3 0 20 c\n- 7 0 20 g\n+ 5 0 5 e")
    assert epoch(h, "+ 6 0 6 f") == expect("- 1 0 10 a\n+ 6 0 6 f")
    assert epoch(h, "- 5 0 5 e\n- 6 0 6 f") == expect(
        "- 5 0 5 e\n- 6 0 6 f\n+ 1 0 10 a\n+ 2 0 20 b\n+ 3 0 20 c\n+ 7 0 20 g"
    )


def test_multi_column_order_desc_and_nulls() -> None:
    # ORDER BY v DESC (NULLS FIRST), w ASC (NULLS LAST) LIMIT 3
    h = Harness(top_n(order_by=((2, DESC), (3, ASC)), limit=3))
    got = epoch(h, "+ 1 0 10 a\n+ 2 0 . b\n+ 3 0 10 .\n+ 4 0 20 z\n+ 5 0 10 b")
    assert got == expect("+ 2 0 . b\n+ 4 0 20 z\n+ 1 0 10 a")
    assert epoch(h, "- 2 0 . b") == expect("- 2 0 . b\n+ 5 0 10 b")
    # DESC NULLS LAST / ASC NULLS FIRST flip where NULLs go
    h = Harness(top_n(order_by=((2, DESC_NULLS_LAST), (3, ASC_NULLS_FIRST)), limit=3))
    got = epoch(h, "+ 1 0 10 a\n+ 2 0 . b\n+ 3 0 10 .\n+ 4 0 20 z\n+ 5 0 10 b")
    assert got == expect("+ 4 0 20 z\n+ 3 0 10 .\n+ 1 0 10 a")


def test_group_top_n_several_groups() -> None:
    node = top_n(group_key=(1,), limit=2, order_by=((2, DESC),))
    assert node.stream_key == (1, 0)
    h = Harness(node)
    got = epoch(h, "+ 1 0 10 a\n+ 2 1 20 b\n+ 3 0 30 c\n+ 4 1 5 d\n+ 5 0 20 e\n+ 6 2 1 f")
    assert sorted(got) == sorted(expect("+ 3 0 30 c\n+ 5 0 20 e\n+ 2 1 20 b\n+ 4 1 5 d\n+ 6 2 1 f"))
    assert epoch(h, "+ 7 1 1 g") == []
    assert sorted(epoch(h, "- 3 0 30 c\n- 2 1 20 b")) == sorted(
        expect("- 3 0 30 c\n+ 1 0 10 a\n- 2 1 20 b\n+ 7 1 1 g")
    )
    # a row moving between groups
    assert sorted(epoch(h, "U- 6 2 1 f\nU+ 6 0 99 f")) == sorted(expect("- 6 2 1 f\n- 1 0 10 a\n+ 6 0 99 f"))


def test_limit_one_stream_key_is_group_key() -> None:
    node = top_n(group_key=(1,), limit=1, order_by=((2, ASC),))
    assert node.stream_key == (1,)
    assert top_n(group_key=(1,), limit=1, offset=1).stream_key == (1, 0)
    assert top_n(group_key=(1,), limit=1, with_ties=True).stream_key == (1, 0)
    assert top_n(limit=1).stream_key == ()
    h = Harness(node)
    assert epoch(h, "+ 1 0 10 a\n+ 2 0 5 b\n+ 3 1 7 c") == expect("+ 2 0 5 b\n+ 3 1 7 c")
    assert epoch(h, "- 2 0 5 b") == expect("- 2 0 5 b\n+ 1 0 10 a")


def test_append_only_trims_state() -> None:
    node = top_n(group_key=(1,), limit=2, append_only=True)
    h = Harness(node)
    assert sorted(epoch(h, "+ 1 0 10 a\n+ 2 0 20 b\n+ 3 0 30 c\n+ 4 1 1 d")) == sorted(
        expect("+ 1 0 10 a\n+ 2 0 20 b\n+ 4 1 1 d")
    )
    assert epoch(h, "+ 5 0 5 e\n+ 6 0 50 f") == expect("- 2 0 20 b\n+ 5 0 5 e")
    # only the top rows are kept in state
    assert h.table_rows(node.state_table) == [(1, 0, 10, "a"), (4, 1, 1, "d"), (5, 0, 5, "e")]
    with pytest.raises(InternalError):
        h.push(H + "- 1 0 10 a")


def test_node_validation() -> None:
    with pytest.raises(FeatureNotSupported):
        top_n(limit=-1)
    with pytest.raises(InternalError):
        TopNNode(
            schema=S,
            stream_key=(0,),
            input=src(),
            group_key=(),
            order_by=((2, ASC),),
            limit=1,
            input_stream_key=(0,),
            state_table=top_n(limit=1).state_table,
        )
    assert "GroupTopN" in top_n(group_key=(1,)).explain()


def test_limit_zero_emits_nothing() -> None:
    h = Harness(top_n(limit=0))
    assert epoch(h, "+ 1 0 10 a") == []
    assert epoch(h, "- 1 0 10 a") == []


# -- randomized differential tests ----------------------------------------------------------------


def _cmp_datum(a: object, b: object, o: OrderType) -> int:
    """PostgreSQL order of one column: NULL largest unless nulls_largest is off; DESC reverses."""
    if a is None or b is None:
        r = (a is None) - (b is None)
        r = r if o.nulls_largest else -r
    else:
        r = (a > b) - (a < b)  # type: ignore[operator]
    return -r if o.descending else r


def model_top_n(
    rows: list[Row],
    group_key: Sequence[int],
    order_by: Sequence[tuple[int, OrderType]],
    limit: int,
    offset: int,
    with_ties: bool,
) -> dict[Row, int]:
    """The top range of every group, from scratch (ties broken by the stream key `id`)."""

    def cmp_order(a: Row, b: Row) -> int:
        for col, o in order_by:
            r = _cmp_datum(a[col], b[col], o)
            if r:
                return r
        return 0

    def cmp_rank(a: Row, b: Row) -> int:
        return cmp_order(a, b) or (a[0] > b[0]) - (a[0] < b[0])  # ties: stream key `id` ascending

    groups: dict[Row, list[Row]] = {}
    for r in rows:
        groups.setdefault(tuple(r[i] for i in group_key), []).append(r)
    out: dict[Row, int] = {}
    for members in groups.values():
        ranked = sorted(members, key=functools.cmp_to_key(cmp_rank))
        picked = ranked[offset : offset + limit]
        if with_ties and limit and len(ranked) >= offset + limit:
            last = ranked[offset + limit - 1]
            picked += [r for r in ranked[offset + limit :] if cmp_order(r, last) == 0]
        for r in picked:
            out[r] = out.get(r, 0) + 1
    return out


def random_epochs(seed: int, n_epochs: int, append_only: bool) -> list[list[StreamChunk]]:
    """Random chunks of inserts / deletes / updates over a small domain, per epoch."""
    rng = random.Random(seed)
    live: dict[int, Row] = {}
    next_id = 0
    epochs = []

    def new_row(i: int) -> Row:
        v = rng.choice([None, *range(6)])
        w = rng.choice([None, "a", "b", "c"])
        return (i, rng.choice([None, 0, 1, 2]), v, w)

    for _ in range(n_epochs):
        chunks = []
        for _ in range(rng.randrange(0, 4)):
            recs: list[tuple[Op, Row]] = []
            for _ in range(rng.randrange(1, 12)):
                r = rng.random()
                if append_only or r < 0.5 or not live:
                    row = new_row(next_id)
                    next_id += 1
                    live[row[0]] = row
                    recs.append((Op.INSERT, row))
                elif r < 0.8:
                    old = live.pop(rng.choice(sorted(live)))
                    recs.append((Op.DELETE, old))
                else:
                    i = rng.choice(sorted(live))
                    old, new = live[i], new_row(i)
                    live[i] = new
                    recs += [(Op.UPDATE_DELETE, old), (Op.UPDATE_INSERT, new)]
            chunks.append(StreamChunk.from_rows(recs, S.types))
        epochs.append(chunks)
    return epochs


def check_stream_key(state: dict[Row, Row], key: Sequence[int], chunks: Sequence[StreamChunk]) -> None:
    """Per output stream key, inserts and deletes alternate and a delete carries the inserted row."""
    for c in chunks:
        for op, row in c.to_records():
            k = tuple(row[i] for i in key)
            if op.is_insert:
                assert k not in state, f"double insert of key {k}: {row}"
                state[k] = row
            else:
                assert state.get(k) == row, f"delete of key {k} does not match: {row} vs {state.get(k)}"
                del state[k]


def run_differential(
    node: TopNNode, seed: int, n_epochs: int, rebuild: bool, cache_budget: int | None = None
) -> list[list[tuple[str, Row]]]:
    """`cache_budget`: rebuild each epoch with the previous epoch's caches (warm), evicted beyond
    that many bytes."""
    if cache_budget is None:
        h = Harness(node, rebuild_each_epoch=rebuild)
    else:
        config = StreamingConfig(
            check_consistency=True, sanity_check_storage=True, cache_budget_bytes=cache_budget
        )
        h = Harness(node, warm_cache=True, config=config)
    live: dict[int, Row] = {}
    view: dict[Row, int] = {}
    keys: dict[Row, Row] = {}
    outputs = []
    for chunks in random_epochs(seed, n_epochs, node.input.append_only):
        out = []
        for c in chunks:
            out += h.push(c)
            for op, row in c.to_records():
                if op.is_insert:
                    live[row[0]] = row
                else:
                    del live[row[0]]
        out += h.barrier()
        check_stream_key(keys, node.stream_key, out)
        apply_changes(view, out)
        want = model_top_n(
            list(live.values()), node.group_key, node.order_by, node.limit, node.offset, node.with_ties
        )
        assert view == want
        outputs.append(records(out))
    return outputs


CONFIGS = [
    {"limit": 3},
    {"limit": 1, "group_key": (1,)},
    {"limit": 2, "offset": 2, "group_key": (1,), "order_by": ((2, DESC), (3, ASC))},
    {"limit": 2, "with_ties": True, "group_key": (1,), "order_by": ((2, ASC_NULLS_FIRST),)},
    {"limit": 1, "offset": 1, "with_ties": True, "order_by": ((3, DESC_NULLS_LAST), (2, ASC))},
    {"limit": 2, "order_by": ((1, ASC), (2, DESC)), "group_key": (1,)},  # ORDER BY a group column
    {"limit": 4, "order_by": ()},
]


@pytest.mark.parametrize("append_only", [False, True])
@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
def test_differential(cfg: int, append_only: bool) -> None:
    node = top_n(append_only=append_only, **CONFIGS[cfg])  # type: ignore[arg-type]
    for seed in range(6):
        run_differential(node, seed, 12, rebuild=True)


@pytest.mark.parametrize("append_only", [False, True])
@pytest.mark.parametrize("cfg", [0, 2, 3])
def test_rebuild_and_long_lived_executors_agree(cfg: int, append_only: bool) -> None:
    node = top_n(append_only=append_only, **CONFIGS[cfg])  # type: ignore[arg-type]
    for seed in range(2):
        a = run_differential(node, 100 + seed, 12, rebuild=True)
        b = run_differential(node, 100 + seed, 12, rebuild=False)
        assert a == b


@pytest.mark.parametrize("room", [1 << 30, 600, 0])
@pytest.mark.parametrize("cfg", [0, 1, 2, 5, 6])
def test_append_only_warm_and_evicted_caches(cfg: int, room: int) -> None:
    """AppendOnlyGroupTopN reads old tops from its cache (all, some or none of the groups, as
    eviction leaves them: `room` bytes beyond the cache's fixed size) and agrees with the model
    and with a cold run."""
    node = top_n(append_only=True, **CONFIGS[cfg])  # type: ignore[arg-type]
    budget = KeyedRows([t.arrow for t in S.types]).nbytes + room
    for seed in range(4):
        cold = run_differential(node, 200 + seed, 12, rebuild=True)
        assert run_differential(node, 200 + seed, 12, rebuild=True, cache_budget=budget) == cold


def test_append_only_top_n_cache_partial_hits() -> None:
    """A group cached from an earlier epoch and a new one in the same epoch (a partial hit);
    then the cache is dropped (as by eviction) and the state answers."""
    config = StreamingConfig(check_consistency=True, sanity_check_storage=True)
    node = top_n(group_key=(1,), limit=2, append_only=True)
    h = Harness(node, warm_cache=True, config=config)
    assert epoch(h, "+ 1 0 10 a\n+ 2 0 20 b") == expect("+ 1 0 10 a\n+ 2 0 20 b")
    assert sorted(epoch(h, "+ 3 0 5 c\n+ 4 1 7 d")) == sorted(expect("- 2 0 20 b\n+ 3 0 5 c\n+ 4 1 7 d"))
    for c in h.cache.keyed_rows():
        assert c.hits >= 1 and c.misses >= 2
        c.clear()
    assert sorted(epoch(h, "+ 5 0 1 e\n+ 6 1 8 f\n+ 7 1 6 g")) == sorted(
        expect("- 1 0 10 a\n+ 5 0 1 e\n+ 7 1 6 g")
    )
    assert sorted(h.table_rows(node.state_table)) == [
        (3, 0, 5, "c"),
        (4, 1, 7, "d"),
        (5, 0, 1, "e"),
        (7, 1, 6, "g"),
    ]
