"""Compaction (seed 001 "Compaction"; reference §5.4): picking tasks and running them.

The *picker* looks at a version and proposes one `CompactTask`: merge L0 sub-levels into the base
level (RocksDB-style dynamic level base, so a small database compacts straight to the bottom),
merge adjacent L0 sub-levels into one (intra-L0, while the base level is much larger than L0), or
push SSTs of an over-full level into the next. The *compactor* runs a task anywhere (a thread in
the driver, or another process: the task is JSON and the object store is reopened by URL): it
merges the input SSTs and keeps, per user key, the newest version plus every version newer than
the low watermark (the oldest pinned snapshot), so no pinned snapshot ever reads differently;
tombstones go when the output is the bottom level, keys of dropped tables and keys below table
watermarks go always.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.compute as pc

from piestream.encoding.keys import TABLE_ID_LEN
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.iterators import (
    ConcatIterator,
    MergeIterator,
    SstableIterator,
    below_watermark,
)
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.sstable import COMPRESSION_NONE
from piestream.storage.hummock.sstable_builder import build_sstable, split_at_user_keys
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import MAX_LEVEL, HummockVersion, Level, SstableInfo, TableWatermark


@dataclass(frozen=True)
class CompactionConfig:
    """Picker knobs (RisingWave defaults scaled for one machine)."""

    max_bytes_for_level_base: int = 256 << 20
    level_multiplier: int = 10
    level0_trigger_sub_levels: int = 4
    level0_max_sub_levels_per_task: int = 32
    target_file_size: int = 32 << 20
    max_compaction_bytes: int = 2 << 30
    compression: int = COMPRESSION_NONE
    block_size: int = 64 * 1024
    #: (table id, block size) of tables with their own block size (`StorageOptions`)
    table_block_sizes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class InputLevel:
    level_idx: int  # 0 = an L0 sub-level
    sub_level_id: int
    ssts: tuple[SstableInfo, ...]

    @property
    def overlapping(self) -> bool:
        return self.level_idx == 0


@dataclass(frozen=True)
class CompactTask:
    """Input SSTs (newest level first) and where their merge goes."""

    task_id: int
    inputs: tuple[InputLevel, ...]
    target_level: int  # 0 = intra-L0: the output becomes one sub-level
    target_sub_level_id: int
    watermark: int  # versions newer than this epoch are all kept
    gc_delete_keys: bool
    dropped_table_ids: tuple[int, ...] = ()
    table_watermarks: dict[int, TableWatermark] = field(default_factory=dict)
    target_file_size: int = 32 << 20
    compression: int = COMPRESSION_NONE
    block_size: int = 64 * 1024
    table_block_sizes: tuple[tuple[int, int], ...] = ()

    def input_object_ids(self) -> list[int]:
        return [s.object_id for lv in self.inputs for s in lv.ssts]

    def input_bytes(self) -> int:
        return sum(s.file_size for lv in self.inputs for s in lv.ssts)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.task_id,
            "inputs": [
                {"level": i.level_idx, "sub": i.sub_level_id, "ssts": [s.to_json() for s in i.ssts]}
                for i in self.inputs
            ],
            "target": self.target_level,
            "target_sub": self.target_sub_level_id,
            "watermark": self.watermark,
            "gc": self.gc_delete_keys,
            "dropped": list(self.dropped_table_ids),
            "wms": {str(k): v.to_json() for k, v in self.table_watermarks.items()},
            "file_size": self.target_file_size,
            "compression": self.compression,
            "block_size": self.block_size,
            "table_block_sizes": [list(p) for p in self.table_block_sizes],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CompactTask:
        return cls(
            task_id=d["id"],
            inputs=tuple(
                InputLevel(i["level"], i["sub"], tuple(SstableInfo.from_json(s) for s in i["ssts"]))
                for i in d["inputs"]
            ),
            target_level=d["target"],
            target_sub_level_id=d["target_sub"],
            watermark=d["watermark"],
            gc_delete_keys=d["gc"],
            dropped_table_ids=tuple(d["dropped"]),
            table_watermarks={int(k): TableWatermark.from_json(v) for k, v in d["wms"].items()},
            target_file_size=d["file_size"],
            compression=d["compression"],
            block_size=d["block_size"],
            # absent in tasks written before per-table block sizes
            table_block_sizes=tuple((int(t), int(b)) for t, b in d.get("table_block_sizes", [])),
        )


# ---------------------------------------------------------------------------------------------
# Picker
# ---------------------------------------------------------------------------------------------


def level_targets(version: HummockVersion, cfg: CompactionConfig) -> tuple[int, dict[int, int]]:
    """(base level, target bytes per level) with a dynamic level base: the bottom level's target is
    its current size, each level above is `multiplier` times smaller, and L0 compacts into the
    highest level whose target still exceeds `max_bytes_for_level_base`."""
    bottom_size = max(version.level(MAX_LEVEL).total_size, cfg.max_bytes_for_level_base)
    targets = {MAX_LEVEL: bottom_size}
    base = MAX_LEVEL
    while base > 1 and targets[base] > cfg.max_bytes_for_level_base:
        targets[base - 1] = targets[base] // cfg.level_multiplier
        base -= 1
    # levels above the base hold nothing in steady state; if they do (config changed), drain them
    for i in range(1, base):
        targets[i] = 0
    return base, targets


def pick_compaction(
    version: HummockVersion,
    cfg: CompactionConfig,
    *,
    task_id: int,
    watermark: int,
    dropped_table_ids: Iterable[int] = (),
) -> CompactTask | None:
    """The most urgent compaction for `version`, or None."""
    base, targets = level_targets(version, cfg)
    # L0 holds the newest data: it must never land below data already in a shallower level
    nonempty = [i for i in range(1, MAX_LEVEL + 1) if version.level(i).ssts]
    if nonempty:
        base = min(base, nonempty[0])
    dropped = tuple(sorted(set(dropped_table_ids)))

    def task(inputs: list[InputLevel], target: int, target_sub: int = 0) -> CompactTask:
        # tombstones may go only when no older version can hide below the output: nothing deeper
        # (inputs take every overlapping SST of the target level, and all older L0 sub-levels)
        deeper_has_data = any(version.level(i).ssts for i in range(max(target, 1) + 1, MAX_LEVEL + 1))
        gc = target > 0 and not deeper_has_data
        return CompactTask(
            task_id=task_id,
            inputs=tuple(inputs),
            target_level=target,
            target_sub_level_id=target_sub,
            watermark=watermark,
            gc_delete_keys=gc,
            dropped_table_ids=dropped,
            # only watermarks no pinned snapshot predates may drop rows physically
            table_watermarks={t: w for t, w in version.table_watermarks.items() if w.epoch <= watermark},
            target_file_size=cfg.target_file_size,
            compression=cfg.compression,
            block_size=cfg.block_size,
            table_block_sizes=cfg.table_block_sizes,
        )

    l0 = list(version.l0)
    l0_size = sum(lv.total_size for lv in l0)
    if len(l0) >= cfg.level0_trigger_sub_levels:
        base_size = version.level(base).total_size
        if len(l0) >= 2 and l0_size * 4 < base_size:
            # tier the oldest adjacent sub-levels into one instead of rewriting the large base level
            picked = l0[-cfg.level0_max_sub_levels_per_task :]
            inputs = [InputLevel(0, lv.sub_level_id, lv.ssts) for lv in picked]
            return task(inputs, 0, picked[0].sub_level_id)
        # L0 -> base: all sub-levels (oldest last) plus the overlapping base SSTs
        picked = l0
        inputs = [InputLevel(0, lv.sub_level_id, lv.ssts) for lv in picked]
        lo = min(s.smallest_user_key for lv in picked for s in lv.ssts)
        hi = max(s.largest_user_key for lv in picked for s in lv.ssts)
        overlap = tuple(
            s
            for s in version.level(base).ssts
            if s.overlaps_user_range(lo, None) and s.smallest_user_key <= hi
        )
        inputs.append(InputLevel(base, 0, overlap))
        return task(inputs, base)
    # Li -> Li+1 by size score
    best: tuple[float, int] | None = None
    for i in range(1, MAX_LEVEL):
        size = version.level(i).total_size
        if not size:
            continue
        score = size / targets[i] if targets[i] else float("inf")
        if score > 1.0 and (best is None or score > best[0]):
            best = (score, i)
    if best is None:
        return _pick_dropped_table_cleanup(version, dropped, task) or _pick_watermark_cleanup(
            version, {t: w for t, w in version.table_watermarks.items() if w.epoch <= watermark}, task
        )
    lvl = best[1]
    src = version.level(lvl).ssts
    # pick the SST with the most overlap-free payload first: the largest (simple, deterministic)
    victim = max(src, key=lambda s: (s.file_size, -s.object_id))
    nxt = tuple(
        s
        for s in version.level(lvl + 1).ssts
        if s.overlaps_user_range(victim.smallest_user_key, None)
        and s.smallest_user_key <= victim.largest_user_key
    )
    return task([InputLevel(lvl, 0, (victim,)), InputLevel(lvl + 1, 0, nxt)], lvl + 1)


def _pick_dropped_table_cleanup(
    version: HummockVersion, dropped: tuple[int, ...], task: Any
) -> CompactTask | None:
    """Rewrite the SSTs of the deepest level holding keys of dropped tables (space reclaim)."""
    if not dropped:
        return None
    ds = set(dropped)
    for i in range(MAX_LEVEL, 0, -1):
        # one SST at a time: merging SSTs that are not neighbours would overlap the ones between
        victim = next((s for s in version.level(i).ssts if ds & set(s.table_ids)), None)
        if victim is not None:
            return task([InputLevel(i, 0, (victim,))], i)
    subs = [lv for lv in version.l0 if any(ds & set(s.table_ids) for s in lv.ssts)]
    if subs and len(version.l0) >= 1:
        picked = list(version.l0)
        return task([InputLevel(0, lv.sub_level_id, lv.ssts) for lv in picked], 0, picked[0].sub_level_id)
    return None


def _pick_watermark_cleanup(
    version: HummockVersion, wms: dict[int, TableWatermark], task: Any
) -> CompactTask | None:
    """Rewrite the deepest SST whose first rows are below its table's watermark (they are dead;
    reads already skip them, compaction reclaims the space). After the rewrite its first key is
    at or above the watermark, so the same SST is not picked again."""
    from piestream.encoding.keys import TABLE_ID_LEN, TABLE_PREFIX_LEN

    if not wms:
        return None
    for i in range(MAX_LEVEL, 0, -1):
        for s in version.level(i).ssts:
            uk = s.smallest_user_key
            tid = int.from_bytes(uk[:TABLE_ID_LEN], "big")
            wm = wms.get(tid)
            if wm is None:
                continue
            key = wm.key_for_vnode(int.from_bytes(uk[TABLE_ID_LEN:TABLE_PREFIX_LEN], "big"))
            if key is not None and uk[TABLE_PREFIX_LEN:] < key:
                return task([InputLevel(i, 0, (s,))], i)
    return None


# ---------------------------------------------------------------------------------------------
# Compactor
# ---------------------------------------------------------------------------------------------


class _Retention:
    """The keep/drop decision per entry, carried across batch boundaries."""

    def __init__(self, task: CompactTask) -> None:
        self.task = task
        self.prev_user_key: bytes | None = None
        self.prev_le = False  # whether the previous entry (same user key) was at or below the watermark
        self.dropped = np.array(task.dropped_table_ids, dtype=np.uint32)

    def apply(self, batch: KvBatch) -> KvBatch:
        n = len(batch)
        uk = batch.user_keys()
        same = np.zeros(n, np.bool_)
        if n > 1:
            same[1:] = pc.equal(uk.slice(1), uk.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        same[0] = self.prev_user_key is not None and uk[0].as_py() == self.prev_user_key
        le = batch.epochs() <= np.uint64(self.task.watermark)
        prev_le = np.empty(n, np.bool_)
        prev_le[0] = self.prev_le
        prev_le[1:] = le[:-1]
        first_le = le & (~same | ~prev_le)
        keep = ~le | first_le
        if self.task.gc_delete_keys:
            keep &= ~(first_le & batch.is_delete())
        if len(self.dropped):
            r = Ragged.from_arrow(batch.keys)
            tids = r.data[r.offsets[:-1][:, None] + np.arange(TABLE_ID_LEN)].copy().view(">u4")[:, 0]
            keep &= ~np.isin(tids, self.dropped)
        if self.task.table_watermarks:
            keep &= ~below_watermark(uk, self.task.table_watermarks)
        self.prev_user_key = uk[n - 1].as_py()
        self.prev_le = bool(le[-1])
        return batch.filter(keep)


def compaction_input(store: SstableStore, task: CompactTask) -> MergeIterator:
    """All entries of the task's inputs, merged (newest input level first)."""
    inputs: list[Iterable[KvBatch]] = []
    for lv in task.inputs:
        if lv.overlapping:
            inputs += [SstableIterator(store, s) for s in lv.ssts]
        elif lv.ssts:
            inputs.append(ConcatIterator(store, sorted(lv.ssts, key=lambda s: s.smallest_key)))
    return MergeIterator(inputs)


class CompactionCancelled(Exception):
    """The compactor was asked to stop (shutdown) before the task finished; nothing was reported,
    and the SSTs it already uploaded are referenced by no version (full GC removes them)."""


def run_compaction(
    store: SstableStore, task: CompactTask, should_stop: Callable[[], bool] | None = None
) -> list[SstableInfo]:
    """Execute a task: merge, filter by retention, write output SSTs of about the target size.

    `should_stop` is asked before each output SST is built, so a shutdown waits for at most one
    SST's build instead of the whole task (raises `CompactionCancelled`)."""
    retention = _Retention(task)
    out: list[SstableInfo] = []
    pending: list[KvBatch] = []
    pending_bytes = 0
    for batch in _retained(compaction_input(store, task), retention):
        if should_stop is not None and should_stop():
            raise CompactionCancelled(f"compaction task {task.task_id} cancelled")
        pending.append(batch)
        pending_bytes += batch.nbytes()
        if pending_bytes >= 2 * task.target_file_size:
            merged = KvBatch.concat(pending)
            parts = split_at_user_keys(merged, task.target_file_size)
            # keep the last piece: later entries may still belong to its last user key
            out += [_upload(store, task, p) for p in parts[:-1]]
            pending = [parts[-1]]
            pending_bytes = parts[-1].nbytes()
    if pending:
        out += [
            _upload(store, task, p)
            for p in split_at_user_keys(KvBatch.concat(pending), task.target_file_size)
        ]
    return out


def _retained(batches: Iterable[KvBatch], retention: _Retention) -> Iterator[KvBatch]:
    for b in batches:
        if len(b):
            kept = retention.apply(b)
            if len(kept):
                yield kept


def _upload(store: SstableStore, task: CompactTask, batch: KvBatch) -> SstableInfo:
    built = build_sstable(
        batch,
        block_size=task.block_size,
        compression=task.compression,
        table_block_sizes=dict(task.table_block_sizes),
    )
    return store.upload(built)


def result_levels(
    task: CompactTask, outputs: list[SstableInfo]
) -> tuple[list[Level], dict[int, tuple[SstableInfo, ...]]]:
    """How a finished task changes levels: (new L0 sub-levels, SSTs added per level)."""
    if task.target_level == 0:
        return ([Level(0, tuple(outputs), task.target_sub_level_id)] if outputs else []), {}
    return [], {task.target_level: tuple(outputs)}
