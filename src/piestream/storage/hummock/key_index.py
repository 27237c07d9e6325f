"""Vector search over sorted byte-string keys: the in-block and block-index search of Hummock.

Keys live in one uint8 buffer addressed by (start, length) arrays, so a batch of queries is
compared against a batch of keys with a few numpy gathers of 8-byte big-endian words instead of
one Python ``bytes`` comparison per key (reference: columnar-state-notes "Vector search facts").

`KeyIndex` holds sorted keys cut into *segments* (the blocks of an SST, or fixed-size slices of an
in-memory run). Each segment knows the prefix all its keys share, and every key gets a uint64
search word: the segment number in the top bits, then the bytes right after the segment's common
prefix. The words of the whole index are sorted, so one `np.searchsorted` finds every query's
place; only queries whose word ties with a key's (equal bytes so far) are settled by an exact,
still vectorized, word-by-word comparison. Keys are never turned into numpy ``S`` strings, which
drop trailing NUL bytes (a BIGINT 0 key ends in ``00``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow.compute as pc

from piestream.encoding.ragged import Ragged, binary_views, word_view

#: ``_MASKS[r]`` keeps the first r bytes (big-endian) of a word; r is clipped to 0..8.
_MASKS = np.array(
    [0] + [((1 << 64) - 1) ^ ((1 << (8 * (8 - r))) - 1) for r in range(1, 8)] + [(1 << 64) - 1], np.uint64
)
_BYTE_SHIFTS = np.arange(56, -8, -8, dtype=np.uint64)
PAD = 8  # every key buffer carries 8 spare bytes so a word read at a key's end stays in bounds


def padded(data: np.ndarray) -> np.ndarray:
    """A copy of a uint8 buffer with `PAD` zero bytes appended (word reads at the end are safe)."""
    out = np.zeros(len(data) + PAD, np.uint8)
    out[: len(data)] = data
    return out


def padded_ragged(r: Ragged) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(padded data, starts, lengths) of a Ragged, the form every search here takes."""
    return padded(r.data), r.offsets[:-1].astype(np.int64), r.lengths.astype(np.int64)


def words(data: np.ndarray, pos: np.ndarray, remaining: np.ndarray) -> np.ndarray:
    """The big-endian uint64 at each ``data[pos:]``, keeping only `remaining` bytes (zero-filled)."""
    short = np.flatnonzero(remaining < 8)
    if len(short):
        pos = pos.copy()
        pos[short[remaining[short] <= 0]] = 0  # nothing to read: any position will do
    w = word_view(data, "u8")[pos]
    w.byteswap(inplace=True)
    if len(short):
        w[short] &= _MASKS[np.maximum(remaining[short], 0)]
    return w


def compare(
    a_data: np.ndarray,
    a_start: np.ndarray,
    a_len: np.ndarray,
    b_data: np.ndarray,
    b_start: np.ndarray,
    b_len: np.ndarray,
    skip: np.ndarray | int = 0,
) -> np.ndarray:
    """Byte-order comparison of key pairs (-1, 0, 1 as int8), starting at byte `skip` of both
    (the caller knows the bytes before it are equal): both sides as Arrow binary_view arrays over
    the buffers (no copy), compared by Arrow's kernels (memcmp per pair in C++)."""
    n = len(a_start)
    if n == 0:
        return np.zeros(0, np.int8)
    a_s, b_s = a_start + skip, b_start + skip
    a_l, b_l = np.maximum(a_len - skip, 0), np.maximum(b_len - skip, 0)
    if int(min(a_l.max(), b_l.max())) <= _SHORT_COMPARE:
        return _compare_words(a_data, a_s, a_l, b_data, b_s, b_l)
    va = binary_views([a_data], None, a_s, a_l)
    vb = binary_views([b_data], None, b_s, b_l)
    lt = pc.less(va, vb).to_numpy(zero_copy_only=False)
    eq = pc.equal(va, vb).to_numpy(zero_copy_only=False)
    return np.where(lt, -1, np.where(eq, 0, 1)).astype(np.int8)


#: Pairs whose shorter side is at most this long are compared with 8-byte words (two rounds).
_SHORT_COMPARE = 16


def _compare_words(
    a_data: np.ndarray, a_s: np.ndarray, a_l: np.ndarray, b_data: np.ndarray, b_s: np.ndarray, b_l: np.ndarray
) -> np.ndarray:
    """`compare` by rounds of big-endian words; each round settles every pair whose words
    differ or whose shorter key ends in the word."""
    n = len(a_s)
    out = np.zeros(n, np.int8)
    idx = np.arange(n)
    off = np.zeros(n, np.int64)
    while len(idx):
        ra = a_l[idx] - off
        rb = b_l[idx] - off
        wa = words(a_data, a_s[idx] + off, ra)
        wb = words(b_data, b_s[idx] + off, rb)
        lt = wa < wb
        gt = wa > wb
        decided = lt | gt | (ra <= 8) | (rb <= 8)
        res = np.where(lt, -1, np.where(gt, 1, np.sign(ra - rb))).astype(np.int8)
        if decided.all():
            out[idx] = res
            break
        out[idx[decided]] = res[decided]
        keep = ~decided
        idx = idx[keep]
        off = off[keep] + 8
    return out


def common_prefix_len(
    data: np.ndarray, a_start: np.ndarray, a_len: np.ndarray, b_start: np.ndarray, b_len: np.ndarray
) -> np.ndarray:
    """Length of the common prefix of each pair of keys in one padded buffer."""
    n = len(a_start)
    out = np.zeros(n, np.int64)
    idx = np.arange(n)
    off = np.zeros(n, np.int64)
    limit = np.minimum(a_len, b_len)
    while len(idx):
        rem = limit[idx] - off
        wa = words(data, a_start[idx] + off, rem)
        wb = words(data, b_start[idx] + off, rem)
        x = wa ^ wb
        same = x == 0
        # leading zero bytes of the xor = bytes equal in this word
        lead = np.where(same, 8, ((x[:, None] >> _BYTE_SHIFTS[None, :]) == 0).argmin(axis=1))
        done = ~same | (rem <= 8)
        out[idx[done]] = np.minimum(off[done] + lead[done], limit[idx[done]])
        keep = ~done
        idx = idx[keep]
        off = off[keep] + 8
    return out


def shared_prefix_len(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> int:
    """Length of the prefix every key (padded buffer) shares: per 8-byte word, one OR over the
    keys of the bits that differ from the first key's."""
    limit = int(lens.min()) if len(lens) else 0
    off = 0
    while off < limit:
        w = words(data, starts + off, np.minimum(lens - off, limit - off))
        differ = int(np.bitwise_or.reduce(w ^ w[0]))
        if differ:
            return min(off + (64 - differ.bit_length()) // 8, limit)
        off += 8
    return limit


class KeyIndex:
    """Sorted keys in segments, searchable for whole batches of queries at once.

    ``data`` is a padded buffer; ``starts``/``lens`` address every key; ``seg_start`` (nseg + 1)
    gives each segment's first key. Segments may be filled later (`fill`): until then their search
    words are the segment number alone, which keeps the word column sorted.
    """

    __slots__ = (
        "_top",
        "bits",
        "cp",
        "data",
        "lens",
        "next_at",
        "nseg",
        "seg_start",
        "shift",
        "starts",
        "word",
        "word2",
    )

    def __init__(self, data: np.ndarray, starts: np.ndarray, lens: np.ndarray, seg_start: np.ndarray) -> None:
        self.data = data
        self.starts = starts
        self.lens = lens
        self.seg_start = seg_start
        self.nseg = len(seg_start) - 1
        self.bits = int(self.nseg - 1).bit_length() if self.nseg > 1 else 0
        self.shift = np.uint64(64 - self.bits) if self.bits else np.uint64(0)
        self.cp = np.zeros(self.nseg, np.int64)
        # the second word starts at the first byte the first word does not hold whole
        self.next_at = 8 - (self.bits + 7) // 8
        self.word2 = np.zeros(int(seg_start[-1]), np.uint64)
        self._top: KeyIndex | None = None
        counts = np.diff(seg_start)
        if self.bits:
            self.word = np.repeat(np.arange(self.nseg, dtype=np.uint64) << self.shift, counts)
        else:
            self.word = np.zeros(int(seg_start[-1]), np.uint64)

    @classmethod
    def of_ragged(cls, r: Ragged, segment_rows: int = 256) -> KeyIndex:
        """An index over every key of a sorted Ragged, in segments of `segment_rows` keys."""
        data, starts, lens = padded_ragged(r)
        n = len(starts)
        seg_start = np.unique(np.append(np.arange(0, n, segment_rows, dtype=np.int64), n))
        if n == 0:
            seg_start = np.zeros(1, np.int64)
        idx = cls(data, starts, lens, seg_start)
        idx.fill(np.arange(idx.nseg))
        return idx

    def _low(self, data: np.ndarray, pos: np.ndarray, rem: np.ndarray) -> np.ndarray:
        w = words(data, pos, rem) if len(pos) else np.zeros(0, np.uint64)
        return w >> np.uint64(self.bits) if self.bits else w

    def fill(self, segs: np.ndarray) -> None:
        """Compute the common prefix and the search words of the given (now loaded) segments."""
        segs = np.asarray(segs, np.int64)
        segs = segs[self.seg_start[segs + 1] > self.seg_start[segs]]
        if not len(segs):
            return
        first = self.seg_start[segs]
        last = self.seg_start[segs + 1] - 1
        cp = common_prefix_len(
            self.data, self.starts[first], self.lens[first], self.starts[last], self.lens[last]
        )
        self.cp[segs] = cp
        counts = last - first + 1
        ent = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        seg_of = np.repeat(segs, counts)
        cpe = np.repeat(cp, counts)
        low = self._low(self.data, self.starts[ent] + cpe, self.lens[ent] - cpe)
        top = seg_of.astype(np.uint64) << self.shift if self.bits else np.uint64(0)
        self.word[ent] = top | low
        at = cpe + self.next_at
        self.word2[ent] = words(self.data, self.starts[ent] + at, self.lens[ent] - at)

    def lower_bound(
        self,
        q_data: np.ndarray,
        q_start: np.ndarray,
        q_len: np.ndarray,
        seg: np.ndarray | None = None,
        *,
        right: bool = False,
    ) -> np.ndarray:
        """For each query, the first key position in its segment with key >= query (> with
        `right`), or the segment's end. `seg` gives each query's segment (the last one whose
        first key is <= the query, see `route`); None routes by the segments' first keys, which
        makes the result the global lower bound (every segment must be filled)."""
        m = len(q_start)
        if seg is None:
            seg = self.route_segments(q_data, q_start, q_len) if self.nseg > 1 else np.zeros(m, np.int64)
        if not m or self.nseg == 0:
            return np.zeros(m, np.int64)
        s_lo = self.seg_start[seg]
        s_hi = self.seg_start[seg + 1]
        pos = s_lo.copy()
        nonempty = s_hi > s_lo
        cp = self.cp[seg]
        # bytes before the segment's common prefix: compare with the segment's first key
        head = np.zeros(m, np.int8)
        hp = np.flatnonzero(nonempty & (cp > 0))
        if len(hp):
            f = s_lo[hp]
            head[hp] = compare(
                q_data, q_start[hp], np.minimum(q_len[hp], cp[hp]), self.data, self.starts[f], cp[hp]
            )
        pos[head > 0] = s_hi[head > 0]
        live = np.flatnonzero(nonempty & (head == 0))
        if not len(live):
            return pos
        c = cp[live]
        low = self._low(q_data, q_start[live] + c, q_len[live] - c)
        top = seg[live].astype(np.uint64) << self.shift if self.bits else np.uint64(0)
        g = top | low
        lo = np.searchsorted(self.word, g, "left")
        hi = np.searchsorted(self.word, g, "right")
        # ties on the first word: binary search on the second (plain uint64 compares), then an
        # exact comparison only where both words tie
        tie = np.flatnonzero(hi > lo)
        if len(tie):
            qi = live[tie]
            at = cp[qi] + self.next_at
            q2 = words(q_data, q_start[qi] + at, q_len[qi] - at)
            a = _range_search(self.word2, lo[tie], hi[tie], q2, right=False)
            b = _range_search(self.word2, a, hi[tie], q2, right=True)
            lo[tie] = a
            tie2 = np.flatnonzero(b > a)
            if len(tie2):
                t_lo, t_hi = a[tie2], b[tie2]
                qj = qi[tie2]
                skip = cp[qj] + self.next_at + 8
                while True:
                    open_ = np.flatnonzero(t_lo < t_hi)
                    if not len(open_):
                        break
                    x, y = t_lo[open_], t_hi[open_]
                    mid = (x + y) // 2
                    q = qj[open_]
                    sk = np.minimum(skip[open_], np.minimum(self.lens[mid], q_len[q]))
                    cmp = compare(
                        self.data, self.starts[mid], self.lens[mid], q_data, q_start[q], q_len[q], sk
                    )
                    go_right = cmp <= 0 if right else cmp < 0
                    t_lo[open_] = np.where(go_right, mid + 1, x)
                    t_hi[open_] = np.where(go_right, y, mid)
                lo[tie[tie2]] = t_lo
        pos[live] = lo
        return pos

    def route_segments(self, q_data: np.ndarray, q_start: np.ndarray, q_len: np.ndarray) -> np.ndarray:
        """Each query's segment: the last one whose first key is <= the query (0 if none is)."""
        if self._top is None:
            first = self.seg_start[:-1]
            self._top = KeyIndex(self.data, self.starts[first], self.lens[first], np.array([0, self.nseg]))
            self._top.fill(np.zeros(1, np.int64))
        return self._top.route(q_data, q_start, q_len)

    def route(self, q_data: np.ndarray, q_start: np.ndarray, q_len: np.ndarray) -> np.ndarray:
        """For keys that are segment *first keys* (a block index): the last key <= each query,
        clipped to 0 (queries below every key go to the first)."""
        return np.maximum(self.lower_bound(q_data, q_start, q_len, right=True) - 1, 0)


def _range_search(
    arr: np.ndarray, lo: np.ndarray, hi: np.ndarray, q: np.ndarray, *, right: bool
) -> np.ndarray:
    """Vectorized binary search of each q in its own sorted range ``arr[lo:hi]``."""
    if right:
        return bisect_ranges(lo, hi, lambda open_, mid: arr[mid] <= q[open_])
    return bisect_ranges(lo, hi, lambda open_, mid: arr[mid] < q[open_])


def bisect_ranges(
    lo: np.ndarray, hi: np.ndarray, go_right: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    """A binary search per range [lo, hi), all at once: each round asks `go_right(open, mid)`
    whether the targets of the searches still open lie right of their middle entries."""
    lo = lo.copy()
    hi = hi.copy()
    while True:
        open_ = np.flatnonzero(lo < hi)
        if not len(open_):
            return lo
        x, y = lo[open_], hi[open_]
        mid = (x + y) >> 1
        go = go_right(open_, mid)
        lo[open_] = np.where(go, mid + 1, x)
        hi[open_] = np.where(go, y, mid)


def sort_order(data: np.ndarray, starts: np.ndarray, lens: np.ndarray, *, stable: bool = True) -> np.ndarray:
    """A permutation sorting the keys (padded buffer) in byte order: numpy sorts of 8-byte words
    after the prefix every key shares, instead of Arrow's comparison sort of binary strings.
    Equal keys keep their order unless `stable` is False (then a faster sort is used)."""
    n = len(starts)
    if n < 2:
        return np.arange(n)
    packed = packed_order(data, starts, lens)
    if packed is not None:
        return packed
    cp = shared_prefix_len(data, starts, lens)
    w0 = words(data, starts + cp, lens - cp)
    order = np.argsort(w0, kind="stable" if stable else None)
    sw = w0[order]
    if not (sw[1:] == sw[:-1]).any():
        return order
    nwords = (int(lens.max()) - cp + 7) // 8
    cols = [w0]
    for k in range(1, nwords):
        rem = lens - cp - 8 * k
        cols.append(words(data, np.where(rem > 0, starts + cp + 8 * k, 0), rem))
    return np.lexsort((lens, *reversed(cols)))


def packed_order(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray | None:
    """A stable permutation sorting keys of one width in byte order with one numpy sort, or None
    when they do not fit: the `packed_keys` above the row number (which makes every value
    unique, so the fast unstable sort gives the stable order)."""
    n = len(starts)
    if n < 2:
        return None
    row_bits = max(int(n - 1).bit_length(), 1)
    budget = (64 - row_bits) // 8  # varying bytes that fit above the row number
    key = packed_keys(data, starts, lens, budget) if budget > 0 else None
    if key is None:
        return None
    key <<= np.uint64(row_bits)
    key |= np.arange(n, dtype=np.uint64)
    key.sort()
    return (key & np.uint64((1 << row_bits) - 1)).astype(np.int64)


def packed_keys(
    data: np.ndarray, starts: np.ndarray, lens: np.ndarray, max_bytes: int = 8
) -> np.ndarray | None:
    """Keys of one width as one uint64 each, or None when they do not fit. A byte position where
    every key holds the same byte never decides their order, so only the varying positions
    (at most `max_bytes`) are packed, big-endian: the numbers order the keys as their bytes do
    and are equal exactly when the keys are. A fixed-width pk of small numbers varies in a few
    bytes (vnode, low bytes of the number, a spill offset), where a lexsort would sort every
    8-byte word of the key in turn."""
    n = len(starts)
    if not n or int(lens[0]) <= 0 or not (lens == lens[0]).all():
        return None
    m = _rows_matrix(data, starts, int(lens[0]))
    if n > 1024:
        # a sample of the rows varies in no more positions than all of them: when it already
        # varies in too many, skip the pass over every row (random keys vary everywhere)
        s = m[:: n // 256]
        if np.count_nonzero(s.min(axis=0) != s.max(axis=0)) > max_bytes:
            return None
    varying = np.flatnonzero(m.min(axis=0) != m.max(axis=0))
    if len(varying) > max_bytes:
        return None
    key = np.zeros(n, np.uint64)
    for j in varying.tolist():  # per varying byte position (at most 8), not per key
        key <<= np.uint64(8)
        key |= m[:, j]
    return key


def _rows_matrix(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The keys as an (n, width) uint8 matrix: a strided view when they lie at equal distances
    (a Ragged of one width, or keys with a fixed suffix), else a gather."""
    n = len(starts)
    first = int(starts[0])
    stride = int(starts[1] - first) if n > 1 else width
    fits = stride >= width and first + stride * (n - 1) + width <= len(data)
    if fits and (n == 1 or (np.diff(starts) == stride).all()):
        return np.lib.stride_tricks.as_strided(
            data[first:], shape=(n, width), strides=(stride, 1), writeable=False
        )
    return data[starts[:, None] + np.arange(width)]
