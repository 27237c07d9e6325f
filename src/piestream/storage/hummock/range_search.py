"""Batched range reads: every entry of many sorted key ranges from every run, in one pass.

A join probes its state with one key prefix per join key of a chunk, i.e. hundreds of tiny
ranges at once. Searching each range alone costs a handful of Python calls per range and run
(bisects, block lookups, slices, a concat). Here the ranges travel as vectors instead:

- the ranges' bounds are full keys in one padded buffer (``start | 00..`` and ``end | 00..``:
  the inverted epoch 0 sorts before every version, so ``[start, end)`` of full keys covers every
  version of the user keys in the range);
- each run (an imm, an SST) is matched against the ranges it overlaps with two vector searches
  over the ranges' bounds (their starts and ends are sorted when the ranges are disjoint);
- inside a run, the Bloom filter prunes ranges with one vectorized probe, the blocks the ranges
  need are routed by the block index and loaded together, and both bounds of every range are
  found by one word search (``searchsorted`` over the run's search words, see `run_search`)
  refined by a vectorized binary search with exact byte comparisons;
- the covered entries of every run are gathered with one Arrow copy per run, merged once (newest
  run first, so it wins on equal full keys), and versions are resolved once by `UserIterator`.

Python runs per run and per SST touched, never per range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from piestream.encoding.hashing import xxh64_ragged
from piestream.encoding.keys import EPOCH_LEN, TABLE_ID_LEN
from piestream.encoding.ragged import Ragged, concat_rows, gather_views
from piestream.storage.hummock.iterators import UserIterator
from piestream.storage.hummock.key_index import KeyIndex, bisect_ranges, compare, padded, words
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.read_view import ReadView, SstRun
from piestream.storage.hummock.run_search import SearchableRun
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import TableWatermark


@dataclass
class Ranges:
    """Sorted user-key ranges ``[start, end)`` as full-key bounds in one padded buffer.

    `start` / `end` address full keys (user key + 8 zero bytes); `has_end` is False for a range
    without an upper bound (its `end` entries are unused). `hashes` are the ranges' filter-key
    hashes (0: no filter). `disjoint` says the ends are sorted too (so a run's ranges are one
    interval of them)."""

    data: np.ndarray
    start: np.ndarray
    start_len: np.ndarray
    end: np.ndarray
    end_len: np.ndarray
    has_end: np.ndarray
    hashes: np.ndarray | None
    table_ids: np.ndarray
    disjoint: bool

    def __len__(self) -> int:
        return len(self.start)

    @classmethod
    def of(cls, starts: Ragged, ends: Ragged, has_end: np.ndarray, filter_keys: Ragged | None) -> Ranges:
        """From user-key starts (sorted) and ends (rows of ranges without an end are ignored);
        `filter_keys`: the common prefix of each range, hashed for the Bloom filters."""
        n = starts.n
        zeros = Ragged.constant(n, b"\x00" * EPOCH_LEN)
        fs = concat_rows([starts, zeros])
        fe = concat_rows([ends, zeros])
        data = padded(
            np.concatenate([fs.data[fs.offsets[0] : fs.offsets[-1]], fe.data[fe.offsets[0] : fe.offsets[-1]]])
        )
        s_start = (fs.offsets[:-1] - fs.offsets[0]).astype(np.int64)
        base = int(fs.offsets[-1] - fs.offsets[0])
        e_start = (fe.offsets[:-1] - fe.offsets[0]).astype(np.int64) + base
        s_len, e_len = fs.lengths.astype(np.int64), fe.lengths.astype(np.int64)
        hashes = None
        if filter_keys is not None:
            hashes = xxh64_ragged(filter_keys)
            hashes[filter_keys.lengths == 0] = 0
        tids = (words(data, s_start, np.minimum(s_len, TABLE_ID_LEN)) >> np.uint64(32)).astype(np.int64)
        # disjoint (so the ends are sorted like the starts): only the last range may be
        # unbounded, and each range ends at or before the next one starts
        disjoint = n <= 1
        if n > 1 and has_end[:-1].all():
            c = compare(data, e_start[:-1], e_len[:-1], data, s_start[1:], s_len[1:])
            disjoint = bool((c <= 0).all())
        return cls(data, s_start, s_len, e_start, e_len, has_end, hashes, tids, disjoint)

    def overlapping(self, lo: list[bytes], hi: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """For runs holding user keys [lo[k], hi[k]]: the interval [a, b) of ranges that may
        overlap each (two vector searches over the ranges' bounds)."""
        m = len(lo)
        n = len(self)
        if not m or not n:
            return np.zeros(m, np.int64), np.zeros(m, np.int64)
        # as full keys: the run's smallest key `lo | 00..` and past its largest `hi | ff..`
        his = Ragged.from_list([h + b"\xff" * EPOCH_LEN for h in hi])
        hd, hs, hl = padded(his.data), his.offsets[:-1].astype(np.int64), his.lengths.astype(np.int64)
        starts = _index(self.data, self.start, self.start_len)
        b = starts.lower_bound(hd, hs, hl)  # ranges starting at or before the run's last key
        if not self.disjoint:
            return np.zeros(m, np.int64), b
        los = Ragged.from_list([x + b"\x00" * EPOCH_LEN for x in lo])
        ld, ls, ll = padded(los.data), los.offsets[:-1].astype(np.int64), los.lengths.astype(np.int64)
        with_end = np.flatnonzero(self.has_end)
        ends = _index(self.data, self.end[with_end], self.end_len[with_end])
        a = ends.lower_bound(ld, ls, ll, right=True)  # ranges ending at or before the run's first key
        return a, np.maximum(a, b)


def _index(data: np.ndarray, start: np.ndarray, length: np.ndarray) -> KeyIndex:
    """A KeyIndex over sorted keys addressed in `data` (one segment per 256 keys)."""
    n = len(start)
    seg_start = np.unique(np.append(np.arange(0, n, 256, dtype=np.int64), n)) if n else np.zeros(1, np.int64)
    idx = KeyIndex(data, start, length, seg_start)
    idx.fill(np.arange(idx.nseg))
    return idx


def lower_bounds(
    run: SearchableRun,
    q_data: np.ndarray,
    q_start: np.ndarray,
    q_len: np.ndarray,
    clip_lo: np.ndarray | None = None,
    clip_hi: np.ndarray | None = None,
) -> np.ndarray:
    """The first entry of `run` >= each query key (full keys). With a clip, each query's answer
    is known to lie in [clip_lo, clip_hi] (its block, the only loaded part the search reads)."""
    m = len(q_start)
    n = len(run.w1)
    lo_lim = np.zeros(m, np.int64) if clip_lo is None else clip_lo
    hi_lim = np.full(m, n, np.int64) if clip_hi is None else clip_hi
    if not m or not n:
        return lo_lim.copy()
    cp = run.cp
    pos = lo_lim.copy()
    inside = np.arange(m)
    if cp:
        # before / among / after the run's keys, by the prefix they all share
        side = _prefix_side(run, q_data, q_start, q_len)
        pos[side > 0] = hi_lim[side > 0]
        inside = np.flatnonzero(side == 0)
        if not len(inside):
            return pos
    qs, ql = q_start[inside], q_len[inside]
    qw = words(q_data, qs + cp, ql - cp)
    skip = cp + 8
    q2 = words(q_data, qs + skip, ql - skip)
    lo_in, hi_in = lo_lim[inside], hi_lim[inside]
    if getattr(run, "w2", None) is None:
        lo = np.clip(np.searchsorted(run.w1, qw, "left"), lo_in, hi_in)
        hi = np.clip(np.searchsorted(run.w1, qw, "right"), lo_in, hi_in)
        # entries tied on the word share the query's bytes up to `skip`: a binary search over
        # the tie range compares the next 8 bytes as words, and bytes past them only where
        # those tie
        pos[inside] = _exact_bounds(run, q_data, qs, ql, q2, lo, hi, skip)
        return pos
    pos[inside] = _folded_bounds(run, q_data, qs, ql, qw, q2, lo_in, hi_in, skip)
    return pos


def _prefix_side(
    run: SearchableRun, q_data: np.ndarray, q_start: np.ndarray, q_len: np.ndarray
) -> np.ndarray:
    """Each query against the run's common prefix (-1 before, 0 inside, 1 past the run's keys):
    one word compare when the prefix fits a word (a table id, a vnode byte), else bytes."""
    cp = run.cp
    m = len(q_start)
    if cp <= 8:
        qp = words(q_data, q_start, np.minimum(q_len, cp))
        pw = run.prefix_words[0]
        # a query shorter than the prefix that ties on its bytes is a proper prefix: before
        eq = (qp == pw) & (q_len < cp)
        return np.where((qp < pw) | eq, -1, np.where(qp > pw, 1, 0)).astype(np.int8)
    pbuf = padded(run.prefix_words.astype(">u8").view(np.uint8))
    return compare(q_data, q_start, np.minimum(q_len, cp), pbuf, np.zeros(m, np.int64), np.full(m, cp))


def _folded_bounds(
    run: SearchableRun,
    q_data: np.ndarray,
    qs: np.ndarray,
    ql: np.ndarray,
    qw: np.ndarray,
    q2: np.ndarray,
    lo_lim: np.ndarray,
    hi_lim: np.ndarray,
    skip: int,
) -> np.ndarray:
    """`lower_bounds` in a run that keeps the next 8 bytes as words too (`DecodedSstable.w2`):
    the query's rank among the distinct first words and its folded word find it with two
    searches; the entries tied on the folded word are searched by `w2`, and bytes are compared
    only where both words tie (16 equal bytes)."""
    folded, bits, distinct = run.folded_words()  # type: ignore[attr-defined]
    w2: np.ndarray = run.w2  # type: ignore[attr-defined]
    low = np.uint64(64 - bits)
    rank = np.searchsorted(distinct, qw, "left")
    tie = rank < len(distinct)
    tie[tie] = distinct[rank[tie]] == qw[tie]
    qf = rank.astype(np.uint64) << low
    qf[tie] |= q2[tie] >> np.uint64(bits)
    # no tie on `w1`: the first entry of a greater word (rank), whatever its `w2`
    a = np.clip(np.searchsorted(folded, qf, "left"), lo_lim, hi_lim)
    t = np.flatnonzero(tie & (a < hi_lim))
    t = t[folded[a[t]] == qf[t]]
    if not len(t):
        return a
    hi = np.clip(np.searchsorted(folded, qf[t], "right"), lo_lim[t], hi_lim[t])
    b = bisect_ranges(a[t], hi, lambda open_, mid: w2[mid] < q2[t[open_]])
    u = np.flatnonzero(b < hi)
    u = u[w2[b[u]] == q2[t[u]]]
    if len(u):
        tu = t[u]
        e = bisect_ranges(b[u], hi[u], lambda open_, mid: w2[mid] <= q2[tu[open_]])
        q3 = words(q_data, qs[tu] + skip + 8, ql[tu] - skip - 8)
        b[u] = _exact_bounds(run, q_data, qs[tu], ql[tu], q3, b[u], e, skip + 8)
    a[t] = b
    return a


def _exact_bounds(
    run: SearchableRun,
    q_data: np.ndarray,
    qs: np.ndarray,
    ql: np.ndarray,
    qw: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    skip: int,
) -> np.ndarray:
    """The first entry >= each query in [lo, hi), where every entry shares the query's first
    `skip` bytes: a binary search comparing the word at `skip` (`qw`), then exact bytes past it
    only where the words tie."""

    def go_right(open_: np.ndarray, mid: np.ndarray) -> np.ndarray:
        ks, kl = run.key_pos(mid)
        w = words(run.kdata, ks + skip, kl - skip)
        qv = qw[open_]
        less = w < qv
        tie = np.flatnonzero(w == qv)
        if len(tie):
            sq, lq, k_s, k_l = qs[open_[tie]], ql[open_[tie]], ks[tie], kl[tie]
            at = np.minimum(skip + 8, np.minimum(k_l, lq))
            less[tie] = compare(run.kdata, k_s, k_l, q_data, sq, lq, at) < 0
        return less

    return bisect_ranges(lo, hi, go_right)


@dataclass
class _Picked:
    """Entries of one run inside the ranges: their key / value positions in the run's buffers."""

    kdata: np.ndarray
    ks: np.ndarray
    kl: np.ndarray
    vdata: np.ndarray
    vs: np.ndarray
    vl: np.ndarray


def _spans(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Every position in the half-open intervals [lo[i], hi[i]), concatenated."""
    cnt = np.maximum(hi - lo, 0)
    total = int(cnt.sum())
    return np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(total, dtype=np.int64)


def _pick(
    run: SearchableRun, r: Ranges, sel: np.ndarray, clip: tuple[np.ndarray, ...] | None
) -> _Picked | None:
    """The entries of `run` inside ranges `sel`: a search for each range's start, then a walk
    to its end (see `_range_ends`). `clip`: where the starts and the ends lie (blocks of an SST)."""
    n = len(run.w1)
    if clip is None:
        lo = lower_bounds(run, r.data, r.start[sel], r.start_len[sel])
        e_lo, e_hi = np.zeros(len(sel), np.int64), np.full(len(sel), n, np.int64)
    else:
        s_lo, s_hi, e_lo, e_hi = clip
        lo = lower_bounds(run, r.data, r.start[sel], r.start_len[sel], s_lo, s_hi)
    hi = _range_ends(run, r, sel, lo, e_lo, e_hi)
    e = _spans(lo, hi)
    if not len(e):
        return None
    if not r.disjoint:
        e = np.unique(e)  # ranges that overlap (repeated or nested): each entry once, in order
    ks, kl = run.key_pos(e)
    vs, vl = run.value_pos(e)
    return _Picked(run.kdata, ks, kl, run.vdata, vs, vl)


#: Entries a range's end is looked for one at a time before a binary search takes over.
_WALK = 4


def _range_ends(
    run: SearchableRun, r: Ranges, sel: np.ndarray, lo: np.ndarray, e_lo: np.ndarray, e_hi: np.ndarray
) -> np.ndarray:
    """Past the last entry of each range (its entries start at `lo`; its end lies in
    [e_lo, e_hi]). In a run with two search words (an SST) the end's lower bound is found like a
    start (`lower_bounds`: word compares only). Elsewhere (an imm) a probe's range holds few
    entries (a key's rows, their versions), so the end is found by stepping over the entries
    below it, all ranges at once, a few steps; ranges still open after that get a binary search."""
    hi = lo.copy()
    bounded = r.has_end[sel]
    hi[~bounded] = e_hi[~bounded]
    open_ = np.flatnonzero(bounded)
    for _ in range(0 if getattr(run, "w2", None) is not None else _WALK):
        open_ = open_[hi[open_] < e_hi[open_]]
        if not len(open_):
            return hi
        ks, kl = run.key_pos(hi[open_])
        i = sel[open_]
        below = compare(run.kdata, ks, kl, r.data, r.end[i], r.end_len[i]) < 0
        open_ = open_[below]
        hi[open_] += 1
    open_ = open_[hi[open_] < e_hi[open_]]
    if len(open_):
        i = sel[open_]
        start = np.maximum(hi[open_], e_lo[open_])
        hi[open_] = lower_bounds(run, r.data, r.end[i], r.end_len[i], start, e_hi[open_])
    return hi


def _pick_sst(store: SstableStore, s: SstRun, r: Ranges, sel: np.ndarray, use_filter: bool) -> _Picked | None:
    """`_pick` for an SST: ranges pruned by its Bloom filter, their blocks loaded together."""
    meta = s.get_meta(store)
    if use_filter and r.hashes is not None:
        sel = sel[meta.may_contain_many(r.hashes[sel], r.table_ids[sel])]
    if not len(sel):
        return None
    cached = store.cached(s.info, len(sel))
    if cached is not None and cached.all_loaded:
        # every block is decoded: the ranges are searched in the whole SST, no block routing
        return _pick(cached, r, sel, None)
    nb = len(meta)
    fk = meta.index()
    first = fk.route(r.data, r.start[sel], r.start_len[sel])
    last = np.full(len(sel), nb - 1, np.int64)
    he = np.flatnonzero(r.has_end[sel] & (first < nb - 1))
    if len(he):
        # most ranges end in the block they start in (the next block's first key is >= the
        # end): one comparison each; only the others are routed
        nxt = first[he] + 1
        i = sel[he]
        stays = compare(fk.data, fk.starts[nxt], fk.lens[nxt], r.data, r.end[i], r.end_len[i]) >= 0
        last[he[stays]] = first[he[stays]]
        far = he[~stays]
        if len(far):
            last[far] = fk.route(r.data, r.end[sel[far]], r.end_len[sel[far]])
    blocks = np.unique(_spans(first, last + 1))
    d = store.load_blocks(s.info, blocks)
    eb = d.ebase
    return _pick(d, r, sel, (eb[first], eb[first + 1], eb[last], eb[last + 1]))


def read_ranges(
    view: ReadView,
    store: SstableStore,
    r: Ranges,
    read_epoch: int,
    watermarks: dict[int, TableWatermark],
) -> KvBatch:
    """Every visible entry (newest version <= `read_epoch`, no tombstones, none below a
    watermark) of the ranges, in key order."""
    if not len(r):
        return KvBatch.empty()
    picked: list[_Picked] = []
    imms = [i for i in view.imms if i.epoch <= read_epoch and len(i.imm.batch)]
    for imm in imms:  # per imm: a sorted in-memory run, searched whole
        run = imm.run()
        bounds = imm.imm.batch
        a, b = r.overlapping([bounds.first_key()[:-EPOCH_LEN]], [bounds.last_key()[:-EPOCH_LEN]])
        if b[0] > a[0]:
            p = _pick(run, r, np.arange(a[0], b[0]), None)
            if p is not None:
                picked.append(p)
    ssts = [(s, True) for s in view.l0 if s.min_epoch <= read_epoch]
    last = len(view.levels) - 1
    for i, lv in enumerate(view.levels):
        # the bottom level skips the filter, as point reads do
        ssts += [(s, i != last) for s in lv.ssts if s.min_epoch <= read_epoch]
    if ssts:
        a, b = r.overlapping([s.lo for s, _ in ssts], [s.hi for s, _ in ssts])
        for k in np.flatnonzero(b > a).tolist():  # per SST overlapping some range
            s, use_filter = ssts[k]
            p = _pick_sst(store, s, r, np.arange(a[k], b[k]), use_filter)
            if p is not None:
                picked.append(p)
    if not picked:
        return KvBatch.empty()
    runs = [_gather(p) for p in picked]
    merged = KvBatch.merge(runs)
    return KvBatch.concat(list(UserIterator([merged], read_epoch, watermarks)))


def _gather(p: _Picked) -> KvBatch:
    """One run's picked entries as a KvBatch (one Arrow copy for keys, one for values); filter
    lengths are not read back (zero)."""
    zeros = np.zeros(len(p.ks), np.int64)
    keys = gather_views([p.kdata], zeros, p.ks, p.kl)
    values = gather_views([p.vdata], zeros, p.vs, p.vl)
    return KvBatch(keys, values, np.zeros(len(p.ks), np.uint16))


def next_keys(keys: Ragged) -> tuple[Ragged, np.ndarray]:
    """Vectorized `next_key`: (the smallest key past every key starting with each key, whether
    one exists; a key of only 0xff bytes has none and gets an empty row)."""
    starts = keys.offsets[:-1].astype(np.int64)
    ends = keys.offsets[1:].astype(np.int64)
    not_ff = np.flatnonzero(keys.data != 0xFF)
    # the last byte of each key that is not 0xff
    at = np.searchsorted(not_ff, ends, "left") - 1
    pos = np.where(at >= 0, not_ff[np.maximum(at, 0)], -1)
    has = (pos >= starts) & (pos < ends)
    lens = np.where(has, pos - starts + 1, 0)
    out = keys.gather_by(starts, lens)
    out = Ragged(out.offsets, out.data.copy())
    last = out.offsets[1:][has] - 1
    out.data[last] += 1
    return out, has
