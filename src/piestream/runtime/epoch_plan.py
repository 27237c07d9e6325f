"""One epoch's job, planned for Spark: stages of actors connected by shuffles.

Every fragment gets a *stage* = its depth in the fragment graph (sources and tables at 0). Stage
k is one RDD whose partitions are the actors of all fragments at depth k; a shuffle
(`partitionBy` with an exact partition function) moves each emitted chunk to the partition of
its destination actor. Chunks for deeper stages and actor reports are forwarded from stage to
stage, so the whole epoch — every running streaming job — is one Spark job with
(max depth) shuffles, ending in a `collect` of the reports.

A Spark task has a fixed cost (~35-70 ms here, whatever it does), so a stage does not run one
task per actor: with `task_slots` = S > 0 it has n = min(S, actors) partitions and actor i of
fragment f runs in partition (f + i) mod n, next to the others of its partition, one after the
other. The rule depends on the actor alone (not on its position among the stage's actors), so
an actor keeps its partition, hence its worker process and caches (`runners.SparkRunner`), when
other jobs come and go.

A fragment whose only input is one upstream fragment over a no-shuffle edge (a table's rows
into the scan of an MV on it) runs in its upstream's stage and task: actor i right after the
upstream's actor i, fed its output in the task (`run_partition`), with no shuffle between them.
Partitions follow the chain's first fragment (its *root*), so both actors land in partition
(root + i) mod n. Otherwise every row a table writes would cross Spark's shuffle once more
before the MV sees it.

The plan holds each fragment in the plan format (`piestream.plan.serde`), not as the objects the
catalog and DDL statements share: it is an immutable snapshot, taken under the barrier manager's
lock, that Spark can serialize while other threads plan or look up those objects. A process
decodes a fragment once and keeps it while its bytes stay the same (`EpochPlan.fragment`).

A plan that crosses a socket (the leased runner's wire) is versioned JSON, never a pickle: whole
(`encode_plan`), or in two halves, its *body* (`encode_plan_body`: what stays while the jobs do,
sent to a worker once per digest) and each epoch's part (`encode_plan_epoch`: epochs, barrier,
version, with the SSTs the receiver holds as their ids). The connector registry, which holds
code, is not part of it: it travels in the Spark task closure and the decoders put it back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from piestream.common.chunk import StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.types import TypeKind
from piestream.common.vnode import actor_of_vnodes
from piestream.encoding.distribution import compute_vnodes
from piestream.plan.fragment import DispatchKind, Fragment, StreamGraph, actor_id
from piestream.plan.node import DmlNode
from piestream.plan.serde import decode_fragment
from piestream.runtime.data_plane import FRAME_BYTES
from piestream.runtime.exchange import (
    REPORT,
    Destination,
    Element,
    MalformedPayload,
    chunk_header,
    encode_chunk,
    encode_elements,
)
from piestream.storage.hummock.store import StorageOptions
from piestream.storage.hummock.version import HummockVersion, Level, SstableInfo
from piestream.stream.connector import Connectors, registered_connectors
from piestream.stream.executor import StreamingConfig
from piestream.stream.message import Barrier, BarrierKind

DRIVER_SOURCE_ACTOR = -1  # the "actor" DML chunks come from


@dataclass(frozen=True)
class EpochPlan:
    """Everything the tasks of one epoch need (pickled into SparkRunner's task closures, sent as
    `encode_plan` over the leased runner's wire)."""

    fragments: Mapping[int, bytes]  # fragment id -> the fragment in the plan format
    stages: tuple[tuple[tuple[int, int], ...], ...]  # per stage: (fragment id, actor index) per partition
    data_epoch: int  # what this epoch's writes carry
    barrier: Barrier  # closes the epoch: (curr = next epoch, prev = data_epoch)
    committed_epoch: int  # the state actors read
    version: HummockVersion
    store_url: str
    config: StreamingConfig = field(default_factory=StreamingConfig)
    storage_options: StorageOptions = field(default_factory=StorageOptions)
    task_slots: int = 0  # partitions per stage at most (0: one per actor)
    connectors: Connectors = field(default_factory=registered_connectors)  # the driver's registry
    # fragment id -> the first fragment of its no-shuffle chain, for fragments fused into their
    # upstream's stage (others are their own root)
    roots: Mapping[int, int] = field(default_factory=dict)
    #: filter table id -> its global watermark at `committed_epoch` (memcomparable, b"": none),
    #: for the tables the driver knows it of (`stream.watermark`): actors skip the table's scan
    global_watermarks: Mapping[int, bytes] = field(default_factory=dict)

    def root(self, fragment_id: int) -> int:
        return self.roots.get(fragment_id, fragment_id)

    def _groups(self, stage: int) -> list[tuple[int, int]]:
        """The stage's (root fragment, actor index) pairs: actors that share a task."""
        return list(dict.fromkeys((self.root(f), i) for f, i in self.stages[stage]))

    def num_partitions(self, stage: int) -> int:
        n = len(self._groups(stage))
        return min(n, self.task_slots) if self.task_slots > 0 else n

    def actors_of_partition(self, stage: int, index: int) -> list[tuple[int, int]]:
        """(fragment id, actor index) of every actor partition `index` of `stage` runs."""
        part = self.partition_index(stage)
        return [a for a in self.stages[stage] if part[a] == index]

    def partition_index(self, stage: int) -> dict[tuple[int, int], int]:
        """Destination actor -> the partition of `stage` that runs it."""
        actors = self.stages[stage]
        if self.task_slots <= 0:  # one partition per actor (and the actors fused with it)
            group = {g: k for k, g in enumerate(self._groups(stage))}
            return {(f, i): group[(self.root(f), i)] for f, i in actors}
        n = self.num_partitions(stage)
        return {(f, i): (self.root(f) + i) % n for f, i in actors}

    def fragment(self, fragment_id: int) -> Fragment:
        return decoded_fragment(self.fragments[fragment_id])

    def actor_ids(self) -> set[int]:
        return {actor_id(f, i) for parts in self.stages for f, i in parts}


#: The wire document of an epoch plan this build writes and the only one it reads.
PLAN_WIRE_FORMAT = 1
#: The two halves the leased runner sends instead (`lease_task.PlanSender`): the plan's *body*,
#: which stays while the jobs do (fragments, stages, config), sent to a worker once per digest;
#: and each epoch's part (epochs, barrier, version), whose SSTs the worker already holds are
#: sent as their object ids.
PLAN_BODY_FORMAT = 1
PLAN_EPOCH_FORMAT = 1
PLAN_DIGEST_BYTES = 32


def _body_doc(plan: EpochPlan) -> dict[str, Any]:
    return {
        "fragments": [[fid, data.decode()] for fid, data in plan.fragments.items()],
        "stages": plan.stages,
        "store_url": plan.store_url,
        "config": _config_doc(plan.config),
        "storage_options": dataclasses.asdict(plan.storage_options),
        "task_slots": plan.task_slots,
        "roots": sorted(plan.roots.items()),
    }


def _epoch_doc(plan: EpochPlan) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "data_epoch": plan.data_epoch,
        "barrier": [plan.barrier.epoch.curr, plan.barrier.epoch.prev, plan.barrier.kind.value],
        "committed_epoch": plan.committed_epoch,
    }
    if plan.global_watermarks:  # optional: a query without watermarks has none
        doc["global_watermarks"] = [[t, w.hex()] for t, w in sorted(plan.global_watermarks.items())]
    return doc


def encode_plan(plan: EpochPlan) -> bytes:
    """`plan` as versioned JSON, without its connector registry (see the module docstring)."""
    doc = {
        "format": PLAN_WIRE_FORMAT,
        **_body_doc(plan),
        **_epoch_doc(plan),
        "version": plan.version.to_json(),
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def encode_plan_body(plan: EpochPlan) -> tuple[bytes, bytes]:
    """The plan's body (what stays from epoch to epoch while the jobs do) and its digest."""
    body = json.dumps({"format": PLAN_BODY_FORMAT, **_body_doc(plan)}, separators=(",", ":")).encode()
    return body, plan_digest(body)


def plan_digest(body: bytes | bytearray | memoryview) -> bytes:
    return hashlib.sha256(body).digest()


def encode_plan_epoch(plan: EpochPlan, known: AbstractSet[int] = frozenset()) -> bytes:
    """The epoch's part of the plan: its SSTs whose object ids are in `known` (the receiver
    holds them) as those ids, the others in full."""
    version = plan.version.to_json()
    for level in (*version["l0"], *version["levels"]):  # per SST, not per row
        level["ssts"] = [s["id"] if s["id"] in known else s for s in level["ssts"]]
    doc = {"format": PLAN_EPOCH_FORMAT, **_epoch_doc(plan), "version": version}
    return json.dumps(doc, separators=(",", ":")).encode()


def _body_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The `EpochPlan` fields of a body document (`_body_doc`)."""
    options = body["storage_options"]
    return {
        "fragments": {int(fid): str(text).encode() for fid, text in body["fragments"]},
        "stages": tuple(tuple((int(f), int(i)) for f, i in stage) for stage in body["stages"]),
        "store_url": str(body["store_url"]),
        "config": _streaming_config(body["config"]),
        "storage_options": StorageOptions(
            **{
                **options,
                "table_block_sizes": tuple((int(t), int(b)) for t, b in options["table_block_sizes"]),
            }
        ),
        "task_slots": int(body["task_slots"]),
        "roots": {int(f): int(r) for f, r in body["roots"]},
    }


def _plan_of(
    body: Mapping[str, Any], epoch: dict[str, Any], version: HummockVersion, connectors: Connectors
) -> EpochPlan:
    """The plan of a body's fields (`_body_fields`) at an epoch document (`_epoch_doc`)."""
    curr, prev, kind = epoch["barrier"]
    return EpochPlan(
        **body,
        data_epoch=int(epoch["data_epoch"]),
        barrier=Barrier(EpochPair(int(curr), int(prev)), BarrierKind(kind)),
        committed_epoch=int(epoch["committed_epoch"]),
        version=version,
        connectors=connectors,
        global_watermarks={int(t): bytes.fromhex(w) for t, w in epoch.get("global_watermarks", ())},
    )


def _document(data: bytes | bytearray | memoryview, fmt: int, what: str) -> dict[str, Any]:
    doc = json.loads(bytes(data))
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        got = doc.get("format") if isinstance(doc, dict) else None
        raise ValueError(f"{what} format {got!r} is not {fmt}")
    return doc


_DECODE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError)


def decode_plan(data: bytes | bytearray | memoryview, connectors: Connectors) -> EpochPlan:
    """The plan `encode_plan` wrote, with `connectors` as its registry; anything else raises
    `MalformedPayload`."""
    try:
        doc = _document(data, PLAN_WIRE_FORMAT, "plan")
        return _plan_of(_body_fields(doc), doc, HummockVersion.from_json(doc["version"]), connectors)
    except _DECODE_ERRORS as e:
        raise MalformedPayload(f"malformed epoch plan: {type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class PlanBody:
    """A decoded plan body (`encode_plan_body`), waiting for its epochs' parts: its `EpochPlan`
    fields decoded once, not every epoch (a worker holds a body for many). Plans of one body
    share these objects (the fragments dict too): nothing mutates a plan's fields."""

    digest: bytes
    fields: Mapping[str, Any]


def decode_plan_body(data: bytes | bytearray | memoryview, digest: bytes) -> PlanBody:
    """The body `encode_plan_body` wrote, checked against its `digest`; else `MalformedPayload`."""
    if plan_digest(data) != digest:
        raise MalformedPayload("a plan body that does not match its digest")
    try:
        doc = _document(data, PLAN_BODY_FORMAT, "plan body")
        return PlanBody(digest, MappingProxyType(_body_fields(doc)))
    except _DECODE_ERRORS as e:
        raise MalformedPayload(f"malformed plan body: {type(e).__name__}: {e}") from None


def decode_plan_epoch(
    data: bytes | bytearray | memoryview,
    body: PlanBody,
    ssts: Mapping[int, SstableInfo],
    connectors: Connectors,
) -> EpochPlan:
    """The plan of `body` at the epoch `encode_plan_epoch` wrote, its SSTs sent as ids taken
    from `ssts`; an id not there (or anything else amiss) raises `MalformedPayload`."""
    try:
        doc = _document(data, PLAN_EPOCH_FORMAT, "epoch plan")
        v = doc["version"]
        version = HummockVersion.from_json({**v, "l0": [], "levels": []})
        l0 = tuple(_level(d, ssts) for d in v["l0"])
        version = dataclasses.replace(version, l0=l0, levels=tuple(_level(d, ssts) for d in v["levels"]))
        return _plan_of(body.fields, doc, version, connectors)
    except KeyError as e:
        raise MalformedPayload(f"malformed epoch plan: no SST {e} held here") from None
    except _DECODE_ERRORS as e:
        raise MalformedPayload(f"malformed epoch plan: {type(e).__name__}: {e}") from None


def _level(d: dict[str, Any], ssts: Mapping[int, SstableInfo]) -> Level:
    """A level of `encode_plan_epoch`'s version: SSTs in full, or ids of SSTs in `ssts`."""
    held = tuple(SstableInfo.from_json(s) if isinstance(s, dict) else ssts[_sst_id(s)] for s in d["ssts"])
    return Level(int(d["level"]), held, int(d["sub"]))


def _sst_id(v: object) -> int:
    if type(v) is not int:
        raise TypeError(f"not an SST id: {v!r}")
    return v


_DECODED: OrderedDict[bytes, Fragment] = OrderedDict()
_DECODED_LOCK = threading.Lock()
_DECODED_MAX = 4096


def decoded_fragment(data: bytes) -> Fragment:
    """The fragment `data` encodes; decoded once per process while it stays in use."""
    with _DECODED_LOCK:
        f = _DECODED.get(data)
        if f is not None:
            _DECODED.move_to_end(data)
            return f
    f = decode_fragment(data)
    with _DECODED_LOCK:
        _DECODED[data] = f
        while len(_DECODED) > _DECODED_MAX:
            _DECODED.popitem(last=False)
    return f


def plan_epoch(
    graph: StreamGraph,
    encoded: Mapping[int, bytes],
    *,
    data_epoch: int,
    barrier: Barrier,
    committed_epoch: int,
    version: HummockVersion,
    store_url: str,
    config: StreamingConfig | None = None,
    storage_options: StorageOptions | None = None,
    global_watermarks: Mapping[int, bytes] | None = None,
) -> EpochPlan:
    depths, roots, hops = stage_depths(graph)
    n_stages = max(depths.values()) + 1 if depths else 0
    stages: list[list[tuple[int, int]]] = [[] for _ in range(n_stages)]
    # within a stage, a fused fragment comes after its upstream (a task runs its actors in order)
    for f in sorted(graph.fragments.values(), key=lambda f: (hops[f.fragment_id], f.fragment_id)):
        stages[depths[f.fragment_id]].extend((f.fragment_id, i) for i in range(f.parallelism))
    return EpochPlan(
        roots={f: r for f, r in roots.items() if f != r},
        fragments={fid: encoded[fid] for fid in graph.fragments},
        stages=tuple(tuple(s) for s in stages),
        data_epoch=data_epoch,
        barrier=barrier,
        committed_epoch=committed_epoch,
        version=version,
        store_url=store_url,
        config=config or StreamingConfig(),
        storage_options=storage_options or StorageOptions(),
        global_watermarks=dict(global_watermarks or {}),
    )


def stage_depths(graph: StreamGraph) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Per fragment: its stage, the root of its no-shuffle chain, and its hops from that root.
    A fragment is fused into its upstream's stage when that is its only upstream fragment and
    every edge from it is no-shuffle (actor i feeds actor i); otherwise its stage is one more
    than its deepest upstream's."""
    edges: dict[int, list[DispatchKind]] = {}
    for f in graph.fragments.values():
        for e in f.outputs:
            edges.setdefault(e.downstream_fragment_id, []).append(e.kind)
    depth: dict[int, int] = {}
    root: dict[int, int] = {}
    hops: dict[int, int] = {}

    def visit(fid: int, stack: frozenset[int]) -> int:
        if fid in depth:
            return depth[fid]
        if fid in stack:
            raise ValueError(f"cycle through fragment {fid}")
        f = graph.fragments[fid]
        ups = f.upstream_fragment_ids()
        root[fid], hops[fid] = fid, 0
        if not ups:
            d = 0
        elif (
            len(ups) == 1
            and ups[0] in graph.fragments
            and edges.get(fid)
            and all(k is DispatchKind.NO_SHUFFLE for k in edges[fid])
            and graph.fragments[ups[0]].parallelism == f.parallelism
        ):
            d = visit(ups[0], stack | {fid})
            root[fid], hops[fid] = root[ups[0]], hops[ups[0]] + 1
        else:
            d = 1 + max(visit(u, stack | {fid}) for u in ups)
        depth[fid] = d
        return d

    for fid in graph.fragments:
        visit(fid, frozenset())
    return depth, root, hops


class StagePartitioner:
    """Spark partition function of one stage: destination -> partition index."""

    def __init__(self, plan: EpochPlan, stage: int) -> None:
        self.index: dict[tuple[int, ...], int] = {tuple(k): v for k, v in plan.partition_index(stage).items()}
        self.n = plan.num_partitions(stage)

    def __call__(self, dest: Destination) -> int:
        p = self.index.get(dest)
        if p is not None:
            return p
        if dest == REPORT:
            return 0
        # forwarded to a deeper stage: any partition will do; spread deterministically
        return (dest[0] * 31 + dest[1]) % self.n


def dml_elements(plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[list[Element]]:
    """Stage-0 input: each table's DML chunks routed to the actors of its DML fragment."""
    parts: list[list[Element]] = [[] for _ in range(plan.num_partitions(0))] if plan.stages else []
    index = plan.partition_index(0) if plan.stages else {}
    seq = 0
    for fid in plan.fragments:
        frag = plan.fragment(fid)
        for node in frag.root.walk():
            if not isinstance(node, DmlNode) or node.table_id not in dml:
                continue
            types = node.schema.types
            for chunk in dml[node.table_id]:
                for actor, sub in route_dml(chunk, node, frag, types):
                    payload = encode_chunk(node.port, DRIVER_SOURCE_ACTOR, seq, sub)
                    seq += 1
                    dest = (frag.fragment_id, actor)
                    parts[index[dest]].append((dest, payload))
    return parts


def dml_frames(
    plan: EpochPlan, slot: int, elements: list[Element], frame_bytes: int = FRAME_BYTES
) -> list[bytes]:
    """Slot `slot`'s stage-0 input (`dml_elements`) as the leased runner's DML frames of about
    `frame_bytes` each, in the order the slot's actors take it: by actor (the order they run),
    then port, then sequence."""
    if not elements:
        return []
    order: dict[tuple[int, ...], int] = {a: k for k, a in enumerate(plan.actors_of_partition(0, slot))}
    keyed = [(order.get(tuple(e[0]), len(order)), chunk_header(e[1]), e) for e in elements]
    keyed.sort(key=lambda x: (x[0], x[1][0], x[1][2]))  # per element (a chunk), not per row
    frames: list[bytes] = []
    batch: list[Element] = []
    size = 0
    for _, _, e in keyed:
        batch.append(e)
        size += len(e[1])
        if size >= frame_bytes:
            frames.append(encode_elements(batch))
            batch, size = [], 0
    if batch:
        frames.append(encode_elements(batch))
    return frames


def route_dml(
    chunk: StreamChunk, node: DmlNode, frag: Fragment, types: list
) -> list[tuple[int, StreamChunk]]:
    """Split a DML chunk among a table fragment's actors by the vnode of the distribution key. A
    table without a pk is distributed by its row id: rows that have one (deletes) go to the actor
    owning its vnode, new rows (NULL id, generated by that actor's RowIdGen) round-robin."""
    c = chunk.compact()
    p = frag.parallelism
    if p == 1 or not c.capacity:
        return [(0, c)] if c.capacity else []
    actors = np.arange(c.capacity) % p
    if node.dist_key:
        cols = [c.columns[i] for i in node.dist_key]
        dtypes = [types[i] for i in node.dist_key]
        if len(cols) == 1 and dtypes[0].kind is TypeKind.SERIAL and cols[0].null_count:
            has = np.flatnonzero(np.asarray(cols[0].is_valid().to_numpy(zero_copy_only=False), np.bool_))
            if len(has):
                vn = compute_vnodes([cols[0].take(has)], dtypes, frag.vnode_count)
                actors[has] = actor_of_vnodes(vn, p, frag.vnode_count)
        else:
            actors = actor_of_vnodes(compute_vnodes(cols, dtypes, frag.vnode_count), p, frag.vnode_count)
    return [(int(a), c.take(np.flatnonzero(actors == a))) for a in np.unique(actors).tolist()]


def _config_doc(config: StreamingConfig) -> dict[str, Any]:
    """The config's JSON fields; `paused_sources` and `source_splits` only when not empty
    (optional, so the plan format stays)."""
    doc = dataclasses.asdict(config)
    for optional in ("paused_sources", "source_splits"):
        if not doc[optional]:
            del doc[optional]
    return doc


def _streaming_config(doc: dict[str, Any]) -> StreamingConfig:
    """The config from its JSON fields (JSON has no tuples: the rate limits come back as lists)."""
    limits = tuple((str(name), float(rate)) for name, rate in doc.get("source_rate_limits", ()))
    paused = tuple(str(name) for name in doc.get("paused_sources", ()))
    splits = tuple((str(name), tuple(map(str, ids))) for name, ids in doc.get("source_splits", ()))
    return StreamingConfig(
        **{**doc, "source_rate_limits": limits, "paused_sources": paused, "source_splits": splits}
    )
