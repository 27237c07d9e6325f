"""The bulk paths' sorts: `sort_order` (its packed one-sort path for keys of one width, whose
constant byte positions are dropped) and `KvBatch.merge_with_positions` (sync's merge of imms)
against plain Python sorting, on keys built to hit both the packed and the fallback paths."""

from __future__ import annotations

import random

import numpy as np
import pyarrow.compute as pc
import pytest

from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.key_index import packed_order, padded_ragged, sort_order
from piestream.storage.hummock.kv_batch import KvBatch


def _keys(rnd: random.Random, n: int, width: int, equal: bool) -> list[bytes]:
    const = [rnd.random() < 0.5 for _ in range(width)]
    base = bytes(rnd.choice([0, 7, 255]) for _ in range(width))
    out = []
    for _ in range(n):
        k = bytes(base[j] if const[j] else rnd.choice([0, 1, 2, 255]) for j in range(width))
        out.append(k if equal else k + b"\x00" * rnd.randint(0, 2))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_sort_order_is_stable_byte_order(seed: int) -> None:
    rnd = random.Random(seed)
    keys = _keys(rnd, rnd.randint(2, 300), rnd.randint(1, 20), equal=seed % 4 != 0)
    data, starts, lens = padded_ragged(Ragged.from_list(keys))
    want = sorted(range(len(keys)), key=lambda i: (keys[i], i))
    assert sort_order(data, starts, lens).tolist() == want
    assert [keys[i] for i in sort_order(data, starts, lens, stable=False)] == sorted(keys)


def test_packed_order_declines_what_does_not_fit() -> None:
    rnd = random.Random(3)
    wide = [bytes(rnd.randrange(256) for _ in range(12)) for _ in range(100)]  # 12 varying bytes
    d, s, ln = padded_ragged(Ragged.from_list(wide))
    assert packed_order(d, s, ln) is None
    assert [wide[i] for i in sort_order(d, s, ln)] == sorted(wide)
    mixed = [b"ab", b"abc", b"a"]
    d, s, ln = padded_ragged(Ragged.from_list(mixed))
    assert packed_order(d, s, ln) is None
    # keys at equal distances (a fixed suffix after each, as lookups' targets) use a strided view
    keys = [bytes([1, i % 3, 9, i % 5]) for i in range(50)]
    r = Ragged.from_list([k + b"SUFFIX" for k in keys])
    d, s, ln = padded_ragged(r)
    order = packed_order(d, s, ln - 6)
    assert order is not None
    assert order.tolist() == sorted(range(50), key=lambda i: (keys[i], i))


@pytest.mark.parametrize("seed", range(30))
def test_merge_with_positions_matches_a_stable_sort(seed: int) -> None:
    rnd = random.Random(seed)
    width = rnd.choice([3, 6, 14])
    batches = []
    for b in range(rnd.randint(1, 5)):
        keys = _keys(rnd, rnd.randint(0, 40), width, equal=seed % 5 != 0)
        batches.append(KvBatch.from_pairs([(k, bytes([b])) for k in keys]))
    merged, pos = KvBatch.merge_with_positions(batches)
    nonempty = [b for b in batches if len(b)]
    if not nonempty:
        assert len(merged) == 0
        return
    cat = KvBatch.concat(nonempty)
    want = cat.take(pc.sort_indices(cat.keys).to_numpy()).dedup_exact()
    assert merged.to_pairs() == want.to_pairs()  # newest (first) batch wins equal full keys
    assert cat.take(np.asarray(pos)).to_pairs() == merged.to_pairs()


@pytest.mark.parametrize("seed", range(20))
def test_merge_of_disjoint_batches_is_their_concatenation_in_key_order(seed: int) -> None:
    """Batches whose key ranges do not overlap (tables, actors' vnode ranges) are concatenated
    in key order; ranges that touch (one batch's last key is another's first, or a prefix of
    it) go through the sort, and the result and positions equal a stable sort's either way."""
    rnd = random.Random(seed)
    keys = sorted(set(_keys(rnd, rnd.randint(6, 80), rnd.choice([2, 5]), equal=seed % 3 != 0)))
    cuts = sorted(rnd.sample(range(1, len(keys)), min(len(keys) - 1, rnd.randint(1, 4))))
    pieces = [keys[a:b] for a, b in zip([0, *cuts], [*cuts, len(keys)], strict=True)]
    if seed % 4 == 0 and len(pieces) > 1:
        pieces[1] = [pieces[0][-1], *pieces[1]]  # the same full key in two batches
    if seed % 4 == 1:
        pieces.append([pieces[0][-1] + b"\x00"])  # a key extending another batch's last key
    batches = [KvBatch.from_pairs([(k, bytes([b])) for k in p]) for b, p in enumerate(pieces)]
    rnd.shuffle(batches)
    merged, pos = KvBatch.merge_with_positions(batches)
    cat = KvBatch.concat(batches)
    want = cat.take(pc.sort_indices(cat.keys).to_numpy()).dedup_exact()
    assert merged.to_pairs() == want.to_pairs()
    assert cat.take(np.asarray(pos)).to_pairs() == merged.to_pairs()
