"""The stream planner's plumbing: pieces of a stream plan with their distribution, stream key and
provably non-NULL columns, and the steps every planning rule uses (exchanges, key-keeping
projections, reordering).

A `Piece` is a planned subtree: its root stream node (whose schema has the logical columns first,
then hidden ones the stream key needs), how its rows are spread over actors (`Dist`), and which of
its columns are never NULL (`non_null`: table primary keys, row ids, union branch tags, constants).
Outer joins need the last: a NULL-padded row must never share its stream key with a real one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from piestream.common.schema import Schema
from piestream.common.types import Field
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.frontend.watermark_derive import Watermarks, derive_project
from piestream.plan.node import ExchangeNode, StreamNode
from piestream.plan.project import ProjectNode


@dataclass(frozen=True)
class Dist:
    """How a piece's rows are spread over actors."""

    kind: str  # "hash" (by `keys`), "single" (one actor), "any" (no known property),
    # "broadcast" (every actor gets every row; only as an exchange's target)
    keys: tuple[int, ...] = ()

    def satisfies(self, required: Dist) -> bool:
        if required.kind == "any":
            return True
        if self.kind == "single":
            return True  # one actor holds everything (and owns every vnode)
        return required.kind == "hash" and self.kind == "hash" and self.keys == required.keys

    def mapped(self, mapping: dict[int, int]) -> Dist:
        if self.kind != "hash":
            return self
        if all(k in mapping for k in self.keys):
            return Dist("hash", tuple(mapping[k] for k in self.keys))
        return Dist("any")


SINGLE = Dist("single")
ANY = Dist("any")


@dataclass(frozen=True, kw_only=True)
class ExchangeMarker(StreamNode):
    """Where the fragmenter cuts: the rows below move to `dist` (hash / single)."""

    child_fields = ("input",)

    input: StreamNode
    dist: Dist

    def explain(self) -> str:
        if self.dist.kind == "hash":
            return f"Exchange {{ dist: HashShard({', '.join(f'${k}' for k in self.dist.keys)}) }}"
        if self.dist.kind == "broadcast":
            return "Exchange { dist: Broadcast }"
        return "Exchange { dist: Single }"


@dataclass
class Piece:
    node: StreamNode
    dist: Dist
    width: int  # logical columns; node.schema may have hidden ones after them
    non_null: frozenset[int] = field(default_factory=frozenset)  # columns never NULL
    #: columns that carry a watermark (`frontend.watermark_derive`); a rule that does not pass
    #: them on drops them, which is always safe (no state clean-up above)
    watermarks: Watermarks = field(default_factory=dict)

    @property
    def stream_key(self) -> tuple[int, ...]:
        return self.node.stream_key

    @property
    def schema(self) -> Schema:
        return self.node.schema


def refs(schema: Schema) -> list[Expr]:
    return [InputRef(i, f.data_type) for i, f in enumerate(schema.fields)]


def upstreams(node: StreamNode) -> set[int]:
    """Upstream fragments whose change streams `node` reads inside its own fragment."""
    if isinstance(node, ExchangeMarker):
        return set()
    if isinstance(node, ExchangeNode):
        return {node.upstream_fragment_id}
    return set().union(*(upstreams(i) for i in node.children()))


def conjuncts(e: Expr | None) -> list[Expr]:
    if e is None:
        return []
    if isinstance(e, FuncCall) and e.name == "and":
        return [c for a in e.args for c in conjuncts(a)]
    return [e]


def and_exprs(exprs: list[Expr]) -> Expr | None:
    from piestream.expr.bind import bind_call

    if not exprs:
        return None
    return exprs[0] if len(exprs) == 1 else bind_call("and", exprs)


def _never_null(e: Expr, non_null: frozenset[int]) -> bool:
    if isinstance(e, InputRef):
        return e.index in non_null
    return isinstance(e, Literal) and e.value is not None


class PlannerBase:
    """Exchanges and projections that keep a piece's stream key (hidden columns appended)."""

    def __init__(self, next_table_id: Callable[[], int]) -> None:
        self.next_table_id = next_table_id
        #: ids of stream nodes that more than one consumer reads (`frontend.share`)
        self.shared: set[int] = set()

    def require(self, piece: Piece, dist: Dist) -> Piece:
        if piece.dist.satisfies(dist):
            return piece
        return self.shuffle(piece, dist)

    def shuffle(self, piece: Piece, dist: Dist) -> Piece:
        """An exchange to `dist` even where the piece already satisfies it."""
        n = piece.node
        below = self._exchange_below_projects(n, dist)
        if below is not None:
            return Piece(below, dist, piece.width, piece.non_null, piece.watermarks)
        marker = ExchangeMarker(
            schema=n.schema, stream_key=n.stream_key, append_only=n.append_only, input=n, dist=dist
        )
        return Piece(marker, dist, piece.width, piece.non_null, piece.watermarks)

    def _exchange_below_projects(self, node: StreamNode, dist: Dist) -> StreamNode | None:
        """Over a shared node reached through column-picking projections, the exchange goes
        right above the shared node (projections rebuilt over it), so that every consumer reads
        it through an exchange of its own and the fragmenter cuts there; None otherwise."""
        if not self.shared:
            return None
        chain: list[ProjectNode] = []
        keys = dist.keys
        cur = node
        while id(cur) not in self.shared:
            if not isinstance(cur, ProjectNode) or not all(isinstance(e, InputRef) for e in cur.exprs):
                return None
            keys = tuple(cur.exprs[k].index for k in keys)  # type: ignore[attr-defined]
            chain.append(cur)
            cur = cur.input
        if not chain:
            return None  # the shared node itself: the plain exchange is right above it
        out: StreamNode = ExchangeMarker(
            schema=cur.schema,
            stream_key=cur.stream_key,
            append_only=cur.append_only,
            input=cur,
            dist=Dist(dist.kind, keys),
        )
        for p in reversed(chain):
            out = replace(p, input=out)
        return out

    def project(
        self,
        piece: Piece,
        exprs: Sequence[Expr],
        names: Sequence[str],
        width: int,
        extra_key: Sequence[int] = (),
    ) -> Piece:
        """A projection that keeps the input's stream key (hidden columns appended if dropped);
        `extra_key` output columns join the stream key after the input's key columns."""
        exprs = list(exprs)
        names = list(names)
        pos, key = keep_stream_key(piece, exprs, names)
        key += [k for k in extra_key if k not in key]
        schema = Schema(tuple(Field(n, e.return_type) for n, e in zip(names, exprs, strict=True)))
        node = ProjectNode(
            schema=schema,
            stream_key=tuple(key),
            append_only=piece.node.append_only,
            input=piece.node,
            exprs=tuple(exprs),
        )
        non_null = frozenset(i for i, e in enumerate(exprs) if _never_null(e, piece.non_null))
        return Piece(node, piece.dist.mapped(pos), width, non_null, derive_project(exprs, piece.watermarks))

    def reorder(self, piece: Piece, logical: list[int]) -> Piece:
        """Put columns `logical` first (in that order), the rest after (hidden)."""
        rest = [i for i in range(len(piece.schema)) if i not in logical]
        order = logical + rest
        if order == list(range(len(piece.schema))):
            return replace(piece, width=len(logical))
        exprs = [InputRef(i, piece.schema[i].data_type) for i in order]
        names = [piece.schema[i].name for i in order]
        return self.project(piece, exprs, names, len(logical))


def keep_stream_key(piece: Piece, exprs: list[Expr], names: list[str]) -> tuple[dict[int, int], list[int]]:
    """Append (hidden, named `_col`) the stream-key columns of `piece` that no item of `exprs`
    passes on; returns input column -> output position for the columns passed, and the positions
    of the stream key's columns."""
    pos: dict[int, int] = {}
    for i, e in enumerate(exprs):
        if isinstance(e, InputRef) and e.index not in pos:
            pos[e.index] = i
    key = []
    for k in piece.stream_key:
        if k not in pos:
            pos[k] = len(exprs)
            exprs.append(InputRef(k, piece.schema[k].data_type))
            names.append(f"_{piece.schema[k].name}")
        key.append(pos[k])
    return pos, key
