"""Fragments, their dispatch edges, and the fragment graph (DESIGN "Spark, concretely").

A fragment is a chain (tree) of executors without an exchange inside; it runs as `parallelism`
actors, actor i owning the i-th contiguous range of the vnodes. Fragments connect through
dispatch edges (how one fragment's output chunks reach the actors of a downstream one). The graph
of every running streaming job is what one epoch's Spark job executes. All of it is plan data:
meta stores it (`piestream.plan.serde`), the runtime runs it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from piestream.common.types import DataType
from piestream.common.vnode import VNODE_COUNT, VnodeBitmap, actor_vnodes
from piestream.plan.node import DmlNode, ExchangeNode, StreamNode
from piestream.storage.table.desc import TableDesc

ACTOR_INDEX_BITS = 16


class DispatchKind(enum.Enum):
    HASH = "hash"
    BROADCAST = "broadcast"
    SIMPLE = "simple"
    NO_SHUFFLE = "no_shuffle"


@dataclass(frozen=True)
class DispatchEdge:
    """An edge from one fragment's output to a downstream fragment's input port."""

    downstream_fragment_id: int
    kind: DispatchKind
    downstream_parallelism: int
    dist_key: tuple[int, ...] = ()
    dist_types: tuple[DataType, ...] = ()
    vnode_count: int = VNODE_COUNT
    #: the upstream output columns this edge carries, in order (None: all). A table's edges to
    #: the jobs that read it before ALTER TABLE ADD COLUMN keep the columns they were planned
    #: for (RisingWave's dispatcher ``output_indices``); `dist_key` indexes the carried columns.
    output_indices: tuple[int, ...] | None = field(default=None, metadata={"since_format": 4})

    def explain(self) -> str:
        key = f"({', '.join(f'${i}' for i in self.dist_key)})" if self.kind is DispatchKind.HASH else ""
        cols = "" if self.output_indices is None else f" [{', '.join(f'${i}' for i in self.output_indices)}]"
        return f"{self.kind.value}{key}{cols} -> fragment {self.downstream_fragment_id}"


def actor_id(fragment_id: int, index: int) -> int:
    return (fragment_id << ACTOR_INDEX_BITS) | index


@dataclass(frozen=True)
class Fragment:
    fragment_id: int
    job_id: int
    root: StreamNode
    parallelism: int = 1
    vnode_count: int = VNODE_COUNT  # 1 for singleton fragments
    outputs: tuple[DispatchEdge, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.parallelism <= self.vnode_count:
            raise ValueError(f"fragment {self.fragment_id}: parallelism {self.parallelism} out of range")

    @property
    def singleton(self) -> bool:
        return self.vnode_count == 1

    def actor_ids(self) -> list[int]:
        return [actor_id(self.fragment_id, i) for i in range(self.parallelism)]

    def vnode_bitmap(self, index: int) -> VnodeBitmap:
        return actor_vnodes(self.parallelism, index, self.vnode_count)

    def upstream_fragment_ids(self) -> list[int]:
        return sorted({n.upstream_fragment_id for n in self.root.walk() if isinstance(n, ExchangeNode)})

    def dml_table_ids(self) -> list[int]:
        return sorted({n.table_id for n in self.root.walk() if isinstance(n, DmlNode)})

    def tables(self) -> list[TableDesc]:
        return [t for n in self.root.walk() for t in n.tables()]

    def with_outputs(self, outputs: Iterable[DispatchEdge]) -> Fragment:
        return replace(self, outputs=tuple(outputs))


@dataclass(frozen=True)
class StreamGraph:
    """Fragments of the running jobs, by id: an immutable value (a change makes a new graph), so
    a reader — an epoch being planned, a DDL statement looking up an upstream — holds a snapshot
    no other thread changes under it."""

    fragments: Mapping[int, Fragment] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not isinstance(self.fragments, MappingProxyType):
            object.__setattr__(self, "fragments", MappingProxyType(dict(self.fragments)))

    def with_fragments(self, fragments: Iterable[Fragment]) -> StreamGraph:
        """This graph with `fragments` added (a fragment of an existing id replaces it)."""
        out = dict(self.fragments)
        out.update((f.fragment_id, f) for f in fragments)
        return StreamGraph(out)

    def without_job(self, job_id: int) -> tuple[StreamGraph, list[Fragment]]:
        """This graph without the job's fragments (and the edges into them), and those fragments."""
        gone = [f for f in self.fragments.values() if f.job_id == job_id]
        ids = {f.fragment_id for f in gone}
        out: dict[int, Fragment] = {}
        for fid, f in self.fragments.items():
            if fid in ids:
                continue
            if any(e.downstream_fragment_id in ids for e in f.outputs):
                f = f.with_outputs(e for e in f.outputs if e.downstream_fragment_id not in ids)
            out[fid] = f
        return StreamGraph(out), gone

    def all_tables(self) -> list[TableDesc]:
        return [t for f in self.fragments.values() for t in f.tables()]
