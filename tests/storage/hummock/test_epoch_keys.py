"""The shared buffer's per-epoch key index (`EpochKeys`): it may only ever rule a key out of an
epoch's imms when none of them holds it, and batched lookups that use it answer like `get`."""

from __future__ import annotations

import random
import uuid

import numpy as np

from piestream.common.epoch import MAX_EPOCH
from piestream.encoding.keys import full_key, user_key
from piestream.storage.hummock.epoch_keys import EpochKeys
from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.hummock.version import HummockVersion
from piestream.storage.object_store import InMemoryObjectStore


def test_may_hold_never_rules_out_an_added_hash_and_tiers_stay_few() -> None:
    rng = np.random.default_rng(5)
    keys = EpochKeys()
    added = []
    for size in rng.integers(1, 400, 60):
        h = rng.integers(1, 2**63, int(size), dtype=np.uint64)
        keys = keys.add(h, set())
        added.append(h)
    every = np.concatenate(added)
    assert keys.may_hold(every, None).all()
    assert all((np.diff(t.astype(np.float64)) >= 0).all() for t in keys.tiers)
    assert len(keys) == len(every)
    assert len(keys.tiers) <= int(np.log2(len(every))) + 1
    others = rng.integers(1, 2**63, 5000, dtype=np.uint64)
    others = others[~np.isin(others, every)]
    assert not keys.may_hold(others, None).any()
    # hash 0 = the query has no filter key: always searched
    assert keys.may_hold(np.zeros(3, np.uint64), None).all()
    # a table with entries without a filter key: its queries are always searched
    unf = keys.add(np.zeros(0, np.uint64), {7})
    assert unf.may_hold(others[:4], np.array([7, 8, 7, 8])).tolist() == [True, False, True, False]


def test_multi_get_over_many_spilled_imms_matches_get_and_the_model() -> None:
    """A bulk-load shape: one epoch of many spills (keys overwritten and deleted across spills),
    over committed SSTs of an earlier epoch; tables 1 (filtered) and 2 (no filter key); reads at
    MAX_EPOCH, at the open epoch and at the committed one."""
    rnd = random.Random(11)
    hs = HummockStorage(SstableStore(InMemoryObjectStore(f"ek-{uuid.uuid4().hex}")), HummockVersion(id=1))
    e1, e2 = 1 << 16, 2 << 16
    model: dict[bytes, list[tuple[int, bytes | None]]] = {}

    def write(epoch: int, table: int, pks: list[int]) -> None:
        flen = 4 if table == 1 else 0
        pairs = []
        for pk in pks:
            uk = user_key(table, pk % 7, pk.to_bytes(4, "big"))
            v = None if rnd.random() < 0.15 else rnd.randbytes(rnd.randint(0, 6))
            model.setdefault(uk, []).append((epoch, v))
            pairs.append((full_key(uk, epoch), TOMBSTONE if v is None else put_value(v)))
        hs.write_batch(KvBatch.from_pairs(pairs, [flen] * len(pairs)), epoch)

    universe = list(range(3000))
    write(e1, 1, rnd.sample(universe, 400))
    write(e1, 2, rnd.sample(universe, 100))
    hs.sync(e1)  # synced, read from SSTs
    for spill in range(12):
        write(e2 | spill, 1, rnd.sample(universe, rnd.randint(1, 150)))
        if spill % 4 == 0:
            write(e2 | spill | 0x8000, 2, rnd.sample(universe, 30))
    assert len(hs._buffer.epoch_keys[e2].tiers) >= 1

    def want(uk: bytes, read_epoch: int) -> bytes | None:
        vs = [(e, v) for e, v in model.get(uk, []) if e <= read_epoch]
        return max(vs, key=lambda x: x[0])[1] if vs else None

    for table, flen in ((1, 4), (2, 0)):
        probes = [user_key(table, pk % 7, pk.to_bytes(4, "big")) for pk in rnd.sample(universe, 2000)]
        for read_epoch in (MAX_EPOCH, e2, e1):
            got = hs.multi_get(probes, read_epoch, filter_lens=[flen] * len(probes))
            bound = read_epoch if read_epoch == MAX_EPOCH else read_epoch | 0xFFFF
            assert got == [want(k, bound) for k in probes]
            assert got == [hs.get(k, read_epoch, filter_len=flen) for k in probes]
    # a sync leaves no index behind for the synced epoch
    hs.sync(e2)
    assert e2 not in hs._buffer.epoch_keys
