"""A stateful model test of HummockStorage + HummockManager.

The model is the plain list of every version ever written (user key, epoch with spill offset,
value or delete) plus which of them are committed. Rules drive the real system through writes,
barriers, syncs, commits, compactions, pins, vacuum, full GC, recovery and restarts; after every
step reads through the real system must equal the model:

- the writer's own storage sees committed and uncommitted data (read-your-writes);
- a fresh reader on the manager's version sees exactly the committed data at every valid epoch;
- every pinned snapshot keeps reading what it read when it was pinned, whatever compaction did;
- every pinned version stays readable (vacuum never deletes what a pin references).

It runs on the in-memory store, a local directory and (shorter) a real S3 server (moto).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from piestream.common.epoch import MAX_EPOCH, pure_epoch
from piestream.encoding.keys import full_key, user_key
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.storage.hummock.compaction import CompactionConfig, pick_compaction
from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
from piestream.storage.hummock.sstable import COMPRESSION_LZ4
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage, StorageOptions, visible_bound, visible_pairs
from piestream.storage.hummock.version import HummockVersion, SstableInfo, object_id_of_path
from piestream.storage.object_store import InMemoryObjectStore, LocalObjectStore, ObjectStore, S3ObjectStore

FILTER_LEN = 2  # the whole 2-byte pk: gets use the Bloom filters
KEYS = [user_key(t, v, pk.to_bytes(2, "big")) for t in (1, 2) for v in (0, 3) for pk in range(0, 120, 5)]
CONFIG = CompactionConfig(
    max_bytes_for_level_base=1500,
    level_multiplier=2,
    level0_trigger_sub_levels=2,
    level0_max_sub_levels_per_task=3,
    target_file_size=900,
    compression=COMPRESSION_LZ4,
    block_size=400,
    table_block_sizes=((2, 90),),  # table 2 is a point-lookup table with tiny blocks
)
OPTIONS = StorageOptions(
    block_size=400, sstable_size=1200, bloom_bits_per_key=10, table_block_sizes=((2, 90),)
)

Entry = tuple[bytes, int, bytes | None]  # (user key, epoch with spill, row or None = delete)


def newest(entries: list[Entry], read_epoch: int) -> dict[bytes, bytes]:
    """What a read at `read_epoch` sees: per user key the newest entry at or below it, if a put."""
    bound = visible_bound(read_epoch)
    best: dict[bytes, tuple[int, bytes | None]] = {}
    for uk, e, v in entries:
        if e <= bound and (uk not in best or e > best[uk][0]):
            best[uk] = (e, v)
    return {uk: v for uk, (_, v) in sorted(best.items()) if v is not None}


def scan(
    hs: HummockStorage, read_epoch: int, lo: bytes | None = None, hi: bytes | None = None
) -> dict[bytes, bytes]:
    pairs = visible_pairs(hs.iter(lo, hi, read_epoch))
    assert [k for k, _ in pairs] == sorted({k for k, _ in pairs}), "scan output is sorted and unique"
    return dict(pairs)


@dataclass
class Stats:
    """What the runs exercised (asserted at the end, so the test cannot go vacuous)."""

    compactions: int = 0
    restarts: int = 0
    vacuumed: int = 0
    gc_deleted: int = 0
    snapshot_reads: int = 0
    deepest_level: int = 0
    max_l0: int = 0
    spill_reads: int = 0
    max_bottom: int = 0
    seen: set[str] = field(default_factory=set)


def make_machine(open_store: Callable[[], ObjectStore], stats: Stats) -> type[RuleBasedStateMachine]:
    class HummockModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tmp = Path(tempfile.mkdtemp(prefix="hummock-model-"))
            self.meta_path = self.tmp / "meta.sqlite"
            self.store = open_store()
            self.committed: list[Entry] = []
            self.uncommitted: list[Entry] = []
            self.cur = 1000 << 16  # the epoch writes go to
            self.spill = 0
            self.pending: list[tuple[int, list[SstableInfo]]] = []  # synced, not committed
            self.snapshots: list[tuple[int, int, dict[bytes, bytes]]] = []  # pin id, epoch, what it read
            self.pinned_versions: list[tuple[int, HummockVersion, dict[bytes, bytes]]] = []
            self.epochs_written: list[int] = []
            self._open()

        # -- setup ------------------------------------------------------------------------------
        def _open(self) -> None:
            self.meta = MetaStore(self.meta_path)
            self.sstables = SstableStore(self.store, meta_cache_bytes=1 << 20, block_cache_bytes=1 << 16)
            self.mgr = HummockManager(self.meta, self.sstables, CONFIG)
            self.hs_pin, version = self.mgr.pin_version()
            self.hs = HummockStorage(self.sstables, version, OPTIONS)

        def teardown(self) -> None:
            self.meta.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

        def committed_reader(self) -> HummockStorage:
            return HummockStorage(SstableStore(self.store), self.mgr.version, OPTIONS)

        def read_ok_epochs(self) -> list[int]:
            """Epochs a read may use: at or above the low watermark (a few of them, to stay fast)."""
            lw = self.mgr.low_watermark()
            ok = [e for e in self.epochs_written if e >= lw]
            return [*ok[:2], *ok[-3:], self.mgr.max_committed_epoch]

        # -- writes, barriers, commits ----------------------------------------------------------
        @initialize(
            ops=st.lists(
                st.tuples(st.integers(0, len(KEYS) - 1), st.binary(min_size=4, max_size=30)),
                max_size=len(KEYS),
            ),
            compact=st.booleans(),
        )
        def preload(self, ops: list[tuple[int, bytes]], compact: bool) -> None:
            """Start from some committed data, compacted to the bottom or still in L0."""
            self.write([(i, v) for i, v in ops])
            self.barrier(True)
            self.commit(True)
            if compact:
                self.compact_until_idle()

        @rule(
            ops=st.lists(
                st.tuples(st.integers(0, len(KEYS) - 1), st.one_of(st.none(), st.binary(max_size=24))),
                min_size=1,
                max_size=12,
            )
        )
        def write(self, ops: list[tuple[int, bytes | None]]) -> None:
            """One write (a MemTable flush or spill) at the current epoch's next spill offset."""
            e = self.cur | self.spill
            self.spill += 1
            latest = dict(ops)  # one entry per key in a batch
            pairs = [
                (full_key(KEYS[i], e), TOMBSTONE if v is None else put_value(v)) for i, v in latest.items()
            ]
            self.hs.write_batch(KvBatch.from_pairs(pairs, [FILTER_LEN] * len(pairs)), e)
            self.uncommitted += [(KEYS[i], e, v) for i, v in latest.items()]
            self.epochs_written.append(e)
            if self.spill > 1:
                stats.seen.add("spill")

        @rule(checkpoint=st.booleans())
        def barrier(self, checkpoint: bool) -> None:
            """Seal the current epoch; a checkpoint barrier also syncs everything sealed so far."""
            sealed = self.cur
            self.epochs_written.append(sealed)
            self.cur += 1 << 16
            self.spill = 0
            if checkpoint:
                ssts = self.hs.sync(sealed)
                self.pending.append((sealed, ssts))
                stats.seen.add("sync")

        @precondition(lambda self: bool(self.pending))
        @rule(refresh=st.booleans())
        def commit(self, refresh: bool) -> None:
            for e, ssts in self.pending:
                self.mgr.commit_epoch(e, ssts)
                done = [x for x in self.uncommitted if pure_epoch(x[1]) <= e]
                self.uncommitted = [x for x in self.uncommitted if pure_epoch(x[1]) > e]
                self.committed += done
            self.pending = []
            if refresh:
                self.refresh()

        @rule(
            batches=st.lists(
                st.lists(
                    st.tuples(st.integers(0, len(KEYS) - 1), st.one_of(st.none(), st.binary(max_size=24))),
                    min_size=1,
                    max_size=16,
                ),
                min_size=1,
                max_size=4,
            ),
            compact=st.booleans(),
        )
        def epochs(self, batches: list[list[tuple[int, bytes | None]]], compact: bool) -> None:
            """A few whole epochs: write, checkpoint, commit, refresh (the common streaming path),
            with the compactor keeping up or not."""
            for ops in batches:
                self.write(ops)
                self.barrier(True)
                self.commit(True)
                if compact:
                    self.compact_once()

        @rule(
            ops=st.lists(
                st.tuples(st.integers(0, len(KEYS) - 1), st.binary(max_size=8)), min_size=1, max_size=5
            )
        )
        def abandoned_attempt(self, ops: list[tuple[int, bytes]]) -> None:
            """Another attempt of a task uploads SSTs that are never committed (a retried Spark task):
            its objects are garbage for full GC, and never visible."""
            other = HummockStorage(self.sstables, self.mgr.version, OPTIONS)
            pairs = [(full_key(KEYS[i], self.cur), put_value(v)) for i, v in dict(ops).items()]
            other.write_batch(KvBatch.from_pairs(pairs, [FILTER_LEN] * len(pairs)), self.cur)
            assert other.sync(self.cur)

        @rule()
        def refresh(self) -> None:
            """Install the manager's newest version in the writer's storage (pinning it)."""
            pin, version = self.mgr.pin_version()
            self.hs.update_version(version)
            self.mgr.unpin_version(self.hs_pin)
            self.hs_pin = pin

        @rule()
        def recover_without_restart(self) -> None:
            """Drop uncommitted data (the epochs in flight are abandoned), keep the process."""
            self.hs.clear_uncommitted()
            self.refresh()
            self.uncommitted = []
            self.pending = []
            stats.seen.add("clear_uncommitted")

        # -- compaction, GC ---------------------------------------------------------------------
        @rule()
        def compact_once(self) -> None:
            if self.mgr.compact_once():
                stats.compactions += 1

        @rule()
        def compact_until_idle(self) -> None:
            stats.compactions += self.mgr.compact_until_idle()
            left = pick_compaction(self.mgr.version, CONFIG, task_id=0, watermark=self.mgr.low_watermark())
            assert left is None, "idle means the picker has nothing left"

        @rule()
        def vacuum(self) -> None:
            stats.vacuumed += self.mgr.vacuum()
            min_pinned = self.mgr.min_pinned_version_id()
            for (removed_in,) in self.meta.query("SELECT removed_in_version FROM hummock_stale_object"):
                assert int(str(removed_in)) > min_pinned, "vacuum left a deletable object"
            listed = self.listed_objects()
            for _, v, _ in self.pinned_versions:
                assert v.object_ids() <= listed, "vacuum deleted an object of a pinned version"
            assert self.hs.version.object_ids() <= listed

        @precondition(lambda self: not self.pending)
        @rule()
        def full_gc(self) -> None:
            """Full GC with no retention while nothing is in flight: only live objects remain."""
            stats.gc_deleted += self.mgr.full_gc(retention_sec=0)
            rows = self.meta.query("SELECT object_id FROM hummock_stale_object")
            stale = {int(str(r[0])) for r in rows}
            live = self.mgr.version.object_ids()
            listed = self.listed_objects()
            assert live <= listed
            assert listed <= live | stale, "full GC left an unreferenced object"

        # -- pins -------------------------------------------------------------------------------
        @precondition(lambda self: len(self.snapshots) < 3)
        @rule()
        def pin_snapshot(self) -> None:
            snap = self.mgr.pin_snapshot()
            assert snap.epoch == self.mgr.max_committed_epoch
            self.snapshots.append((snap.pin_id, snap.epoch, newest(self.committed, snap.epoch)))

        @precondition(lambda self: bool(self.snapshots))
        @rule(i=st.integers(0, 2))
        def unpin_snapshot(self, i: int) -> None:
            pin, _, _ = self.snapshots.pop(i % len(self.snapshots))
            self.mgr.unpin_snapshot(pin)

        @precondition(lambda self: len(self.pinned_versions) < 2)
        @rule()
        def pin_version(self) -> None:
            pin, v = self.mgr.pin_version()
            self.pinned_versions.append((pin, v, newest(self.committed, v.max_committed_epoch)))

        @precondition(lambda self: bool(self.pinned_versions))
        @rule(i=st.integers(0, 1))
        def unpin_version(self, i: int) -> None:
            pin, _, _ = self.pinned_versions.pop(i % len(self.pinned_versions))
            self.mgr.unpin_version(pin)

        # -- restart ----------------------------------------------------------------------------
        @rule(dice=st.integers(0, 2))
        def restart(self, dice: int) -> None:
            """Reopen meta and storage from the SQLite file and the object store; in-flight work
            and pins die with the old process."""
            if dice:  # rarer than the other rules
                return
            before = self.mgr.version
            self.meta.close()
            self._open()
            assert self.mgr.version == before, "restart loads exactly the last committed version"
            self.uncommitted = []
            self.pending = []
            self.snapshots = []
            self.pinned_versions = []
            stats.restarts += 1

        # -- reads ------------------------------------------------------------------------------
        @rule(idx=st.lists(st.integers(0, len(KEYS) - 1), min_size=1, max_size=8), pick=st.integers(0, 1000))
        def point_gets(self, idx: list[int], pick: int) -> None:
            epochs = [MAX_EPOCH, self.cur, *self.read_ok_epochs()]
            e = epochs[pick % len(epochs)]
            want = newest(self.committed + self.uncommitted, e)
            keys = [KEYS[i] for i in idx]
            assert [self.hs.get(k, e, filter_len=FILTER_LEN) for k in keys] == [want.get(k) for k in keys]
            assert [self.hs.get(k, e) for k in keys] == [want.get(k) for k in keys]
            assert self.hs.multi_get(keys, e, filter_lens=[FILTER_LEN] * len(keys)) == [
                want.get(k) for k in keys
            ]
            if e & 0xFFFF:
                stats.spill_reads += 1

        @rule(a=st.integers(0, len(KEYS)), b=st.integers(0, len(KEYS)), pick=st.integers(0, 1000))
        def range_scan(self, a: int, b: int, pick: int) -> None:
            epochs = [MAX_EPOCH, *self.read_ok_epochs()]
            e = epochs[pick % len(epochs)]
            lo = KEYS[a] if a < len(KEYS) else None
            hi = KEYS[b] if b < len(KEYS) else None
            want = {
                k: v
                for k, v in newest(self.committed + self.uncommitted, e).items()
                if (lo is None or k >= lo) and (hi is None or k < hi)
            }
            assert scan(self.hs, e, lo, hi) == want
            # a table's vnode as a prefix scan with the filter key
            prefix = KEYS[a % len(KEYS)][:6]
            want_p = {
                k: v for k, v in newest(self.committed + self.uncommitted, e).items() if k.startswith(prefix)
            }
            got = dict(visible_pairs(self.hs.iter(prefix, _next_prefix(prefix), e)))
            assert got == want_p

        @rule(
            cuts=st.lists(st.integers(0, len(KEYS)), min_size=1, max_size=12, unique=True),
            prefixes=st.lists(st.integers(0, len(KEYS) - 1), min_size=1, max_size=10),
            pick=st.integers(0, 1000),
        )
        def batched_ranges(self, cuts: list[int], prefixes: list[int], pick: int) -> None:
            """One `read_ranges` call over many sorted, disjoint ranges (the last one maybe
            unbounded) equals the model; so does one over many key prefixes with their filter
            keys (a join's probe: tombstones, older versions, every run at once)."""
            epochs = [MAX_EPOCH, self.cur, *self.read_ok_epochs()]
            e = epochs[pick % len(epochs)]
            model = newest(self.committed + self.uncommitted, e)
            bounds = sorted(cuts)
            ranges: list[tuple[bytes, bytes | None]] = []
            for i in range(0, len(bounds), 2):
                lo = KEYS[bounds[i]] if bounds[i] < len(KEYS) else KEYS[-1] + b"\x00"
                hi = bounds[i + 1] if i + 1 < len(bounds) else len(KEYS)
                ranges.append((lo, KEYS[hi] if hi < len(KEYS) else None))
            got = self.hs.read_ranges(ranges, e)
            want = [
                (k, v) for k, v in model.items() if any(a <= k and (b is None or k < b) for a, b in ranges)
            ]
            assert [(k[:-8], v[1:]) for k, v in got.to_pairs()] == want
            # whole keys and vnode prefixes, filtered by the whole-key Bloom filters where whole
            keys = sorted({KEYS[i][: 6 if i % 3 == 0 else None] for i in prefixes})
            ends = [_next_prefix(k) for k in keys]
            filters = [k if len(k) > 6 else None for k in keys]
            got = self.hs.read_ranges(list(zip(keys, ends, strict=True)), e, filter_keys=filters)
            want = [(k, v) for k, v in model.items() if any(k.startswith(p) for p in keys)]
            assert [(k[:-8], v[1:]) for k, v in got.to_pairs()] == want
            stats.seen.add("batched_ranges")

        # -- invariants -------------------------------------------------------------------------
        @rule()
        def committed_reads_at_every_valid_epoch(self) -> None:
            """A reader without local data, at epochs at or above the low watermark, and the writer."""
            reader = self.committed_reader()
            for e in self.read_ok_epochs():
                want = newest(self.committed, e)
                assert scan(reader, e) == want, f"read at {e} (low watermark {self.mgr.low_watermark()})"
                got = [reader.get(k, e, filter_len=FILTER_LEN) for k in KEYS[e % 7 :: 7]]
                assert got == [want.get(k) for k in KEYS[e % 7 :: 7]]
                if e <= self.mgr.max_committed_epoch:
                    assert scan(self.hs, e) == want  # the writer has nothing uncommitted that old

        @invariant()
        def writer_reads_its_writes(self) -> None:
            assert scan(self.hs, MAX_EPOCH) == newest(self.committed + self.uncommitted, MAX_EPOCH)

        @invariant()
        def committed_reads(self) -> None:
            mce = self.mgr.max_committed_epoch
            assert scan(self.committed_reader(), MAX_EPOCH) == newest(self.committed, mce)

        @invariant()
        def snapshots_read_what_they_read_when_pinned(self) -> None:
            for _, e, seen in self.snapshots:
                assert scan(self.hs, e) == seen
                got = [self.hs.get(k, e, filter_len=FILTER_LEN) for k in KEYS[e % 5 :: 5]]
                assert got == [seen.get(k) for k in KEYS[e % 5 :: 5]]
                stats.snapshot_reads += 1

        @invariant()
        def pinned_versions_stay_readable(self) -> None:
            for _, v, seen in self.pinned_versions:
                reader = HummockStorage(SstableStore(self.store), v, OPTIONS)
                assert scan(reader, v.max_committed_epoch) == seen

        @invariant()
        def version_shape(self) -> None:
            v = self.mgr.version
            ids = [lv.sub_level_id for lv in v.l0]
            assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
            for lv in v.levels:
                for a, b in zip(lv.ssts, lv.ssts[1:], strict=False):
                    assert a.largest_user_key < b.smallest_user_key, f"L{lv.level_idx} overlaps"
                if lv.ssts:
                    stats.deepest_level = max(stats.deepest_level, lv.level_idx)
                    stats.seen.add(f"L{lv.level_idx}")
            stats.max_l0 = max(stats.max_l0, len(v.l0))
            stats.max_bottom = max(stats.max_bottom, v.level(6).total_size)
            assert self.mgr.max_committed_epoch < self.cur

        def listed_objects(self) -> set[int]:
            out = set()
            for m in self.store.list("hummock/sst/"):
                oid = object_id_of_path(m.path)
                assert oid is not None
                out.add(oid)
            return out

    return HummockModel


def _next_prefix(p: bytes) -> bytes:
    return (int.from_bytes(p, "big") + 1).to_bytes(len(p), "big")


def run_model(open_store: Callable[[], ObjectStore], examples: int, steps: int) -> Stats:
    stats = Stats()
    machine = make_machine(open_store, stats)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            database=None,
            derandomize=True,  # the same runs every time: the coverage checks below are stable
        ),
    )
    return stats


def check_coverage(stats: Stats) -> None:
    assert stats.compactions > 10, stats
    assert stats.restarts > 0, stats
    assert stats.vacuumed > 0, stats
    assert stats.gc_deleted > 0, stats
    assert stats.snapshot_reads > 0, stats
    assert stats.deepest_level >= 5, stats
    assert {"spill", "sync", "clear_uncommitted", "batched_ranges"} <= stats.seen, stats


def test_model_in_memory() -> None:
    stats = run_model(lambda: InMemoryObjectStore(f"model-{uuid.uuid4().hex}"), examples=60, steps=50)
    check_coverage(stats)


def test_model_local_directory(tmp_path: Path) -> None:
    n = iter(range(10**6))
    stats = run_model(lambda: LocalObjectStore(tmp_path / f"store{next(n)}"), examples=25, steps=40)
    check_coverage(stats)


def test_model_s3(s3_endpoint: str) -> None:
    def open_store() -> ObjectStore:
        return S3ObjectStore("hummock-model", f"run/{uuid.uuid4().hex}", endpoint=s3_endpoint)

    stats = run_model(open_store, examples=6, steps=30)
    assert stats.compactions > 0 and stats.restarts > 0, stats
