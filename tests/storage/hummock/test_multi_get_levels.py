"""`multi_get` over levels of many SSTs, against a dict model, in every cache state.

The hypothesis model test (`test_model.py`) covers the read path's rules over random operations
with tiny, compressed SSTs. This test builds a compacted level of many uncompressed SSTs with
small blocks (so a key's versions straddle blocks and SSTs hold ~10 blocks) on a local
directory, then checks batched lookups of present, deleted and absent keys at several read
epochs while the block cache is:

- cold (a fresh `SstableStore`: blocks are read and decoded on demand),
- partly warm (single-key gets loaded some blocks: SSTs searched block by block or filled),
- fully warm (a scan loaded every block: whole-SST searches).

It fails if routing a batch to SSTs, the block-clipped or whole-SST search, filling an SST's
missing blocks or the read-epoch rule loses or invents a key.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from piestream.encoding.keys import full_key, user_key
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.storage.hummock.compaction import CompactionConfig
from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage, StorageOptions
from piestream.storage.object_store import LocalObjectStore

FILTER_LEN = 4
CONFIG = CompactionConfig(
    max_bytes_for_level_base=1 << 30,  # everything compacts into one bottom level
    level0_trigger_sub_levels=2,
    target_file_size=6000,
    block_size=512,
)
OPTIONS = StorageOptions(block_size=512, sstable_size=6000, bloom_bits_per_key=10)
EPOCH0 = 1000 << 16


def _key(i: int) -> bytes:
    # keys of two lengths: a long tail after the common prefix, and a short one
    tail = i.to_bytes(4, "big") + (b"x" * (i % 3) * 5)
    return user_key(7, i % 2, tail)


def _build(
    root: Path, rng: random.Random
) -> tuple[HummockManager, LocalObjectStore, list[dict[bytes, bytes]]]:
    store = LocalObjectStore(root / "objects")
    mgr = HummockManager(MetaStore(root / "meta.sqlite"), SstableStore(store), CONFIG)
    hs = HummockStorage(SstableStore(store), mgr.version, OPTIONS)
    model: dict[bytes, bytes] = {}
    snapshots = []
    for step in range(6):
        if step == 1:
            mgr.pin_snapshot()  # keeps the versions a read at epoch 0 sees through compaction
        e = EPOCH0 + (step << 16)
        batch: dict[bytes, bytes | None] = {}
        for i in rng.sample(range(3000), 1200):
            batch[_key(i)] = None if rng.random() < 0.15 else f"v{i}@{step}".encode() * (1 + i % 4)
        pairs = sorted((full_key(k, e), TOMBSTONE if v is None else put_value(v)) for k, v in batch.items())
        hs.write_batch(KvBatch.from_pairs(pairs, [FILTER_LEN] * len(pairs)), e)
        mgr.commit_epoch(e, hs.sync(e))
        hs.update_version(mgr.version)
        for k, v in batch.items():
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
        snapshots.append(dict(model))
    mgr.compact_until_idle()
    return mgr, store, snapshots


def _check(hs: HummockStorage, snapshots: list[dict[bytes, bytes]], rng: random.Random) -> None:
    for step in (len(snapshots) - 1, 0):
        model = snapshots[step]
        ids = rng.sample(range(3100), 900)  # some never written, some deleted
        keys = [_key(i) for i in ids]
        got = hs.multi_get(keys, EPOCH0 + (step << 16), filter_lens=[FILTER_LEN] * len(keys))
        want = [model.get(k) for k in keys]
        assert got == [None if w is None else put_value(w)[1:] for w in want]


@pytest.mark.parametrize("seed", [1, 2])
def test_multi_get_over_a_level_of_many_ssts(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    mgr, store, snapshots = _build(tmp_path, rng)
    version = mgr.version
    level = [lv for lv in version.levels if lv.ssts]
    assert not version.l0 and len(level) == 1, "one compacted level"
    ssts = level[0].ssts
    assert len(ssts) >= 20, f"want a level of many SSTs, got {len(ssts)}"
    cold = HummockStorage(SstableStore(store), version, OPTIONS)
    _check(cold, snapshots, rng)

    partly = HummockStorage(SstableStore(store), version, OPTIONS)
    for i in rng.sample(range(3000), 40):  # single gets load a few blocks of some SSTs
        partly.get(_key(i), filter_len=FILTER_LEN)
    decoded = [partly.sstables.block_cache.peek(s.object_id) for s in ssts]
    assert any(d is not None and 0 < int(np.count_nonzero(d.loaded)) < len(d.loaded) for d in decoded)
    _check(partly, snapshots, rng)

    warm = HummockStorage(SstableStore(store), version, OPTIONS)
    assert sum(len(b) for b in warm.iter(None, None)) > 0
    assert all(warm.sstables.block_cache.peek(s.object_id).all_loaded for s in ssts)  # type: ignore[union-attr]
    _check(warm, snapshots, rng)
