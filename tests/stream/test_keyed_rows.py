"""The columnar operator cache against a dict model: it answers the last run put for a key, or
nothing (a miss) — never a wrong row, also when keys share a hash, when entries are evicted
and when compactions renumber everything."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piestream.encoding.ragged import Ragged
from piestream.stream.cache import keyed_rows
from piestream.stream.cache.hash_index import HashIndex, normalized
from piestream.stream.cache.keyed_rows import KeyedRows
from piestream.stream.cache.registry import ActorCaches, CacheRegistry

KEYS = [b"", b"a", b"b", b"ab", b"\x00", b"\x00\x00", b"key-7", b"k" * 40]

# one operation: ("put", {key: run}), ("remove", [keys]), ("evict", tick offset)
op = st.one_of(
    st.tuples(
        st.just("put"),
        st.dictionaries(st.sampled_from(KEYS), st.lists(st.integers(-9, 9), max_size=3), max_size=6),
    ),
    st.tuples(st.just("remove"), st.lists(st.sampled_from(KEYS), max_size=4)),
    st.tuples(st.just("evict"), st.integers(0, 6)),
)


def _run_model(ops: list, weak_hash: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if weak_hash:  # every key hashes to one of two values: every lookup meets collisions
        monkeypatch.setattr(
            keyed_rows, "xxh64_ragged", lambda r: (r.lengths % 2).astype(np.uint64) + np.uint64(7)
        )
    clock = iter(range(1, 1 << 30))
    cache = KeyedRows([pa.string(), pa.int64()], lambda: next(clock))
    model: dict[bytes, list[int]] = {}
    for kind, arg in ops:
        if kind == "put":
            if not arg:
                continue
            ks = list(arg)
            counts = np.array([len(arg[k]) for k in ks])
            vals = [v for k in ks for v in arg[k]]
            names = [k.hex() for k in ks for _ in arg[k]]
            cache.put_runs(
                Ragged.from_list(ks), counts, [pa.array(names, pa.string()), pa.array(vals, pa.int64())]
            )
            model.update(arg)
        elif kind == "remove":
            cache.remove(Ragged.from_list(arg))
            for k in arg:
                model.pop(k, None)
        else:
            t, _ = cache.ticks()
            if len(t):
                cutoff = int(np.sort(t)[min(arg, len(t) - 1)])
                cache.evict_before(cutoff)
                # whatever was evicted is a miss from now on: the model forgets it
                hit, _, _ = cache.get_runs(Ragged.from_list(list(model)))
                model = {k: v for (k, v), h in zip(model.items(), hit, strict=True) if h}
        probe = [*KEYS, b"never"]
        hit, counts, rows = cache.get_runs(Ragged.from_list(probe))
        at = 0
        for k, h, n in zip(probe, hit, counts, strict=True):
            if not h:
                assert n == 0
                if not weak_hash:  # with a strong hash nothing is lost except by eviction
                    assert k not in model, k
                continue
            assert k in model, k
            assert rows[1].slice(at, n).to_pylist() == model[k]
            assert rows[0].slice(at, n).to_pylist() == [k.hex()] * n
            at += n
        assert at == len(rows[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=25))
def test_runs_match_a_dict(ops: list) -> None:
    with pytest.MonkeyPatch.context() as mp:
        _run_model(ops, False, mp)


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=25))
def test_colliding_hashes_are_misses_never_wrong_rows(ops: list) -> None:
    with pytest.MonkeyPatch.context() as mp:
        _run_model(ops, True, mp)


def test_get_of_single_rows_and_counters() -> None:
    cache = KeyedRows([pa.int64()])
    keys = Ragged.from_list([b"x%d" % i for i in range(5000)])
    cache.put(keys, [pa.array(np.arange(5000), pa.int64())])
    q = Ragged.from_list([b"x10", b"nope", b"x4999", b"x10"])
    hit, rows = cache.get(q)
    assert hit.tolist() == [True, False, True, True]
    assert rows[0].to_pylist() == [10, None, 4999, 10]
    assert (cache.hits, cache.misses) == (3, 1)
    # replacing half the keys many times: garbage is compacted away, answers stay right
    for r in range(6):
        cache.put(keys.take(np.arange(0, 5000, 2)), [pa.array(np.arange(0, 5000, 2) + r, pa.int64())])
    assert cache.live_rows == 5000 and len(cache) == 5000
    hit, rows = cache.get(keys)
    assert hit.all()
    want = np.arange(5000)
    want[::2] += 5
    assert rows[0].to_pylist() == want.tolist()


def test_hash_index_against_a_dict() -> None:
    rng = np.random.default_rng(5)
    idx = HashIndex()
    model: dict[int, int] = {}
    for step in range(40):
        hs = normalized(rng.integers(0, 3000, 400).astype(np.uint64))  # many repeats and removals
        hs = np.unique(hs)
        slots = idx.find(hs)
        new = slots < 0
        ids = np.arange(len(hs)) + step * 1000
        idx.set_entries(slots[~new], ids[~new])
        idx.insert(hs[new], ids[new])
        model.update(zip(hs.tolist(), ids.tolist(), strict=True))
        gone = np.unique(normalized(rng.integers(0, 3000, 100).astype(np.uint64)))
        gs = idx.find(gone)
        idx.remove(gs[gs >= 0])
        for h in gone.tolist():
            model.pop(h, None)
        assert len(idx) == len(model)
        probe = normalized(np.arange(3100, dtype=np.uint64))
        s = idx.find(probe)
        got = {int(h): int(idx.entries(np.array([x]))[0]) for h, x in zip(probe, s, strict=True) if x >= 0}
        assert got == model


def test_hash_index_insert_with_crowded_slots_equal_hashes_and_reused_slots() -> None:
    """Batches whose hashes all start at a few slots (long probe runs, many keys reaching one
    free slot in a pass), into a table with deleted slots: every hash is found with its id, and
    the live and used counts match the slots. Two entries with one hash (a 64-bit collision) each
    take a slot; a lookup finds one of them (callers compare keys)."""
    idx = HashIndex()
    cap = idx.capacity
    rng = np.random.default_rng(2)
    model: dict[int, int] = {}
    next_id = 0
    for _ in range(6):
        # hashes equal modulo the starting capacity: they all start probing at one slot
        hs = normalized(
            np.unique(rng.integers(1, 50_000, 120)).astype(np.uint64) * np.uint64(cap) + np.uint64(5)
        )
        hs = np.array([h for h in hs.tolist() if h not in model], np.uint64)
        ids = np.arange(next_id, next_id + len(hs), dtype=np.int64)
        next_id += len(hs)
        idx.insert(hs, ids)
        model.update(zip(hs.tolist(), ids.tolist(), strict=True))
        gone = np.array(sorted(model)[::3], np.uint64)
        idx.remove(idx.find(gone))
        for h in gone.tolist():
            del model[h]
        assert len(idx) == len(model)
        assert idx._used == int((idx._h != 0).sum())
        found = idx.find(np.array(sorted(model), np.uint64))
        assert (found >= 0).all()
        assert idx.entries(found).tolist() == [model[h] for h in sorted(model)]
    twin = normalized(np.array([77, 77], np.uint64))
    before = len(idx)
    idx.insert(twin, np.array([10**6, 10**6 + 1], np.int64))
    assert len(idx) == before + 2
    assert int((idx._h == twin[0]).sum()) == 2
    assert int(idx.entries(idx.find(twin[:1]))[0]) in (10**6, 10**6 + 1)


def test_budget_evicts_least_recently_used_across_actors() -> None:
    reg = CacheRegistry()
    a, warm_a = reg.acquire("db", 1, 0, b"")
    b, _ = reg.acquire("db", 2, 0, b"")
    assert not warm_a
    ca = a.keyed("t", [pa.int64()])
    cb = b.keyed("t", [pa.int64()])
    keys = [Ragged.from_list([b"%d-%d" % (j, i) for i in range(2000)]) for j in range(4)]
    ca.put(keys[0], [pa.array(np.arange(2000), pa.int64())])
    cb.put(keys[1], [pa.array(np.arange(2000), pa.int64())])
    ca.put(keys[2], [pa.array(np.arange(2000), pa.int64())])
    cb.get(keys[1])  # actor 2's first keys are used again: newer than actor 1's first ones
    budget = int(reg.nbytes * 0.75)
    b.charge(budget)
    assert reg.nbytes <= budget
    assert not ca.get(keys[0])[0].any()  # the oldest entries went first
    assert cb.get(keys[1])[0].all()
    # published caches are warm only at the epoch they were published for
    reg.publish("db", 1, 100, a)
    again, warm = reg.acquire("db", 1, 100, b"")
    assert warm and again is a
    other, warm = reg.acquire("db", 1, 100, b"")  # in use (or failed) until published again
    assert not warm and other is not a
    _, warm = reg.acquire("elsewhere", 1, 100, b"")
    assert not warm


def test_a_tiny_budget_empties_caches_without_breaking_them() -> None:
    caches = ActorCaches()
    c = caches.keyed("t", [pa.int64()])
    keys = Ragged.from_list([b"%d" % i for i in range(100)])
    c.put(keys, [pa.array(np.arange(100), pa.int64())])
    caches.charge(1)
    assert len(c) == 0 and not c.get(keys)[0].any()
    c.put(keys, [pa.array(np.arange(100), pa.int64())])
    assert c.get(keys)[1][0].to_pylist() == list(range(100))


def test_parts_read_by_row_number_without_concatenating() -> None:
    """Appends keep O(log n) parts; reads across parts return exactly the rows asked for."""
    rng = np.random.default_rng(3)
    parts = keyed_rows._Parts([pa.int64(), pa.string()])
    flat: list[int] = []
    for _ in range(40):
        n = int(rng.integers(1, 50))
        vals = np.arange(len(flat), len(flat) + n)
        parts.append([pa.array(vals), pa.array([f"s{v}" for v in vals])])
        flat += vals.tolist()
        assert len(parts.parts) <= 2 * int(np.log2(len(flat))) + 2
        idx = rng.integers(0, len(flat), size=int(rng.integers(0, 30)))
        got = parts.take(idx)
        assert got[0].to_pylist() == [flat[i] for i in idx]
        assert got[1].to_pylist() == [f"s{flat[i]}" for i in idx]
    assert len(parts) == len(flat)


def test_completeness_is_lost_by_eviction_and_undecided_after_clearing() -> None:
    """A complete cache (every key of its table) stays complete through puts and removals; an
    eviction drops keys the table still holds, so it never is again; a cleared one is undecided."""
    now = [1]
    cache = KeyedRows([pa.int64()], lambda: now[0])
    assert cache.complete is None
    cache.complete = True
    keys = Ragged.from_list([b"%03d" % i for i in range(100)])
    cache.put(keys, [pa.array(np.arange(100), pa.int64())])
    cache.remove(keys.take(np.arange(10)))
    cache.remove_below(b"020")
    assert cache.complete is True and len(cache) == 80
    cache.evict_before(0)  # nothing older than tick 0: nothing dropped
    assert cache.complete is True
    now[0] = 5
    cache.get(keys.take(np.arange(50, 100)))  # touched later than the others
    cache.evict_before(5)
    assert cache.complete is False and len(cache) == 50
    cache.clear()
    assert cache.complete is None
