"""The stream plan node: what one executor of a fragment is, as plain data (DESIGN "Layers").

A fragment's plan is a tree of `StreamNode`s (the tree protocol of `piestream.common.tree`: a node
declares its input fields in `child_fields`). Nodes hold only data — schemas, column indices,
bound expressions, state-table descriptors, connector specs — never executors or connector
objects: the frontend plans them, meta stores them (`piestream.plan.serde`, versioned JSON), and
the stream layer builds executors from them through its registry (`piestream.stream.build`), the
way RisingWave keeps ``stream_plan.proto`` apart from its executors.

Every node kind is registered under a stable name (`node_kind`), which is what the serialized
form records instead of a Python module path. Leaves are input ports: an `ExchangeNode` receives
chunks from an upstream fragment, a `DmlNode` receives a table's rows from INSERT / UPDATE /
DELETE statements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from piestream.common.schema import Schema
from piestream.common.tree import TreeNode
from piestream.storage.table.desc import TableDesc

#: Node kinds by their stable serialized name.
NODE_KINDS: dict[str, type[StreamNode]] = {}

N = TypeVar("N", bound="StreamNode")


def node_kind(name: str) -> Callable[[type[N]], type[N]]:
    """Register a node class under `name` (its name in the serialized plan; never change it)."""

    def register(cls: type[N]) -> type[N]:
        if name in NODE_KINDS:
            raise ValueError(f"stream node kind {name!r} registered twice")
        NODE_KINDS[name] = cls
        cls.kind = name
        return cls

    return register


@dataclass(frozen=True, kw_only=True)
class StreamNode(TreeNode):
    """One executor of a fragment's tree; its inputs are its tree children (`child_fields`)."""

    kind = ""  # the registered name (`node_kind`)

    schema: Schema
    stream_key: tuple[int, ...]
    append_only: bool = False

    def tables(self) -> list[TableDesc]:
        """The state tables this node's executor keeps (for the catalog and EXPLAIN)."""
        return []

    def explain(self) -> str:
        """One line for EXPLAIN (the node name and its arguments)."""
        return type(self).__name__.removesuffix("Node")


@dataclass(frozen=True, kw_only=True)
class InputPortNode(StreamNode):
    """A leaf fed by the runtime; the actor's `run_epoch` inputs are keyed by `port`."""

    @property
    def port(self) -> str:
        raise NotImplementedError


@node_kind("Exchange")
@dataclass(frozen=True, kw_only=True)
class ExchangeNode(InputPortNode):
    """Chunks from an upstream fragment (through an exchange)."""

    upstream_fragment_id: int

    @property
    def port(self) -> str:
        return f"fragment:{self.upstream_fragment_id}"

    def explain(self) -> str:
        return f"Exchange {{ from: fragment {self.upstream_fragment_id} }}"


@node_kind("Dml")
@dataclass(frozen=True, kw_only=True)
class DmlNode(InputPortNode):
    """Rows written to a table by DML statements, routed here by the driver."""

    table_id: int
    dist_key: tuple[int, ...] = ()  # columns DML rows are routed by; () = spread round-robin

    @property
    def port(self) -> str:
        return f"dml:{self.table_id}"

    def explain(self) -> str:
        return f"Dml {{ table: {self.table_id} }}"
