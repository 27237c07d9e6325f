"""Stream plan nodes: plain, picklable descriptions from which actors build executors.

The planner produces a tree of nodes per fragment; the runtime ships the tree to Spark tasks,
where each actor builds its executors from it (`StreamNode.build`). Leaves are input ports: an
`ExchangeNode` receives chunks from an upstream fragment, a `DmlNode` receives a table's rows
from INSERT / UPDATE / DELETE statements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from piestream.common.schema import Schema
from piestream.common.tree import TreeNode
from piestream.storage.table.desc import TableDesc

if TYPE_CHECKING:
    from piestream.stream.executor import ActorContext, Executor


@dataclass(frozen=True, kw_only=True)
class StreamNode(TreeNode):
    """One executor of a fragment's tree; its inputs are its tree children (`child_fields`)."""

    schema: Schema
    stream_key: tuple[int, ...]
    append_only: bool = False

    def build(self, ctx: ActorContext) -> Executor:
        raise NotImplementedError(type(self).__name__)

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

    def build(self, ctx: ActorContext) -> Executor:
        from piestream.stream.executor import Executor

        return Executor(ctx, self.schema, self.stream_key, self.append_only)


@dataclass(frozen=True, kw_only=True)
class ExchangeNode(InputPortNode):
    """Chunks from an upstream fragment (through an exchange)."""

    upstream_fragment_id: int

    @property
    def port(self) -> str:
        return f"fragment:{self.upstream_fragment_id}"

    def explain(self) -> str:
        return f"Exchange {{ from: fragment {self.upstream_fragment_id} }}"


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
