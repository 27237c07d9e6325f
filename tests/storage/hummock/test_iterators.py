"""Hummock's batch iterators against plain Python models.

Inputs are random sorted runs cut into batches at random places (so batch boundaries fall between
versions of one user key, right after a tombstone, ...); the models are sorted lists and dicts.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piestream.common.epoch import MAX_EPOCH
from piestream.encoding.keys import full_key, split_full_key, user_key
from piestream.storage.hummock import iterators
from piestream.storage.hummock.iterators import (
    BlockIterator,
    ConcatIterator,
    EntryIterator,
    MergeIterator,
    SstableIterator,
    UserIterator,
    clip,
    full_key_range,
    lower_bound,
    seek_key,
)
from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
from piestream.storage.hummock.sstable_builder import build_sstable
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import visible_bound
from piestream.storage.hummock.version import SstableInfo, TableWatermark
from piestream.storage.object_store import InMemoryObjectStore

Pairs = list[tuple[bytes, bytes]]

N_USER_KEYS = 24
EPOCHS = [(100 + i) << 16 for i in range(6)] + [(103 << 16) | 1, (103 << 16) | 2]


def uk_of(i: int) -> bytes:
    """User key i of two tables and a few vnodes; ascending in i."""
    return user_key(1 + i // 12, i // 6, i.to_bytes(2, "big"))


@st.composite
def runs(draw: st.DrawFn, max_runs: int = 4) -> list[dict[bytes, bytes]]:
    """Up to `max_runs` runs (newest first), each a dict full key -> HummockValue. Runs share full
    keys often, with different values, so "newest input wins" is exercised."""
    n = draw(st.integers(1, max_runs))
    out = []
    for r in range(n):
        entries = draw(
            st.lists(
                st.tuples(st.integers(0, N_USER_KEYS - 1), st.sampled_from(EPOCHS), st.booleans()),
                max_size=40,
            )
        )
        run = {}
        for i, e, tomb in entries:
            run[full_key(uk_of(i), e)] = TOMBSTONE if tomb else put_value(f"r{r}-{i}-{e}".encode())
        out.append(run)
    return out


def chunked(pairs: Pairs, cuts: list[int]) -> list[KvBatch]:
    """`pairs` (sorted) as batches cut at the given positions (empty batches included)."""
    bounds = sorted({0, len(pairs), *(c % (len(pairs) + 1) for c in cuts)})
    out = [KvBatch.from_pairs(pairs[a:b], sort=False) for a, b in itertools.pairwise(bounds)]
    return [KvBatch.empty(), *out]  # an empty leading batch must be harmless too


def flatten(batches: Iterable[KvBatch]) -> Pairs:
    out: Pairs = []
    last: bytes | None = None
    for b in batches:
        assert len(b) > 0, "iterators never yield empty batches"
        assert b.is_sorted()
        pairs = b.to_pairs()
        if last is not None:
            assert pairs[0][0] > last, "batches ascend strictly across boundaries"
        last = pairs[-1][0]
        out += pairs
    return out


def merge_model(rs: list[dict[bytes, bytes]]) -> Pairs:
    out: dict[bytes, bytes] = {}
    for run in rs:  # newest first: the first run holding a full key wins
        for k, v in run.items():
            out.setdefault(k, v)
    return sorted(out.items())


def user_model(merged: Pairs, read_epoch: int) -> Pairs:
    """Newest version <= read_epoch of every user key, tombstones hidden."""
    seen: set[bytes] = set()
    out: Pairs = []
    for k, v in merged:  # sorted: newest version of each user key first
        uk, e = split_full_key(k)
        if e > read_epoch or uk in seen:
            continue
        seen.add(uk)
        if v != TOMBSTONE:
            out.append((k, v))
    return out


def in_range(pairs: Pairs, rng: tuple[bytes | None, bytes | None]) -> Pairs:
    lo, hi = rng
    return [(k, v) for k, v in pairs if (lo is None or k >= lo) and (hi is None or k < hi)]


cuts_st = st.lists(st.integers(0, 200), max_size=6)


# --- MergeIterator --------------------------------------------------------------------------------


@given(rs=runs(), cuts=st.lists(cuts_st, min_size=4, max_size=4))
@settings(max_examples=300, deadline=None)
def test_merge_iterator_matches_model(rs: list[dict[bytes, bytes]], cuts: list[list[int]]) -> None:
    inputs = [chunked(sorted(run.items()), cuts[i]) for i, run in enumerate(rs)]
    assert flatten(MergeIterator(inputs)) == merge_model(rs)


def test_merge_equal_full_keys_newest_input_wins_across_batch_boundaries() -> None:
    keys = [full_key(uk_of(i), EPOCHS[0]) for i in range(10)]
    newer = [(k, put_value(b"new")) for k in keys[::2]]
    older = [(k, put_value(b"old")) for k in keys]
    # the newer input's batches end in the middle of the older one's and vice versa
    got = flatten(MergeIterator([chunked(newer, [1, 3]), chunked(older, [2, 5, 7])]))
    assert got == [(k, put_value(b"new" if i % 2 == 0 else b"old")) for i, k in enumerate(keys)]
    # the order of inputs, not of batches, decides
    got = flatten(MergeIterator([chunked(older, [4]), chunked(newer, [])]))
    assert got == older


def test_merge_iterator_edge_cases() -> None:
    assert flatten(MergeIterator([])) == []
    assert flatten(MergeIterator([[], [KvBatch.empty()]])) == []
    pairs = [(full_key(uk_of(i), EPOCHS[1]), put_value(b"v")) for i in range(5)]
    assert flatten(MergeIterator([[], chunked(pairs, [2]), []])) == pairs
    # the merge is lazy: it pulls input batches as it goes
    pulled: list[int] = []

    def gen() -> Iterable[KvBatch]:
        for i, b in enumerate(chunked(pairs, [1, 2, 3])):
            pulled.append(i)
            yield b

    it = iter(MergeIterator([gen()]))
    next(it)
    assert len(pulled) < 5


# --- UserIterator ----------------------------------------------------------------------------------


@given(
    rs=runs(),
    cuts=st.lists(cuts_st, min_size=5, max_size=5),
    read=st.sampled_from([*EPOCHS, MAX_EPOCH, 99 << 16, 103 << 16]),
)
@settings(max_examples=300, deadline=None)
def test_user_iterator_matches_model(rs: list[dict[bytes, bytes]], cuts: list[list[int]], read: int) -> None:
    merged = merge_model(rs)
    inputs = [chunked(sorted(run.items()), cuts[i]) for i, run in enumerate(rs)]
    want = user_model(merged, read)
    assert flatten(UserIterator(MergeIterator(inputs), read)) == want
    # directly over adversarially cut batches of the merged run
    assert flatten(UserIterator(chunked(merged, cuts[4]), read)) == want


def test_user_iterator_tombstone_at_batch_end_hides_older_version_in_next_batch() -> None:
    uk = uk_of(3)
    pairs = [
        (full_key(uk, EPOCHS[3]), TOMBSTONE),
        (full_key(uk, EPOCHS[2]), put_value(b"old")),
        (full_key(uk, EPOCHS[1]), put_value(b"older")),
    ]
    for cuts in ([1], [2], [1, 2]):
        assert flatten(UserIterator(chunked(pairs, cuts), MAX_EPOCH)) == []
        # reading below the tombstone shows the version before it
        got = flatten(UserIterator(chunked(pairs, cuts), EPOCHS[2]))
        assert got == [pairs[1]]


def test_user_iterator_spill_offsets() -> None:
    """A read at a barrier epoch sees its spills (E|1, E|2) once widened by `visible_bound`."""
    uk = uk_of(1)
    e = 103 << 16
    pairs = sorted([(full_key(uk, e | 2), put_value(b"s2")), (full_key(uk, e | 1), put_value(b"s1"))])
    assert flatten(UserIterator(chunked(pairs, []), visible_bound(e))) == [pairs[0]]
    assert flatten(UserIterator(chunked(pairs, []), e)) == []  # the raw epoch alone would not
    assert visible_bound(MAX_EPOCH) == MAX_EPOCH
    assert visible_bound(e | 5) == e | 0xFFFF


def test_user_iterator_hides_rows_below_table_watermark() -> None:
    pairs = []
    for vnode in range(4):
        pairs += [
            (full_key(user_key(7, vnode, bytes([pk])), EPOCHS[0]), put_value(bytes([vnode, pk])))
            for pk in range(6)
        ]
        pairs.append((full_key(user_key(8, vnode, b"\x00"), EPOCHS[0]), put_value(b"other table")))
    pairs.sort()
    wm = TableWatermark(EPOCHS[0], ((0, 2, b"\x03"), (2, 3, b"\x05")))
    got = flatten(UserIterator(chunked(pairs, [5, 11]), MAX_EPOCH, {7: wm}))

    def dead(k: bytes) -> bool:
        t, v, pk = int.from_bytes(k[:4], "big"), int.from_bytes(k[4:6], "big"), k[6:-8]
        return t == 7 and ((v < 2 and pk < b"\x03") or (v == 2 and pk < b"\x05"))

    assert got == [(k, v) for k, v in pairs if not dead(k)]
    assert len(got) < len(pairs)


# --- SST-backed iterators -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sst_level() -> tuple[SstableStore, list[SstableInfo], Pairs]:
    """Six SSTs with disjoint key ranges (several small blocks each) and their entries."""
    store = SstableStore(InMemoryObjectStore(f"iters-{uuid.uuid4().hex}"))
    pairs: Pairs = []
    for i in range(600):
        uk = user_key(1, 0, i.to_bytes(4, "big"))
        for e in EPOCHS[: 1 + i % 3]:
            pairs.append((full_key(uk, e), put_value(b"%d@%d" % (i, e))))
    pairs.sort()
    ssts = []
    step = len(pairs) // 6
    for j in range(6):
        part = pairs[j * step : (j + 1) * step if j < 5 else len(pairs)]
        ssts.append(store.upload(build_sstable(KvBatch.from_pairs(part), block_size=300)))
    assert all(len(store.meta(s).blocks) > 3 for s in ssts)
    return store, ssts, pairs


def _range_bounds(pairs: Pairs) -> list[tuple[bytes | None, bytes | None]]:
    keys = [k for k, _ in pairs]
    cands: list[bytes | None] = [None, b"", b"\xff" * 20, keys[0], keys[-1], keys[1], keys[-2]]
    cands += [keys[i] for i in range(7, len(keys), 97)]
    cands += [keys[i][:-8] + b"\x00" * 8 for i in range(3, len(keys), 131)]  # user-key starts
    cands += [keys[i][:-1] for i in range(5, len(keys), 149)]  # between entries
    return [(a, b) for a in cands for b in cands[::3]]


def test_sstable_iterator_ranges(sst_level: tuple[SstableStore, list[SstableInfo], Pairs]) -> None:
    store, ssts, pairs = sst_level
    sst = ssts[2]
    own = [p for p in pairs if sst.smallest_key <= p[0] <= sst.largest_key]
    for rng in _range_bounds(own):
        assert flatten(SstableIterator(store, sst, rng)) == in_range(own, rng), rng


def test_concat_iterator_ranges(sst_level: tuple[SstableStore, list[SstableInfo], Pairs]) -> None:
    store, ssts, pairs = sst_level
    for rng in _range_bounds(pairs):
        assert flatten(ConcatIterator(store, ssts, rng)) == in_range(pairs, rng), rng


def test_user_ranges_over_merge_of_levels(sst_level: tuple[SstableStore, list[SstableInfo], Pairs]) -> None:
    """A user-key range over an SST level merged with a newer in-memory run."""
    store, ssts, pairs = sst_level
    newer = sorted(
        [(full_key(user_key(1, 0, i.to_bytes(4, "big")), EPOCHS[5]), TOMBSTONE) for i in range(0, 600, 7)]
        + [
            (full_key(user_key(1, 0, i.to_bytes(4, "big")), EPOCHS[4]), put_value(b"new"))
            for i in range(3, 600, 5)
        ]
    )
    merged = merge_model([dict(newer), dict(pairs)])
    for lo, hi in [(None, None), (10, 20), (0, 1), (599, None), (None, 3), (250, 251), (300, 300), (5, 2)]:
        rng = full_key_range(
            None if lo is None else user_key(1, 0, lo.to_bytes(4, "big")),
            None if hi is None else user_key(1, 0, hi.to_bytes(4, "big")),
        )
        for read in (MAX_EPOCH, EPOCHS[4], EPOCHS[0]):
            it = UserIterator(
                MergeIterator(
                    [BlockIterator(KvBatch.from_pairs(newer), rng), ConcatIterator(store, ssts, rng)]
                ),
                read,
            )
            assert flatten(it) == user_model(in_range(merged, rng), read), (lo, hi, read)


def test_full_key_range_covers_every_version_of_the_start_key_and_none_of_the_end_key() -> None:
    a, b = uk_of(1), uk_of(2)
    lo, hi = full_key_range(a, b)
    assert lo is not None and hi is not None
    for e in (0, 1, EPOCHS[0], MAX_EPOCH):
        assert lo <= full_key(a, e) < hi
        assert not full_key(b, e) < hi
    assert full_key_range(None, None) == (None, None)
    # seek_key finds the newest version at or below the read epoch
    versions = sorted(full_key(a, e) for e in EPOCHS)
    for read in EPOCHS:
        i = next(i for i, k in enumerate(versions) if k >= seek_key(a, read))
        assert split_full_key(versions[i])[1] == read


def test_clip_and_lower_bound() -> None:
    pairs = [(full_key(uk_of(i), EPOCHS[0]), put_value(b"x")) for i in range(0, 20, 2)]
    batch = KvBatch.from_pairs(pairs)
    keys = [k for k, _ in pairs]
    for probe in [b"", *keys, *(k + b"\x00" for k in keys), b"\xff" * 30]:
        assert lower_bound(batch.keys, probe) == sum(k < probe for k in keys)
    for rng in _range_bounds(pairs):
        assert clip(batch, rng).to_pairs() == in_range(pairs, rng)
        assert flatten(BlockIterator(batch, rng)) == in_range(pairs, rng)


# --- EntryIterator ----------------------------------------------------------------------------------


@given(
    rs=runs(), cuts=st.lists(cuts_st, min_size=4, max_size=4), seeks=st.lists(st.integers(0, 400), max_size=6)
)
@settings(max_examples=150, deadline=None)
def test_entry_iterator_seek_next(
    rs: list[dict[bytes, bytes]], cuts: list[list[int]], seeks: list[int]
) -> None:
    merged = merge_model(rs)
    runs_sorted = [sorted(run.items()) for run in rs]

    def make(start: bytes | None) -> Iterable[KvBatch]:
        rng = (start, None)
        return MergeIterator(
            [[clip(b, rng) for b in chunked(r, cuts[i]) if len(b)] for i, r in enumerate(runs_sorted)]
        )

    it = EntryIterator(make)
    keys = [k for k, _ in merged]
    targets: list[bytes | None] = [None, b"\xff" * 30]
    targets += [
        keys[s % len(keys)] if keys and s % 3 else full_key(uk_of(s % N_USER_KEYS), (s << 16) | 7)
        for s in seeks
    ]
    for t in targets:
        it.seek(t)
        got = []
        while it.is_valid():
            got.append((it.key(), it.value()))
            it.next()
        assert got == [(k, v) for k, v in merged if t is None or k >= t]
    # seek after exhausting starts over
    it.seek(None)
    assert it.is_valid() == bool(merged)


@pytest.mark.parametrize("width, prefix", [(10, 2), (16, 8), (23, 15), (40, 32), (41, 33)])
def test_neighbours_differ_matches_a_byte_comparison(width: int, prefix: int) -> None:
    """Records that repeat, that differ only after the prefix (the epoch) or only in one prefix
    byte: the word-window comparison says what comparing every byte says."""
    rng = np.random.default_rng(width)
    n = 2000
    grid = rng.integers(0, 2, (n, width), dtype=np.uint8)
    grid[1::3, :prefix] = grid[0:-1:3, :prefix]  # same key as the previous record, other epoch
    pos = rng.integers(0, prefix, n)
    grid[2::3, :] = grid[1:-1:3, :]
    grid[np.arange(2, n, 3), pos[2::3]] ^= 1  # one prefix byte flipped
    expected = (grid[1:, :prefix] != grid[:-1, :prefix]).any(axis=1)
    got = iterators._neighbours_differ(np.ascontiguousarray(grid).reshape(-1), n, width, prefix)
    assert np.array_equal(got, expected)
    assert (~got).sum() > n // 4  # the repeats are there
