"""Relational table descriptors (seed 000 "Row-based Encoding"; reference §4).

A `TableDesc` says how one relational table — a user table, an MV, or an executor's internal
state — maps onto Hummock keys and values: one row is one key/value pair, the key is
``vnode | memcomparable(pk columns in their orders)``, the value is the value encoding of the
`value_indices` columns. The distribution key lies inside the pk, so a point get or a prefix
scan whose prefix covers it knows its vnode.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from piestream.common.order import OrderType
from piestream.common.scalar import Datum
from piestream.common.types import DataType, parse_type
from piestream.common.vnode import VNODE_COUNT
from piestream.encoding.value_datum import decode_datum, encode_datum


@dataclass(frozen=True)
class ColumnDesc:
    name: str
    data_type: DataType
    hidden: bool = False  # e.g. `_row_id`, stream-key columns the user did not select
    #: what a row stored before this column was added reads for it (ALTER TABLE ADD COLUMN ...
    #: DEFAULT; None = NULL); only columns after the table's `value_required` have one
    missing: Datum = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": str(self.data_type), "hidden": self.hidden}
        if self.missing is not None:  # the value encoding's bytes of the datum, as hex
            out["missing"] = encode_datum(self.missing, self.data_type).hex()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ColumnDesc:
        t = parse_type(d["type"])
        missing = d.get("missing")
        value = None if missing is None else decode_datum(bytes.fromhex(missing), 0, t)[0]
        return cls(d["name"], t, d["hidden"], value)


@dataclass(frozen=True)
class TableDesc:
    """How a relational table is stored."""

    table_id: int
    columns: tuple[ColumnDesc, ...]
    pk: tuple[int, ...]  # column indices
    pk_orders: tuple[OrderType, ...]
    dist_key: tuple[int, ...] = ()  # column indices, all inside the pk; () = singleton
    value_indices: tuple[int, ...] | None = None  # None = every column
    vnode_count: int = VNODE_COUNT
    read_prefix_len_hint: int = 0  # pk columns an SST filter is built on (0 = none)
    append_only: bool = False
    watermark_col: int | None = None  # a column whose committed watermark cleans old rows
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    #: value columns every stored value holds (None: all). ALTER TABLE ADD COLUMN appends value
    #: columns without rewriting rows: values stored before it end early, and read the added
    #: columns' `ColumnDesc.missing` (the value encoding's datums are self-delimiting).
    value_required: int | None = None

    def __post_init__(self) -> None:
        ncols = len(self.columns)
        if len(self.pk) != len(self.pk_orders):
            raise ValueError("pk and pk_orders differ in length")
        if any(not 0 <= i < ncols for i in (*self.pk, *self.dist_key, *(self.value_indices or ()))):
            raise ValueError("column index out of range")
        if not set(self.dist_key) <= set(self.pk):
            raise ValueError("the distribution key must lie inside the pk")
        if self.value_indices is not None and set(self.value_indices) | set(self.pk) != set(range(ncols)):
            raise ValueError("every column must be in the pk or in the value")
        if self.value_required is not None and not 0 <= self.value_required <= len(self.value_cols):
            raise ValueError("value_required out of range")
        if not 0 <= self.read_prefix_len_hint <= len(self.pk):
            raise ValueError("read_prefix_len_hint longer than the pk")
        if not self.dist_key and self.vnode_count != 1:
            object.__setattr__(self, "vnode_count", 1)
        if self.watermark_col is not None and (not self.pk or self.pk[0] != self.watermark_col):
            raise ValueError("watermark cleaning needs the watermark column to be the first pk column")
        if self.watermark_col is not None and self.pk_orders[0].descending:
            raise ValueError("watermark cleaning needs an ascending watermark column")

    # -- derived --------------------------------------------------------------------------------
    @cached_property
    def types(self) -> list[DataType]:
        return [c.data_type for c in self.columns]

    @cached_property
    def pk_types(self) -> list[DataType]:
        return [self.columns[i].data_type for i in self.pk]

    @cached_property
    def value_cols(self) -> tuple[int, ...]:
        return tuple(range(len(self.columns))) if self.value_indices is None else self.value_indices

    @cached_property
    def value_types(self) -> list[DataType]:
        return [self.columns[i].data_type for i in self.value_cols]

    @cached_property
    def dist_key_in_pk(self) -> tuple[int, ...]:
        """Positions of the distribution-key columns within the pk."""
        return tuple(self.pk.index(i) for i in self.dist_key)

    @cached_property
    def value_missing(self) -> tuple[Datum, ...]:
        """What values stored before the columns after `value_required` were added read for them."""
        if self.value_required is None:
            return ()
        return tuple(self.columns[i].missing for i in self.value_cols[self.value_required :])

    def with_added_column(self, column: ColumnDesc) -> TableDesc:
        """This table with `column` appended (last in the value): rows stored so far lack it."""
        required = len(self.value_cols) if self.value_required is None else self.value_required
        value = None if self.value_indices is None else (*self.value_indices, len(self.columns))
        return replace(self, columns=(*self.columns, column), value_indices=value, value_required=required)

    @property
    def is_singleton(self) -> bool:
        return not self.dist_key

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def dist_prefix_len(self) -> int:
        """How many leading pk columns a prefix needs to determine the vnode."""
        return max(self.dist_key_in_pk) + 1 if self.dist_key else 0

    # -- persistence ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.table_id,
            "name": self.name,
            "columns": [c.to_json() for c in self.columns],
            "pk": list(self.pk),
            "orders": [[o.descending, o.nulls_largest] for o in self.pk_orders],
            "dist": list(self.dist_key),
            "value": None if self.value_indices is None else list(self.value_indices),
            "vnodes": self.vnode_count,
            "prefix": self.read_prefix_len_hint,
            "append_only": self.append_only,
            "watermark": self.watermark_col,
            **({"required": self.value_required} if self.value_required is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TableDesc:
        return cls(
            table_id=d["id"],
            name=d["name"],
            columns=tuple(ColumnDesc.from_json(c) for c in d["columns"]),
            pk=tuple(d["pk"]),
            pk_orders=tuple(OrderType(a, b) for a, b in d["orders"]),
            dist_key=tuple(d["dist"]),
            value_indices=None if d["value"] is None else tuple(d["value"]),
            vnode_count=d["vnodes"],
            read_prefix_len_hint=d["prefix"],
            append_only=d["append_only"],
            watermark_col=d["watermark"],
            value_required=d.get("required"),
        )

    def describe(self) -> str:
        """One line for EXPLAIN: columns, pk with orders, distribution key."""
        cols = ", ".join(c.name for c in self.columns)
        pk = ", ".join(f"{self.columns[i].name} {o}" for i, o in zip(self.pk, self.pk_orders, strict=True))
        dist = ", ".join(self.columns[i].name for i in self.dist_key) or "singleton"
        return (
            f"Table {self.table_id} {{ columns: [{cols}], pk: [{pk}], dist: [{dist}], "
            f"prefix: {self.read_prefix_len_hint} }}"
        )
