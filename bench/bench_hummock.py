"""Hummock vs RocksDB (through rocksdict), side by side on the same keys and values.

N random 16-byte keys with random 100-byte values (the Hummock user key is
``user_key(table_id=1, vnode=0, key)``; RocksDB stores the 16 bytes as they are). Hummock runs on
the embedded default: a local-directory object store and a SQLite meta store in a temp dir.

Measured, before and after a full compaction (`compact_until_idle` / `compact_range`):

- batched ingest: per 100K keys, Hummock builds and sorts a KvBatch, `write_batch` + `sync` +
  `commit_epoch`; RocksDB fills a `WriteBatch` and writes it;
- warm point gets of 100K random existing keys (caches warmed first), one `get` at a time and as
  one batch: Hummock's `multi_get_columns` (keys as an Arrow binary array, values back as one)
  against RocksDB's `multi_get` (list of bytes) *and* its `get` loop; Hummock gets pass
  ``filter_len=16`` so the Bloom filters are used;
- cold point gets: a fresh `SstableStore` (empty meta and block caches; the SST files stay in
  the OS page cache) / RocksDB reopened, one at a time and as one batch;
- an ordered full scan and a range scan over ~10% of the keys (rows/s);
- the batched gets' rates from CPU time as well (the machine may be shared; targets are judged
  on wall time);
- write, space and read amplification.

    .venv/bin/python bench/bench_hummock.py [--keys 1000000] [--batch 100000] [--gets 100000]
        [--block-cache-mb N]   (default: room for the whole data set, at least 256 MiB)

Needs the `bench` extra (rocksdict): ``make bench`` installs it from uv.lock.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from piestream.encoding.keys import EPOCH_LEN, encode_epoch, user_key
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.storage.hummock.compaction import CompactionConfig
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.sstable import DEFAULT_BLOCK_SIZE, FORMAT_VERSION, POINT_LOOKUP_BLOCK_SIZE
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage, StorageOptions
from piestream.storage.hummock.version import HummockVersion
from piestream.storage.object_store import LocalObjectStore

KEY_LEN = 16
VALUE_LEN = 100
TABLE_ID = 1
PREFIX = user_key(TABLE_ID, 0, b"")  # table 1, vnode 0
FILTER_LEN = KEY_LEN
FIRST_EPOCH = 1_000_000 << 16


# --- data ------------------------------------------------------------------------------------------


@dataclass
class Data:
    keys: np.ndarray  # (n, 16) uint8, unique
    values: np.ndarray  # (n, 100) uint8

    @property
    def n(self) -> int:
        return len(self.keys)

    @property
    def logical_bytes(self) -> int:
        return self.n * (KEY_LEN + VALUE_LEN)

    def key_bytes(self, idx: np.ndarray) -> list[bytes]:
        return [bytes(r) for r in self.keys[idx]]


def make_data(n: int, seed: int) -> Data:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 256, (n, KEY_LEN), dtype=np.uint8)
    # 16 random bytes collide with negligible probability; make sure anyway
    _, first = np.unique(keys.view(f"V{KEY_LEN}").ravel(), return_index=True)
    if len(first) != n:
        keys = keys[np.sort(first)]
        n = len(keys)
    values = rng.integers(0, 256, (n, VALUE_LEN), dtype=np.uint8)
    return Data(keys, values)


def fixed_binary(matrix: np.ndarray) -> pa.Array:
    """An Arrow binary array over the rows of a (n, w) uint8 matrix (one copy, no Python objects)."""
    n, w = matrix.shape
    offsets = np.arange(0, (n + 1) * w, w, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(matrix))]
    )


def hummock_batch(data: Data, lo: int, hi: int, epoch: int) -> KvBatch:
    """Full keys ``prefix | key | inverted epoch`` and Put values of rows [lo, hi), sorted."""
    n = hi - lo
    fk = np.empty((n, len(PREFIX) + KEY_LEN + EPOCH_LEN), np.uint8)
    fk[:, : len(PREFIX)] = np.frombuffer(PREFIX, np.uint8)
    fk[:, len(PREFIX) : len(PREFIX) + KEY_LEN] = data.keys[lo:hi]
    fk[:, len(PREFIX) + KEY_LEN :] = np.frombuffer(encode_epoch(epoch), np.uint8)
    vals = np.empty((n, 1 + VALUE_LEN), np.uint8)
    vals[:, 0] = 0  # Put
    vals[:, 1:] = data.values[lo:hi]
    return KvBatch(fixed_binary(fk), fixed_binary(vals), np.full(n, FILTER_LEN, np.uint16)).sorted()


# --- measurement helpers ---------------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def cpu_timed(fn: Callable[[], object]) -> float:
    """CPU seconds of this thread (both systems read in the calling thread): on a shared, loaded
    machine wall time also counts time spent preempted."""
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def proc_wchar() -> int:
    """Bytes this process passed to write() so far (all threads: RocksDB's flushes and compactions)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class CountingStore(LocalObjectStore):
    """A local object store that counts the bytes written through it."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.bytes_put = 0

    def put(self, path: str, data: bytes) -> None:
        self.bytes_put += len(data)
        super().put(path, data)


@contextmanager
def count_block_reads(ss: SstableStore) -> Iterator[list[int]]:
    """Count `SstableStore.block` calls (data blocks a read touched, cached or not)."""
    calls = [0]
    orig = ss.block

    def counted(sst: object, idx: int) -> object:
        calls[0] += 1
        return orig(sst, idx)  # type: ignore[arg-type]

    ss.block = counted  # type: ignore[method-assign, assignment]
    try:
        yield calls
    finally:
        del ss.block


def ssts_per_get(version: HummockVersion, ukeys: list[bytes]) -> float:
    """Read amplification from the version's shape: SSTs whose key range holds the key, per get
    (every L0 SST covering it, at most one per level below); Bloom filters then skip most."""
    total = 0
    for uk in ukeys:
        total += sum(s.smallest_user_key <= uk <= s.largest_user_key for lv in version.l0 for s in lv.ssts)
        total += sum(len(lv.ssts_for_user_key(uk)) for lv in version.levels)
    return total / max(len(ukeys), 1)


# --- the two systems -------------------------------------------------------------------------------


class Hummock:
    def __init__(self, root: Path, data: Data, block_cache_bytes: int, block_size: int) -> None:
        self.data = data
        self.store = CountingStore(root / "objects")
        self.meta = MetaStore(root / "meta.sqlite")
        self.block_cache_bytes = block_cache_bytes
        self.ss = SstableStore(self.store, block_cache_bytes=block_cache_bytes)
        # the bench's table block size (--block-size): a per-table storage option
        sizes = ((TABLE_ID, block_size),)
        self.mgr = HummockManager(self.meta, self.ss, CompactionConfig(table_block_sizes=sizes))
        self.hs = HummockStorage(self.ss, self.mgr.version, StorageOptions(table_block_sizes=sizes))
        self.epoch = FIRST_EPOCH

    def ingest(self, batch: int) -> None:
        for lo in range(0, self.data.n, batch):
            hi = min(lo + batch, self.data.n)
            kv = hummock_batch(self.data, lo, hi, self.epoch)
            self.hs.write_batch(kv, self.epoch)
            ssts = self.hs.sync(self.epoch)
            self.mgr.commit_epoch(self.epoch, ssts)
            self.hs.update_version(self.mgr.version)
            self.epoch += 1 << 16

    def ukeys(self, idx: np.ndarray) -> list[bytes]:
        return [PREFIX + k for k in self.data.key_bytes(idx)]

    def gets(self, hs: HummockStorage, ukeys: list[bytes]) -> int:
        found = 0
        get = hs.get
        for k in ukeys:
            if get(k, filter_len=FILTER_LEN) is not None:
                found += 1
        return found

    def key_column(self, idx: np.ndarray) -> pa.Array:
        """User keys as an Arrow binary column (the form state tables pass)."""
        fk = np.empty((len(idx), len(PREFIX) + KEY_LEN), np.uint8)
        fk[:, : len(PREFIX)] = np.frombuffer(PREFIX, np.uint8)
        fk[:, len(PREFIX) :] = self.data.keys[idx]
        return fixed_binary(fk)

    def multi_get(self, hs: HummockStorage, keys: pa.Array) -> int:
        found, _ = hs.multi_get_columns(keys, filter_lens=np.full(len(keys), FILTER_LEN, np.int64))
        return int(found.sum())

    def scan(self, hs: HummockStorage, lo: bytes | None, hi: bytes | None) -> int:
        return sum(len(b) for b in hs.iter(lo, hi))

    def cold(self) -> HummockStorage:
        return HummockStorage(
            SstableStore(self.store, block_cache_bytes=self.block_cache_bytes), self.mgr.version
        )

    def compact(self) -> int:
        n = self.mgr.compact_until_idle()
        self.hs.update_version(self.mgr.version)
        self.mgr.vacuum()
        return n

    def stored_bytes(self) -> int:
        return sum(m.size for m in self.store.list("hummock/sst/"))


class Rocks:
    def __init__(self, root: Path, data: Data) -> None:
        from rocksdict import Options, Rdict

        self.data = data
        self.path = str(root / "rocksdb")
        self.opts = Options(raw_mode=True)
        self.db = Rdict(self.path, self.opts)
        self._Rdict = Rdict
        self.keys = data.key_bytes(np.arange(data.n))
        self.values = [bytes(r) for r in data.values]
        self.wchar = 0

    def ingest(self, batch: int) -> None:
        from rocksdict import WriteBatch

        w0 = proc_wchar()
        keys, values = self.keys, self.values
        for lo in range(0, self.data.n, batch):
            wb = WriteBatch(raw_mode=True)
            put = wb.put
            for i in range(lo, min(lo + batch, self.data.n)):
                put(keys[i], values[i])
            self.db.write(wb)
        self.wchar += proc_wchar() - w0

    def gets(self, keys: list[bytes]) -> int:
        db = self.db
        found = 0
        for k in keys:
            if db[k] is not None:
                found += 1
        return found

    def multi_get(self, keys: list[bytes]) -> int:
        values: list[bytes | None] = self.db.get(keys)  # type: ignore[arg-type,assignment]  # rocksdict: get(list) returns a list
        return sum(v is not None for v in values)

    def scan(self, lo: bytes | None, hi: bytes | None) -> int:
        n = 0
        it = self.db.items(from_key=lo) if lo is not None else self.db.items()
        for k, _ in it:
            assert isinstance(k, bytes)
            if hi is not None and k >= hi:
                break
            n += 1
        return n

    def block_size(self) -> str:
        """The table block size RocksDB runs with, from the OPTIONS file it writes at open."""
        opts = sorted(Path(self.path).glob("OPTIONS-*"))
        for line in opts[-1].read_text().splitlines() if opts else []:
            if line.strip().startswith("block_size="):
                return f"{int(line.split('=', 1)[1]):,} B"
        return "unknown"

    def reopen(self) -> None:
        self.db.close()
        self.db = self._Rdict(self.path, self.opts)

    def compact(self) -> None:
        w0 = proc_wchar()
        self.db.flush()
        self.db.compact_range(None, None)
        self.wchar += proc_wchar() - w0

    def sst_bytes(self) -> int:
        return int(self.db.property_int_value("rocksdb.total-sst-files-size") or 0)

    def close(self) -> None:
        self.db.close()


# --- the run ---------------------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    ours: float
    theirs: float | None
    unit: str
    target: str = ""
    met: bool | None = None


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def add(self, *args: object, **kw: object) -> None:
        self.rows.append(Row(*args, **kw))  # type: ignore[arg-type]

    def print(self) -> None:
        head = f"{'measure':<44} {'piestream':>14} {'RocksDB':>14} {'ratio':>7}  {'unit':<8} target"
        print(head)
        print("-" * len(head) + "-" * 22)
        for r in self.rows:
            theirs = (
                f"{r.theirs:>14,.2f}"
                if r.theirs is not None and r.theirs < 100
                else (f"{r.theirs:>14,.0f}" if r.theirs is not None else f"{'-':>14}")
            )
            ours = f"{r.ours:>14,.2f}" if r.ours < 100 else f"{r.ours:>14,.0f}"
            ratio = f"{r.ours / r.theirs:>7.2f}" if r.theirs else f"{'':>7}"
            verdict = "" if r.met is None else (" MET" if r.met else " MISSED")
            print(f"{r.label:<44} {ours} {theirs} {ratio}  {r.unit:<8} {r.target}{verdict}")


def read_phase(
    rep: Report, phase: str, hum: Hummock, rocks: Rocks, data: Data, gets: int, rng: np.random.Generator
) -> None:
    n = data.n
    idx = rng.choice(n, min(gets, n), replace=False)
    ukeys, rkeys = hum.ukeys(idx), data.key_bytes(idx)
    m = len(idx)

    # warm point gets: one pass to fill caches, then the measured pass
    hum.gets(hum.hs, ukeys)
    rocks.gets(rkeys)
    with count_block_reads(hum.ss) as blocks:
        t_h, found = timed(lambda: hum.gets(hum.hs, ukeys))
    assert found == m, f"hummock found {found} of {m}"
    t_r, found = timed(lambda: rocks.gets(rkeys))
    assert found == m
    rep.add(
        f"[{phase}] warm get (single-key loop)",
        m / t_h,
        m / t_r,
        "ops/s",
        ">= 0.5x RocksDB",
        (m / t_h) / (m / t_r) >= 0.5,
    )
    kcol = hum.key_column(idx)
    t_h = min(timed(lambda: hum.multi_get(hum.hs, kcol))[0] for _ in range(3))
    assert hum.multi_get(hum.hs, kcol) == m
    t_rm = min(timed(lambda: rocks.multi_get(rkeys))[0] for _ in range(3))
    assert rocks.multi_get(rkeys) == m
    ahead = t_h < t_rm and t_h < t_r
    rep.add(
        f"[{phase}] warm multi_get ({m:,} keys) vs multi_get",
        m / t_h,
        m / t_rm,
        "keys/s",
        ">= 2M keys/s, ahead of both",
        m / t_h >= 2e6 and ahead,
    )
    rep.add(f"[{phase}] warm multi_get ({m:,} keys) vs get loop", m / t_h, m / t_r, "keys/s")
    c_h = min(cpu_timed(lambda: hum.multi_get(hum.hs, kcol)) for _ in range(3))
    c_r = min(cpu_timed(lambda: rocks.multi_get(rkeys)) for _ in range(3))
    rep.add(f"[{phase}] warm multi_get, rate from CPU time", m / c_h, m / c_r, "keys/s")
    rep.add(
        f"[{phase}] read amp: SSTs covering key / get",
        ssts_per_get(hum.mgr.version, ukeys[:2000]),
        None,
        "SSTs",
    )
    rep.add(f"[{phase}] read amp: data blocks read / get", blocks[0] / m, None, "blocks")

    # cold point gets: fresh caches / a reopened RocksDB
    cidx = rng.choice(n, min(gets, n), replace=False)
    cu, cr = hum.ukeys(cidx), data.key_bytes(cidx)
    cold = hum.cold()
    t_h, found = timed(lambda: hum.gets(cold, cu))
    assert found == len(cidx)
    rocks.reopen()
    t_r, found = timed(lambda: rocks.gets(cr))
    assert found == len(cidx)
    rep.add(f"[{phase}] cold get (fresh caches / reopened)", len(cidx) / t_h, len(cidx) / t_r, "ops/s")
    bidx = rng.choice(n, min(gets, n), replace=False)
    bcol, br = hum.key_column(bidx), data.key_bytes(bidx)
    cold = hum.cold()
    c0 = time.thread_time()
    t_h, found = timed(lambda: hum.multi_get(cold, bcol))
    c_h = time.thread_time() - c0
    assert found == len(bidx)
    rocks.reopen()
    c0 = time.thread_time()
    t_r, found = timed(lambda: rocks.multi_get(br))
    c_r = time.thread_time() - c0
    assert found == len(bidx)
    rep.add(
        f"[{phase}] cold multi_get (fresh caches / reopened)",
        len(bidx) / t_h,
        len(bidx) / t_r,
        "keys/s",
        ">= 500K keys/s",
        len(bidx) / t_h >= 5e5,
    )
    rep.add(f"[{phase}] cold multi_get, rate from CPU time", len(bidx) / c_h, len(bidx) / c_r, "keys/s")

    # scans
    t_h, rows = timed(lambda: hum.scan(hum.hs, None, None))
    assert rows == n, rows
    t_r, rrows = timed(lambda: rocks.scan(None, None))
    assert rrows == n
    rep.add(f"[{phase}] full scan", n / t_h, n / t_r, "rows/s", ">= 3M rows/s", n / t_h >= 3e6)
    order = np.lexsort(data.keys.T[::-1])
    lo_k, hi_k = bytes(data.keys[order[int(n * 0.45)]]), bytes(data.keys[order[int(n * 0.55)]])
    t_h, rows = timed(lambda: hum.scan(hum.hs, PREFIX + lo_k, PREFIX + hi_k))
    t_r, rrows = timed(lambda: rocks.scan(lo_k, hi_k))
    assert rows == rrows == int(n * 0.55) - int(n * 0.45), (rows, rrows)
    rep.add(
        f"[{phase}] range scan ({rows:,} rows)",
        rows / t_h,
        rows / t_r,
        "rows/s",
        ">= 3M rows/s",
        rows / t_h >= 3e6,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000, help="number of keys (default 1M)")
    ap.add_argument("--batch", type=int, default=100_000, help="keys per ingest batch / epoch")
    ap.add_argument("--gets", type=int, default=100_000, help="point gets per measurement")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--block-cache-mb", type=int, default=0, help="block cache (default: fits the data)")
    ap.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        help=f"block size of the bench's table (default {DEFAULT_BLOCK_SIZE:,}, what every table gets "
        f"today; {POINT_LOOKUP_BLOCK_SIZE:,} is the small point-lookup size a table may be given)",
    )
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-hummock-", dir=args.dir))
    rng = np.random.default_rng(args.seed + 1)
    try:
        t0 = time.perf_counter()
        data = make_data(args.keys, args.seed)
        print(
            f"{data.n:,} keys of {KEY_LEN} B, values of {VALUE_LEN} B, batches of {args.batch:,}; "
            f"logical {data.logical_bytes / 2**20:,.1f} MiB; work dir {work}"
        )
        cache_mb = args.block_cache_mb or max(256, int(data.logical_bytes * 2.5) >> 20)
        print(f"block cache {cache_mb:,} MiB (decoded blocks); RocksDB with rocksdict defaults")
        hum = Hummock(work / "hummock", data, cache_mb << 20, args.block_size)
        rocks = Rocks(work, data)
        print(
            f"SST block size {args.block_size:,} B for the bench's table (point-lookup tables' size; "
            f"other tables {DEFAULT_BLOCK_SIZE:,} B); RocksDB block size {rocks.block_size()}"
        )
        print(
            f"SST format version {FORMAT_VERSION} (search words stored, xxh3 block checksums); "
            "SSTs of the local object store are memory-mapped: a cold read verifies the blocks it "
            "searches where they lie in the OS page cache, with no copy"
        )
        rep = Report()
        hummock_batch(data, 0, min(10, data.n), FIRST_EPOCH)  # warm up: first-call imports stay untimed

        t_h, _ = timed(lambda: hum.ingest(args.batch))
        t_r, _ = timed(lambda: rocks.ingest(args.batch))
        ingest_bytes = hum.store.bytes_put
        rep.add(
            "batched ingest (write+sync+commit / WriteBatch)",
            data.n / t_h,
            data.n / t_r,
            "kv/s",
            ">= 1M kv/s",
            data.n / t_h >= 1e6,
        )
        v = hum.mgr.version
        print(f"after ingest: L0 sub-levels={len(v.l0)}, SSTs={len(v.all_ssts())}")

        read_phase(rep, "before compaction", hum, rocks, data, args.gets, rng)

        t_h, tasks = timed(hum.compact)
        t_r, _ = timed(rocks.compact)
        rep.add("full compaction (compact_until_idle / range)", t_h, t_r, "seconds")
        v = hum.mgr.version
        shape = {f"L{lv.level_idx}": len(lv.ssts) for lv in v.levels if lv.ssts}
        print(f"after compaction: {tasks} tasks, L0 sub-levels={len(v.l0)}, SSTs per level={shape}")
        metas = [hum.ss.meta(s) for s in v.all_ssts()]
        print(
            f"SSTs with one key width / one value width (format 4: point lookups place entries by "
            f"arithmetic): {sum(m.key_width > 0 for m in metas)} / {sum(m.value_width > 0 for m in metas)} "
            f"of {len(metas)}"
        )

        read_phase(rep, "after compaction", hum, rocks, data, args.gets, rng)

        logical = data.logical_bytes
        rep.add("write amp, ingest only (bytes written / logical)", ingest_bytes / logical, None, "x")
        rep.add(
            "write amp, ingest + compaction",
            hum.store.bytes_put / logical,
            rocks.wchar / logical if rocks.wchar >= 0 else None,
            "x",
        )
        space = hum.stored_bytes() / logical
        rep.add(
            "space amp after compaction (stored / logical)",
            space,
            rocks.sst_bytes() / logical,
            "x",
            "<= 1.5",
            space <= 1.5,
        )
        rep.add(
            "meta store file (SQLite)",
            dir_bytes(work / "hummock") - dir_bytes(work / "hummock" / "objects"),
            None,
            "bytes",
        )
        rocks.close()
        print()
        rep.print()
        print(
            f"\n(RocksDB write amp = bytes this process passed to write(): WAL + flush + compaction; "
            f"total run {time.perf_counter() - t0:.1f} s)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    main()
