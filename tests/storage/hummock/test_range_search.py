"""Batched range reads (`read_ranges`: range_search) against a plain model, on keys that tie.

A decoded SST searches range bounds by two words per entry (`w1`, `w2`: the 16 bytes after the
SST's common prefix) folded with the rank of `w1`, then by bytes. The keys here are chosen so
every step decides something: a join's keys (vnode, a BIGINT whose high bytes every key shares,
then a second BIGINT), keys sharing 8 or 16 bytes after the prefix and differing after, keys
ending in zeros (a zero-filled word ties with them), proper prefixes of other keys, several
versions and tombstones. Ranges are whole prefixes (a join's probe), bounds on keys and on proper
prefixes of keys, and unbounded tails; each is read from an imm, a cold SST (only the routed
blocks loaded: the clipped search) and the same SST with every block cached.
"""

from __future__ import annotations

import random

import pytest
from hummock_runs import Entry, epoch, imm_storage, newest_visible, one_sst, tie_prone_keys

from piestream.encoding.keys import next_key, user_key
from piestream.encoding.memcmp_scalar import escape_bytes
from piestream.storage.hummock.kv_batch import TOMBSTONE, put_value
from piestream.storage.hummock.store import HummockStorage


def _bigint(x: int) -> bytes:
    return b"\x01" + (x ^ (1 << 63)).to_bytes(8, "big")


def _user_keys(rnd: random.Random, shape: str) -> list[bytes]:
    out: set[bytes] = set()
    if shape == "join":  # vnode | j | k: the first word ties on the vnode and j's high bytes
        for _ in range(150):
            j = rnd.randrange(0, 3000)
            for _ in range(rnd.randint(1, 3)):
                out.add(user_key(1, j % 7, _bigint(j) + _bigint(rnd.randrange(0, 1 << rnd.choice([8, 40])))))
        return sorted(out)
    if shape == "shared 16":  # 16 bytes after the prefix tie, the rest differs
        head = rnd.randbytes(18)
        for _ in range(80):
            out.add(user_key(1, 0, escape_bytes(head + rnd.randbytes(rnd.randint(0, 4)))))
        return sorted(out)
    return sorted(user_key(1, 0, escape_bytes(k)) for k in tie_prone_keys(rnd, 100, 20, 9))


def _entries(rnd: random.Random, keys: list[bytes]) -> list[Entry]:
    entries = []
    for uk in keys:
        for e in rnd.sample(range(2, 40, 2), rnd.randint(1, 3)):
            v = TOMBSTONE if rnd.random() < 0.15 else put_value(rnd.randbytes(rnd.randint(0, 12)))
            entries.append((uk, epoch(e), v))
    return entries


def _ranges(rnd: random.Random, keys: list[bytes], shape: str) -> list[tuple[bytes, bytes | None]]:
    """Sorted, disjoint ranges: prefixes of keys (a probe) or bounds on and between keys."""
    if shape == "join" and rnd.random() < 0.7:  # one prefix per join key, present or absent
        prefixes = {k[:15] for k in rnd.sample(keys, min(len(keys), 40))}
        prefixes |= {user_key(1, j % 7, _bigint(j)) for j in rnd.sample(range(3000), 20)}
        return [(p, next_key(p)) for p in sorted(prefixes)]
    # bounds are keys or proper prefixes of keys: user keys are prefix-free (memcomparable), so
    # a bound extending a key would order differently as a user key and as a full key
    picked = [rnd.choice(keys) for _ in range(30)]
    points = sorted({k[: rnd.choice([len(k), rnd.randrange(1, len(k))])] for k in picked})
    rnd.shuffle(points)
    points = sorted(points[: rnd.randrange(1, len(points) + 1)])
    return [(points[i], points[i + 1] if i + 1 < len(points) else None) for i in range(0, len(points), 2)]


def _model(
    entries: list[Entry], read_epoch: int, ranges: list[tuple[bytes, bytes | None]]
) -> list[tuple[bytes, bytes]]:
    best = newest_visible(entries, read_epoch)
    inside = [uk for uk in best if any(a <= uk and (b is None or uk < b) for a, b in ranges)]
    return [(uk, best[uk][1:]) for uk in sorted(inside) if best[uk] != TOMBSTONE]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("shape", ["join", "shared 16", "mixed"])
def test_read_ranges_matches_the_model_in_every_kind_of_run(seed: int, shape: str) -> None:
    rnd = random.Random(seed)
    keys = _user_keys(rnd, shape)
    entries = _entries(rnd, keys)
    read_epochs = [epoch(e) for e in (1, 7, 20, 50)]
    queries = [_ranges(rnd, keys, shape) for _ in range(4)]

    def check(hs: HummockStorage, what: str) -> None:
        for re in read_epochs:
            for ranges in queries:
                got = [(k[:-8], v[1:]) for k, v in hs.read_ranges(ranges, re).to_pairs()]
                assert got == _model(entries, re, ranges), f"{what} at {re >> 16}"

    check(imm_storage(entries), "imm")

    store, info, version, compression = one_sst(rnd, entries)
    for re in read_epochs:  # cold: only the routed blocks load, the search is clipped to them
        store.block_cache.clear()
        ranges = queries[rnd.randrange(len(queries))]
        got = [(k[:-8], v[1:]) for k, v in HummockStorage(store, version).read_ranges(ranges, re).to_pairs()]
        assert got == _model(entries, re, ranges), f"cold SST at {re >> 16}"
    d = store.load_blocks(info, range(len(store.meta(info))))
    assert d.all_loaded
    check(HummockStorage(store, version), f"SST (compression {compression})")
    folded, _, _ = d.folded_words()
    assert (folded[1:] >= folded[:-1]).all()
