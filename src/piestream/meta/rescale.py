"""Online rescaling: which fragments a ``SET PARALLELISM`` changes, and to what (RisingWave's
``ScaleController``, reduced to what piestream's plans need).

Rescaling is a remapping, not a data copy: a fragment of parallelism P gives actor i the i-th
contiguous range of its vnodes (`Fragment.vnode_bitmap`), every state table is keyed by vnode,
and actors are built afresh each epoch from the committed state, so a fragment with a new
parallelism reads exactly its new actors' vnodes at the next epoch. Operator caches follow by
themselves (`WORKER_CACHES.acquire` is keyed by the actor's vnode bitmap). What must change
together, in one meta-store transaction between two epochs (`DdlController.rescale`):

- **No-shuffle groups.** Fragments joined by NO_SHUFFLE edges run actor i → actor i, so they
  must keep one parallelism. A group is rescaled only if every fragment of it that has no
  no-shuffle input (its roots) belongs to the altered job: an MV's fragment that reads a table
  without a shuffle follows the table (ALTER TABLE rescales it with the table), as in RisingWave.
- **Singletons** (vnode count 1) stay at 1.
- **Upstream dispatchers** follow: every edge into a rescaled fragment gets its new
  ``downstream_parallelism`` (hash edges then route by the new vnode ranges).
- **Source splits** are re-spread: actor i owns the splits at positions ≡ i (mod P) and their
  offsets live per split, not per actor, so a group with a source is capped at its split count.

Refused with 0A000 (never silently wrong): a fragment whose state is kept per actor index
rather than per vnode (the watermark filter's), a source fused with the table it fills when the
table is stored by its primary key (created at parallelism 1: rows would land on actors that do
not own their vnodes), a job still backfilling, and a job none of whose fragments the statement
may change (it says which relation to alter instead).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.vnode import split_vnodes
from piestream.plan.fragment import DispatchKind, Fragment, StreamGraph
from piestream.plan.materialize import MaterializeNode
from piestream.plan.node import InputPortNode
from piestream.plan.row_id_gen import RowIdGenNode
from piestream.plan.source import SourceNode
from piestream.plan.watermark import WatermarkFilterNode


@dataclass(frozen=True)
class RescalePlan:
    """The fragments a rescale replaces (new parallelism and/or new output edges)."""

    fragments: tuple[Fragment, ...]
    parallelism: Mapping[int, int]  # rescaled fragment id -> its new parallelism
    capped: tuple[str, ...] = ()  # notices: groups limited by their source's splits

    @property
    def changed(self) -> bool:
        return bool(self.parallelism)


def no_shuffle_groups(graph: StreamGraph) -> list[set[int]]:
    """The fragments of the graph joined by NO_SHUFFLE edges (either way), one set per group."""
    parent = {fid: fid for fid in graph.fragments}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for fid, f in graph.fragments.items():
        for e in f.outputs:
            if e.kind is DispatchKind.NO_SHUFFLE and e.downstream_fragment_id in parent:
                parent[find(fid)] = find(e.downstream_fragment_id)
    groups: dict[int, set[int]] = {}
    for fid in graph.fragments:
        groups.setdefault(find(fid), set()).add(fid)
    return list(groups.values())


def _roots(graph: StreamGraph, group: set[int]) -> set[int]:
    """Fragments of a no-shuffle group with no no-shuffle input."""
    fed = {
        e.downstream_fragment_id
        for fid in group
        for e in graph.fragments[fid].outputs
        if e.kind is DispatchKind.NO_SHUFFLE
    }
    return group - fed


def _gathered(graph: StreamGraph) -> set[int]:
    """Fragments that run one actor by their plan, not by a parallelism: fed by a SIMPLE edge
    (everything gathered into actor 0: a top-n over all rows, or a job planned at parallelism 1,
    whose edges carry no distribution key to hash by) or reading nothing (VALUES)."""
    out = {
        e.downstream_fragment_id
        for f in graph.fragments.values()
        for e in f.outputs
        if e.kind is DispatchKind.SIMPLE
    }
    for fid, f in graph.fragments.items():
        nodes = list(f.root.walk())
        leaf_only = not any(isinstance(n, InputPortNode | SourceNode) for n in nodes)
        if f.parallelism == 1 and leaf_only:
            out.add(fid)
    return out


def _refuse_unsafe(f: Fragment, name: str) -> None:
    nodes = list(f.root.walk())
    if any(isinstance(n, WatermarkFilterNode) for n in nodes):
        raise FeatureNotSupported(
            f'cannot change the parallelism of "{name}": fragment {f.fragment_id} has a watermark '
            "filter, whose state is kept per actor index, not per vnode"
        )
    fused_pk_table = (
        any(isinstance(n, SourceNode) for n in nodes)
        and any(isinstance(n, MaterializeNode) for n in nodes)
        and not any(isinstance(n, RowIdGenNode) for n in nodes)
    )
    if fused_pk_table:
        raise FeatureNotSupported(
            f'cannot change the parallelism of "{name}": its source feeds the table without a '
            "shuffle by the primary key (it was created at parallelism 1), so a row would land on "
            "an actor that does not own its vnode",
            hint="Recreate the table with SET streaming_parallelism to the parallelism wanted.",
        )


def can_rescale(fragments: Iterable[Fragment]) -> bool:
    """Whether none of a new job's fragments is one `plan_rescale` refuses to change (such a job
    is created FIXED even where ADAPTIVE is the default: it could never follow the slots)."""
    try:
        for f in fragments:
            _refuse_unsafe(f, "")
    except FeatureNotSupported:
        return False
    return True


def plan_rescale(
    graph: StreamGraph, job_id: int, parallelism: int, name: str, *, following: bool = False
) -> RescalePlan:
    """The fragments to replace so that job `job_id` runs at `parallelism` (see the module doc).
    `following` (an ADAPTIVE job following the slots): a job whose every fragment follows its
    upstream is left alone, not refused."""
    own = {fid for fid, f in graph.fragments.items() if f.job_id == job_id}
    if not own:
        raise PiestreamError(f'"{name}" has no running streaming job', sqlstate="55000")
    new_par: dict[int, int] = {}
    capped: list[str] = []
    followed: list[int] = []  # fragments left alone because another job's fragment leads them
    gathered = _gathered(graph)
    for group in no_shuffle_groups(graph):
        if not group & own:
            continue
        frags = [graph.fragments[fid] for fid in sorted(group)]
        if any(f.singleton or f.fragment_id in gathered for f in frags):
            continue
        roots = _roots(graph, group)
        foreign = sorted({graph.fragments[r].job_id for r in roots} - {job_id})
        if foreign:
            followed.extend(sorted(group & own))
            continue
        target = parallelism
        splits = [n.max_parallelism for f in frags for n in f.root.walk() if isinstance(n, SourceNode)]
        if splits and min(splits) < target:
            target = min(splits)
            capped.append(
                f"fragments {', '.join(map(str, sorted(group)))} run {target} actors: one per source split"
            )
        if target < 1 or any(target > f.vnode_count for f in frags):
            raise PiestreamError(f"parallelism {parallelism} is out of range", sqlstate="22023")
        if all(f.parallelism == target for f in frags):
            continue
        for f in frags:
            _refuse_unsafe(f, name)
            new_par[f.fragment_id] = target
    if not new_par and own <= set(followed) and not following:
        raise FeatureNotSupported(
            f'cannot change the parallelism of "{name}": every fragment of it reads its upstream '
            "without a shuffle, so its parallelism follows the upstream's",
            hint="Alter the parallelism of the table or materialized view it reads.",
        )
    changed: dict[int, Fragment] = {}
    for fid, p in new_par.items():
        changed[fid] = replace(graph.fragments[fid], parallelism=p)
    for fid, f in graph.fragments.items():
        if any(e.downstream_fragment_id in new_par for e in f.outputs):
            base = changed.get(fid, f)
            changed[fid] = base.with_outputs(
                replace(e, downstream_parallelism=new_par[e.downstream_fragment_id])
                if e.downstream_fragment_id in new_par
                else e
                for e in base.outputs
            )
    return RescalePlan(tuple(changed[k] for k in sorted(changed)), new_par, tuple(capped))


def actor_vnode_ranges(f: Fragment) -> str:
    """``actor index: first-last`` vnode ranges of a fragment's actors (rw_fragments)."""
    if f.singleton:
        return "0: singleton"
    parts = []
    for i, bm in enumerate(split_vnodes(f.parallelism, f.vnode_count)):
        parts.append(f"{i}: " + ", ".join(f"{a}-{b - 1}" for a, b in bm.ranges()))
    return "; ".join(parts)
