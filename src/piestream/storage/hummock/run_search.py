"""Batched point lookups in one sorted run (an imm or an SST): the vector search of `multi_get`.

A *searchable run* holds sorted full keys, every one starting with the run's common prefix
(``cp`` bytes: the prefix of its first and last key), and ``w1``: per entry, the big-endian
uint64 of the 8 key bytes after that prefix. Word order is key order (not strictly), so for a
batch of targets ``user key | inverted read epoch`` one `np.searchsorted` pair finds the entries
whose word ties with each target's. Then:

- a long user key (one that covers the word) with at most one tie is settled at once: the tied
  entry is the key's newest version in the run, or the key is not there;
- any other target (short keys, several versions, word ties between different keys) finds its
  exact lower bound by a vectorized binary search over its tie range with exact byte comparisons,
  and the entry found there answers if it has the target's user key.

The read-epoch rule is the lower bound itself (versions are sorted newest first, so the first
entry >= ``user key | inverted read epoch`` is the newest visible one). Everything is a numpy
pass over the batch: Python runs per run, never per key.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from piestream.encoding.keys import EPOCH_LEN, TABLE_PREFIX_LEN
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.key_index import bisect_ranges, compare, padded, words
from piestream.storage.hummock.kv_batch import KvBatch


class SearchableRun(Protocol):
    """What `find` needs of a run (`DecodedSstable`, `BatchRun`)."""

    cp: int
    prefix_words: np.ndarray

    @property
    def w1(self) -> np.ndarray: ...

    def lower_bound(self, qw: np.ndarray) -> np.ndarray:
        """``np.searchsorted(w1, qw, "left")`` (`sampled_lower_bound` for a large run)."""
        ...

    @property
    def kdata(self) -> np.ndarray: ...

    @property
    def vdata(self) -> np.ndarray: ...

    def key_pos(self, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def value_pos(self, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


#: `sampled_lower_bound` keeps every SAMPLE_STRIDE-th word of a run (a power of two)
SAMPLE_STRIDE = 16


def word_sample(w1: np.ndarray) -> np.ndarray:
    """The last word of each group of `SAMPLE_STRIDE` words (a complete group), for
    `sampled_lower_bound`: 1/16 of the words, small enough to stay in the CPU's caches."""
    return np.ascontiguousarray(w1[SAMPLE_STRIDE - 1 :: SAMPLE_STRIDE])


def sampled_lower_bound(w1: np.ndarray, sample: np.ndarray, qw: np.ndarray) -> np.ndarray:
    """``np.searchsorted(w1, qw, "left")`` in two steps: the group of 16 words holding each
    answer from a search of the cached `word_sample`, then four branch-free halving steps
    inside the group. A binary search over a large `w1` misses the cache on each of its last
    steps (4-5 per query); here the group's words share one or two cache lines."""
    n = len(w1)
    lo = np.searchsorted(sample, qw, "left")
    lo *= SAMPLE_STRIDE  # the answer is in [lo, lo + STRIDE - 1], or past a short last group
    step = SAMPLE_STRIDE >> 1
    last = n - 1
    while step:
        mid = lo + (step - 1)
        np.minimum(mid, last, out=mid)
        lo += np.where(w1[mid] < qw, step, 0)
        step >>= 1
    np.minimum(lo, n, out=lo)
    return lo


def common_prefix(a: bytes, b: bytes) -> bytes:
    """The longest common prefix of two byte strings (of a run's first and last key)."""
    n = min(len(a), len(b))
    differ = np.frombuffer(a, np.uint8, n) != np.frombuffer(b, np.uint8, n)
    return a[: int(np.argmax(differ)) if differ.any() else n]


def prefix_words(prefix: bytes) -> np.ndarray:
    """A key prefix as big-endian uint64 words, the last one zero-filled."""
    padded_prefix = prefix + b"\x00" * (-len(prefix) % 8)
    return np.frombuffer(padded_prefix, ">u8").astype(np.uint64)


class BatchRun:
    """A sorted in-memory batch (an imm) as a searchable run; built once per imm."""

    __slots__ = ("cp", "kdata", "koff", "prefix_words", "vdata", "voff", "w1")

    def __init__(self, batch: KvBatch) -> None:
        keys = Ragged.from_arrow(batch.keys)
        values = Ragged.from_arrow(batch.values)
        self.kdata = padded(keys.data)
        self.koff = keys.offsets
        self.vdata = values.data
        self.voff = values.offsets
        n = keys.n
        prefix = common_prefix(keys[0], keys[n - 1]) if n else b""
        self.cp = len(prefix)
        self.prefix_words = prefix_words(prefix)
        starts = self.koff[:-1]
        self.w1 = words(self.kdata, starts + self.cp, np.diff(self.koff) - self.cp)

    def __len__(self) -> int:
        return len(self.w1)

    def lower_bound(self, qw: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.w1, qw, "left")

    def key_pos(self, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.koff[e], self.koff[e + 1] - self.koff[e]

    def value_pos(self, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.voff[e], self.voff[e + 1] - self.voff[e]


@dataclass
class Queries:
    """A batch of point lookups sorted by user key: search targets ``user key | inverted read
    epoch`` in one padded buffer (`start`, `length` in sorted order), and what filters need."""

    data: np.ndarray
    start: np.ndarray
    length: np.ndarray
    user_keys: Ragged
    order: np.ndarray
    filter_lens: np.ndarray | None
    _hashes: np.ndarray | None = field(default=None, repr=False)
    _table_ids: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.start)

    def user_key(self, i: int) -> bytes:
        s = int(self.start[i])
        return self.data[s : s + int(self.length[i]) - EPOCH_LEN].tobytes()

    def bound(self, key: bytes, *, right: bool, lo: int = 0, hi: int | None = None) -> int:
        """First sorted query whose user key is >= `key` (> with `right`), searching [lo, hi)
        (a bisect: Python per run, not per key)."""
        f = bisect.bisect_right if right else bisect.bisect_left
        return f(range(len(self.start)), key, lo, len(self.start) if hi is None else hi, key=self.user_key)

    def hashes(self) -> np.ndarray | None:
        """XXH64 of each query's filter key (0 = none), sorted order; computed on first need."""
        if self.filter_lens is None:
            return None
        if self._hashes is None:
            self._hashes = filter_hashes(self.user_keys, self.filter_lens)[self.order]
        return self._hashes

    def table_ids(self) -> np.ndarray:
        if self._table_ids is None:
            self._table_ids = (words(self.data, self.start, self.length) >> np.uint64(32)).astype(np.int64)
        return self._table_ids


def filter_hashes(keys: Ragged, flens: np.ndarray) -> np.ndarray:
    """XXH64 of each key's filter prefix (0 where the key has none)."""
    from piestream.encoding.hashing import xxh64_ragged

    fl = np.asarray(flens, np.int64)
    # like `key[:TABLE_PREFIX_LEN + filter_len]`, clipped to the key
    pref = keys.gather_by(
        keys.offsets[:-1], np.where(fl > 0, np.minimum(TABLE_PREFIX_LEN + fl, keys.lengths), 0)
    )
    h = xxh64_ragged(pref)
    h[fl == 0] = 0
    return h


def _side_of_prefix(run: SearchableRun, data: np.ndarray, qs: np.ndarray, ql: np.ndarray) -> np.ndarray:
    """-1 / 0 / 1: each target sorts before every key of the run, starts with the run's prefix
    (and may fall among its keys), or sorts after every key (keys sharing a prefix are one
    contiguous interval of byte order)."""
    cp = run.cp
    m = len(qs)
    side = np.zeros(m, np.int8)
    if cp == 0 or m == 0:
        return side
    open_ = np.arange(m)
    for k, pw in enumerate(run.prefix_words.tolist()):
        take = min(8, cp - 8 * k)
        rem = np.minimum(ql[open_] - 8 * k, take)
        qw = words(data, qs[open_] + 8 * k, rem)
        pw_masked = np.uint64(pw)
        lt, gt = qw < pw_masked, qw > pw_masked
        # a target that ends inside the prefix (and agrees so far) is a proper prefix of it: before
        short = (rem < take) & ~lt & ~gt
        side[open_[lt | short]] = -1
        side[open_[gt]] = 1
        open_ = open_[~(lt | gt | short)]
        if not len(open_):
            break
    return side


def find(
    run: SearchableRun,
    q: Queries,
    j: np.ndarray,
    clip_lo: np.ndarray | None = None,
    clip_hi: np.ndarray | None = None,
    *,
    in_prefix: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Look up queries `j` (sorted positions) in a run: (hit mask over j, entry of each hit;
    for misses, with a clip, the lower bound inside [clip_lo, clip_hi], so a caller can tell a
    target that lies past its block). A clip restricts each query to a range of loaded entries
    (its block); without one the whole run is loaded. `in_prefix`: the caller knows every
    query starts with the run's common prefix (it lies inside the run's user-key range and the
    prefix ends within those keys' user keys), so the prefix check is skipped."""
    m = len(j)
    hit = np.zeros(m, np.bool_)
    pos = np.zeros(m, np.int64)
    n = len(run.w1)
    if m == 0 or n == 0:
        return hit, pos
    cp = run.cp
    qs, ql = q.start[j], q.length[j]
    side = np.zeros(m, np.int8) if in_prefix else _side_of_prefix(run, q.data, qs, ql)
    limit = np.full(m, n, np.int64) if clip_hi is None else clip_hi
    inside = np.flatnonzero(side == 0)
    qw = words(q.data, qs[inside] + cp, ql[inside] - cp)
    w1 = run.w1
    lo = run.lower_bound(qw)
    # fast path: the word covers only user-key bytes, so every version of the target's key
    # ties with it; with at most one tie (the next entry's word differs), that entry is the
    # only candidate. Only the other targets need the end of their tie range.
    last = n - 1
    tie0 = w1[np.minimum(lo, last)] == qw
    tie0 &= lo < n
    tie1 = (w1[np.minimum(lo + 1, last)] == qw) & (lo + 1 < n)
    fast = (ql[inside] - EPOCH_LEN >= cp + 8) & ~tie1
    if clip_lo is not None:
        # With a clip, entries outside the loaded blocks carry placeholder words, but `w1` stays
        # sorted and a block's first entry carries its real word: a lone tie inside the clip is
        # still the only candidate in the whole run. The rest take the clipped search.
        assert clip_hi is not None
        cl, ch = clip_lo[inside], clip_hi[inside]
        one = np.flatnonzero(fast & tie0 & (lo >= cl) & (lo < ch))
    else:
        one = np.flatnonzero(fast & tie0)
    if len(one) == m:  # every target settled by its lone tie (the usual warm batch)
        return _newest_visible(run, lo, q, j, cp + 8), lo
    if len(one):
        qi = inside[one]
        c = lo[one]
        hit[qi] = _newest_visible(run, c, q, j[qi], cp + 8)
        pos[qi] = c
    if clip_lo is not None:
        rest = np.ones(len(inside), np.bool_)
        rest[one] = False
        keep = np.flatnonzero(rest)
        general, lo = inside[keep], lo[keep]
        hi = np.searchsorted(w1, qw[keep], "right")
        lo = np.clip(lo, cl[keep], ch[keep])
        hi = np.clip(hi, cl[keep], ch[keep])
        pos[side < 0] = clip_lo[side < 0]
    else:
        keep = np.flatnonzero(~fast)
        general, lo = inside[keep], lo[keep]
        hi = np.searchsorted(w1, qw[keep], "right")
    pos[side > 0] = limit[side > 0]
    pos[general] = _refine(run, q, j[general], lo, hi)
    # the lower bound answers if it holds the target's user key (its epoch is then visible)
    check = np.concatenate([general, np.flatnonzero(side < 0)])
    check = check[pos[check] < limit[check]]
    if len(check):
        skip = np.where(side[check] == 0, cp, 0)
        hit[check] = _same_user_key(run, pos[check], q, j[check], skip)
    return hit, pos


def _refine(run: SearchableRun, q: Queries, j: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Exact lower bounds of the targets inside their tie ranges [lo, hi) (a vectorized binary
    search; the bytes before the word's end are known equal)."""
    qs, ql = q.start[j], q.length[j]
    skip = run.cp + 8

    def go_right(open_: np.ndarray, mid: np.ndarray) -> np.ndarray:
        ks, kl = run.key_pos(mid)
        sq, lq = qs[open_], ql[open_]
        return compare(run.kdata, ks, kl, q.data, sq, lq, np.minimum(skip, np.minimum(kl, lq))) < 0

    return bisect_ranges(lo, hi, go_right)


def _same_user_key(
    run: SearchableRun, e: np.ndarray, q: Queries, j: np.ndarray, skip: int | np.ndarray
) -> np.ndarray:
    """Whether entries `e` of the run have the user keys of queries `j`."""
    ks, kl = run.key_pos(e)
    return same_user_key(run.kdata, ks, kl, q, j, skip)


def same_user_key(
    data: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    q: Queries,
    j: np.ndarray,
    skip: int | np.ndarray = 0,
) -> np.ndarray:
    """Whether the full keys (`data`, `starts`, `lens`) have the user keys of queries `j` (their
    first `skip` bytes are known equal)."""
    ql = q.length[j]
    out = np.zeros(len(j), np.bool_)
    k = np.flatnonzero(lens == ql)
    if len(k):
        ul = ql[k] - EPOCH_LEN
        sk = np.minimum(skip if np.isscalar(skip) else np.asarray(skip)[k], ul)
        out[k] = compare(data, starts[k], ul, q.data, q.start[j[k]], ul, sk) == 0
    return out


def _newest_visible(run: SearchableRun, e: np.ndarray, q: Queries, j: np.ndarray, skip: int) -> np.ndarray:
    """Whether entries `e` have the user keys of queries `j` (their first `skip` bytes are known
    equal) in a version no newer than the read epoch (inverted-epoch suffix >= the target's)."""
    ks, kl = run.key_pos(e)
    qs, ql = q.start[j], q.length[j]
    same_len = kl == ql
    if same_len.all():  # the usual case (a fixed-width SST and targets of its width): no gathers
        return _visible_same_len(run, ks, q, qs, ql, skip)
    out = np.zeros(len(e), np.bool_)
    k = np.flatnonzero(same_len)
    if len(k):
        out[k] = _visible_same_len(run, ks[k], q, qs[k], ql[k], skip)
    return out


def _visible_same_len(
    run: SearchableRun, ks: np.ndarray, q: Queries, qs: np.ndarray, ql: np.ndarray, skip: int
) -> np.ndarray:
    """`_newest_visible` of entry keys at `ks` as long as their targets (`qs`, `ql`)."""
    ul = ql - EPOCH_LEN
    sk = np.minimum(skip, ul)
    rest = ul - sk
    if int(rest.max()) <= 8:  # the user keys' unknown bytes fit one word: one compare
        same = words(run.kdata, ks + sk, rest) == words(q.data, qs + sk, rest)
    else:
        same = compare(run.kdata, ks, ul, q.data, qs, ul, sk) == 0
    eight = np.full(len(ks), EPOCH_LEN, np.int64)
    return same & (words(run.kdata, ks + ul, eight) >= words(q.data, qs + ul, eight))
