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

With consistency checks on (the default, and always in tests) an illegal sequence raises
`StateConsistencyError`, and the old value a delete or update carries must equal the value the
MemTable holds for the key byte for byte — that is what catches executor bugs before they corrupt
state. With checks off the last operation wins.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.errors import StateConsistencyError


class KeyOpKind(enum.IntEnum):
    INSERT = 1
    DELETE = 2
    UPDATE = 3


#: (kind, old value or None, new value or None)
KeyOp = tuple[KeyOpKind, bytes | None, bytes | None]

_INS = KeyOpKind.INSERT
_DEL = KeyOpKind.DELETE
_UPD = KeyOpKind.UPDATE


@dataclass
class _Segment:
    """A chunk of ops on keys nobody else touched in this epoch, kept as arrays (no per-row
    Python) until a read or a conflicting op needs them merged into the dict."""

    keys: pa.Array  # binary table keys
    values: pa.Array  # binary encoded rows (the new row of an insert, the old row of a delete)
    deletes: np.ndarray  # bool


@dataclass
class Drained:
    """A flushed MemTable: sorted keys, Put rows (b"" for deletes) and delete flags."""

    keys: pa.Array
    rows: pa.Array
    deletes: np.ndarray


class MemTable:
    """Ops keyed by table key (vnode | memcomparable pk), values as encoded rows."""

    def __init__(self, *, check_consistency: bool = True) -> None:
        self.check = check_consistency
        self._ops: dict[bytes, KeyOp] = {}
        self._sorted: list[bytes] | None = []
        self._bytes = 0
        self._segments: list[_Segment] = []
        self._segment_keys: set[bytes] = set()

    def _materialize(self) -> None:
        """Merge bulk segments into the dict (they hold no keys in common with it)."""
        if not self._segments:
            return
        ops = self._ops
        for seg in self._segments:
            ops.update(
                (k, (_DEL, v, None) if d else (_INS, None, v))
                for k, v, d in zip(
                    seg.keys.to_pylist(), seg.values.to_pylist(), seg.deletes.tolist(), strict=True
                )
            )
        self._segments = []
        self._segment_keys = set()
        self._sorted = None

    def __len__(self) -> int:
        return len(self._ops) + len(self._segment_keys)

    def __contains__(self, key: bytes) -> bool:
        return key in self._ops or key in self._segment_keys

    @property
    def nbytes(self) -> int:
        """Approximate buffered size (drives spilling)."""
        return self._bytes

    def get(self, key: bytes) -> KeyOp | None:
        if self._segments and key in self._segment_keys:
            self._materialize()
        return self._ops.get(key)

    # -- writes ---------------------------------------------------------------------------------
    def _set(self, key: bytes, op: KeyOp) -> None:
        if key not in self._ops:
            self._sorted = None
        self._ops[key] = op
        self._bytes += len(key) + len(op[1] or b"") + len(op[2] or b"") + 48

    def _fail(self, what: str, key: bytes) -> None:
        raise StateConsistencyError(f"mem-table operation inconsistent: {what} on key {key.hex()}")

    def _check_old(self, key: bytes, expected: bytes | None, given: bytes) -> None:
        if self.check and expected != given:
            self._fail("old value differs from the buffered value", key)

    def insert(self, key: bytes, new: bytes) -> None:
        if self._segments:
            self._materialize()
        e = self._ops.get(key)
        if e is None:
            self._set(key, (_INS, None, new))
        elif e[0] is _DEL:
            self._set(key, (_UPD, e[1], new))
        else:
            if self.check:
                self._fail("double insert", key)
            self._set(key, (e[0], e[1], new))

    def delete(self, key: bytes, old: bytes) -> None:
        if self._segments:
            self._materialize()
        e = self._ops.get(key)
        if e is None:
            self._set(key, (_DEL, old, None))
        elif e[0] is _INS:
            self._check_old(key, e[2], old)
            del self._ops[key]
            self._sorted = None
        elif e[0] is _UPD:
            self._check_old(key, e[2], old)
            self._set(key, (_DEL, e[1], None))
        elif self.check:
            self._fail("double delete", key)

    def update(self, key: bytes, old: bytes, new: bytes) -> None:
        if self._segments:
            self._materialize()
        e = self._ops.get(key)
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
                self._fail("update on deleted", key)
            self._set(key, (_UPD, e[1], new))

    def apply_batch(self, keys: pa.Array, values: pa.Array, inserts: np.ndarray, nbytes: int) -> None:
        """Apply a chunk's ops in order. When no key is buffered yet and none repeats — the common
        case — the chunk is kept as one array segment; otherwise each op merges one by one."""
        key_list = keys.to_pylist()
        fresh = set(key_list)
        if (
            len(fresh) == len(key_list)
            and self._ops.keys().isdisjoint(fresh)
            and self._segment_keys.isdisjoint(fresh)
        ):
            self._segments.append(_Segment(keys, values, ~np.asarray(inserts, np.bool_)))
            self._segment_keys |= fresh
            self._bytes += nbytes + 16 * len(key_list)
            return
        self._materialize()
        for k, v, ins in zip(key_list, values.to_pylist(), np.asarray(inserts).tolist(), strict=True):
            if ins:
                self.insert(k, v)
            else:
                self.delete(k, v)

    # -- reads ----------------------------------------------------------------------------------
    def sorted_keys(self) -> list[bytes]:
        self._materialize()
        if self._sorted is None:
            self._sorted = sorted(self._ops)
        return self._sorted

    def iter_range(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, KeyOp]]:
        """Ops with keys in [start, end), ascending."""
        self._materialize()
        keys = self.sorted_keys()
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        ops = self._ops
        for k in keys[lo:hi]:
            op = ops.get(k)
            if op is not None:
                yield k, op

    def drain(self) -> list[tuple[bytes, KeyOp]]:
        """Every op, sorted by key, leaving the MemTable empty (a flush or a spill)."""
        self._materialize()
        out = sorted(self._ops.items())  # keys are unique, so only keys are ever compared
        self._ops = {}
        self._sorted = []
        self._bytes = 0
        return out

    @staticmethod
    def drained_of(ops: list[tuple[bytes, KeyOp]]) -> Drained:
        keys = pa.array([k for k, _ in ops], pa.binary())
        rows = pa.array([op[2] or b"" for _, op in ops], pa.binary())
        dels = np.fromiter((op[0] is _DEL for _, op in ops), np.bool_, count=len(ops))
        return Drained(keys, rows, dels)

    def drain_arrays(self) -> Drained | None:
        """Like `drain`, as sorted arrays; bulk segments never become Python objects."""
        if not self._ops and not self._segments:
            return None
        if self._ops:
            return self.drained_of(self.drain())
        keys = pa.concat_arrays([sg.keys for sg in self._segments])
        values = pa.concat_arrays([sg.values for sg in self._segments])
        dels = np.concatenate([sg.deletes for sg in self._segments])
        order = pc.sort_indices(keys)
        self._segments = []
        self._segment_keys = set()
        self._sorted = []
        self._bytes = 0
        rows = pc.if_else(pa.array(dels), pa.scalar(b"", pa.binary()), values).take(order)
        return Drained(keys.take(order), rows, dels[order.to_numpy()])
