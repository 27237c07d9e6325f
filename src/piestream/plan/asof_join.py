"""AsOfJoin: ``left ASOF [LEFT] JOIN right ON l.k = r.k [AND ...] AND l.t <op> r.t`` (RisingWave's
AsOf join), maintained under inserts, updates and deletes on both sides.

Each left row joins at most one right row: the one of its join key nearest by the inequality
column (ties broken by the right's stream key, `stream.executors.join.asof`). Both inputs are
kept in state tables keyed by join key | stream key (the hash join's layout), hash-distributed by
the join key. A left change joins the right rows of its key as they are; a right change
re-matches the left rows of its key and emits only those whose match changed. The output is
left ++ right (right NULL for an unmatched row of ASOF LEFT JOIN); its stream key is the left's
(plus the join key, which keeps the distribution key inside an MV's pk).
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import TableDesc

#: inequality operators of ``left.t <op> right.t``
ASOF_OPS = ("<", "<=", ">", ">=")
#: the operator seen from the other side (``r.t <= l.t`` is ``l.t >= r.t``)
FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


@node_kind("AsOfJoin")
@dataclass(frozen=True, kw_only=True)
class AsOfJoinNode(StreamNode):
    child_fields = ("left", "right")

    left: StreamNode
    right: StreamNode
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    #: the inequality ``left[left_col] <op> right[right_col]``
    left_col: int
    right_col: int
    op: str
    #: ASOF LEFT JOIN: unmatched left rows are kept, NULL-padded
    outer: bool
    left_table: TableDesc
    right_table: TableDesc

    def __post_init__(self) -> None:
        if self.op not in ASOF_OPS:
            raise ValueError(f"AsOfJoin: unknown inequality {self.op!r}")
        if not self.left_keys or len(self.left_keys) != len(self.right_keys):
            raise ValueError("AsOfJoin: needs equally many (>= 1) left and right keys")

    def explain(self) -> str:
        ln = len(self.left.schema)
        eqs = [f"${lk} = ${ln + rk}" for lk, rk in zip(self.left_keys, self.right_keys, strict=True)]
        eqs.append(f"${self.left_col} {self.op} ${ln + self.right_col}")
        kind = "LeftOuter" if self.outer else "Inner"
        return f"AsOfJoin {{ type: {kind}, predicate: {' AND '.join(eqs)} }}"
