"""The connector interface of the stream layer: what source readers and sink writers are, and the
registry that turns a plan node's connector name and options into one.

Connectors (`piestream.connectors`) implement these protocols and register by name; the frontend
validates a statement's options through the registry (`plan_source_node`), and an actor builds
its readers and writers from the `Connectors` it is given when its executors are built. The
runtime ships the driver's registry with every epoch, so a Spark worker builds the same connector
objects the driver would, without the plan naming any Python class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

import pyarrow as pa

from piestream.common.epoch import EpochPair
from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.schema import Schema
from piestream.plan.source import SourceLimits, SourceNode, SourceSpec, source_state_table
from piestream.storage.table.desc import TableDesc

# -- sources ---------------------------------------------------------------------------------------


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
    """A connector's reading logic. Deterministic: the same (split, offset, budget) gives the same
    rows, so a retried Spark task emits exactly what the first did."""

    def splits(self) -> list[str]:
        """The split ids, fixed for the life of the job."""
        ...

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        """Read up to `budget` units of `split` after `offset` (None: from the beginning)."""
        ...


class SourceConnector(Protocol):
    """A registered source connector: builds the reader and the limits from a spec (validating
    the options). Called when a job is planned and whenever an actor builds its executors."""

    def __call__(self, spec: SourceSpec) -> tuple[SourceReader, SourceLimits]: ...


# -- sinks -----------------------------------------------------------------------------------------


@runtime_checkable
class SinkWriter(Protocol):
    """Stages one actor's output of one epoch; returns a token naming it (None: nothing staged)."""

    def stage(self, epoch: int, actor_index: int, table: pa.Table) -> str | None: ...


#: A registered sink connector: the writer for a sink's validated options.
SinkConnector = Callable[[Mapping[str, str]], SinkWriter]
C = TypeVar("C")


# -- the registry ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connectors:
    """Source and sink connectors by (lower-case) name."""

    sources: Mapping[str, SourceConnector] = field(default_factory=dict)
    sinks: Mapping[str, SinkConnector] = field(default_factory=dict)

    def source(self, name: str) -> SourceConnector:
        return _lookup(self.sources, name, "connector")

    def sink(self, name: str) -> SinkConnector:
        return _lookup(self.sinks, name, "sink connector")


def _lookup(connectors: Mapping[str, C], name: str, what: str) -> C:
    c = connectors.get(name.lower())
    if c is None:
        known = ", ".join(sorted(connectors)) or "none registered"
        raise FeatureNotSupported(f'{what} "{name}" is not supported (known: {known})')
    return c


_SOURCES: dict[str, SourceConnector] = {}
_SINKS: dict[str, SinkConnector] = {}


def register_source_connector(name: str, connector: SourceConnector) -> None:
    _SOURCES[name.lower()] = connector


def register_sink_connector(name: str, connector: SinkConnector) -> None:
    _SINKS[name.lower()] = connector


def registered_connectors() -> Connectors:
    """The connectors registered in this process (a snapshot)."""
    return Connectors(dict(_SOURCES), dict(_SINKS))


def source_connector(name: str) -> SourceConnector:
    return registered_connectors().source(name)


def plan_source_node(
    spec: SourceSpec,
    *,
    schema: Schema,
    stream_key: tuple[int, ...],
    state_table_id: int,
    dead_letter: TableDesc | None = None,
) -> SourceNode:
    """A `SourceNode` for a catalog source or connector table: validates the options and fixes
    the splits now, through the connector."""
    reader, limits = source_connector(spec.connector)(spec)
    if limits.error_handling == "dead_letter" and dead_letter is None:
        raise PiestreamError("error.handling = 'dead_letter' needs a dead-letter table", sqlstate="22023")
    return SourceNode(
        schema=schema,
        stream_key=stream_key,
        append_only=True,
        spec=spec,
        limits=limits,
        state_table=source_state_table(state_table_id, f"{spec.name}_source_state"),
        split_ids=tuple(reader.splits()),
        dead_letter=dead_letter,
    )
