"""The executor interface and the context an actor gives its executors (seed 003; reference §6).

Executors are push-based: the actor hands each one its input chunks (`process`, per input
index), then the epoch's barrier (`barrier`), children before parents. An executor returns the
chunks it emits; on the barrier it emits what it held back (e.g. an aggregation's changed groups),
then commits its state tables with the barrier's epoch pair. Every executor's output keeps the
stream-key invariant: per key, inserts and deletes alternate and a delete carries the inserted row.

Executors must be deterministic functions of (their input multiset in arrival order, committed
state): a Spark task may run twice, and any attempt's output and state must be a correct one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from piestream.common.chunk import DataChunk, StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.schema import Schema
from piestream.common.vnode import VnodeBitmap
from piestream.expr.expr import Expr
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.state_table import StateTable
from piestream.stream.cache.registry import ActorCaches
from piestream.stream.connector import Connectors, registered_connectors
from piestream.stream.errors import CONSISTENCY, ActorErrors, evaluate
from piestream.stream.message import Barrier

DEFAULT_CHUNK_SIZE = 1024
DEFAULT_BACKFILL_ROWS_PER_EPOCH = 50_000


def default_cache_budget() -> int:
    """Bytes of operator caches per worker process: the workers (one per core) share a quarter
    of the machine's memory, each within [64 MiB, 8 GiB]. A cached row costs ~150 bytes beside
    its values (hash index, entry columns, room to grow), so a HashAgg group plus its MV row is
    ~300 bytes: on a 2-core, 24 GB machine, 3 GiB per worker keeps 10M groups in the caches
    (a sixteenth of the memory per worker, the earlier default, held ~80 % of them)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 8 << 30
    workers = max(1, os.cpu_count() or 1)
    return int(min(8 << 30, max(64 << 20, total // 4 // workers)))


def _strict_consistency_default() -> bool:
    """Inconsistent ops fail the epoch only where asked: the test suite sets
    ``PIESTREAM_STRICT_CONSISTENCY=1`` (tests/conftest.py) so executor bugs fail loudly there."""
    return os.environ.get("PIESTREAM_STRICT_CONSISTENCY", "") not in ("", "0")


@dataclass(frozen=True)
class StreamingConfig:
    """Knobs shared by all executors of a job."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    check_consistency: bool = True  # MemTable merge-rule checks (reference §4.1)
    #: an inconsistent op fails the epoch (tests); otherwise it is applied (last op wins),
    #: logged and counted in rw_catalog.rw_streaming_errors (RisingWave's non-strict default)
    strict_consistency: bool = field(default_factory=_strict_consistency_default)
    #: a data error in an expression fails the epoch (``streaming_strict_mode``); otherwise the
    #: expression is NULL for that row and the error is recorded (RisingWave's default)
    strict_mode: bool = False
    sanity_check_storage: bool = False  # also check ops against storage at flush (slow; tests)
    spill_threshold: int = 4 << 20
    #: bytes of operator caches (all actors of a worker process together), LRU-evicted beyond it
    cache_budget_bytes: int = field(default_factory=default_cache_budget)
    #: snapshot rows a backfill actor emits per epoch (RisingWave interleaves snapshot reads
    #: with upstream changes the same way): bounds an epoch's work while a new MV catches up
    backfill_rows_per_epoch: int = DEFAULT_BACKFILL_ROWS_PER_EPOCH
    #: ``ALTER SOURCE s SET source_rate_limit``: (source name, rows per second; 0 = paused),
    #: overriding the limit the source was created with
    source_rate_limits: tuple[tuple[str, float], ...] = ()
    #: sources the barrier manager paused for this epoch (their upstream was unreachable, see
    #: `SourceUnavailable`): not read, offsets kept; the same in every attempt of the epoch.
    #: Omitted from the plan when empty.
    paused_sources: tuple[str, ...] = ()
    #: splits made after a source was planned (new Kafka partitions), by source name: asked of
    #: the connector by the barrier manager at an epoch's start, the same in every attempt of
    #: the epoch. Omitted from the plan when empty.
    source_splits: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class ActorContext:
    """What one actor's executors share: identity, owned vnodes, storage, config, caches."""

    actor_id: int
    fragment_id: int
    actor_index: int
    parallelism: int
    vnodes: VnodeBitmap
    storage: HummockStorage
    config: StreamingConfig = field(default_factory=StreamingConfig)
    committed_epoch: int = 0  # the epoch the committed state reflects (cache validity)
    connectors: Connectors = field(default_factory=registered_connectors)  # builds readers / writers
    cache: ActorCaches = field(default_factory=ActorCaches)  # survives across epochs in a worker
    metrics: dict[str, float] = field(default_factory=dict)  # this epoch's counters, reported
    errors: ActorErrors = field(default_factory=ActorErrors)  # this epoch's survived errors, reported
    #: committed global watermarks read this epoch, by WatermarkFilter table id (`stream.watermark`)
    watermarks: dict[int, Any] = field(default_factory=dict)
    #: the committed global watermarks the driver knows, memcomparable (b"": none yet), by filter
    #: table id: read from here instead of a scan of the table (`stream.watermark`)
    known_watermarks: dict[int, bytes] = field(default_factory=dict)
    #: what this actor's WatermarkFilters raised their rows to this epoch, by table id
    raised_watermarks: dict[int, Any] = field(default_factory=dict)
    #: the filter tables read or raised this epoch, by table id (their reports encode by them)
    watermark_tables: dict[int, TableDesc] = field(default_factory=dict)

    def eval(self, expr: Expr, data: DataChunk, executor: str) -> pa.Array:
        """Evaluate an executor's expression: a data error in a row makes it NULL for that row
        and is recorded (or, in strict mode, fails the epoch)."""
        return evaluate(expr, data, strict=self.config.strict_mode, errors=self.errors, executor=executor)

    def count(self, name: str, n: float = 1) -> None:
        """Add to one of this epoch's counters (e.g. cache hits), sent back in the actor's report."""
        self.metrics[name] = self.metrics.get(name, 0.0) + n

    def charge_caches(self) -> None:
        """After a cache grew: keep the worker's caches within the budget (LRU eviction)."""
        self.cache.charge(self.config.cache_budget_bytes)

    def state_table(self, desc: TableDesc) -> StateTable:
        """A state table over this actor's vnodes (all of a singleton table's one vnode)."""
        if desc.is_singleton:
            vnodes = VnodeBitmap.full(1)
        elif desc.vnode_count == self.vnodes.count:
            vnodes = self.vnodes
        else:
            raise ValueError(
                f"table {desc.table_id} has {desc.vnode_count} vnodes, actor owns {self.vnodes!r}"
            )
        return StateTable(
            desc,
            self.storage,
            vnodes,
            check_consistency=self.config.check_consistency,
            on_inconsistency=None if self.config.strict_consistency else self._inconsistent_op,
            sanity_check_storage=self.config.sanity_check_storage,
            spill_threshold=self.config.spill_threshold,
        )

    def _inconsistent_op(self, table_id: int, message: str, count: int, sample: str) -> None:
        self.errors.add(CONSISTENCY, f"StateTable {table_id}", "XX000", message, count, sample)


class Executor:
    """Base class: pass-through with no state. Subclasses override `process` / `barrier`."""

    def __init__(
        self, ctx: ActorContext, schema: Schema, stream_key: Sequence[int], append_only: bool = False
    ) -> None:
        self.ctx = ctx
        self.schema = schema
        self.stream_key = list(stream_key)
        self.append_only = append_only
        self.state_tables: list[StateTable] = []

    @property
    def identity(self) -> str:
        return f"{type(self).__name__}(actor {self.ctx.actor_id})"

    def table(self, desc: TableDesc) -> StateTable:
        """Create and register a state table (committed automatically on barriers)."""
        st = self.ctx.state_table(desc)
        self.state_tables.append(st)
        return st

    def init(self, epoch: EpochPair) -> None:
        """Before any input of the actor's first epoch: writes carry `epoch.curr`."""
        for st in self.state_tables:
            st.init_epoch(epoch)

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        return [chunk]

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        """Emit held-back output, then commit state with the barrier's epochs."""
        self.commit_state(barrier)
        return []

    def commit_state(self, barrier: Barrier) -> None:
        for st in self.state_tables:
            st.commit(barrier.epoch)

    def __repr__(self) -> str:
        return self.identity
