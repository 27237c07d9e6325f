"""What the batched-read tests of Hummock (`test_run_search`, `test_range_search`) share: entries
with versions, the model (each key's newest version visible at a read epoch), and the runs that
hold the entries: an imm, and one SST in L0 with a random block size and compression, in memory
or in a local directory (whose uncompressed SSTs are read through memory maps)."""

from __future__ import annotations

import random
import tempfile
import uuid
from pathlib import Path

from piestream.encoding.keys import full_key
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.sstable import COMPRESSION_LZ4, COMPRESSION_NONE
from piestream.storage.hummock.sstable_builder import build_sstable
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage, visible_bound
from piestream.storage.hummock.version import HummockVersion, Level, SstableInfo
from piestream.storage.object_store import InMemoryObjectStore, LocalObjectStore, ObjectStore

Entry = tuple[bytes, int, bytes]  # (user key, epoch, HummockValue)


def epoch(i: int) -> int:
    return (1000 + i) << 16


def newest_visible(entries: list[Entry], read_epoch: int) -> dict[bytes, bytes]:
    """Each user key's newest HummockValue at or below `read_epoch` (tombstones included)."""
    best: dict[bytes, tuple[int, bytes]] = {}
    bound = visible_bound(read_epoch)
    for uk, e, v in entries:
        if e <= bound and (uk not in best or e > best[uk][0]):
            best[uk] = (e, v)
    return {uk: v for uk, (_, v) in best.items()}


def batch_of(entries: list[Entry]) -> KvBatch:
    pairs = sorted((full_key(uk, e), v) for uk, e, v in entries)
    return KvBatch.from_pairs(pairs, [0] * len(pairs))


def imm_storage(entries: list[Entry]) -> HummockStorage:
    """A storage whose only run is an imm holding `entries`."""
    hs = HummockStorage(SstableStore(InMemoryObjectStore(f"runs-{uuid.uuid4().hex}")), HummockVersion(id=1))
    hs.write_batch(batch_of(entries), epoch(1))
    return hs


def one_sst(
    rnd: random.Random, entries: list[Entry]
) -> tuple[SstableStore, SstableInfo, HummockVersion, int]:
    """`entries` as one SST in L0 (blocks of 60, 200 or 900 bytes, compressed or not, in memory or
    in a local directory): its store, info, a version holding it, and the compression used."""
    compression = rnd.choice([COMPRESSION_NONE, COMPRESSION_LZ4])
    objects: ObjectStore = (
        LocalObjectStore(Path(_LOCAL.name) / uuid.uuid4().hex)
        if rnd.random() < 0.5
        else InMemoryObjectStore(f"runs-{uuid.uuid4().hex}")
    )
    store = SstableStore(objects)
    info = store.upload(
        build_sstable(batch_of(entries), block_size=rnd.choice([60, 200, 900]), compression=compression)
    )
    version = HummockVersion(id=1, l0=(Level(0, (info,), 1),), max_committed_epoch=epoch(50))
    return store, info, version, compression


_LOCAL = tempfile.TemporaryDirectory(prefix="hummock-runs-")  # removed when the tests exit


def tie_prone_keys(rnd: random.Random, n: int, max_len: int, max_zeros: int) -> set[bytes]:
    """`n` random raw keys up to `max_len` bytes, plus keys that tie with them in a search word:
    some with up to `max_zeros` trailing zeros, some proper prefixes of another key."""
    out: set[bytes] = set()
    for _ in range(n):
        k = rnd.randbytes(rnd.randint(0, max_len))
        out.add(k)
        if rnd.random() < 0.3:
            out.add(k + b"\x00" * rnd.randint(1, max_zeros))
        if rnd.random() < 0.2 and k:
            out.add(k[: rnd.randint(0, len(k) - 1)])
    return out
