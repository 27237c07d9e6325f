"""Source: a leaf executor reading a connector's splits, one bounded batch per epoch, exactly once.

The connector side is a `SourceReader` (picklable; shipped with the plan to Spark tasks): it
names the source's splits and reads one split from an offset. This module owns everything that
makes a source exactly-once and deterministic, whatever the connector:

- **Split ownership.** The splits are fixed when the job is planned (`SourceReader.splits()`).
  Actor i of a fragment with parallelism P owns the splits whose position ≡ i (mod P); no other
  actor reads or writes them. The fragment's parallelism is at most the number of splits.
- **Offsets are state** (reference §6.9): one singleton table ``(split_id VARCHAR pk,
  offset_info VARCHAR)`` holding per split a JSON ``{"o": <reader offset>, "c": <rate credit>}``.
  Every actor writes only the rows of its own splits, so actors never conflict on a key. The new
  offsets are written in the same epoch as the rows they cover and commit atomically with them:
  a task that is re-run, or a job restarted after a crash, resumes from the committed offsets.
- **Deterministic epochs.** An epoch's rows depend only on the committed offsets and the
  barrier's epoch pair: the budget is ``rate × (curr − prev)`` (the barrier's wall-clock span,
  the same in every attempt of the epoch) plus the fractional credit carried in the state, capped
  by a per-epoch maximum. Readers must return the same rows for the same (offset, budget).
- **Emitted in `barrier()`**, before the state commits: the executor has no input, so the whole
  epoch's reading happens when the barrier arrives. Output is inserts only (append-only).
- **Bad records are never dropped silently.** A reader reports malformed records; with
  ``error_handling = "reject"`` the epoch fails with the first one's file and line (nothing
  commits, nothing is skipped); with ``"dead_letter"`` they are written, in the same epoch, to
  the dead-letter table ``(file, line, raw, error)`` that users can query.

Connectors register themselves by name (`register_source_connector`); the frontend builds a
`SourceNode` from a catalog entry through `build_source_node` without importing connectors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op, StreamChunk
from piestream.common.epoch import EpochPair, physical_ms
from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.order import ASC
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, VARCHAR, DataType
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.state_table import StateTable
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier
from piestream.stream.nodes import StreamNode

# -- the connector interface ----------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSpec:
    """What a connector is asked to read: the columns it must produce and the WITH options."""

    name: str  # the source (or table) name, for messages
    connector: str
    columns: tuple[tuple[str, DataType], ...]  # output columns, in order
    options: Mapping[str, str] = field(default_factory=dict)  # WITH (...), keys lower-case
    encode: str | None = None  # FORMAT ... ENCODE <encode>, lower-case
    encode_options: Mapping[str, str] = field(default_factory=dict)
    generated: frozenset[str] = frozenset()  # columns declared ``AS expr`` the connector must supply

    def option(self, *names: str, default: str | None = None) -> str | None:
        """The first of `names` given in WITH (...) (aliases), else `default`."""
        for n in names:
            if n in self.options:
                return self.options[n]
        return default


@dataclass(frozen=True)
class BadRecord:
    """A record a reader could not turn into a row: where it was, what it was, why."""

    file: str
    line: int  # 1-based line (row number for Parquet); 0 = the whole file
    raw: str
    error: str

    def describe(self) -> str:
        where = f'file "{self.file}"' + (f", line {self.line}" if self.line else "")
        return f"malformed record in {where}: {self.error}"


@dataclass
class ReadResult:
    """One split's read for one epoch."""

    batches: list[pa.RecordBatch]  # rows, columns as in `SourceSpec.columns` (Arrow types of them)
    offset: str  # the offset after these rows (the reader's own format)
    consumed: int  # budget units used (events, lines, rows); 0 = nothing available now
    bad_records: list[BadRecord] = field(default_factory=list)


@runtime_checkable
class SourceReader(Protocol):
    """A connector's reading logic. Must be picklable and deterministic: the same (split, offset,
    budget) gives the same rows, so a retried Spark task emits exactly what the first did."""

    def splits(self) -> list[str]:
        """The split ids, fixed for the life of the job."""
        ...

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        """Read up to `budget` units of `split` after `offset` (None: from the beginning)."""
        ...


@dataclass(frozen=True)
class SourceLimits:
    """How fast a source may go: per epoch at most rate × epoch span rows, and `max_rows_per_epoch`."""

    rate_limit: float | None = None  # rows (events) per second for the whole source; None = unlimited
    max_rows_per_epoch: int = 1_000_000  # for the whole source
    chunk_size: int | None = None  # rows per emitted chunk; None = the job's StreamingConfig
    error_handling: str = "reject"  # "reject" | "dead_letter"


class SourceConnector(Protocol):
    """A registered connector: builds the reader and the limits from a spec (validating options)."""

    def __call__(self, spec: SourceSpec) -> tuple[SourceReader, SourceLimits]: ...


_CONNECTORS: dict[str, SourceConnector] = {}


def register_source_connector(name: str, connector: SourceConnector) -> None:
    _CONNECTORS[name.lower()] = connector


def source_connector(name: str) -> SourceConnector:
    c = _CONNECTORS.get(name.lower())
    if c is None:
        known = ", ".join(sorted(_CONNECTORS)) or "none registered"
        raise FeatureNotSupported(f'connector "{name}" is not supported (known: {known})')
    return c


class SourceError(PiestreamError):
    """A source could not be read (a malformed record under error.handling = 'reject', ...)."""

    sqlstate = "22P02"


# -- state tables ----------------------------------------------------------------------------------


def source_state_table(table_id: int, name: str = "source_state") -> TableDesc:
    """Offsets: one row per split, singleton (each actor writes only its own splits' rows)."""
    return TableDesc(
        table_id,
        (ColumnDesc("split_id", VARCHAR), ColumnDesc("offset_info", VARCHAR)),
        pk=(0,),
        pk_orders=(ASC,),
        name=name,
    )


DEAD_LETTER_COLUMNS: tuple[tuple[str, DataType], ...] = (
    ("file", VARCHAR),
    ("line", BIGINT),
    ("raw", VARCHAR),
    ("error", VARCHAR),
)


def dead_letter_table(table_id: int, name: str) -> TableDesc:
    """Malformed records of a source, keyed by (file, line): a re-read writes the same row."""
    return TableDesc(
        table_id,
        tuple(ColumnDesc(n, t) for n, t in DEAD_LETTER_COLUMNS),
        pk=(0, 1),
        pk_orders=(ASC, ASC),
        name=name,
    )


# -- the plan node ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SourceNode(StreamNode):
    """Reads a connector. `schema` = the reader's columns, then any extra columns (e.g. a table's
    hidden `_row_id`) which come out NULL for a following executor to fill."""

    reader: SourceReader
    limits: SourceLimits
    state_table: TableDesc
    source_name: str
    connector: str
    split_ids: tuple[str, ...]
    reader_width: int  # leading schema columns the reader produces
    dead_letter: TableDesc | None = None  # written here but owned by the source's catalog entry

    def build(self, ctx: ActorContext) -> Executor:
        return SourceExecutor(ctx, self)

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    @property
    def max_parallelism(self) -> int:
        return max(1, len(self.split_ids))

    def explain(self) -> str:
        cols = ", ".join(self.schema.names[: self.reader_width])
        return (
            f"Source {{ source: {self.source_name}, connector: {self.connector}, "
            f"splits: {len(self.split_ids)}, columns: [{cols}] }}"
        )


def build_source_node(
    spec: SourceSpec,
    *,
    schema: Schema,
    stream_key: tuple[int, ...],
    state_table_id: int,
    dead_letter: TableDesc | None = None,
) -> SourceNode:
    """A `SourceNode` for a catalog source or connector table (validates the options)."""
    reader, limits = source_connector(spec.connector)(spec)
    if limits.error_handling == "dead_letter" and dead_letter is None:
        raise PiestreamError("error.handling = 'dead_letter' needs a dead-letter table", sqlstate="22023")
    return SourceNode(
        schema=schema,
        stream_key=stream_key,
        append_only=True,
        reader=reader,
        limits=limits,
        state_table=source_state_table(state_table_id, f"{spec.name}_source_state"),
        source_name=spec.name,
        connector=spec.connector,
        split_ids=tuple(reader.splits()),
        reader_width=len(spec.columns),
        dead_letter=dead_letter,
    )


# -- the executor ----------------------------------------------------------------------------------


def owned_splits(split_ids: Sequence[str], actor_index: int, parallelism: int) -> list[str]:
    """The splits actor `actor_index` of `parallelism` owns: positions ≡ actor_index (mod P)."""
    return [s for i, s in enumerate(split_ids) if i % parallelism == actor_index]


def split_budget(limits: SourceLimits, n_splits: int, epoch: EpochPair, credit: float) -> tuple[int, float]:
    """(rows one split may read this epoch, its credit before subtracting what it reads)."""
    cap = max(1, math.ceil(limits.max_rows_per_epoch / max(n_splits, 1)))
    if limits.rate_limit is None:
        return cap, 0.0
    span_ms = max(0, physical_ms(epoch.curr) - physical_ms(epoch.prev)) if epoch.prev else 0
    allowance = credit + limits.rate_limit / max(n_splits, 1) * span_ms / 1000.0
    return min(cap, int(allowance)), allowance


class SourceExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: SourceNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, True)
        self.node = node
        self.state: StateTable = self.table(node.state_table)
        self.dead: StateTable | None = self.table(node.dead_letter) if node.dead_letter is not None else None
        self.splits = owned_splits(node.split_ids, ctx.actor_index, ctx.parallelism)

    def _committed(self, epoch: EpochPair) -> dict[str, str | None]:
        """The committed state value (JSON) of each owned split, None for a split never read.

        The actor's cache holds them when it reflects exactly the committed epoch *and* was
        written by the attempt that committed: it is keyed by the epoch that attempt's barrier
        opened, which is this epoch's `prev` only if that attempt's barrier is the one committed."""
        cached = self.ctx.cache.get("source_state")
        if isinstance(cached, tuple) and cached[0] == epoch.prev:
            return dict(cached[1])
        out: dict[str, str | None] = {}
        for s in self.splits:
            row = self.state.get_row((s,))
            out[s] = None if row is None else str(row[1])
        return out

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        committed = self._committed(barrier.epoch)
        n_splits = len(self.node.split_ids)
        for s in self.splits:
            raw = committed[s]
            d = json.loads(raw) if raw is not None else {}
            offset: str | None = d.get("o")
            credit = float(d.get("c", 0.0))
            budget, allowance = split_budget(self.node.limits, n_splits, barrier.epoch, credit)
            consumed = 0
            new_offset = offset
            if budget > 0:
                result = self.node.reader.read(s, offset, budget, barrier.epoch)
                if result.consumed > budget:
                    raise SourceError(f"source {self.node.source_name}: reader exceeded its budget")
                self._handle_bad_records(result.bad_records)
                out += self._chunks(result.batches)
                consumed = result.consumed
                new_offset = result.offset
            new_credit = min(allowance - consumed, 1.0) if self.node.limits.rate_limit else 0.0
            value = json.dumps({"o": new_offset, "c": round(new_credit, 9)})
            if value != raw:
                if raw is None:
                    self.state.insert_row((s, value))
                else:
                    self.state.update_row((s, raw), (s, value))
                committed[s] = value
        self.commit_state(barrier)
        self.ctx.cache["source_state"] = (barrier.epoch.curr, committed)
        return out

    def _handle_bad_records(self, bad: list[BadRecord]) -> None:
        if not bad:
            return
        if self.node.limits.error_handling != "dead_letter" or self.dead is None:
            first = bad[0]
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise SourceError(
                f"source {self.node.source_name}: {first.describe()}{more}",
                detail=f"record: {first.raw[:200]}",
                hint="Fix or remove the record, or create the source with error.handling = 'dead_letter'.",
            )
        for b in bad:
            row = (b.file, b.line, b.raw, b.error)
            old = self.dead.get_row((b.file, b.line))
            if old is None:
                self.dead.insert_row(row)
            elif tuple(old) != row:
                self.dead.update_row(old, row)

    def _chunks(self, batches: list[pa.RecordBatch]) -> list[StreamChunk]:
        out = []
        types = self.schema.types
        width = self.node.reader_width
        size = self.node.limits.chunk_size or self.ctx.config.chunk_size
        for b in batches:
            n = b.num_rows
            if not n:
                continue
            cols = list(b.columns)
            if len(cols) != width:
                raise SourceError(f"source {self.node.source_name}: reader returned {len(cols)} columns")
            cols += [pa.nulls(n, t.arrow) for t in types[width:]]
            chunk = StreamChunk(np.full(n, Op.INSERT, np.int8), cols, length=n)
            out += chunk.split(size) if n > size else [chunk]
        return out
