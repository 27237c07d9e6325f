"""What the dashboard shows, read from a running `Database` at one moment."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from piestream.frontend.catalog import FunctionCatalog, Relation
from piestream.plan.backfill import BackfillNode
from piestream.plan.fragment import Fragment
from piestream.plan.node import ExchangeNode
from piestream.server.cdc_handlers import CdcStatusRow, cdc_status_rows

if TYPE_CHECKING:
    from piestream.meta.barrier_manager import EpochStats
    from piestream.server.database import Database


@dataclass(frozen=True)
class EpochPoint:
    epoch: int
    seconds: float
    rows: float
    failed: bool = False
    error: str = ""


@dataclass(frozen=True)
class Backfill:
    """A job's backfill (all its StreamTableScans): rows done / total, as rw_ddl_progress."""

    relation: str
    upstream: str
    rows_done: int
    rows_total: int
    vnodes_done: int
    vnodes_total: int
    percent: float


@dataclass(frozen=True)
class Subscription:
    name: str
    of: str  # the table / MV whose changes it keeps
    retention_ms: int
    start_epoch: int


@dataclass(frozen=True)
class ErrorRecord:
    """One row of rw_catalog.rw_streaming_errors."""

    relation: str
    kind: str
    executor: str
    sqlstate: str
    message: str
    count: int
    sample: str
    last_seen: str


@dataclass
class Overview:
    relations: list[Relation]
    functions: list[FunctionCatalog]
    epochs: list[EpochPoint]
    state_bytes: dict[int, int]  # table id -> approximate bytes in SSTs
    state_keys: dict[int, int]
    backfills: list[Backfill]
    failures: list[EpochPoint]
    subscriptions: list[Subscription] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    committed_epoch: int = 0
    table_names: dict[int, str] = field(default_factory=dict)
    #: per CDC table its ``rw_catalog.rw_cdc_sources`` row
    cdc: list[CdcStatusRow] = field(default_factory=list)


def state_sizes(db: Database) -> tuple[dict[int, int], dict[int, int]]:
    """Bytes and keys per state table: each SST's size and key count split evenly among the
    tables it holds (an SST rarely holds more than one)."""
    sizes: dict[int, int] = defaultdict(int)
    keys: dict[int, int] = defaultdict(int)
    for sst in db.hummock.version.all_ssts():
        n = max(1, len(sst.table_ids))
        for t in sst.table_ids:
            sizes[t] += sst.file_size // n
            keys[t] += sst.key_count // n
    return dict(sizes), dict(keys)


def backfills(db: Database, relations: list[Relation]) -> list[Backfill]:
    tracker = db.ddl.progress
    if tracker is None:
        return []
    frags = {r.job_id: db.catalog.job_fragments(r.job_id) for r in relations if r.job_id is not None}
    progress = tracker.read(list(frags.items()))
    out: list[Backfill] = []
    for r in relations:
        if r.job_id is None or (p := progress.get(r.job_id)) is None:
            continue
        ups = [
            n.upstream.name or str(n.upstream.table_id)
            for f in frags[r.job_id]
            for n in f.root.walk()
            if isinstance(n, BackfillNode)
        ]
        out.append(
            Backfill(
                r.name, ", ".join(ups), p.rows_done, p.rows_total, p.vnodes_done, p.vnodes_total, p.percent
            )
        )
    return out


def _subscriptions(relations: list[Relation]) -> list[Subscription]:
    names = {r.id: r.name for r in relations}
    return [
        Subscription(
            r.name,
            names.get(r.subscription.of, str(r.subscription.of)),
            r.subscription.retention_ms,
            r.subscription.start_epoch,
        )
        for r in relations
        if r.subscription is not None
    ]


def _errors(db: Database, relations: list[Relation]) -> list[ErrorRecord]:
    jobs = {r.job_id: r.name for r in relations if r.job_id is not None}
    return [
        ErrorRecord(
            jobs.get(e.job_id, f"job {e.job_id}"),
            e.kind,
            e.executor or "",
            e.sqlstate,
            e.message,
            e.count,
            e.sample or "",
            str(e.last_seen)[:19],
        )
        for e in db.barriers.errors.entries()
    ]


def epoch_points(stats: list[EpochStats], limit: int = 120) -> list[EpochPoint]:
    return [EpochPoint(s.epoch, s.seconds, s.rows_in) for s in stats[-limit:]]


def overview(db: Database) -> Overview:
    relations = sorted(db.catalog.snapshot().relations(), key=lambda r: r.id)
    sizes, keys = state_sizes(db)
    names: dict[int, str] = {}
    for r in relations:
        if r.table is not None:
            names[r.table.table_id] = r.name
        for f in db.catalog.job_fragments(r.job_id) if r.job_id is not None else []:
            for t in f.root.walk():
                for desc in t.tables():
                    names.setdefault(desc.table_id, f"{r.name}: {desc.name or desc.table_id}")
    failures = [
        EpochPoint(f.epoch, 0.0, 0.0, failed=True, error=f.error) for f in list(db.barriers.failures)[-50:]
    ]
    return Overview(
        relations=relations,
        functions=db.catalog.functions(),
        epochs=epoch_points(list(db.barriers.stats)),
        state_bytes=sizes,
        state_keys=keys,
        backfills=backfills(db, relations),
        failures=failures,
        subscriptions=_subscriptions(relations),
        errors=_errors(db, relations),
        committed_epoch=db.hummock.max_committed_epoch,
        table_names=names,
        cdc=cdc_status_rows(db),
    )


@dataclass(frozen=True)
class JobGraph:
    """A streaming job's fragments and the upstream fragments (of other jobs) they read."""

    relation: Relation
    fragments: list[Fragment]  # the job's own
    upstream: list[Fragment]  # other jobs' fragments feeding it
    edges: list[tuple[int, int]]  # (upstream fragment id, downstream fragment id)


def job_graph(db: Database, name: str) -> JobGraph | None:
    rel = db.catalog.get(name)
    if rel is None or rel.job_id is None:
        return None
    own = db.catalog.job_fragments(rel.job_id)
    ids = {f.fragment_id for f in own}
    edges: set[tuple[int, int]] = set()
    upstream: dict[int, Fragment] = {}
    for f in own:
        for n in f.root.walk():
            if isinstance(n, ExchangeNode):
                edges.add((n.upstream_fragment_id, f.fragment_id))
                if n.upstream_fragment_id not in ids:
                    up = db.catalog.fragment(n.upstream_fragment_id)
                    if up is not None:
                        upstream[up.fragment_id] = up
    return JobGraph(rel, own, sorted(upstream.values(), key=lambda f: f.fragment_id), sorted(edges))
