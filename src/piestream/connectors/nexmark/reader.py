"""The ``nexmark`` source connector: per-table (Person / Auction / Bid) or combined events.

Splits. ``nexmark.split.num = k`` splits; split s generates the event numbers ≡ s (mod k), in
order (as nexmark-rs does with offset s and step k), so all splits advance through event time
together. A split's offset is how many of its events it has generated; with
``nexmark.event.num = N`` the splits together generate exactly the events [0, N) and stop.

Forms (reference §8):
- ``nexmark.table.type = 'Person' | 'Auction' | 'Bid'`` (RisingWave's legacy per-table mode):
  the columns are fields of that event kind, by name; only that kind's events become rows, but
  every event counts against the rate (events/s), as in RisingWave.
- otherwise the combined form: ``event_type`` (0 person, 1 auction, 2 bid) and ``person`` /
  ``auction`` / ``bid`` STRUCT columns (NULL unless the row is of that kind), plus optionally
  ``date_time``, the event time (RisingWave declares it as a generated CASE column; the
  generator supplies it directly).

Declared types may differ from the natural ones (e.g. INT ids, TIMESTAMPTZ): values are cast.
Rate: ``nexmark.min.event.gap.in.ns`` per split (default 100000 ⇒ 10k events/s per split;
0 = unlimited), or ``nexmark.event.rate`` / ``source_rate_limit`` (events per second for the
whole source). Event *times* advance by ``1000 / nexmark.first.event.rate`` ms per event whatever
the generation rate (deterministic, as with RisingWave's ``nexmark.use.real.time = false``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.epoch import EpochPair
from piestream.common.types import BIGINT, TIMESTAMP, DataType, TypeKind
from piestream.connectors.nexmark.config import NexmarkConfig, config_from_options, nexmark_options
from piestream.connectors.nexmark.generator import (
    COLUMNS_OF,
    GENERATORS,
    EventKind,
    event_kinds,
    timestamps_ms,
)
from piestream.connectors.options import InvalidOption, parse_float, parse_int, source_limits
from piestream.expr.functions.cast import cast_array
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.stream.connector import ReadResult, SourceReader

DEFAULT_MIN_EVENT_GAP_NS = 100_000
BATCH_EVENTS = 1 << 16  # events generated per record batch

_TABLE_TYPES = {"person": EventKind.PERSON, "auction": EventKind.AUCTION, "bid": EventKind.BID}
_STRUCT_COLUMNS = {"person": EventKind.PERSON, "auction": EventKind.AUCTION, "bid": EventKind.BID}


def _cast(arr: pa.Array, natural: DataType, declared: DataType) -> pa.Array:
    return arr if natural == declared else cast_array(arr, natural, declared)


@dataclass(frozen=True)
class NexmarkReader:
    """Generates a split's events from its offset (picklable: configuration only)."""

    config: NexmarkConfig
    table_type: EventKind | None  # None = combined form
    columns: tuple[tuple[str, DataType], ...]
    split_num: int = 1
    event_num: int | None = None

    def splits(self) -> list[str]:
        return [str(i) for i in range(self.split_num)]

    def split_event_count(self, split: int) -> int | None:
        """How many events split `split` generates in all (None: unbounded)."""
        if self.event_num is None:
            return None
        return max(0, -(-(self.event_num - split) // self.split_num))

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        s = int(split)
        j0 = int(offset) if offset else 0
        j1 = j0 + budget
        limit = self.split_event_count(s)
        if limit is not None:
            j1 = min(j1, limit)
        if j1 <= j0:
            return ReadResult([], str(j0), 0)
        batches = []
        for a in range(j0, j1, BATCH_EVENTS):
            n = s + np.arange(a, min(a + BATCH_EVENTS, j1), dtype=np.int64) * self.split_num
            b = self.events(n)
            if b.num_rows:
                batches.append(b)
        return ReadResult(batches, str(j1), j1 - j0)

    def events(self, n: np.ndarray) -> pa.RecordBatch:
        """The rows of event numbers `n` in this source's columns."""
        kinds = event_kinds(self.config, n)
        names = [c for c, _ in self.columns]
        if self.table_type is not None:
            n = n[kinds == self.table_type]
            natural = COLUMNS_OF[self.table_type]
            arrays = GENERATORS[self.table_type](self.config, n, names)
            cols = [_cast(arrays[c], natural[c], t) for c, t in self.columns]
            return pa.RecordBatch.from_arrays(cols, names=names)
        cols = []
        for c, t in self.columns:
            if c == "event_type":
                cols.append(_cast(pa.array(kinds.astype(np.int64)), BIGINT, t))
            elif c == "date_time":
                ms = timestamps_ms(self.config, n)
                cols.append(_cast(pa.array(ms * 1000, pa.timestamp("us")), TIMESTAMP, t))
            else:
                cols.append(self._struct(_STRUCT_COLUMNS[c], n, kinds, t))
        return pa.RecordBatch.from_arrays(cols, names=names)

    def _struct(self, kind: EventKind, n: np.ndarray, kinds: np.ndarray, t: DataType) -> pa.Array:
        """A STRUCT column: the kind's fields for its rows, NULL elsewhere."""
        pos = np.flatnonzero(kinds == kind)
        natural = COLUMNS_OF[kind]
        names = [f.name for f in t.fields]
        arrays = GENERATORS[kind](self.config, n[pos], names)
        idx = np.full(len(n), -1, np.int64)
        idx[pos] = np.arange(len(pos))
        missing = idx < 0
        take = pa.array(idx, pa.int64(), mask=missing)
        children = [_cast(arrays[f.name], natural[f.name], f.data_type).take(take) for f in t.fields]
        return pa.StructArray.from_arrays(
            children, fields=[pa.field(f.name, f.data_type.arrow) for f in t.fields], mask=pa.array(missing)
        )


def _validate_columns(spec: SourceSpec, table_type: EventKind | None) -> None:
    if table_type is not None:
        natural = COLUMNS_OF[table_type]
        for c, _ in spec.columns:
            if c not in natural:
                raise InvalidOption(
                    f'column "{c}" is not a field of nexmark {table_type.name.title()} '
                    f"(fields: {', '.join(natural)})"
                )
        if spec.generated:
            raise InvalidOption("generated columns are not supported in a per-table nexmark source")
        return
    for c, t in spec.columns:
        if c in ("event_type", "date_time"):
            continue
        kind = _STRUCT_COLUMNS.get(c)
        if kind is None:
            raise InvalidOption(
                f'column "{c}" is not a nexmark column (event_type, person, auction, bid, date_time); '
                "use nexmark.table.type = 'Person' | 'Auction' | 'Bid' for per-table sources"
            )
        if t.kind is not TypeKind.STRUCT:
            raise InvalidOption(f'nexmark column "{c}" must be a STRUCT')
        for f in t.fields:
            if f.name not in COLUMNS_OF[kind]:
                raise InvalidOption(f'"{f.name}" is not a field of nexmark {kind.name.lower()}')
    extra_generated = set(spec.generated) - {"date_time"}
    if extra_generated:
        raise InvalidOption(
            f"generated column {sorted(extra_generated)[0]!r} is not supported in a nexmark source"
        )


def nexmark_connector(spec: SourceSpec) -> tuple[SourceReader, SourceLimits]:
    """Build a nexmark reader and its limits from the WITH options."""
    opts = nexmark_options(spec.options)
    cfg = config_from_options(spec.options)
    table_type = None
    if "table.type" in opts:
        tt = opts["table.type"].strip().lower()
        if tt not in _TABLE_TYPES:
            raise InvalidOption(
                f"nexmark.table.type must be Person, Auction or Bid, got '{opts['table.type']}'"
            )
        table_type = _TABLE_TYPES[tt]
    _validate_columns(spec, table_type)
    split_num = parse_int("nexmark.split.num", opts.get("split.num", "1"), minimum=1)
    event_num = parse_int("nexmark.event.num", opts["event.num"], minimum=0) if "event.num" in opts else None
    gap = parse_int(
        "nexmark.min.event.gap.in.ns",
        opts.get("min.event.gap.in.ns", str(DEFAULT_MIN_EVENT_GAP_NS)),
        minimum=0,
    )
    rate = split_num * 1e9 / gap if gap > 0 else None
    if "event.rate" in opts:  # events per second for the whole source (0 = unlimited)
        r = parse_float("nexmark.event.rate", opts["event.rate"], minimum=0)
        rate = r if r > 0 else None
    chunk = (
        parse_int("nexmark.max.chunk.size", opts["max.chunk.size"], minimum=1)
        if "max.chunk.size" in opts
        else None
    )
    reader = NexmarkReader(cfg, table_type, tuple(spec.columns), split_num, event_num)
    return reader, source_limits(spec, default_rate=rate, chunk_size=chunk)
