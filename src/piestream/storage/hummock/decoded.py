"""A decoded SST: what the block cache holds (reference §5.5; DESIGN "The state path is columnar").

`DecodedSstable` keeps the blocks of one SST that have been read, decoded into *one* buffer: each
block's payload sits at a fixed place (its offset among the uncompressed blocks), and per-entry
arrays (key start and length, value start and length, filter length) cover the whole SST. So a
batch of point lookups that touches a thousand blocks of an SST still searches, compares and
gathers with a handful of numpy calls over the whole SST (`KeyIndex`), instead of one Python step
per block. Blocks not read yet cost nothing but their share of the per-entry arrays; the buffer is
allocated zero-filled, which the OS backs with memory only where blocks were written.

Scans and the single-key `get` see a block as a `Block`: Arrow arrays that view the buffer
without copying it.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from piestream.common.errors import DataCorruption
from piestream.storage.hummock.key_index import PAD, KeyIndex
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.sstable import Block, SstableMeta, block_body

#: Bytes per entry of the per-entry arrays (charged to the block cache).
ENTRY_OVERHEAD = 48


class DecodedSstable:
    """The decoded blocks of one SST, in one buffer, searchable as one `KeyIndex`."""

    def __init__(self, object_id: int, meta: SstableMeta, path: str) -> None:
        self.object_id = object_id
        self.meta = meta
        self.path = path
        nb = len(meta)
        room = (meta.usizes + 7) // 8 * 8  # every block starts 8-byte aligned: zero-copy views
        self.ubase = np.zeros(nb + 1, np.int64)
        np.cumsum(room, out=self.ubase[1:])
        self.buf = np.zeros(int(self.ubase[-1]) + PAD, np.uint8)
        self.ebase = np.zeros(nb + 1, np.int64)
        np.cumsum(meta.key_counts, out=self.ebase[1:])
        n = int(self.ebase[-1])
        self.keys = KeyIndex(self.buf, np.zeros(n, np.int64), np.zeros(n, np.int64), self.ebase)
        self.vstart = np.zeros(n, np.int64)
        self.vlen = np.zeros(n, np.int64)
        self.flens = np.zeros(n, np.uint16)
        self.loaded = np.zeros(nb, np.bool_)
        self.searchable = np.zeros(nb, np.bool_)  # search words computed (only batched gets need them)
        self.loaded_bytes = 0
        self._views: dict[int, Block] = {}
        self._lock = threading.Lock()

    def nbytes(self) -> int:
        """Memory charged to the cache: loaded blocks plus the per-entry arrays."""
        return self.loaded_bytes + ENTRY_OVERHEAD * len(self.vstart) + 256

    def where(self, idx: int) -> str:
        return f"{self.path} block {idx}"

    # -- loading --------------------------------------------------------------------------------
    def install(self, idx: int, payload: bytes | memoryview, where: str) -> None:
        """Copy one verified, uncompressed block payload into place and fill its entry arrays."""
        meta = self.meta
        usize = int(meta.usizes[idx])
        n = int(meta.key_counts[idx])
        if len(payload) != usize:
            raise DataCorruption(f"{where}: block is {len(payload)} bytes, the index says {usize}")
        base = int(self.ubase[idx])
        buf = self.buf
        buf[base : base + usize] = np.frombuffer(payload, np.uint8)
        head = 4 + 8 * (n + 1) + 2 * n
        if usize < head or struct.unpack_from("<I", payload, 0)[0] != n:
            raise DataCorruption(f"{where}: key count differs from the index")
        ko = buf[base + 4 : base + 4 + 4 * (n + 1)].view("<u4").astype(np.int64)
        vo = buf[base + 4 + 4 * (n + 1) : base + 4 + 8 * (n + 1)].view("<u4").astype(np.int64)
        kb = base + head
        if (
            ko[0] != 0
            or vo[0] != 0
            or head + ko[-1] + vo[-1] != usize
            or (n and (np.any(np.diff(ko) < 0) or np.any(np.diff(vo) < 0)))
        ):
            raise DataCorruption(f"{where}: block layout is inconsistent")
        e0 = int(self.ebase[idx])
        self.keys.starts[e0 : e0 + n] = kb + ko[:-1]
        self.keys.lens[e0 : e0 + n] = np.diff(ko)
        vb = kb + int(ko[-1])
        self.vstart[e0 : e0 + n] = vb + vo[:-1]
        self.vlen[e0 : e0 + n] = np.diff(vo)
        self.flens[e0 : e0 + n] = buf[base + 4 + 8 * (n + 1) : kb].view("<u2")

    def ensure(self, blocks: Sequence[int] | np.ndarray, read: Callable[[int, int], bytes]) -> int:
        """Load the given blocks that are not loaded yet; `read(offset, length)` returns bytes of
        the SST object. Consecutive blocks are read with one call. Returns how many were loaded."""
        want = np.unique(np.asarray(blocks, np.int64))
        if not len(want):
            return 0
        missing = want[~self.loaded[want]]
        if not len(missing):
            return 0
        with self._lock:
            missing = missing[~self.loaded[missing]]
            if not len(missing):
                return 0
            meta = self.meta
            # runs of consecutive block numbers, each read with one range request
            breaks = np.flatnonzero(np.diff(missing) != 1) + 1
            for run in np.split(missing, breaks):  # one iteration per run of blocks
                first, last = int(run[0]), int(run[-1])
                start = int(meta.offsets[first])
                end = int(meta.offsets[last] + meta.lengths[last])
                raw = memoryview(read(start, end - start))
                if len(raw) != end - start:
                    raise DataCorruption(f"{self.where(first)}: block is cut off (object truncated)")
                for b in run.tolist():  # per block: checksum and decompression are C calls
                    at = int(meta.offsets[b]) - start
                    where = self.where(b)
                    self.install(
                        b, block_body(raw[at : at + int(meta.lengths[b])], where, meta.version), where
                    )
            self.loaded[missing] = True
            self.loaded_bytes += int(meta.usizes[missing].sum())
            return len(missing)

    def make_searchable(self, blocks: np.ndarray) -> None:
        """Compute the search words of loaded blocks that have none yet (scans never need them)."""
        todo = np.unique(blocks)
        todo = todo[~self.searchable[todo]]
        if len(todo):
            with self._lock:
                todo = todo[~self.searchable[todo]]
                self.keys.fill(todo)
                self.searchable[todo] = True

    # -- views ----------------------------------------------------------------------------------
    def block(self, idx: int) -> Block:
        """Block `idx` (loaded) as Arrow views over the buffer."""
        b = self._views.get(idx)
        if b is None:
            if not self.loaded[idx]:
                raise RuntimeError("block not loaded")
            b = Block(self.batch(int(self.ebase[idx]), int(self.ebase[idx + 1])), int(self.meta.usizes[idx]))
            self._views[idx] = b
        return b

    def batch(self, lo: int, hi: int) -> KvBatch:
        """Entries [lo, hi) of one block as a KvBatch viewing the buffer."""
        n = hi - lo
        if n == 0:
            return KvBatch.empty()
        ks, kl = self.keys.starts[lo:hi], self.keys.lens[lo:hi]
        vs, vl = self.vstart[lo:hi], self.vlen[lo:hi]
        k0, v0 = int(ks[0]), int(vs[0])
        kend, vend = int(ks[-1] + kl[-1]), int(vs[-1] + vl[-1])
        koffs = np.append(ks - k0, kend - k0).astype(np.int32)
        voffs = np.append(vs - v0, vend - v0).astype(np.int32)
        keys = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(koffs), pa.py_buffer(self.buf[k0:kend])]
        )
        values = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(voffs), pa.py_buffer(self.buf[v0:vend])]
        )
        return KvBatch(keys, values, self.flens[lo:hi])
