"""HummockManager: persistence, checkpoints, pins, GC, dropped tables, the picker and the
background compactor, driven through the public API with real SSTs."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from piestream.common.epoch import MAX_EPOCH
from piestream.common.errors import ObjectNotFound
from piestream.encoding.keys import full_key, user_key
from piestream.meta.hummock_manager import CHECKPOINT_EVERY_DELTAS, CompactorThread, HummockManager
from piestream.meta.store import MetaStore
from piestream.storage.hummock.compaction import (
    CompactionConfig,
    CompactTask,
    level_targets,
    pick_compaction,
    run_compaction,
)
from piestream.storage.hummock.iterators import SstableIterator
from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage, visible_pairs
from piestream.storage.hummock.version import MAX_LEVEL, HummockVersion, Level, SstableInfo, object_id_of_path
from piestream.storage.object_store import (
    InMemoryObjectStore,
    LocalObjectStore,
    ObjectStore,
    open_object_store,
)

SMALL = CompactionConfig(
    max_bytes_for_level_base=4000,
    level_multiplier=4,
    level0_trigger_sub_levels=2,
    target_file_size=1500,
    block_size=512,
)


def K(i: int, table: int = 1) -> bytes:
    return user_key(table, i % 4, i.to_bytes(4, "big"))


@dataclass
class Db:
    """A manager, its stores and a model of the committed data (user key -> row)."""

    store: ObjectStore
    meta_path: Path | str
    config: CompactionConfig = SMALL
    next_epoch: int = 1000
    model: dict[bytes, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.open()

    def open(self) -> None:
        self.meta = MetaStore(self.meta_path)
        self.sstables = SstableStore(self.store)
        self.mgr = HummockManager(self.meta, self.sstables, self.config)

    def restart(self) -> None:
        self.meta.close()
        self.open()

    def epoch(self) -> int:
        e = self.next_epoch << 16
        self.next_epoch += 1
        return e

    def commit(self, writes: dict[bytes, bytes | None]) -> int:
        """Write and commit one epoch through a HummockStorage; update the model."""
        e = self.epoch()
        hs = HummockStorage(self.sstables, self.mgr.version)
        pairs = [(full_key(k, e), TOMBSTONE if v is None else put_value(v)) for k, v in writes.items()]
        hs.write_batch(KvBatch.from_pairs(pairs, [4] * len(pairs)), e)
        self.mgr.commit_epoch(e, hs.sync(e))
        for k, v in writes.items():
            if v is None:
                self.model.pop(k, None)
            else:
                self.model[k] = v
        return e

    def reader(self, version: HummockVersion | None = None) -> HummockStorage:
        return HummockStorage(SstableStore(self.store), version or self.mgr.version)

    def check(self, version: HummockVersion | None = None) -> None:
        hs = self.reader(version)
        assert dict(visible_pairs(hs.iter(None, None))) == self.model
        keys = [*sorted(self.model)[::7], K(10**6)]
        assert [hs.get(k, filter_len=4) for k in keys] == [self.model.get(k) for k in keys]

    def objects(self) -> set[int]:
        return {
            oid for m in self.store.list("hummock/sst/") if (oid := object_id_of_path(m.path)) is not None
        }


@pytest.fixture
def db(tmp_path: Path) -> Db:
    return Db(InMemoryObjectStore(f"mgr-{uuid.uuid4().hex}"), tmp_path / "meta.sqlite")


def random_writes(
    rng: random.Random, n: int, universe: int = 300, table: int = 1
) -> dict[bytes, bytes | None]:
    return {
        K(rng.randrange(universe), table): (None if rng.random() < 0.2 else rng.randbytes(rng.randint(5, 40)))
        for _ in range(n)
    }


def all_entries(db: Db, version: HummockVersion) -> list[tuple[bytes, bytes]]:
    """Every stored entry (all versions, tombstones included) of a version's SSTs."""
    out = []
    for sst in version.all_ssts():
        for b in SstableIterator(db.sstables, sst):
            out += b.to_pairs()
    return out


def assert_levels_disjoint(version: HummockVersion) -> None:
    for lv in version.levels:
        for a, b in zip(lv.ssts, lv.ssts[1:], strict=False):
            assert a.largest_user_key < b.smallest_user_key, (
                f"L{lv.level_idx}: {a.object_id} overlaps {b.object_id}"
            )


# --- persistence -----------------------------------------------------------------------------------


def test_restart_loads_last_committed_version_across_checkpoints(db: Db) -> None:
    rng = random.Random(1)
    versions = []
    n_commits = 2 * CHECKPOINT_EVERY_DELTAS + 7
    for i in range(n_commits):
        db.commit(random_writes(rng, 20))
        if i % 5 == 4:
            db.mgr.compact_once()
        versions.append(db.mgr.version)
    final = db.mgr.version
    assert final.id > 2 * CHECKPOINT_EVERY_DELTAS
    # deltas since the last checkpoint are all that is kept besides it
    (cp_id,) = db.meta.query("SELECT id FROM hummock_version_checkpoint")[0]
    assert isinstance(cp_id, int) and cp_id % CHECKPOINT_EVERY_DELTAS == 0 and cp_id > CHECKPOINT_EVERY_DELTAS
    ids = [r[0] for r in db.meta.query("SELECT id FROM hummock_version_delta ORDER BY id")]
    assert ids == list(range(cp_id + 1, final.id + 1))
    db.restart()
    assert db.mgr.version == final
    assert HummockVersion.from_json(json.loads(json.dumps(final.to_json()))) == final
    db.check()
    # and it keeps going after the restart, including across the next checkpoint
    for _ in range(CHECKPOINT_EVERY_DELTAS + 1):
        db.commit(random_writes(rng, 5))
    db.restart()
    db.check()


def test_restart_forgets_uncommitted_epochs(db: Db) -> None:
    db.commit({K(1): b"committed"})
    committed = db.mgr.version
    e = db.epoch()
    hs = HummockStorage(db.sstables, db.mgr.version)
    hs.write_batch(KvBatch.from_pairs([(full_key(K(1), e), put_value(b"synced only"))]), e)
    orphans = hs.sync(e)
    assert hs.get(K(1)) == b"synced only"  # read-your-writes before the commit
    db.restart()
    assert db.mgr.version == committed
    db.check()
    # the synced SSTs are garbage: young ones survive full GC with a retention, old ones do not
    assert db.mgr.full_gc(retention_sec=3600) == 0
    assert {s.object_id for s in orphans} <= db.objects()
    assert db.mgr.full_gc(retention_sec=3600, now=time.time() + 7200) == len(orphans)
    assert not {s.object_id for s in orphans} & db.objects()
    db.check()


def test_commit_epoch_must_advance(db: Db) -> None:
    e = db.commit({K(1): b"a"})
    with pytest.raises(ValueError, match="not after"):
        db.mgr.commit_epoch(e, [])
    before = db.mgr.version
    with pytest.raises(ValueError):
        db.mgr.commit_epoch(e - (1 << 16), [])
    assert db.mgr.version == before
    db.restart()
    assert db.mgr.version == before


class DurabilityLog(LocalObjectStore):
    """A local store that records deferred puts and `make_durable` calls, in order."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.log: list[tuple[str, tuple[str, ...]]] = []

    def put_deferred(self, path: str, data: bytes) -> None:
        self.log.append(("deferred", (path,)))
        super().put_deferred(path, data)

    def make_durable(self, paths: Sequence[str]) -> None:
        self.log.append(("durable", tuple(paths)))
        super().make_durable(paths)


def test_commit_makes_deferred_ssts_durable_before_the_version_holds_them(tmp_path: Path) -> None:
    """Actors upload without fsyncs (`sync(durable=False)`); `commit_epoch` syncs the epoch's SSTs
    as one batch before the delta is written, and a reported SST that is gone fails the commit
    with the version unchanged."""
    store = DurabilityLog(tmp_path / "objects")
    db = Db(store, tmp_path / "meta.sqlite")
    e = db.epoch()
    ssts = []
    for table in (1, 2):  # two "actors", one SST each
        hs = HummockStorage(db.sstables, db.mgr.version)
        hs.write_batch(KvBatch.from_pairs([(full_key(K(1, table), e), put_value(b"v"))], [4]), e)
        ssts += hs.sync(e, durable=False)
    paths = tuple(s.path for s in ssts)
    assert store.log == [("deferred", (paths[0],)), ("deferred", (paths[1],))]
    db.mgr.commit_epoch(e, ssts)
    assert store.log[-1] == ("durable", paths)
    assert [s.object_id for s in db.mgr.version.l0[-1].ssts] == [s.object_id for s in ssts]

    e2 = db.epoch()
    hs = HummockStorage(db.sstables, db.mgr.version)
    hs.write_batch(KvBatch.from_pairs([(full_key(K(2), e2), put_value(b"w"))], [4]), e2)
    lost = hs.sync(e2, durable=False)
    store.delete(lost[0].path)
    before = db.mgr.version
    with pytest.raises(ObjectNotFound, match=re.escape(lost[0].path)):
        db.mgr.commit_epoch(e2, lost)
    assert db.mgr.version == before
    db.restart()
    assert db.mgr.version == before


def test_commit_without_ssts_advances_epochs(db: Db) -> None:
    db.commit({K(1): b"a"})
    e = db.epoch()
    v = db.mgr.commit_epoch(e, [], table_ids=[1, 7])
    assert v.max_committed_epoch == e
    assert v.table_committed_epoch[7] == e and v.table_committed_epoch[1] == e
    assert len(v.l0) == 1  # no empty sub-level


def test_extra_writes_commit_atomically_with_the_epoch(db: Db) -> None:
    def extra(c: object) -> None:
        c.execute("INSERT INTO kv (ns, key, value) VALUES ('test', 'offset', '42')")  # type: ignore[attr-defined]

    e = db.epoch()
    db.mgr.commit_epoch(e, [], table_ids=[1], extra=extra)
    assert db.meta.get("test", "offset") == "42"

    def failing(c: object) -> None:
        c.execute("INSERT INTO kv (ns, key, value) VALUES ('test', 'other', '1')")  # type: ignore[attr-defined]
        raise RuntimeError("boom")

    before = db.mgr.version
    with pytest.raises(RuntimeError):
        db.mgr.commit_epoch(db.epoch(), [], table_ids=[1], extra=failing)
    assert db.mgr.version == before
    assert db.meta.get("test", "other") is None
    db.restart()
    assert db.mgr.version == before


# --- wait_epoch ------------------------------------------------------------------------------------


def test_wait_epoch_wakes_on_commit(db: Db) -> None:
    target = (db.next_epoch + 2) << 16
    results: dict[str, bool] = {}
    hs = HummockStorage(db.sstables, db.mgr.version)
    db.mgr.on_new_version(hs.update_version)

    def waiter(name: str, fn: object) -> None:
        results[name] = fn(target, timeout=10)  # type: ignore[operator]

    threads = [
        threading.Thread(target=waiter, args=("mgr", db.mgr.wait_epoch)),
        threading.Thread(target=waiter, args=("hs", hs.wait_epoch)),
    ]
    for t in threads:
        t.start()
    time.sleep(0.1)
    db.commit({K(1): b"1"})
    db.commit({K(2): b"2"})
    time.sleep(0.1)
    assert not results  # still waiting: the target epoch is not committed yet
    db.commit({K(3): b"3"})
    for t in threads:
        t.join(5)
    assert results == {"mgr": True, "hs": True}
    assert hs.version.max_committed_epoch >= target
    assert hs.get(K(3)) == b"3"
    t0 = time.monotonic()
    assert db.mgr.wait_epoch(MAX_EPOCH - 1, timeout=0.2) is False
    assert hs.wait_epoch(MAX_EPOCH - 1, timeout=0.2) is False
    assert 0.3 < time.monotonic() - t0 < 60  # each waited its timeout (an upper bound: no hang)
    assert db.mgr.wait_epoch(target, timeout=0) is True


# --- pins, vacuum, full GC -------------------------------------------------------------------------


def test_pinned_version_blocks_vacuum_until_unpinned(db: Db) -> None:
    rng = random.Random(2)
    for _ in range(3):
        db.commit(random_writes(rng, 60))
    pin, old = db.mgr.pin_version()
    old_model = dict(db.model)
    old_objects = old.object_ids()
    db.commit(random_writes(rng, 60))
    assert db.mgr.compact_until_idle() > 0
    replaced = old_objects - db.mgr.version.object_ids()
    assert replaced
    assert db.mgr.vacuum() == 0
    assert replaced <= db.objects()
    # the pinned version still reads exactly what it read
    hs_old = db.reader(old)
    assert dict(visible_pairs(hs_old.iter(None, None))) == old_model
    # a second, newer pin does not release the first
    pin2, _ = db.mgr.pin_version()
    db.commit(random_writes(rng, 60))
    db.mgr.compact_until_idle()
    assert db.mgr.vacuum() == 0  # everything was replaced after the first pin
    assert replaced <= db.objects()
    db.mgr.unpin_version(pin)
    deleted = db.mgr.vacuum()
    assert deleted >= len(replaced)
    assert not replaced & db.objects()
    db.mgr.unpin_version(pin2)
    db.mgr.vacuum()
    assert db.objects() == db.mgr.version.object_ids()
    db.check()
    assert db.mgr.vacuum() == 0  # idempotent


def test_vacuum_survives_restart(db: Db) -> None:
    rng = random.Random(3)
    for _ in range(4):
        db.commit(random_writes(rng, 50))
    db.mgr.compact_until_idle()
    stale = db.objects() - db.mgr.version.object_ids()
    assert stale
    db.restart()  # pins are gone with the old process; stale objects are still known
    assert db.mgr.vacuum() == len(stale)
    assert db.objects() == db.mgr.version.object_ids()
    db.check()


def test_full_gc_deletes_only_old_unreferenced_objects(db: Db) -> None:
    db.commit({K(i): b"x" * 30 for i in range(200)})
    live = db.mgr.version.object_ids()
    # a stray object from a failed writer, plus non-SST objects that GC must ignore
    hs = HummockStorage(db.sstables, db.mgr.version)
    e = db.epoch()
    hs.write_batch(KvBatch.from_pairs([(full_key(K(1), e), put_value(b"stray"))]), e)
    stray = {s.object_id for s in hs.sync(e)}
    db.store.put("hummock/sst/not-an-sst.txt", b"x")
    db.store.put("other/thing", b"y")
    assert db.mgr.full_gc(retention_sec=60) == 0  # young
    assert db.mgr.full_gc(retention_sec=60, now=time.time() + 120) == len(stray)
    assert db.objects() == live
    assert db.store.exists("hummock/sst/not-an-sst.txt") and db.store.exists("other/thing")
    # objects compaction replaced are vacuum's business (a pinned version may read them)
    pin, _ = db.mgr.pin_version()
    db.commit({K(i): b"y" * 30 for i in range(200)})
    db.mgr.compact_until_idle()
    replaced = live - db.mgr.version.object_ids()
    assert replaced
    db.mgr.full_gc(retention_sec=0)
    assert replaced <= db.objects()
    db.mgr.unpin_version(pin)
    db.mgr.vacuum()
    assert db.objects() == db.mgr.version.object_ids()
    db.check()


def test_pinned_snapshot_keeps_old_versions_through_compaction(db: Db) -> None:
    db.commit({K(i): b"old%d" % i for i in range(100)})
    db.mgr.compact_until_idle()
    snap = db.mgr.pin_snapshot()
    at_snap = dict(db.model)
    rng = random.Random(4)
    for _ in range(6):
        db.commit(random_writes(rng, 80, universe=100))
        db.mgr.compact_until_idle()
    assert db.mgr.low_watermark() == snap.epoch
    hs = db.reader()
    assert dict(visible_pairs(hs.iter(None, None, snap.epoch))) == at_snap
    assert [hs.get(k, snap.epoch) for k in sorted(at_snap)] == [at_snap[k] for k in sorted(at_snap)]
    db.check()
    kept = len(all_entries(db, db.mgr.version))
    db.mgr.unpin_snapshot(snap.pin_id)
    assert db.mgr.low_watermark() == db.mgr.max_committed_epoch
    # once the snapshot is gone, the next compactions drop what only it needed
    for _ in range(3):
        db.commit(random_writes(rng, 80, universe=100))
        db.mgr.compact_until_idle()
    entries = all_entries(db, db.mgr.version)
    assert len(entries) < kept
    db.check()


def test_compaction_to_the_bottom_keeps_only_live_newest_versions(db: Db) -> None:
    """With the bottom level as the base, a full compaction without pins leaves exactly one entry
    per live key: no old versions, no tombstones."""
    db.config = CompactionConfig(
        max_bytes_for_level_base=1 << 30, level0_trigger_sub_levels=2, target_file_size=2000
    )
    db.restart()
    rng = random.Random(9)
    for _ in range(8):
        db.commit(random_writes(rng, 120, universe=200))
    db.mgr.compact_until_idle()
    v = db.mgr.version
    assert not v.l0 and [lv.level_idx for lv in v.levels if lv.ssts] == [MAX_LEVEL]
    entries = all_entries(db, v)
    assert sorted(k[:-8] for k, _ in entries) == sorted(db.model)
    assert all(val != TOMBSTONE for _, val in entries)
    db.check()


def test_tombstones_stay_above_the_bottom(db: Db) -> None:
    """A tombstone compacted into a level with older data below must stay and keep hiding it."""
    cfg = CompactionConfig(
        max_bytes_for_level_base=4000, level_multiplier=4, level0_trigger_sub_levels=1, target_file_size=1500
    )
    db.config = cfg
    db.restart()
    db.commit({K(i): b"v" * 30 for i in range(300)})
    db.mgr.compact_until_idle()
    assert db.mgr.version.level(MAX_LEVEL).ssts
    base = level_targets(db.mgr.version, cfg)[0]
    assert base < MAX_LEVEL
    db.commit({K(i): None for i in range(0, 300, 3)})
    task = db.mgr.get_compact_task()
    assert task is not None and task.target_level == base
    assert not task.gc_delete_keys
    assert db.mgr.report_compact_task(task, run_compaction(db.sstables, task))
    tombstones = [
        k
        for sst in db.mgr.version.level(base).ssts
        for b in SstableIterator(db.sstables, sst)
        for k, val in b.to_pairs()
        if val == TOMBSTONE
    ]
    assert len(tombstones) == 100
    db.check()
    db.mgr.compact_until_idle()
    db.check()


# --- dropped tables --------------------------------------------------------------------------------


def test_drop_tables_compaction_removes_their_keys(db: Db) -> None:
    rng = random.Random(5)
    for t in (1, 2, 3):
        for _ in range(3):
            db.commit(random_writes(rng, 60, table=t))
    db.mgr.compact_until_idle()
    db.commit(random_writes(rng, 30, table=2))  # some of table 2 still in L0
    db.mgr.drop_tables([2])
    assert 2 not in db.mgr.version.table_committed_epoch
    db.restart()  # the dropped set is persisted
    db.mgr.compact_until_idle()
    v = db.mgr.version
    assert all(2 not in s.table_ids for s in v.all_ssts())
    assert not [k for k, _ in all_entries(db, v) if k[:4] == b"\x00\x00\x00\x02"]
    db.model = {k: val for k, val in db.model.items() if k[:4] != b"\x00\x00\x00\x02"}
    db.check()
    assert_levels_disjoint(v)


def test_dropping_two_tables_with_a_live_table_between_keeps_levels_disjoint(db: Db) -> None:
    """Dropped-table cleanup must not merge SSTs that are not adjacent in their level: the output
    would overlap the live SSTs between them and hide their keys from point gets."""
    cfg = CompactionConfig(
        max_bytes_for_level_base=1 << 20, level0_trigger_sub_levels=1, target_file_size=1500
    )
    db.config = cfg
    db.restart()
    writes: dict[bytes, bytes | None] = {}
    for t, n in [(1, 60), (2, 3), (3, 60), (4, 3), (5, 60)]:
        writes.update({K(i, t): b"v%d-%d" % (t, i) + b"x" * 20 for i in range(n)})
    db.commit(writes)
    db.mgr.compact_until_idle()
    assert len(db.mgr.version.level(MAX_LEVEL).ssts) >= 5
    db.mgr.drop_tables([2, 4])
    db.mgr.compact_until_idle()
    db.model = {k: v for k, v in db.model.items() if k[:4] not in (b"\x00\x00\x00\x02", b"\x00\x00\x00\x04")}
    assert_levels_disjoint(db.mgr.version)
    db.check()


# --- the picker ------------------------------------------------------------------------------------


def _sst(oid: int, lo: int, hi: int, size: int) -> SstableInfo:
    return SstableInfo(
        oid, size, size - 100, full_key(K(lo), 1 << 16), full_key(K(hi), 1 << 16), (1,), 10, 1 << 16, 1 << 16
    )


def test_picker_never_puts_l0_below_a_non_empty_level() -> None:
    """With a small bottom level the dynamic base is the bottom; if an upper level still holds
    data (it used to be the base), L0 must not skip over it: newer data would land below older."""
    cfg = CompactionConfig(max_bytes_for_level_base=10_000, level0_trigger_sub_levels=1)
    levels = [Level(i, ()) for i in range(1, MAX_LEVEL + 1)]
    levels[4] = Level(5, (_sst(5, 0, 100, 1000),))
    levels[5] = Level(6, (_sst(6, 0, 100, 5000),))
    v = HummockVersion(id=3, l0=(Level(0, (_sst(7, 10, 20, 500),), 1),), levels=tuple(levels))
    task = pick_compaction(v, cfg, task_id=1, watermark=0)
    assert task is not None
    assert task.inputs[0].level_idx == 0
    assert task.target_level <= 5, f"L0 compacted into L{task.target_level} under a non-empty L5"
    assert not task.gc_delete_keys


def test_base_level_moving_down_does_not_resurrect_or_shadow(db: Db) -> None:
    """End to end: shrink the bottom level with deletes until the dynamic base moves down while
    L5 still holds rows, then update one of those rows and delete another. Reads must see the
    newest versions."""
    cfg = CompactionConfig(
        max_bytes_for_level_base=9600,  # sized for SSTs with 16 B of search words per entry
        level_multiplier=4,
        level0_trigger_sub_levels=1,
        target_file_size=2000,
        block_size=512,
    )
    db.config = cfg
    db.restart()

    def k0(i: int) -> bytes:
        return user_key(1, 0, i.to_bytes(4, "big"))

    db.commit({k0(i): b"a" * 40 for i in range(400)})
    db.mgr.compact_until_idle()
    db.commit({k0(i): b"b" * 40 for i in range(0, 400, 10)})
    db.mgr.compact_until_idle()
    db.commit({k0(i): None for i in range(400) if i % 10})
    for _ in range(100):
        v = db.mgr.version
        if level_targets(v, cfg)[0] == MAX_LEVEL and v.level(5).ssts and not v.l0:
            break
        assert db.mgr.compact_once(), "the scenario needs the base level to move down"
    l5 = db.mgr.version.level(5).ssts
    in_l5 = [
        k0(i)
        for i in range(0, 400, 10)
        if any(s.smallest_user_key <= k0(i) <= s.largest_user_key for s in l5)
    ]
    assert len(in_l5) >= 2
    db.commit({in_l5[0]: b"NEW", in_l5[1]: None})
    assert db.mgr.compact_once()
    hs = db.reader()
    after_one = [hs.get(in_l5[0]), hs.get(in_l5[1])]
    db.mgr.compact_until_idle()
    hs = db.reader()
    after_all = [hs.get(in_l5[0]), hs.get(in_l5[1])]
    # (with the bug: L5's old row shadows the update, then the dropped tombstone resurrects a row)
    assert (after_one, after_all) == ([b"NEW", None], [b"NEW", None])
    db.check()


# --- compaction tasks ------------------------------------------------------------------------------


def test_compact_task_runs_from_json_in_another_store_instance(tmp_path: Path) -> None:
    """A task is JSON; a compactor elsewhere reopens the object store by URL and runs it."""
    db = Db(LocalObjectStore(tmp_path / "objects"), tmp_path / "meta.sqlite")
    rng = random.Random(6)
    for _ in range(3):
        db.commit(random_writes(rng, 80))
    task = db.mgr.get_compact_task()
    assert task is not None
    wire = json.dumps(task.to_json())
    remote = SstableStore(open_object_store(db.store.url))
    again = CompactTask.from_json(json.loads(wire))
    assert again == task
    # per-table block sizes travel with the task; a task written before them has none
    sized = dataclasses.replace(task, table_block_sizes=((3, 256),))
    assert CompactTask.from_json(json.loads(json.dumps(sized.to_json()))) == sized
    old = {k: v for k, v in task.to_json().items() if k != "table_block_sizes"}
    assert CompactTask.from_json(old).table_block_sizes == ()
    outputs = run_compaction(remote, again)
    assert db.mgr.get_compact_task() is None  # one task at a time
    assert db.mgr.report_compact_task(again, outputs)
    assert not db.mgr.report_compact_task(again, outputs)  # reported twice: ignored
    db.check()


def test_failed_task_is_released_and_unknown_reports_are_refused(db: Db) -> None:
    rng = random.Random(7)
    for _ in range(3):
        db.commit(random_writes(rng, 80))
    before = db.mgr.version
    task = db.mgr.get_compact_task()
    assert task is not None
    assert db.mgr.report_compact_task(task, None) is False
    assert db.mgr.version == before  # a failed task changes nothing
    task2 = db.mgr.get_compact_task()
    assert task2 is not None and task2.task_id != task.task_id
    outputs = run_compaction(db.sstables, task2)
    # a report for a task the manager does not know (e.g. from before a restart) is refused
    assert db.mgr.report_compact_task(task, outputs) is False
    assert db.mgr.report_compact_task(task2, outputs) is True
    db.check()


def test_cancelled_task_reports_nothing_and_a_later_task_completes(db: Db) -> None:
    """A shutdown cancels a running task at its next input batch: the version is unchanged, the
    task is released, and its partial outputs are garbage that full GC may delete."""
    rng = random.Random(9)
    for _ in range(4):
        db.commit(random_writes(rng, 80))
    before = db.mgr.version
    asked: list[int] = []

    def stop_on_second_ask() -> bool:
        asked.append(1)
        return len(asked) >= 2

    assert db.mgr.compact_once(stop_on_second_ask) is False
    assert len(asked) >= 2, "the task asked again after its first input batch"
    assert db.mgr.version == before
    assert db.mgr.compact_once() is True
    db.check()


# --- background compactor --------------------------------------------------------------------------


def test_compactor_thread_runs_while_commits_continue(tmp_path: Path) -> None:
    db = Db(LocalObjectStore(tmp_path / "objects"), tmp_path / "meta.sqlite")
    compactor = CompactorThread(db.mgr, interval=0.01)
    compactor.start()
    rng = random.Random(8)
    errors: list[BaseException] = []
    reads: list[int] = []
    stop = threading.Event()
    lock = threading.Lock()

    def reader() -> None:
        """Pin a version, read it fully with cold caches, check it, unpin; vacuum runs meanwhile."""
        cold = SstableStore(db.store, meta_cache_bytes=0, block_cache_bytes=0)
        try:
            while not stop.is_set():
                with lock:
                    pin, v = db.mgr.pin_version()
                    want = dict(db.model)
                try:
                    hs = HummockStorage(cold, v)
                    assert dict(visible_pairs(hs.iter(None, None))) == want
                    reads.append(v.id)
                finally:
                    db.mgr.unpin_version(pin)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(60):
            with lock:
                db.commit(random_writes(rng, 40, universe=400))
            time.sleep(0.005)
        # the compactor catches up once commits stop (stop() would cancel a running task)
        deadline = time.monotonic() + 60
        while len(db.mgr.version.l0) >= 10 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(30)
        compactor.stop()
    assert not errors, errors
    assert not compactor.errors, compactor.errors
    assert len(set(reads)) > 5, "the reader saw many versions"
    v = db.mgr.version
    assert any(lv.ssts for lv in v.levels), "the compactor moved data out of L0"
    assert len(v.l0) < 10
    db.check()
    db.mgr.compact_until_idle()
    db.mgr.vacuum()
    assert db.objects() >= db.mgr.version.object_ids()
    db.restart()
    db.check()
    assert_levels_disjoint(db.mgr.version)
