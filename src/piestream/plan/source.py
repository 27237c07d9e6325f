"""Source: a leaf reading a connector's splits, one bounded batch per epoch, exactly once.

The node holds what to read as data — the connector's name and WITH options (`SourceSpec`), the
limits, the splits fixed when the job was planned — never a reader object: the executor asks the
connector registry (`piestream.stream.connector`) for a reader when it is built, so a stored plan
does not depend on a connector's Python classes. Offsets live in `state_table` (one row per
split), malformed records optionally in the source's dead-letter table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from piestream.common.order import ASC
from piestream.common.types import BIGINT, VARCHAR, DataType
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc

#: FORMATs whose messages are changes (updates and deletes), needing a table with a primary key
CHANGE_FORMATS = frozenset({"upsert", "debezium"})


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
    #: FORMAT <format> (lower-case): plain (inserts), upsert or debezium (changes); None = none given
    format: str | None = field(default=None, metadata={"since_format": 3})
    #: INCLUDE clauses: (kind, column, header name or ""), kind in key | partition | offset |
    #: timestamp | header; the columns are among `columns`, filled from message metadata
    include: tuple[tuple[str, str, str], ...] = field(default=(), metadata={"since_format": 3})

    @property
    def append_only(self) -> bool:
        """Whether the source only inserts (FORMAT UPSERT / DEBEZIUM emit changes)."""
        return (self.format or "plain") not in CHANGE_FORMATS

    def option(self, *names: str, default: str | None = None) -> str | None:
        """The first of `names` given in WITH (...) (aliases), else `default`."""
        for n in names:
            if n in self.options:
                return self.options[n]
        return default


@dataclass(frozen=True)
class SourceLimits:
    """How fast a source may go: per epoch at most rate × epoch span rows, and `max_rows_per_epoch`."""

    rate_limit: float | None = None  # rows (events) per second for the whole source; None = unlimited
    max_rows_per_epoch: int = 1_000_000  # for the whole source
    chunk_size: int | None = None  # rows per emitted chunk; None = the job's StreamingConfig
    error_handling: str = "reject"  # "reject" | "dead_letter" | "skip"


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


@node_kind("Source")
@dataclass(frozen=True, kw_only=True)
class SourceNode(StreamNode):
    """Reads a connector. `schema` = the reader's columns (`spec.columns`), then any extra columns
    (e.g. a table's hidden `_row_id`) which come out NULL for a following executor to fill."""

    spec: SourceSpec
    limits: SourceLimits
    state_table: TableDesc
    split_ids: tuple[str, ...]  # fixed when the job was planned
    dead_letter: TableDesc | None = None  # written here but owned by the source's catalog entry
    #: the table a CDC source feeds: an upstream TRUNCATE deletes its rows (read at the committed
    #: epoch, never written here); None for other sources
    truncates: TableDesc | None = field(default=None, metadata={"since_format": 4})

    @property
    def source_name(self) -> str:
        return self.spec.name

    @property
    def connector(self) -> str:
        return self.spec.connector

    @property
    def reader_width(self) -> int:
        """Leading schema columns the reader produces."""
        return len(self.spec.columns)

    @property
    def max_parallelism(self) -> int:
        return max(1, len(self.split_ids))

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        cols = ", ".join(self.schema.names[: self.reader_width])
        return (
            f"Source {{ source: {self.source_name}, connector: {self.connector}, "
            f"splits: {len(self.split_ids)}, columns: [{cols}] }}"
        )
