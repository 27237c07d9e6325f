"""Batched point lookups (`run_search.find` through `multi_get`) against a plain model.

Keys are chosen to hit every branch of the vector search: pks are escaped like a memcomparable
BYTEA (prefix-free, as every table's keys are) from raw bytes that are prefixes of each other or
end in 0x00, so keys end in zeros (a zero-filled search word ties with them), long keys sharing the 8 bytes
after the run's common prefix, several versions straddling blocks, tombstones, SSTs holding one
user key only (their common prefix runs into the epoch suffix), read epochs between, before and
after the versions. Each case is read from an imm (`BatchRun`), a cold SST (only the routed blocks
loaded: the clipped search), the same SST once every block is cached (the whole-SST search), and
uncompressed (blocks decoded in place) as well as compressed SSTs.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from hummock_runs import Entry, epoch, imm_storage, newest_visible, one_sst, tie_prone_keys
from hypothesis import given, settings
from hypothesis import strategies as st

from piestream.encoding.keys import full_key, user_key
from piestream.encoding.memcmp_scalar import escape_bytes
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.key_index import padded_ragged, shared_prefix_len, sort_order
from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
from piestream.storage.hummock.run_search import sampled_lower_bound, word_sample
from piestream.storage.hummock.sstable_builder import build_sstable
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.object_store import InMemoryObjectStore


def _pks(rnd: random.Random, shape: str) -> list[bytes]:
    if shape == "one key":
        return [escape_bytes(b"only")]
    if shape == "long shared":  # 8 bytes after the common prefix tie, the rest differs
        head = rnd.randbytes(10)
        return [escape_bytes(head + rnd.randbytes(rnd.randint(0, 6))) for _ in range(60)]
    return sorted({escape_bytes(k) for k in tie_prone_keys(rnd, 80, 12, 3)})


def _entries(rnd: random.Random, shape: str) -> list[Entry]:
    entries = []
    for pk in set(_pks(rnd, shape)):
        uk = user_key(1, 0, pk)
        for e in rnd.sample(range(2, 40, 2), rnd.randint(1, 5 if shape == "one key" else 3)):
            v = TOMBSTONE if rnd.random() < 0.15 else put_value(rnd.randbytes(rnd.randint(0, 20)))
            entries.append((uk, epoch(e), v))
    return entries


def _model(entries: list[Entry], read_epoch: int) -> dict[bytes, bytes | None]:
    return {uk: (None if v == TOMBSTONE else v[1:]) for uk, v in newest_visible(entries, read_epoch).items()}


def _probes(rnd: random.Random, entries: list[Entry]) -> list[bytes]:
    keys = sorted({uk for uk, _, _ in entries})
    # absent keys: a pk data byte flipped (the escaped form stays prefix-free)
    near = [k[:7] + bytes([k[7] ^ 1]) + k[8:] for k in keys if len(k) > 8]
    extra = [user_key(1, 0, escape_bytes(rnd.randbytes(9))) for _ in range(10)]
    probes = keys + near + extra + [user_key(0, 0, b"x"), user_key(2, 0, b"")] + keys[:7]
    rnd.shuffle(probes)
    return probes


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("shape", ["mixed", "long shared", "one key"])
def test_multi_get_matches_the_model_in_every_kind_of_run(seed: int, shape: str) -> None:
    rnd = random.Random(seed)
    entries = _entries(rnd, shape)
    probes = _probes(rnd, entries)
    read_epochs = [epoch(e) for e in (1, 2, 7, 20, 39, 50)]

    def check(hs: HummockStorage, what: str) -> None:
        for re in read_epochs:
            want = _model(entries, re)
            got = hs.multi_get(probes, re)
            assert got == [want.get(k) for k in probes], f"{what} at {re >> 16}"
            assert got == [hs.get(k, re) for k in probes], f"{what}: get disagrees at {re >> 16}"

    check(imm_storage(entries), "imm")

    # an SST: cold (routed blocks only, clipped search), then with every block cached
    store, info, version, compression = one_sst(rnd, entries)
    for re in read_epochs:
        store.block_cache.clear()
        cold = HummockStorage(store, version)
        want = _model(entries, re)
        sub = probes[: rnd.randint(1, len(probes))]
        assert cold.multi_get(sub, re) == [want.get(k) for k in sub], f"cold SST at {re >> 16}"
    d = store.load_blocks(info, range(len(store.meta(info))))
    assert d.all_loaded and store.cached(info) is d
    check(HummockStorage(store, version), f"SST (compression {compression})")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=20), min_size=1, max_size=12), st.binary(max_size=12))
def test_sort_order_and_shared_prefix(tails: list[bytes], head: bytes) -> None:
    """The batch sort `multi_get` starts with: byte order (keys sharing a long prefix, keys that
    are prefixes of others, trailing zeros), and the shared prefix it skips."""
    keys = [head + t for t in tails] + [head + tails[0] + b"\x00"]
    data, starts, lens = padded_ragged(Ragged.from_list(keys))
    assert shared_prefix_len(data, starts, lens) == len(os.path.commonprefix(keys))  # noqa: RUF071 (bytes)
    assert [keys[i] for i in sort_order(data, starts, lens)] == sorted(keys)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=300),
    st.lists(st.integers(-1, 42), min_size=1, max_size=60),
)
def test_sampled_lower_bound_is_searchsorted(words: list[int], queries: list[int]) -> None:
    """The two-step search of a warm SST's words gives `np.searchsorted(..., "left")` exactly:
    runs of equal words across group edges, a short last group, queries before and after all."""
    w1 = np.array(sorted(words), np.uint64) + np.uint64(1 << 63)  # high bit set: unsigned order
    q = np.array(queries, np.int64).clip(0).astype(np.uint64) + np.uint64(1 << 63)
    q[np.array(queries) < 0] = 0
    got = sampled_lower_bound(w1, word_sample(w1), q)
    assert got.tolist() == np.searchsorted(w1, q, "left").tolist()


def test_warm_ssts_search_through_the_sample() -> None:
    """A fully loaded SST answers `lower_bound` through its word sample, a cold one without."""
    pairs = [(full_key(user_key(1, 0, i.to_bytes(8, "big")), epoch(1)), put_value(b"v")) for i in range(3000)]
    store = SstableStore(InMemoryObjectStore())
    info = store.upload(build_sstable(KvBatch.from_pairs(pairs, [0] * len(pairs)), block_size=1024))
    d = store.decoded(info)
    qw = d.w1[::7].copy()
    assert d.lower_bound(qw).tolist() == np.searchsorted(d.w1, qw, "left").tolist()
    assert d._sample is None  # cold: no sample built
    d = store.load_blocks(info, np.arange(len(d.meta)))
    q2 = qw + np.uint64(1)
    assert d.lower_bound(q2).tolist() == np.searchsorted(d.w1, q2, "left").tolist()
    assert d._sample is not None
