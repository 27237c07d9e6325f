"""Cutting a stream plan into fragments at its exchanges (DESIGN "Spark, concretely").

Below each exchange marker starts a new fragment; the marker becomes an `ExchangeNode` leaf of
the fragment above and a dispatch edge (hash by the marker's keys, or simple into a singleton) out
of the fragment below. A leaf reading an existing table's change stream (backfill) sits in a
fragment with that table's parallelism, fed by a no-shuffle edge from the table's fragment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from piestream.common.vnode import VNODE_COUNT
from piestream.frontend.stream_piece import ExchangeMarker
from piestream.plan.fragment import DispatchEdge, DispatchKind, Fragment
from piestream.plan.node import ExchangeNode, StreamNode
from piestream.plan.source import SourceNode


@dataclass
class FragmentedJob:
    fragments: list[Fragment]
    # edges to add to fragments of other (running) jobs: (upstream fragment id, edge)
    upstream_edges: list[tuple[int, DispatchEdge]] = field(default_factory=list)
    root_fragment_id: int = 0


@dataclass
class _Draft:
    fragment_id: int
    root: StreamNode | None = None
    entry: str = "none"  # how rows enter: "single", "hash", "upstream", "source", "none"
    upstream_parallelism: int = 0
    outputs: list[tuple[int, ExchangeMarker]] = field(default_factory=list)  # (downstream id, marker)
    relay_to: int | None = None  # a relay: placed like, and no-shuffle into, this fragment


def fragment_job(
    root: StreamNode,
    *,
    job_id: int,
    parallelism: int,
    next_fragment_id: Callable[[], int],
    upstream_parallelism: Callable[[int], int],
) -> FragmentedJob:
    drafts: dict[int, _Draft] = {}
    upstream_edges: list[tuple[int, int]] = []  # (existing upstream fragment, new fragment)
    # the fragment cut below each exchange's input, by the input's identity: a shared subtree
    # (`frontend.share`) under several exchanges becomes one fragment with an output to each
    below_of: dict[int, _Draft] = {}

    def _below(marker: ExchangeMarker, draft: _Draft) -> int:
        """The fragment the rows under `marker` come from, into `draft`."""
        child = below_of.get(id(marker.input))
        if child is None:
            child = _Draft(next_fragment_id())
            drafts[child.fragment_id] = child
            below_of[id(marker.input)] = child
            child.root = build(marker.input, child)
        same = [m for down, m in child.outputs if down == draft.fragment_id]
        if not same:
            child.outputs.append((draft.fragment_id, marker))
            return child.fragment_id
        if same[0].dist == marker.dist:
            return child.fragment_id  # the port already delivers these rows, so placed
        # the draft reads this fragment again, placed differently: its input port is named by the
        # sending fragment, so the rows come through a pass-through fragment of their own
        relay = _Draft(next_fragment_id(), relay_to=draft.fragment_id)
        drafts[relay.fragment_id] = relay
        relay.root = ExchangeNode(
            schema=marker.schema,
            stream_key=marker.stream_key,
            append_only=marker.append_only,
            upstream_fragment_id=child.fragment_id,
        )
        child.outputs.append((relay.fragment_id, marker))  # placed as `marker` says, actor i
        return relay.fragment_id  # ... forwarding to the draft's actor i (edge added below)

    def build(node: StreamNode, draft: _Draft) -> StreamNode:
        if isinstance(node, ExchangeMarker):
            upstream_id = _below(node, draft)
            if node.dist.kind == "single":
                draft.entry = "single"
            elif node.dist.kind == "broadcast":
                pass  # a broadcast input follows the parallelism the other inputs give
            elif draft.entry == "none":
                draft.entry = "hash"
            return ExchangeNode(
                schema=node.schema,
                stream_key=node.stream_key,
                append_only=node.append_only,
                upstream_fragment_id=upstream_id,
            )
        if isinstance(node, ExchangeNode):
            # the change stream of a table/MV maintained by another job: no-shuffle from its fragment
            upstream_edges.append((node.upstream_fragment_id, draft.fragment_id))
            if draft.entry != "single":
                draft.entry = "upstream"
            draft.upstream_parallelism = upstream_parallelism(node.upstream_fragment_id)
            return node
        if not node.children():
            if draft.entry == "none" and isinstance(node, SourceNode):
                draft.entry = "source"  # one actor per split, up to the job's parallelism
                draft.upstream_parallelism = node.max_parallelism
            elif draft.entry in ("none", "source"):
                draft.entry = "single"  # a source of rows with no input (Values)
            return node
        return node.with_children([build(c, draft) for c in node.children()])

    top = _Draft(next_fragment_id())
    drafts[top.fragment_id] = top
    top.root = build(root, top)

    def par(d: _Draft) -> int:
        if d.entry == "single":
            return 1
        if d.entry == "upstream":
            return d.upstream_parallelism
        if d.entry == "source":
            return min(parallelism, d.upstream_parallelism)
        return parallelism

    pars = {fid: par(d) for fid, d in drafts.items()}
    for d in drafts.values():
        if d.relay_to is not None:
            pars[d.fragment_id] = pars[d.relay_to]
    frags = []
    for fid, d in drafts.items():
        edges = []
        if d.relay_to is not None:
            edges.append(DispatchEdge(d.relay_to, DispatchKind.NO_SHUFFLE, pars[d.relay_to]))
        for down, marker in d.outputs:
            if marker.dist.kind == "broadcast" and pars[down] > 1:
                edges.append(DispatchEdge(down, DispatchKind.BROADCAST, pars[down]))
            elif marker.dist.kind == "single" or pars[down] == 1:
                edges.append(DispatchEdge(down, DispatchKind.SIMPLE, 1))
            else:
                keys = marker.dist.keys
                types = tuple(marker.schema[k].data_type for k in keys)
                edges.append(DispatchEdge(down, DispatchKind.HASH, pars[down], keys, types, VNODE_COUNT))
        assert d.root is not None
        frags.append(Fragment(fid, job_id, d.root, pars[fid], VNODE_COUNT, tuple(edges)))
    ups = [(up, DispatchEdge(down, DispatchKind.NO_SHUFFLE, pars[down])) for up, down in upstream_edges]
    return FragmentedJob(frags, ups, top.fragment_id)
