"""Hummock versions (seed 001 "Transaction Management with Hummock Manager").

A version is the list of SSTs a reader may read, organized in levels: L0 is a list of
*sub-levels*, newest first, each the SSTs of one commit or one intra-L0 compaction (sub-levels may
overlap each other); L1..Ln each hold non-overlapping SSTs sorted by key. A version also records
each table's committed epoch and `max_committed_epoch`, and the table watermarks below which rows
are dead. Every change (a committed epoch, a compaction) is a `VersionDelta` applied to the
previous version; deltas and periodic full checkpoints are what the meta store persists.
"""

from __future__ import annotations

import base64
import bisect
from dataclasses import dataclass, field, replace
from typing import Any

from piestream.encoding.keys import EPOCH_LEN

MAX_LEVEL = 6


@dataclass(frozen=True)
class SstableInfo:
    """What a version knows about one SST object."""

    object_id: int
    file_size: int
    meta_offset: int
    smallest_key: bytes  # full keys
    largest_key: bytes
    table_ids: tuple[int, ...]
    key_count: int
    min_epoch: int
    max_epoch: int

    @property
    def path(self) -> str:
        return sst_path(self.object_id)

    @property
    def smallest_user_key(self) -> bytes:
        return self.smallest_key[:-EPOCH_LEN]

    @property
    def largest_user_key(self) -> bytes:
        return self.largest_key[:-EPOCH_LEN]

    def overlaps_user_range(self, start: bytes | None, end: bytes | None) -> bool:
        """Whether the SST may hold user keys in [start, end) (None = unbounded)."""
        if end is not None and self.smallest_user_key >= end:
            return False
        return not (start is not None and self.largest_user_key < start)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.object_id,
            "size": self.file_size,
            "meta": self.meta_offset,
            "lo": _b64(self.smallest_key),
            "hi": _b64(self.largest_key),
            "tables": list(self.table_ids),
            "keys": self.key_count,
            "e0": self.min_epoch,
            "e1": self.max_epoch,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SstableInfo:
        return cls(
            d["id"],
            d["size"],
            d["meta"],
            _unb64(d["lo"]),
            _unb64(d["hi"]),
            tuple(d["tables"]),
            d["keys"],
            d["e0"],
            d["e1"],
        )


def sst_path(object_id: int) -> str:
    return f"hummock/sst/{object_id:016x}.sst"


def object_id_of_path(path: str) -> int | None:
    name = path.rsplit("/", 1)[-1]
    if not (path.startswith("hummock/sst/") and name.endswith(".sst")):
        return None
    try:
        return int(name[:-4], 16)
    except ValueError:
        return None


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _unb64(s: str) -> bytes:
    return base64.b64decode(s)


@dataclass(frozen=True)
class Level:
    """L0 sub-level (may overlap other sub-levels) or a level L1..Ln (non-overlapping, sorted)."""

    level_idx: int
    ssts: tuple[SstableInfo, ...]
    sub_level_id: int = 0  # L0 only: increasing with recency

    @property
    def total_size(self) -> int:
        return sum(s.file_size for s in self.ssts)

    def ssts_for_user_key(self, ukey: bytes) -> list[SstableInfo]:
        """For a non-overlapping level: the (at most one) SST whose range holds `ukey`."""
        los = [s.smallest_user_key for s in self.ssts]
        i = bisect.bisect_right(los, ukey) - 1
        if i >= 0 and self.ssts[i].largest_user_key >= ukey:
            return [self.ssts[i]]
        return []

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level_idx, "sub": self.sub_level_id, "ssts": [s.to_json() for s in self.ssts]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Level:
        return cls(d["level"], tuple(SstableInfo.from_json(s) for s in d["ssts"]), d["sub"])


@dataclass(frozen=True)
class TableWatermark:
    """Per vnode, the watermark of a table: rows whose first pk column (right after the vnode)
    encodes below `key` are dead; reads skip them and compaction drops them (reference §4.2)."""

    epoch: int
    ranges: tuple[tuple[int, int, bytes], ...]  # (first vnode, end vnode exclusive, watermark key)

    def key_for_vnode(self, vnode: int) -> bytes | None:
        for lo, hi, key in self.ranges:
            if lo <= vnode < hi:
                return key
        return None

    def merged(self, newer: TableWatermark) -> TableWatermark:
        """Per vnode the larger of the two watermarks (a watermark never moves back)."""
        per_vnode: dict[int, bytes] = {}
        for w in (self, newer):
            for lo, hi, key in w.ranges:
                for v in range(lo, hi):
                    per_vnode[v] = max(per_vnode.get(v, key), key)
        ranges: list[tuple[int, int, bytes]] = []
        for v in sorted(per_vnode):
            key = per_vnode[v]
            if ranges and ranges[-1][1] == v and ranges[-1][2] == key:
                ranges[-1] = (ranges[-1][0], v + 1, key)
            else:
                ranges.append((v, v + 1, key))
        return TableWatermark(max(self.epoch, newer.epoch), tuple(ranges))

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "ranges": [[lo, hi, _b64(k)] for lo, hi, k in self.ranges]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TableWatermark:
        return cls(d["epoch"], tuple((lo, hi, _unb64(k)) for lo, hi, k in d["ranges"]))


@dataclass(frozen=True)
class HummockVersion:
    """An immutable snapshot of the LSM."""

    id: int
    l0: tuple[Level, ...] = ()  # sub-levels, newest first
    levels: tuple[Level, ...] = field(
        default_factory=lambda: tuple(Level(i, ()) for i in range(1, MAX_LEVEL + 1))
    )
    table_committed_epoch: dict[int, int] = field(default_factory=dict)
    max_committed_epoch: int = 0
    table_watermarks: dict[int, TableWatermark] = field(default_factory=dict)
    next_sub_level_id: int = 1

    def all_ssts(self) -> list[SstableInfo]:
        out = [s for lv in self.l0 for s in lv.ssts]
        out += [s for lv in self.levels for s in lv.ssts]
        return out

    def object_ids(self) -> set[int]:
        return {s.object_id for s in self.all_ssts()}

    def level(self, idx: int) -> Level:
        return self.levels[idx - 1]

    def apply(self, delta: VersionDelta) -> HummockVersion:
        """The version after `delta`."""
        if delta.prev_id != self.id:
            raise ValueError(f"delta {delta.id} applies to version {delta.prev_id}, not {self.id}")
        removed = set(delta.removed_object_ids)
        l0 = [
            Level(0, tuple(s for s in lv.ssts if s.object_id not in removed), lv.sub_level_id)
            for lv in self.l0
        ]
        levels = [
            Level(lv.level_idx, tuple(s for s in lv.ssts if s.object_id not in removed)) for lv in self.levels
        ]
        next_sub = self.next_sub_level_id
        for new in delta.new_l0_sub_levels:
            # a compaction's intra-L0 output replaces its inputs at the position of the newest input
            pos = _insert_position(l0, new.sub_level_id)
            l0.insert(pos, new)
            next_sub = max(next_sub, new.sub_level_id + 1)
        for lvl_idx, ssts in delta.added_to_levels.items():
            cur = list(levels[lvl_idx - 1].ssts) + list(ssts)
            cur.sort(key=lambda s: s.smallest_key)
            levels[lvl_idx - 1] = Level(lvl_idx, tuple(cur))
        committed = dict(self.table_committed_epoch)
        for t in delta.removed_table_ids:
            committed.pop(t, None)
        committed.update(delta.table_committed_epoch)
        watermarks = dict(self.table_watermarks)
        for t in delta.removed_table_ids:
            watermarks.pop(t, None)
        for t, w in delta.new_table_watermarks.items():
            watermarks[t] = watermarks[t].merged(w) if t in watermarks else w
        return HummockVersion(
            id=delta.id,
            l0=tuple(lv for lv in l0 if lv.ssts),
            levels=tuple(levels),
            table_committed_epoch=committed,
            max_committed_epoch=max(self.max_committed_epoch, delta.max_committed_epoch),
            table_watermarks=watermarks,
            next_sub_level_id=next_sub,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "l0": [lv.to_json() for lv in self.l0],
            "levels": [lv.to_json() for lv in self.levels],
            "committed": {str(k): v for k, v in self.table_committed_epoch.items()},
            "max_committed": self.max_committed_epoch,
            "watermarks": {str(k): v.to_json() for k, v in self.table_watermarks.items()},
            "next_sub": self.next_sub_level_id,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HummockVersion:
        return cls(
            id=d["id"],
            l0=tuple(Level.from_json(x) for x in d["l0"]),
            levels=tuple(Level.from_json(x) for x in d["levels"]),
            table_committed_epoch={int(k): v for k, v in d["committed"].items()},
            max_committed_epoch=d["max_committed"],
            table_watermarks={int(k): TableWatermark.from_json(v) for k, v in d["watermarks"].items()},
            next_sub_level_id=d["next_sub"],
        )

    def with_id(self, id_: int) -> HummockVersion:
        return replace(self, id=id_)


def _insert_position(l0: list[Level], sub_level_id: int) -> int:
    """Keep L0 sorted by sub-level id, newest (largest) first."""
    for i, lv in enumerate(l0):
        if lv.sub_level_id < sub_level_id:
            return i
    return len(l0)


@dataclass(frozen=True)
class VersionDelta:
    """The change from version `prev_id` to version `id`."""

    id: int
    prev_id: int
    new_l0_sub_levels: tuple[Level, ...] = ()
    added_to_levels: dict[int, tuple[SstableInfo, ...]] = field(default_factory=dict)
    removed_object_ids: tuple[int, ...] = ()
    table_committed_epoch: dict[int, int] = field(default_factory=dict)
    max_committed_epoch: int = 0
    new_table_watermarks: dict[int, TableWatermark] = field(default_factory=dict)
    removed_table_ids: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "prev": self.prev_id,
            "l0": [lv.to_json() for lv in self.new_l0_sub_levels],
            "add": {str(k): [s.to_json() for s in v] for k, v in self.added_to_levels.items()},
            "rm": list(self.removed_object_ids),
            "committed": {str(k): v for k, v in self.table_committed_epoch.items()},
            "max_committed": self.max_committed_epoch,
            "watermarks": {str(k): v.to_json() for k, v in self.new_table_watermarks.items()},
            "rm_tables": list(self.removed_table_ids),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VersionDelta:
        return cls(
            id=d["id"],
            prev_id=d["prev"],
            new_l0_sub_levels=tuple(Level.from_json(x) for x in d["l0"]),
            added_to_levels={int(k): tuple(SstableInfo.from_json(s) for s in v) for k, v in d["add"].items()},
            removed_object_ids=tuple(d["rm"]),
            table_committed_epoch={int(k): v for k, v in d["committed"].items()},
            max_committed_epoch=d["max_committed"],
            new_table_watermarks={int(k): TableWatermark.from_json(v) for k, v in d["watermarks"].items()},
            removed_table_ids=tuple(d["rm_tables"]),
        )
