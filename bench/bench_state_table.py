"""Throughput of the relational table layer: StateTable writes, point gets and scans.

Write: `write_chunk` of N rows (id BIGINT pk, name VARCHAR 5-20 chars, amount BIGINT, ts
TIMESTAMP) in chunks of 10K rows, a barrier (`commit` -> `sync` -> `commit_epoch` ->
`update_version`) every `--epoch-rows` rows, over a local-directory object store in a temp dir.
Read: `get_row` of random existing pks on the warm (compacted, cached) table, `get_rows` of
whole pk columns, prefix scans of a (grp BIGINT, id BIGINT) table on `grp`, and full scans.

    .venv/bin/python bench/bench_state_table.py [--rows N] [--gets N] [--profile write|get]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.order import ASC
from piestream.common.types import BIGINT, TIMESTAMP, VARCHAR
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.storage.hummock import HummockStorage, SstableStore
from piestream.storage.object_store import open_object_store
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.state_table import StateTable
from piestream.storage.table.storage_table import StorageTable

CHUNK_ROWS = 10_000
TARGET_WRITE = 500_000  # end to end, with SST upload and commit
TARGET_WRITE_COMMIT = 1_000_000  # write_chunk + commit (MemTable -> shared buffer), issue 11
TARGET_GET = 200_000  # one get_row at a time
TARGET_GET_ROWS = 1_000_000  # batched get_rows, issue 11
TARGET_SCAN = 3_000_000  # ordered scans, issue 11

WIDE = TableDesc(
    1,
    (
        ColumnDesc("id", BIGINT),
        ColumnDesc("name", VARCHAR),
        ColumnDesc("amount", BIGINT),
        ColumnDesc("ts", TIMESTAMP),
    ),
    pk=(0,),
    pk_orders=(ASC,),
    dist_key=(0,),
    read_prefix_len_hint=1,
    name="bench_wide",
)
GROUPED = TableDesc(
    2,
    (ColumnDesc("grp", BIGINT), ColumnDesc("id", BIGINT), ColumnDesc("v", BIGINT)),
    pk=(0, 1),
    pk_orders=(ASC, ASC),
    dist_key=(0,),
    read_prefix_len_hint=1,
    name="bench_grouped",
)


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def wide_chunk(start: int, n: int, rng: np.random.Generator) -> StreamChunk:
    ids = pa.array(np.arange(start, start + n, dtype=np.int64) * 7919 % (1 << 40))  # unique, unordered
    lens = rng.integers(5, 21, n, dtype=np.int64)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    names = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])
    amounts = pa.array(rng.integers(0, 1_000_000, n, dtype=np.int64))
    base = 1_704_067_200_000_000
    ts = pa.array(base + rng.integers(0, 365 * 86_400_000_000, n, dtype=np.int64), pa.timestamp("us"))
    return StreamChunk(np.ones(n, np.int8), [ids, names, amounts, ts])


def wide_ids(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) * 7919 % (1 << 40)


def grouped_chunk(start: int, n: int, groups: int) -> StreamChunk:
    i = np.arange(start, start + n, dtype=np.int64)
    return StreamChunk(np.ones(n, np.int8), [pa.array(i % groups), pa.array(i), pa.array(i * 3)])


# ---------------------------------------------------------------------------------------------
# harness
# ---------------------------------------------------------------------------------------------


class Env:
    def __init__(self, root: Path) -> None:
        self.sstables = SstableStore(open_object_store(str(root / "objects")))
        self.manager = HummockManager(MetaStore(str(root / "meta.db")), self.sstables)
        self.storage = HummockStorage(self.sstables, self.manager.version)
        self.epoch = 1 << 16

    def table(self, desc: TableDesc) -> StateTable:
        t = StateTable(desc, self.storage)
        t.init_epoch(EpochPair.initial(self.epoch))
        return t

    def barrier(
        self, t: StateTable, commit_clock: Clock | None = None, sync_clock: Clock | None = None
    ) -> None:
        """commit (MemTable -> shared buffer) -> sync (SSTs uploaded) -> commit_epoch -> update_version."""
        cur, nxt = self.epoch, self.epoch + (1 << 16)
        with commit_clock or Clock():
            t.commit(EpochPair(nxt, cur))
        with sync_clock or Clock():
            ssts = self.storage.sync(cur)
            self.manager.commit_epoch(
                cur, ssts, [t.desc.table_id], new_watermarks=self.storage.take_table_watermarks()
            )
            self.storage.update_version(self.manager.version)
        self.epoch = nxt


class Clock:
    """Wall and CPU seconds of a block (CPU seconds show the cost on a shared, loaded machine)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c


def line(label: str, n: int, clk: Clock, target: float | None = None, unit: str = "rows/s") -> None:
    rate = n / clk.wall if clk.wall > 0 else float("inf")
    cpu_rate = n / clk.cpu if clk.cpu > 0 else float("inf")
    tgt = ""
    if target is not None:
        tgt = f"  target >= {target:>9,.0f} {'OK' if rate >= target else 'MISS'}"
    print(f"{label:<44} {rate:>11,.0f} {unit:<6} cpu {cpu_rate:>11,.0f}  ({clk.wall:6.2f} s, {n:,}){tgt}")


def timed(fn: Callable[[], object]) -> Clock:
    with Clock() as c:
        fn()
    return c


# ---------------------------------------------------------------------------------------------
# phases
# ---------------------------------------------------------------------------------------------


def write_phase(env: Env, t: StateTable, chunks: list[StreamChunk], epoch_rows: int) -> dict[str, Clock]:
    clocks = {"write_chunk": Clock(), "commit": Clock(), "sync": Clock(), "total": Clock()}
    since = 0
    with clocks["total"]:
        for i, c in enumerate(chunks):
            with clocks["write_chunk"]:
                t.write_chunk(c)
            since += c.cardinality
            if since >= epoch_rows or i == len(chunks) - 1:
                env.barrier(t, clocks["commit"], clocks["sync"])
                since = 0
    return clocks


def get_phase(t: StateTable, n_rows: int, gets: int) -> tuple[Clock, Clock]:
    rng = np.random.default_rng(7)
    ids = wide_ids(n_rows)[rng.integers(0, n_rows, gets)].tolist()
    for i in ids[: min(gets, 20_000)]:  # warm the caches
        t.get_row((i,))

    def run() -> None:
        for i in ids:
            if t.get_row((i,)) is None:
                raise AssertionError(f"missing pk {i}")

    c_get = timed(run)
    col = pa.array(ids, pa.int64())

    def vec() -> None:
        for s in range(0, gets, CHUNK_ROWS):
            found, _ = t.get_rows([col.slice(s, CHUNK_ROWS)])
            if not found.all():
                raise AssertionError("get_rows missed existing pks")

    c_vec = timed(vec)
    return c_get, c_vec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows written (and scanned)")
    ap.add_argument("--gets", type=int, default=100_000, help="point gets")
    ap.add_argument("--epoch-rows", type=int, default=100_000, help="rows per barrier")
    ap.add_argument("--groups", type=int, default=1_000, help="groups of the prefix-scan table")
    ap.add_argument("--profile", choices=["write", "get", "scan"], help="cProfile one phase, print the top")
    ap.add_argument("--top", type=int, default=25, help="profile lines")
    args = ap.parse_args()
    n = args.rows
    gets = min(args.gets, max(n, 1))
    # CPU-time profile: on a shared machine wall time also counts time spent preempted
    prof = cProfile.Profile(time.process_time) if args.profile else None

    def profiling(phase: str) -> cProfile.Profile | contextlib.nullcontext[None]:
        return prof if prof is not None and args.profile == phase else contextlib.nullcontext()

    with tempfile.TemporaryDirectory(prefix="piestream-bench-") as tmp:
        env = Env(Path(tmp))
        print(f"rows={n:,}  chunk={CHUNK_ROWS:,}  rows/epoch={args.epoch_rows:,}  object store: local dir")
        print("(rates from wall time; 'cpu' = rate from this process's CPU time)")

        # -- write ------------------------------------------------------------------------------
        rng = np.random.default_rng(42)
        chunks = [wide_chunk(s, min(CHUNK_ROWS, n - s), rng) for s in range(0, n, CHUNK_ROWS)]
        wide = env.table(WIDE)
        with profiling("write"):
            clocks = write_phase(env, wide, chunks, args.epoch_rows)
        del chunks
        line("write: write_chunk", n, clocks["write_chunk"])
        line("write: commit (MemTable -> shared buffer)", n, clocks["commit"])
        both = Clock()
        both.wall = clocks["write_chunk"].wall + clocks["commit"].wall
        both.cpu = clocks["write_chunk"].cpu + clocks["commit"].cpu
        line("write: write_chunk + commit", n, both, TARGET_WRITE_COMMIT)
        line("write: sync + commit_epoch + update_version", n, clocks["sync"])
        line("write: end to end", n, clocks["total"], TARGET_WRITE)

        c = timed(env.manager.compact_until_idle)
        env.storage.update_version(env.manager.version)
        left = len(env.manager.version.l0)
        print(f"{'compaction until idle':<44} {c.wall:>9.2f} s   (L0 sub-levels left: {left})")

        # -- point gets -------------------------------------------------------------------------
        with profiling("get"):
            c_get, c_vec = get_phase(wide, n, gets)
        line("get_row, warm, random existing pks", gets, c_get, TARGET_GET, "gets/s")
        line("get_rows, 10K pks per call", gets, c_vec, TARGET_GET_ROWS, "gets/s")

        # -- scans ------------------------------------------------------------------------------
        grouped = env.table(GROUPED)
        since = 0
        for s in range(0, n, CHUNK_ROWS):
            grouped.write_chunk(grouped_chunk(s, min(CHUNK_ROWS, n - s), args.groups))
            since += CHUNK_ROWS
            if since >= args.epoch_rows:
                env.barrier(grouped)
                since = 0
        env.barrier(grouped)
        env.manager.compact_until_idle()
        env.storage.update_version(env.manager.version)
        groups = list(range(args.groups))

        def prefix_scan() -> int:
            return sum(ch.cardinality for g in groups for ch in grouped.iter_chunks_with_prefix((g,)))

        prefix_scan()  # warm the block cache
        with profiling("scan"):
            with Clock() as c:
                got = prefix_scan()
            assert got == n, (got, n)
            line(f"prefix scan of {args.groups} groups (chunks)", got, c, TARGET_SCAN)
            few = groups[:50]
            with Clock() as c:
                got = sum(1 for g in few for _ in grouped.iter_with_prefix((g,)))
            line(f"prefix scan of {len(few)} groups (row tuples)", got, c)
            with Clock() as c:
                got = sum(ch.cardinality for ch in grouped.iter_chunks_with_prefix())
            assert got == n
            line("full scan, StateTable, 256 vnodes (chunks)", got, c, TARGET_SCAN)
            committed = env.epoch - (1 << 16)
            reader = HummockStorage(env.sstables, env.manager.version)
            with Clock() as c:
                got = sum(ch.cardinality for ch in StorageTable(GROUPED, reader, committed).scan_vnodes())
            assert got == n
            line("full scan, StorageTable.scan_vnodes (chunks)", got, c, TARGET_SCAN)
            with Clock() as c:
                got = sum(ch.cardinality for ch in StorageTable(WIDE, reader, committed, [1]).scan_vnodes())
            assert got == n
            line("full scan, StorageTable, wide, 1 of 4 columns", got, c, TARGET_SCAN)

        if prof is not None:
            out = io.StringIO()
            stats = pstats.Stats(prof, stream=out)
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
            print(out.getvalue())


if __name__ == "__main__":
    main()
