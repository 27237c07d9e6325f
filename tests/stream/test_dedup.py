"""AppendOnlyDedup: pretty-chunk cases and randomized differential tests against a Python model."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from exec_harness import Harness, apply_changes, pretty_records, records

from piestream.common.chunk import Op, StreamChunk
from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.scalar import Row
from piestream.common.schema import Schema
from piestream.common.types import INT, VARCHAR
from piestream.plan.dedup import DedupNode, build_dedup, dedup_table
from piestream.plan.node import ExchangeNode

# id (stream key), k1, k2, payload
S = Schema.of(("id", INT), ("k1", INT), ("k2", VARCHAR), ("p", INT))
H = " i i T i\n"
SRC = ExchangeNode(schema=S, stream_key=(0,), append_only=True, upstream_fragment_id=1)


def epoch(h: Harness, *chunks: str) -> list[tuple[str, Row]]:
    out = []
    for c in chunks:
        out += h.push(H + c)
    out += h.barrier()
    return records(out)


def expect(text: str) -> list[tuple[str, Row]]:
    return pretty_records(H + text)


def test_first_row_wins_within_a_chunk_and_across_epochs() -> None:
    node = build_dedup(SRC, (1,), table_id=20)
    assert node.stream_key == (1,) and node.append_only
    h = Harness(node)
    got = epoch(h, "+ 1 10 a 0\n+ 2 10 b 1\n+ 3 20 c 2\n+ 4 . d 3\n+ 5 . e 4\n+ 6 20 f 5")
    assert got == expect("+ 1 10 a 0\n+ 3 20 c 2\n+ 4 . d 3")
    # later chunks of the same epoch see the earlier ones
    assert epoch(h, "+ 7 30 g 6\n+ 8 10 h 7", "+ 9 30 i 8\n+ 10 40 j 9") == expect("+ 7 30 g 6\n+ 10 40 j 9")
    # and later epochs see the committed state
    assert epoch(h, "+ 11 40 k 0\n+ 12 . l 0\n+ 13 50 m 0") == expect("+ 13 50 m 0")
    assert h.table_rows(node.state_table) == [
        (1, 10, "a", 0),
        (3, 20, "c", 2),
        (4, None, "d", 3),
        (7, 30, "g", 6),
        (10, 40, "j", 9),
        (13, 50, "m", 0),
    ]


def test_dedup_on_several_columns() -> None:
    h = Harness(build_dedup(SRC, (2, 1), table_id=20))
    got = epoch(h, "+ 1 1 a 0\n+ 2 1 b 0\n+ 3 1 a 0\n+ 4 2 a 0\n+ 5 . a 0\n+ 6 . a 0\n+ 7 1 . 0")
    assert got == expect("+ 1 1 a 0\n+ 2 1 b 0\n+ 4 2 a 0\n+ 5 . a 0\n+ 7 1 . 0")
    assert epoch(h, "+ 8 1 . 1\n+ 9 2 b 1") == expect("+ 9 2 b 1")


def test_no_dedup_columns_keeps_the_very_first_row() -> None:
    h = Harness(build_dedup(SRC, (), table_id=20))
    assert epoch(h, "+ 1 1 a 0\n+ 2 2 b 0") == expect("+ 1 1 a 0")
    assert epoch(h, "+ 3 3 c 0") == []


def test_rejects_retractable_input() -> None:
    retract = ExchangeNode(schema=S, stream_key=(0,), upstream_fragment_id=1)
    with pytest.raises(FeatureNotSupported, match="append-only"):
        build_dedup(retract, (1,), table_id=20)
    with pytest.raises(InternalError):
        DedupNode(
            schema=S,
            stream_key=(1,),
            append_only=True,
            input=SRC,
            dedup_cols=(1,),
            state_table=dedup_table(20, [(f.name, f.data_type) for f in S], (2,)),
        )
    h = Harness(build_dedup(SRC, (1,), table_id=20))
    with pytest.raises(InternalError):
        h.push(H + "- 1 10 a 0")
    assert "AppendOnlyDedup" in build_dedup(SRC, (1, 2), table_id=20).explain()


# -- randomized differential tests ----------------------------------------------------------------


def random_epochs(seed: int, n_epochs: int) -> list[list[StreamChunk]]:
    rng = random.Random(seed)
    next_id = 0
    epochs = []
    for _ in range(n_epochs):
        chunks = []
        for _ in range(rng.randrange(0, 4)):
            rows = []
            for _ in range(rng.randrange(1, 15)):
                rows.append(
                    (Op.INSERT, (next_id, rng.choice([None, *range(8)]), rng.choice([None, "x", "y"]), 0))
                )
                next_id += 1
            chunks.append(StreamChunk.from_rows(rows, S.types))
        epochs.append(chunks)
    return epochs


def run_differential(
    dedup_cols: Sequence[int], seed: int, n_epochs: int, rebuild: bool
) -> list[list[tuple[str, Row]]]:
    node = build_dedup(SRC, dedup_cols, table_id=20)
    h = Harness(node, rebuild_each_epoch=rebuild)
    first: dict[Row, Row] = {}  # model: dedup key -> first row in arrival order
    view: dict[Row, int] = {}
    outputs = []
    for chunks in random_epochs(seed, n_epochs):
        out = []
        for c in chunks:
            out += h.push(c)
            for _, row in c.to_records():
                first.setdefault(tuple(row[i] for i in dedup_cols), row)
        out += h.barrier()
        recs = records(out)
        assert all(op == "+" for op, _ in recs)  # append-only output
        keys = [tuple(r[i] for i in dedup_cols) for _, r in recs]
        assert len(keys) == len(set(keys))  # each key inserted at most once
        apply_changes(view, out)
        assert view == {r: 1 for r in first.values()}
        outputs.append(recs)
    return outputs


@pytest.mark.parametrize("dedup_cols", [(1,), (2, 1), (2,)])
def test_differential(dedup_cols: tuple[int, ...]) -> None:
    for seed in range(10):
        run_differential(dedup_cols, seed, 15, rebuild=True)


def test_rebuild_and_long_lived_executors_agree() -> None:
    for seed in range(4):
        assert run_differential((1, 2), 50 + seed, 15, True) == run_differential((1, 2), 50 + seed, 15, False)
