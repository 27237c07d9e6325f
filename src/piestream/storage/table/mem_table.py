"""The MemTable: a state table's buffer of operations during one epoch (seed 000; reference §4.1).

Operations per key merge by exactly the rules of reference §4.1::

    existing        new op          result
    none            any             stored as is
    Delete(o)       Insert(n)       Update(o, n)
    Insert(v)       Delete(o)       removed (nothing reaches storage)
    Update(o, n1)   Delete(x)       Delete(o)
    Insert(v)       Update(x, n)    Insert(n)
    Update(o, n1)   Update(x, n2)   Update(o, n2)
    Insert/Update   Insert          error "double insert"
    Delete          Delete          error "double delete"
    Delete          Update          error "update on deleted"

Every op is a transition of the key between *absent* and *present*: Insert(n) absent -> n,
Delete(o) o -> absent, Update(o, n) o -> n. A run of ops on one key composes to the transition
from the first op's "before" to the last op's "after" (absent -> absent = removed), and once a
run is removed the key is "none" again, so the next op starts afresh. That makes the table a
handful of vector operations (`_fold`) over ops sorted by (key, arrival): the MemTable keeps its
ops as *columns* — a sorted, merged base plus appended chunks — and merges the chunks into the
base when it is read, flushed, or has grown. `write_chunk` appends one chunk: no per-row work.

With consistency checks on (the default, and always in tests) an illegal sequence raises
`StateConsistencyError`, and the old value a delete or update carries must equal the value the
MemTable holds for the key byte for byte — that is what catches executor bugs before they corrupt
state. Chunk ops are checked when the chunk is merged (the next read, spill or flush of the
epoch); the single-row calls check at once, through a small per-key overlay. With checks off the
last operation wins. With checks on and an `on_inconsistency` callback (RisingWave's non-strict
default outside tests), an illegal sequence is reported to the callback (what, how many ops, a
key) and then applied as with checks off, so one inconsistent op does not stop the pipeline.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.errors import StateConsistencyError
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.key_index import KeyIndex, packed_keys, padded_ragged, shared_prefix_len, words


class KeyOpKind(enum.IntEnum):
    INSERT = 1
    DELETE = 2
    UPDATE = 3


#: (kind, old value or None, new value or None)
KeyOp = tuple[KeyOpKind, bytes | None, bytes | None]

_INS = KeyOpKind.INSERT
_DEL = KeyOpKind.DELETE
_UPD = KeyOpKind.UPDATE
_EMPTY = pa.array([], pa.binary())


@dataclass
class Ops:
    """Ops as columns: table keys, kinds (KeyOpKind as int8), old and new values (b"" where the
    op has none)."""

    keys: pa.Array
    kinds: np.ndarray
    old: pa.Array
    new: pa.Array

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def empty(cls) -> Ops:
        return cls(_EMPTY, np.zeros(0, np.int8), _EMPTY, _EMPTY)

    def take(self, idx: np.ndarray) -> Ops:
        ia = pa.array(idx, pa.int64())
        return Ops(self.keys.take(ia), self.kinds[idx], self.old.take(ia), self.new.take(ia))

    def slice(self, lo: int, hi: int) -> Ops:
        return Ops(
            self.keys.slice(lo, hi - lo),
            self.kinds[lo:hi],
            self.old.slice(lo, hi - lo),
            self.new.slice(lo, hi - lo),
        )

    @staticmethod
    def concat(parts: list[Ops]) -> Ops:
        parts = [p for p in parts if len(p)]
        if not parts:
            return Ops.empty()
        if len(parts) == 1:
            return parts[0]
        return Ops(
            pa.concat_arrays([p.keys for p in parts]),
            np.concatenate([p.kinds for p in parts]),
            pa.concat_arrays([p.old for p in parts]),
            pa.concat_arrays([p.new for p in parts]),
        )

    def to_list(self) -> list[tuple[bytes, KeyOp]]:
        """As Python (key, KeyOp) pairs (tests and the storage sanity check)."""
        out = []
        for k, kind, o, n in zip(
            self.keys.to_pylist(),
            self.kinds.tolist(),
            self.old.to_pylist(),
            self.new.to_pylist(),
            strict=True,
        ):
            kk = KeyOpKind(kind)
            out.append((k, (kk, None if kk is _INS else o, None if kk is _DEL else n)))
        return out


@dataclass
class Drained:
    """A flushed MemTable: sorted keys, Put rows (b"" for deletes) and delete flags."""

    keys: pa.Array
    rows: pa.Array
    deletes: np.ndarray


def _binary(values: list[bytes]) -> pa.Array:
    return pa.array(values, pa.binary())


def _fail(what: str, key: bytes) -> StateConsistencyError:
    return StateConsistencyError(f"mem-table operation inconsistent: {what} on key {key.hex()}")


#: Where a lenient MemTable reports illegal op sequences: (what, number of illegal ops, a key).
InconsistencyReport = Callable[[str, int, bytes], None]


def fold(ops: Ops, check: bool, report: InconsistencyReport | None = None, *, keep_old: bool = True) -> Ops:
    """Merge ops listed in arrival order into one op per key, sorted by key (the §4.1 rules as
    vector operations; see the module docstring).

    Works on the sort permutation and the kinds only; the (large) key and value columns are
    gathered once, for the surviving ops (a fold at a spill or flush is mostly U-/U+ pairs, so
    that is half of them). `keep_old=False` (a flush, which writes only new rows): the result's
    old values are not gathered (they read as empty, unless no op moved)."""
    n = len(ops)
    if n == 0:
        return ops
    data, starts, lens = padded_ragged(Ragged.from_arrow(ops.keys))
    order, new_key = sorted_runs(data, starts, lens)  # stable: arrival order within a key
    if new_key.all():  # one op per key: every op stands as it is
        if np.array_equal(order, np.arange(n)):
            return ops
        if keep_old:
            return ops.take(order)
        ia = pa.array(order, pa.int64())
        return Ops(ops.keys.take(ia), ops.kinds[order], _empties(n), ops.new.take(ia))
    kind = ops.kinds[order]
    pos = np.arange(n)
    gstart = np.maximum.accumulate(np.where(new_key, pos, 0))
    gend = np.empty(n, np.bool_)
    gend[:-1] = new_key[1:]
    gend[-1] = True
    is_del = kind == _DEL
    # a Delete closes a removal (Insert ... Delete = none) while every run of the key so far began
    # with an Insert; the op after a removal starts a new run
    last_del = np.maximum.accumulate(np.where(is_del, pos, -1))
    prev_del = np.concatenate([[-1], last_del[:-1]])
    run_start = np.maximum(prev_del + 1, gstart)
    bad = np.where(is_del, kind[run_start] != _INS, False).astype(np.int64)
    cum = np.cumsum(bad)
    before_group = np.where(gstart > 0, cum[gstart - 1], 0)
    removal = is_del & (cum - before_group == 0)
    new_run = new_key.copy()
    new_run[1:] |= removal[:-1] & ~new_key[1:]
    first = np.maximum.accumulate(np.where(new_run, pos, 0))  # start of the run each op is in
    if check:
        _check_pairs(ops, order, kind, new_run, report)
    ends = np.flatnonzero(gend & ~removal)  # last op of every key that still has an op
    firsts = first[ends]
    before = kind[firsts] != _INS
    after = kind[ends] != _DEL
    out_kind = np.where(before, np.where(after, _UPD, _DEL), _INS).astype(np.int8)
    ie = pa.array(order[ends], pa.int64())
    old = ops.old.take(pa.array(order[firsts], pa.int64())) if keep_old else _empties(len(ends))
    return Ops(ops.keys.take(ie), out_kind, old, ops.new.take(ie))


def _empties(n: int) -> pa.Array:
    """n empty byte strings (old values a flush does not need)."""
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")]
    )


def sorted_runs(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stable sort permutation of the keys in byte order, per sorted position whether its key
    differs from the previous one): `sort_order`'s word sort, whose words also tell equal keys
    apart without gathering or comparing the keys themselves."""
    n = len(starts)
    if n < 2:
        return np.arange(n), np.ones(n, np.bool_)
    packed = packed_keys(data, starts, lens)
    if packed is not None:
        order = np.argsort(packed, kind="stable")
        sp = packed[order]
        new_key = np.ones(n, np.bool_)
        new_key[1:] = sp[1:] != sp[:-1]
        return order, new_key
    cp = shared_prefix_len(data, starts, lens)
    w0 = words(data, starts + cp, lens - cp)
    order = np.argsort(w0, kind="stable")
    sw = w0[order]
    new_key = np.ones(n, np.bool_)
    new_key[1:] = sw[1:] != sw[:-1]
    if new_key.all():
        return order, new_key
    # words beyond a key's end read as zero bytes: keys are equal when every word and the length is
    nwords = (int(lens.max()) - cp + 7) // 8
    cols = [w0]
    for k in range(1, nwords):
        rem = lens - cp - 8 * k
        cols.append(words(data, np.where(rem > 0, starts + cp + 8 * k, 0), rem))
    order = np.lexsort((lens, *reversed(cols)))
    new_key[:] = False
    new_key[0] = True
    for col in (lens, *cols):
        sc = col[order]
        new_key[1:] |= sc[1:] != sc[:-1]
    return order, new_key


def _same_key_pairs(keys: pa.Array, inserts: np.ndarray, candidates: np.ndarray | None) -> np.ndarray:
    """The candidate rows i that delete the key row i + 1 inserts."""
    if candidates is None or not len(candidates):
        return np.zeros(0, np.int64)
    c = np.asarray(candidates, np.int64)
    c = c[~inserts[c] & inserts[c + 1]]
    same = pc.equal(keys.take(pa.array(c)), keys.take(pa.array(c + 1)))
    return c[np.asarray(same.to_numpy(zero_copy_only=False), np.bool_)]


def _check_pairs(
    ops: Ops,
    order: np.ndarray,
    kind: np.ndarray,
    new_run: np.ndarray,
    report: InconsistencyReport | None = None,
) -> None:
    """Raise for the first illegal pair of consecutive ops on one key (within one run), or tell
    `report` about them (the first one's kind, how many, its key). `order` sorts `ops`; `kind`
    and `new_run` are by sorted position."""
    prev_after = kind[:-1] != _DEL
    next_before = kind[1:] != _INS
    same = ~new_run[1:]
    mismatch = same & (prev_after != next_before)
    value = np.flatnonzero(same & prev_after & next_before)
    bad_value = np.zeros(len(kind) - 1, np.bool_)
    if len(value):
        eq = pc.equal(
            ops.new.take(pa.array(order[value], pa.int64())),
            ops.old.take(pa.array(order[value + 1], pa.int64())),
        )
        bad_value[value] = ~eq.to_numpy(zero_copy_only=False)
    wrong = np.flatnonzero(mismatch | bad_value)
    if not len(wrong):
        return
    i = int(wrong[0])
    key = ops.keys[int(order[i])].as_py()
    nxt = kind[i + 1]
    what = (
        "old value differs from the buffered value"
        if bad_value[i]
        else "double insert"
        if nxt == _INS
        else "double delete"
        if nxt == _DEL
        else "update on deleted"
    )
    if report is not None:
        report(what, len(wrong), key)
        return
    raise _fail(what, key)


class MemTable:
    """Ops keyed by table key (vnode | memcomparable pk), values as encoded rows."""

    def __init__(
        self, *, check_consistency: bool = True, on_inconsistency: InconsistencyReport | None = None
    ) -> None:
        self.check = check_consistency
        self.report = on_inconsistency  # set: illegal ops are reported and applied, not raised
        self._base = Ops.empty()  # merged: sorted, one op per key
        self._base_dead: np.ndarray | None = None  # base rows taken over by the row overlay
        self._chunks: list[Ops] = []  # appended, arrival order
        self._chunk_rows = 0
        self._rows: dict[bytes, KeyOp] = {}  # the single-row overlay (newest of all)
        self._base_pos: dict[bytes, int] | None = None
        self._index: KeyIndex | None = None
        self._bytes = 0
        self._folded = False  # whether anything was merged since the last drain

    # -- merging --------------------------------------------------------------------------------
    def _merge(self, *, keep_old: bool = True) -> Ops:
        """Fold appended chunks and the row overlay into the base; return the base.
        `keep_old=False` only right before the MemTable is emptied (`drain_arrays`): the
        folded ops' old values are left out, so the base must not be used again."""
        if not self._chunks and not self._rows and self._base_dead is None:
            return self._base
        self._folded = True
        parts = [self._base if self._base_dead is None else self._base.take(np.flatnonzero(~self._base_dead))]
        if self._rows:  # the overlay's ops already include what they replaced in the base
            items = sorted(self._rows.items())
            parts.append(
                Ops(
                    _binary([k for k, _ in items]),
                    np.array([op[0] for _, op in items], np.int8),
                    _binary([op[1] or b"" for _, op in items]),
                    _binary([op[2] or b"" for _, op in items]),
                )
            )
        merged = fold(Ops.concat([*parts, *self._chunks]), self.check, self.report, keep_old=keep_old)
        self._base = merged
        self._base_dead = None
        self._chunks = []
        self._chunk_rows = 0
        self._rows = {}
        self._base_pos = None
        self._index = None
        return merged

    def ops(self) -> Ops:
        """Every buffered op, merged: sorted by key, one per key."""
        return self._merge()

    def index(self) -> KeyIndex:
        """The merged keys as a `KeyIndex` (for batched lookups and range bounds)."""
        base = self._merge()
        if self._index is None:
            self._index = KeyIndex.of_ragged(Ragged.from_arrow(base.keys))
        return self._index

    def __len__(self) -> int:
        return len(self._merge())

    def __contains__(self, key: bytes) -> bool:
        return self.get(key) is not None

    @property
    def nbytes(self) -> int:
        """Approximate buffered size (drives spilling)."""
        return self._bytes

    @property
    def write_only(self) -> bool:
        """Whether since the last drain only whole chunks were appended and nothing merged them
        (no read, no single-row op): such a MemTable costs nothing more for being large until
        the drain sorts it, once."""
        return not self._folded and not self._rows

    # -- single rows ----------------------------------------------------------------------------
    def _in_base(self, key: bytes) -> tuple[int, KeyOp] | None:
        """The key's row in the merged base and its op (chunks merged first), if buffered there."""
        if self._chunks:
            self._merge()
        if self._base_pos is None:
            self._base_pos = {k: i for i, k in enumerate(self._base.keys.to_pylist())}
        i = self._base_pos.get(key)
        if i is None or (self._base_dead is not None and self._base_dead[i]):
            return None
        b = self._base
        kind = KeyOpKind(int(b.kinds[i]))
        return i, (
            kind,
            None if kind is _INS else b.old[i].as_py(),
            None if kind is _DEL else b.new[i].as_py(),
        )

    def _current(self, key: bytes) -> KeyOp | None:
        """The key's op, moved into the row overlay if it was in the base or the chunks."""
        op = self._rows.get(key)
        if op is not None:
            return op
        found = self._in_base(key)
        if found is None:
            return None
        i, op = found
        if self._base_dead is None:
            self._base_dead = np.zeros(len(self._base), np.bool_)
        self._base_dead[i] = True
        self._rows[key] = op
        return op

    def get(self, key: bytes) -> KeyOp | None:
        op = self._rows.get(key)
        if op is not None:
            return op
        found = self._in_base(key)
        return None if found is None else found[1]

    def _set(self, key: bytes, op: KeyOp) -> None:
        self._rows[key] = op
        self._bytes += len(key) + len(op[1] or b"") + len(op[2] or b"") + 48

    def _removed(self, key: bytes) -> None:
        self._rows.pop(key, None)
        # a removed key is "none": a tombstone-free marker keeps later ops starting afresh
        self._index = None

    def _check_old(self, key: bytes, expected: bytes | None, given: bytes) -> None:
        if self.check and expected != given:
            self._illegal("old value differs from the buffered value", key)

    def _illegal(self, what: str, key: bytes) -> None:
        """An illegal op: raise, or (lenient) report it and let the caller apply it anyway."""
        if self.report is None:
            raise _fail(what, key)
        self.report(what, 1, key)

    def insert(self, key: bytes, new: bytes) -> None:
        e = self._current(key)
        if e is None:
            self._set(key, (_INS, None, new))
        elif e[0] is _DEL:
            self._set(key, (_UPD, e[1], new))
        else:
            if self.check:
                self._illegal("double insert", key)
            self._set(key, (e[0], e[1], new))

    def delete(self, key: bytes, old: bytes) -> None:
        e = self._current(key)
        if e is None:
            self._set(key, (_DEL, old, None))
        elif e[0] is _INS:
            self._check_old(key, e[2], old)
            self._removed(key)
        elif e[0] is _UPD:
            self._check_old(key, e[2], old)
            self._set(key, (_DEL, e[1], None))
        elif self.check:
            self._illegal("double delete", key)

    def update(self, key: bytes, old: bytes, new: bytes) -> None:
        e = self._current(key)
        if e is None:
            self._set(key, (_UPD, old, new))
        elif e[0] is _INS:
            self._check_old(key, e[2], old)
            self._set(key, (_INS, None, new))
        elif e[0] is _UPD:
            self._check_old(key, e[2], old)
            self._set(key, (_UPD, e[1], new))
        else:
            if self.check:
                self._illegal("update on deleted", key)
            self._set(key, (_UPD, e[1], new))

    # -- chunks ---------------------------------------------------------------------------------
    def apply_batch(
        self,
        keys: pa.Array,
        values: pa.Array,
        inserts: np.ndarray,
        nbytes: int,
        *,
        update_pairs: np.ndarray | None = None,
    ) -> None:
        """Append a chunk's ops (Insert where `inserts`, else Delete with `values` as the old
        row), in order after everything buffered; merged later as columns.

        `update_pairs`: rows i whose Delete is followed by the Insert of row i + 1 (a chunk's
        U- / U+ pairs). Where both rows have the same key they become one Update(old, new): the
        same transition, half the ops for the merge to sort and gather."""
        if not len(keys):
            return
        if self._rows:  # the overlay is older than this chunk: fold it first to keep the order
            self._merge()
        ins = np.asarray(inserts, np.bool_)
        kinds = np.where(ins, _INS, _DEL).astype(np.int8)
        pairs = _same_key_pairs(keys, ins, update_pairs)
        if len(pairs):
            n = len(keys)
            kinds[pairs] = _UPD
            new_of = np.arange(n, dtype=np.int64)
            new_of[pairs] = pairs + 1
            keep = np.ones(n, np.bool_)
            keep[pairs + 1] = False
            rows = np.flatnonzero(keep)
            kinds, ins = kinds[rows], ins[rows]
            keys = keys.take(pa.array(rows))
            new_values = values.take(pa.array(new_of[rows]))
            values = values.take(pa.array(rows))
        else:
            new_values = values
        mask = pa.array(ins)
        empty = pa.scalar(b"", pa.binary())
        new = pc.if_else(pa.array(kinds == _DEL), empty, new_values) if (kinds == _DEL).any() else new_values
        old = pc.if_else(mask, empty, values) if ins.any() else values
        if ins.all():
            old = pa.nulls(len(keys), pa.binary()).fill_null(b"")
        self._chunks.append(Ops(keys, kinds, old, new))
        self._chunk_rows += len(keys)
        self._bytes += nbytes + 16 * len(keys)
        self._index = None

    # -- reads ----------------------------------------------------------------------------------
    def lookup(self, keys: Ragged) -> tuple[np.ndarray, pa.Array]:
        """Batched `get`: (kind per key, 0 = not buffered; the new row of each Insert/Update)."""
        base = self._merge()
        m = keys.n
        kinds = np.zeros(m, np.int8)
        if not len(base) or not m:
            return kinds, pa.nulls(m, pa.binary()).fill_null(b"")
        idx = self.index()
        qd, qs, ql = padded_ragged(keys)
        pos = idx.lower_bound(qd, qs, ql)
        inside = np.flatnonzero(pos < len(base))
        p = pos[inside]
        same = ql[inside] == idx.lens[p]
        k = inside[same]
        p = p[same]
        if len(k):
            from piestream.storage.hummock.key_index import compare

            eq = compare(idx.data, idx.starts[p], idx.lens[p], qd, qs[k], ql[k]) == 0
            k, p = k[eq], p[eq]
        kinds[k] = base.kinds[p]
        where = np.full(m, -1, np.int64)
        where[k] = p
        take = pa.array(where, mask=where < 0)
        return kinds, base.new.take(take).fill_null(b"")

    def range_ops(self, start: bytes | None, end: bytes | None) -> Ops:
        """The merged ops with keys in [start, end), ascending."""
        base = self._merge()
        if not len(base):
            return base
        idx = self.index()
        bounds = [b for b in (start, end) if b is not None]
        if not bounds:
            return base
        r = Ragged.from_list(bounds)
        qd, qs, ql = padded_ragged(r)
        pos = idx.lower_bound(qd, qs, ql).tolist()
        lo = pos.pop(0) if start is not None else 0
        hi = pos[0] if end is not None else len(base)
        return base.slice(lo, max(hi, lo))

    def sorted_keys(self) -> list[bytes]:
        return self._merge().keys.to_pylist()

    def iter_range(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, KeyOp]]:
        """Ops with keys in [start, end), ascending (as Python tuples; tests and small reads)."""
        yield from self.range_ops(start, end).to_list()

    def _reset(self) -> None:
        self._base = Ops.empty()
        self._base_dead = None
        self._base_pos = None
        self._index = None
        self._bytes = 0
        self._folded = False

    def drain(self) -> list[tuple[bytes, KeyOp]]:
        """Every op, sorted by key, leaving the MemTable empty (a flush or a spill)."""
        out = self._merge().to_list()
        self._reset()
        return out

    @staticmethod
    def drained_of(ops: list[tuple[bytes, KeyOp]]) -> Drained:
        keys = pa.array([k for k, _ in ops], pa.binary())
        rows = pa.array([op[2] or b"" for _, op in ops], pa.binary())
        dels = np.fromiter((op[0] is _DEL for _, op in ops), np.bool_, count=len(ops))
        return Drained(keys, rows, dels)

    def drain_arrays(self) -> Drained | None:
        """Like `drain`, as sorted arrays (no Python object per op)."""
        base = self._merge(keep_old=False)  # a flush writes new rows and tombstones only
        if not len(base):
            self._reset()
            return None
        dels = base.kinds == _DEL
        rows = base.new
        self._reset()
        return Drained(base.keys, rows, dels)
