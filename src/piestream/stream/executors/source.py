"""Source: a leaf executor reading a connector's splits, one bounded batch per epoch, exactly once.

The connector side is a `SourceReader` (`piestream.stream.connector`), built from the node's
`SourceSpec` by the connector registry when the actor builds its executors: it names the source's
splits and reads one split from an offset. This module owns everything that makes a source
exactly-once and deterministic, whatever the connector:

- **Split ownership.** The splits are fixed when the job is planned (`SourceNode.split_ids`).
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
  epoch's reading happens when the barrier arrives. Output is inserts, or the changes a
  reader's ops say (FORMAT UPSERT / DEBEZIUM; the node is then not append-only).
- **Upstream TRUNCATE** (CDC): a reader marks where in its batches the upstream table was
  emptied (`ReadResult.truncate_at`); there the executor deletes every key of the table it
  feeds (`SourceNode.truncates`, read at the committed epoch) and of the read's earlier rows.
- **New keys** (a CDC snapshot): a batch whose schema metadata has ``NEW_KEYS_METADATA`` holds
  only keys no earlier row of the stream had; its chunks carry `StreamChunk.new_keys`, so the
  table's Materialize skips the conflict lookup.
- **Splits made later** (new Kafka partitions): the barrier manager asks a reader with
  ``current_splits()`` for them at each epoch's start and fixes them in the epoch's plan
  (``config.source_splits``); they follow the planned ones, owned by position as those are.
- **An unreachable upstream** (`SourceUnavailable` from the reader) fails the attempt rather
  than emitting fewer rows; the barrier manager retries the epoch with the source in
  ``config.paused_sources``, where it reads nothing and keeps its offsets. So an epoch's rows
  depend only on the committed offsets and the plan, in every attempt (Spark task retries too).
- **Bad records are never dropped silently.** A reader reports malformed records; with
  ``error_handling = "reject"`` the epoch fails with the first one's file and line (nothing
  commits, nothing is skipped); with ``"dead_letter"`` they are written, in the same epoch, to
  the dead-letter table ``(file, line, raw, error)`` that users can query; with ``"skip"``
  (message sources' default, RisingWave's rule) they are skipped — or, for a field that does not
  convert, NULL in their row — and counted in rw_streaming_errors with their split and offset.

The node is plan data (`piestream.plan.source`); connectors register themselves by name
(`piestream.stream.connector`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa

from piestream.common.chunk import NEW_KEYS_METADATA, Op, StreamChunk
from piestream.common.epoch import EpochPair, physical_ms
from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.scalar import Row
from piestream.plan.source import SourceLimits, SourceNode
from piestream.storage.table.state_table import StateTable
from piestream.storage.table.storage_table import StorageTable
from piestream.stream.connector import (
    HINTS_NEW_KEYS,
    BadRecord,
    ReadResult,
    SourceReader,
    SourceUnavailable,
)
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier

#: the kind of a skipped or nulled source record in rw_streaming_errors
SOURCE_ERROR = "source"


class SourceError(PiestreamError):
    """A source could not be read (a malformed record under error.handling = 'reject', ...)."""

    sqlstate = "22P02"


# -- the executor ----------------------------------------------------------------------------------


def owned_splits(split_ids: Sequence[str], actor_index: int, parallelism: int) -> list[str]:
    """The splits actor `actor_index` of `parallelism` owns: positions ≡ actor_index (mod P)."""
    return [s for i, s in enumerate(split_ids) if i % parallelism == actor_index]


def split_budget(limits: SourceLimits, n_splits: int, epoch: EpochPair, credit: float) -> tuple[int, float]:
    """(rows one split may read this epoch, its credit before subtracting what it reads)."""
    cap = max(1, math.ceil(limits.max_rows_per_epoch / max(n_splits, 1)))
    if limits.rate_limit is None:
        return cap, 0.0
    if limits.rate_limit <= 0:  # paused (ALTER SOURCE ... SET source_rate_limit = 0)
        return 0, 0.0
    span_ms = max(0, physical_ms(epoch.curr) - physical_ms(epoch.prev)) if epoch.prev else 0
    allowance = credit + limits.rate_limit / max(n_splits, 1) * span_ms / 1000.0
    return min(cap, int(allowance)), allowance


class SourceExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: SourceNode, reader: SourceReader) -> None:
        super().__init__(ctx, node.schema, node.stream_key, True)
        self.node = node
        self.reader = reader
        self.state: StateTable = self.table(node.state_table)
        self.dead: StateTable | None = self.table(node.dead_letter) if node.dead_letter is not None else None
        self.all_splits: tuple[str, ...] = node.split_ids
        self._hints = bool(getattr(self.reader, HINTS_NEW_KEYS, False))
        self.splits = owned_splits(node.split_ids, ctx.actor_index, ctx.parallelism)

    def _epoch_splits(self) -> None:
        """This epoch's splits: the planned ones, then those the barrier manager found since
        (`config.source_splits`, fixed in the epoch's plan: every attempt reads the same)."""
        extra = next(
            (ids for name, ids in self.ctx.config.source_splits if name == self.node.source_name), ()
        )
        planned = set(self.node.split_ids)
        self.all_splits = (*self.node.split_ids, *(s for s in extra if s not in planned))
        self.splits = owned_splits(self.all_splits, self.ctx.actor_index, self.ctx.parallelism)

    def _committed(self, epoch: EpochPair) -> dict[str, str | None]:
        """The committed state value (JSON) of each owned split, None for a split never read.

        The actor's cache holds them when it reflects exactly the committed epoch *and* was
        written by the attempt that committed: it is keyed by the epoch that attempt's barrier
        opened, which is this epoch's `prev` only if that attempt's barrier is the one committed."""
        cached = self.ctx.cache.get("source_state")
        if isinstance(cached, tuple) and cached[0] == epoch.prev and set(cached[1]) == set(self.splits):
            return dict(cached[1])
        if not self.splits:
            return {}
        found, rows = self.state.get_rows([pa.array(self.splits, pa.string())])  # one state call
        values = rows.columns[1].to_pylist()
        return {
            s: (str(v) if f else None) for s, f, v in zip(self.splits, found.tolist(), values, strict=True)
        }

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        self._epoch_splits()
        committed = self._committed(barrier.epoch)
        n_splits = len(self.all_splits)
        limits, held = self._limits()
        changes: list[tuple[Op, Row]] = []
        for s in [] if held else self.splits:
            raw = committed[s]
            d = json.loads(raw) if raw is not None else {}
            offset: str | None = d.get("o")
            credit = float(d.get("c", 0.0))
            budget, allowance = split_budget(limits, n_splits, barrier.epoch, credit)
            consumed = 0
            new_offset = offset
            if budget > 0:
                try:
                    result = self.reader.read(s, offset, budget, barrier.epoch)
                except SourceUnavailable as e:  # the barrier manager pauses the source, retries
                    raise SourceUnavailable(e.message, source=self.node.source_name) from None
                if result.consumed > budget:
                    raise SourceError(f"source {self.node.source_name}: reader exceeded its budget")
                self._handle_bad_records(result.bad_records)
                for sqlstate, message in result.errors:
                    self.ctx.errors.add(
                        SOURCE_ERROR, f"Source {self.node.source_name}", sqlstate, message, 1, ""
                    )
                out += self._changes(result)
                consumed = result.consumed
                new_offset = result.offset
            new_credit = min(allowance - consumed, 1.0) if limits.rate_limit else 0.0
            value = json.dumps({"o": new_offset, "c": round(new_credit, 9)})
            if value != raw:
                if raw is None:
                    changes.append((Op.INSERT, (s, value)))
                else:
                    changes += [(Op.UPDATE_DELETE, (s, raw)), (Op.UPDATE_INSERT, (s, value))]
                committed[s] = value
        if changes:  # every owned split's new offsets with one state call
            self.state.write_chunk(StreamChunk.from_rows(changes, self.state.desc.types))
        self.commit_state(barrier)
        self.ctx.cache["source_state"] = (barrier.epoch.curr, committed)
        self.ctx.count("rows.source", sum(c.cardinality for c in out))  # for /metrics, per epoch
        return out

    def _limits(self) -> tuple[SourceLimits, bool]:
        """Whether and how much this source reads this epoch, decided in this one place: the
        node's limits with the rate ALTER SOURCE set (the user's setting; 0 = paused: nothing
        read, the rate credit reset), and whether the barrier manager holds the source (its
        outage overlay, `config.paused_sources`, after the upstream was unreachable: nothing
        read and the state left as it is, offsets and credit, in every attempt of the epoch)."""
        held = self.node.source_name in self.ctx.config.paused_sources
        for name, rate in self.ctx.config.source_rate_limits:
            if name == self.node.source_name:
                return replace(self.node.limits, rate_limit=max(rate, 0.0)), held
        return self.node.limits, held

    def _handle_bad_records(self, bad: list[BadRecord]) -> None:
        if not bad:
            return
        if self.node.limits.error_handling == "skip":
            for b in bad:
                self.ctx.errors.add(
                    SOURCE_ERROR,
                    f"Source {self.node.source_name}",
                    SourceError.sqlstate,
                    b.describe(),
                    1,
                    b.raw,
                )
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

    def _changes(self, result: ReadResult) -> list[StreamChunk]:
        """The read's rows as chunks, with an upstream TRUNCATE's deletes where it happened."""
        if not result.truncate_at:
            return self._chunks(result.batches, result.ops)
        out: list[StreamChunk] = []
        at = set(result.truncate_at)
        for k, b in enumerate([*result.batches, None]):
            if k in at:
                out += self._truncate(result.batches[:k])
            if b is not None:
                out += self._chunks([b], None if result.ops is None else [result.ops[k]])
        return out

    def _truncate(self, earlier: list[pa.RecordBatch]) -> list[StreamChunk]:
        """Deletes of every key the table may hold now: its rows at the committed epoch (the
        same version for every attempt of the epoch, so a retry deletes the same keys) and the
        keys of this read's earlier rows. A delete of a key not stored is dropped by the
        table's Materialize, which emits the stored row for the others."""
        desc = self.node.truncates
        if desc is None:
            raise FeatureNotSupported(
                f"source {self.node.source_name}: the upstream table was truncated, and this "
                "table's plan (made before upstream TRUNCATE was followed) cannot delete its rows",
                hint="Drop and recreate the table to copy it again.",
            )
        key = list(self.node.stream_key)
        types = self.schema.types
        stored = StorageTable(desc, self.ctx.storage, self.ctx.committed_epoch, list(desc.pk))
        parts = [list(chunk.columns) for chunk in stored.scan()]
        parts += [[b.column(i) for i in key] for b in earlier if b.num_rows]
        out: list[StreamChunk] = []
        size = self.node.limits.chunk_size or self.ctx.config.chunk_size
        for p in parts:
            n = len(p[0])
            if not n:
                continue
            cols = [pa.nulls(n, t.arrow) for t in types]
            for i, a in zip(key, p, strict=True):
                cols[i] = a if a.type == types[i].arrow else a.cast(types[i].arrow)
            chunk = StreamChunk(np.full(n, Op.DELETE, np.int8), cols, length=n)
            out += chunk.split(size) if n > size else [chunk]
        return out

    def _chunks(
        self, batches: list[pa.RecordBatch], ops: list[np.ndarray] | None = None
    ) -> list[StreamChunk]:
        out = []
        types = self.schema.types
        width = self.node.reader_width
        size = self.node.limits.chunk_size or self.ctx.config.chunk_size
        for k, b in enumerate(batches):
            n = b.num_rows
            if not n:
                continue
            cols = list(b.columns)
            if len(cols) != width:
                raise SourceError(f"source {self.node.source_name}: reader returned {len(cols)} columns")
            cols += [pa.nulls(n, t.arrow) for t in types[width:]]
            op = np.full(n, Op.INSERT, np.int8) if ops is None else np.asarray(ops[k], np.int8)
            # a reader's hint that the batch's keys are new to the stream (a CDC snapshot chunk),
            # honoured only from readers that make it (never a file's or a message's own metadata)
            meta = b.schema.metadata
            hinted = self._hints and meta is not None and meta.get(NEW_KEYS_METADATA) == b"1"
            new_keys = hinted and bool((op == Op.INSERT).all())
            chunk = StreamChunk(op, cols, length=n, new_keys=new_keys)
            out += chunk.split(size) if n > size else [chunk]
        return out
