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
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
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

    file: str  # where: a file name, or a message connector's split (e.g. a Kafka partition)
    line: int  # 1-based line (row number for Parquet); 0 = the whole file; a message's offset
    raw: str
    error: str
    container: str = "file"  # what `file` names
    unit: str = "line"  # what `line` counts

    def describe(self) -> str:
        where = f'{self.container} "{self.file}"' + (
            f", {self.unit} {self.line}" if self.line or self.unit != "line" else ""
        )
        return f"malformed record in {where}: {self.error}"


class SourceUnavailable(PiestreamError):
    """A source's upstream cannot be read now (broker down or hung past a time-out). A reader
    raises it instead of returning fewer rows than the committed offsets say exist: which rows an
    epoch reads must not depend on timing, or a retried task (Spark's task retry, speculation)
    could emit other rows than the attempt whose output was already used. The attempt fails;
    the barrier manager then pauses the source for that epoch's retry and a back-off
    (`StreamingConfig.paused_sources`), so every attempt of an epoch reads a source fully or
    not at all. The source executor names the source (`source`, carried by the error's marker
    across processes: `unavailable_source`)."""

    sqlstate = "08006"
    marker_fields = ("source",)

    def __init__(self, message: str, *, source: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.source = source


def unavailable_source(error: BaseException) -> str | None:
    """The source a `SourceUnavailable` from the source executor names, else None."""
    return error.source if isinstance(error, SourceUnavailable) else None


@dataclass
class ReadResult:
    """One split's read for one epoch."""

    batches: list[pa.RecordBatch]  # rows, columns as in `SourceSpec.columns` (Arrow types of them)
    offset: str  # the offset after these rows (the reader's own format)
    consumed: int  # budget units used (events, lines, rows); 0 = nothing available now
    bad_records: list[BadRecord] = field(default_factory=list)
    #: the op of each row, an int8 array per batch (`Op` values); None = every row inserted
    ops: list[np.ndarray] | None = None
    #: faults the reader survived and retries (an unreachable upstream), as (SQLSTATE, message):
    #: recorded in rw_streaming_errors; the epoch commits what the read returned
    errors: list[tuple[str, str]] = field(default_factory=list)
    #: upstream TRUNCATEs (CDC), as batch indexes k: every row of the table the source feeds is
    #: deleted before batch k is applied (k may be len(batches)); ascending
    truncate_at: list[int] = field(default_factory=list)


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


# Optional reader methods, looked up with getattr (a reader defines them only if it needs them):
#: ``ack(split, offset) -> None``: called on the driver after an epoch whose state holds `offset`
#: for `split` is durable (RisingWave's WaitCheckpointWorker): e.g. commit a Kafka group offset
#: for monitoring, confirm a replication slot's LSN. Never called with an uncommitted offset.
ACK = "ack"
#: ``current_splits() -> list[str]``: the splits now (a superset of the planned ones, in a stable
#: order: new splits only ever append), never blocking; the barrier manager calls it on the
#: driver at each epoch's start and fixes what it adds in the epoch's plan
#: (`StreamingConfig.source_splits`), so splits made after the job was planned (new Kafka
#: partitions) are read too, the same in every attempt. Without it: the planned splits.
CURRENT_SPLITS = "current_splits"
#: ``hints_new_keys = True``: the reader marks batches whose keys are new to the stream
#: (`common.chunk.NEW_KEYS_METADATA`, a CDC snapshot's chunks); from any other reader the
#: metadata is ignored, so a file's or a message's own metadata never skips a conflict lookup
HINTS_NEW_KEYS = "hints_new_keys"


class SourceConnector(Protocol):
    """A registered source connector: builds the reader and the limits from a spec (validating
    the options). Called when a job is planned and whenever an actor builds its executors."""

    def __call__(self, spec: SourceSpec) -> tuple[SourceReader, SourceLimits]: ...


#: Formats every connector takes unless it declares its own: no FORMAT, or PLAIN / NATIVE /
#: NONE with any ENCODE the connector accepts itself.
DEFAULT_FORMATS: frozenset[tuple[str, str | None]] = frozenset(
    {("plain", None), ("native", None), ("none", None)}
)


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
_FORMATS: dict[str, frozenset[tuple[str, str | None]]] = {}


def register_source_connector(
    name: str, connector: SourceConnector, formats: frozenset[tuple[str, str | None]] | None = None
) -> None:
    """Register a source connector; `formats` = its (FORMAT, ENCODE) pairs (RisingWave's
    CONNECTORS_COMPATIBLE_FORMATS; ENCODE None = any), default `DEFAULT_FORMATS`."""
    _SOURCES[name.lower()] = connector
    _FORMATS[name.lower()] = formats if formats is not None else DEFAULT_FORMATS


def supports_include(connector: str) -> bool:
    """Whether the connector fills INCLUDE columns (it declared message formats of its own)."""
    return _FORMATS.get(connector.lower(), DEFAULT_FORMATS) is not DEFAULT_FORMATS


def check_format(connector: str, fmt: str | None, encode: str | None) -> None:
    """Refuse (0A000) a FORMAT ... ENCODE pair the connector does not declare."""
    allowed = _FORMATS.get(connector.lower(), DEFAULT_FORMATS)
    if fmt is None:
        if ("none", None) in allowed:
            return
        pairs = ", ".join(sorted(f"FORMAT {f.upper()} ENCODE {(e or '...').upper()}" for f, e in allowed))
        raise FeatureNotSupported(f'connector "{connector}" needs a FORMAT ... ENCODE clause ({pairs})')
    f, e = fmt.lower(), (encode or "").lower()
    if (f, e) in allowed or (f, None) in allowed:
        return
    pairs = ", ".join(sorted(f"{a.upper()} {(b or '*').upper()}" for a, b in allowed))
    raise FeatureNotSupported(
        f'FORMAT {f.upper()} ENCODE {e.upper()} is not supported by connector "{connector}" '
        f"(supported: {pairs})"
    )


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
        append_only=spec.append_only,
        spec=spec,
        limits=limits,
        state_table=source_state_table(state_table_id, f"{spec.name}_source_state"),
        split_ids=tuple(reader.splits()),
        dead_letter=dead_letter,
    )
