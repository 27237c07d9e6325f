"""Small expressions for batch tests, built on pyarrow.compute.

They implement `Expr.eval` directly, so these tests depend only on the `Expr` interface the batch
engine uses, not on which scalar functions the expression library has registered yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk
from piestream.common.types import BOOLEAN, DataType
from piestream.expr.expr import Expr, InputRef, Literal

_CMP = {
    "=": pc.equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


@dataclass(frozen=True)
class Cmp(Expr):
    op: str
    left: Expr
    right: Expr
    return_type: DataType = BOOLEAN

    def eval(self, chunk: DataChunk) -> pa.Array:
        return _CMP[self.op](self.left.eval(chunk), self.right.eval(chunk))

    def children(self) -> Sequence[Expr]:
        return (self.left, self.right)

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class And(Expr):
    left: Expr
    right: Expr
    return_type: DataType = BOOLEAN

    def eval(self, chunk: DataChunk) -> pa.Array:
        return pc.and_kleene(self.left.eval(chunk), self.right.eval(chunk))

    def children(self) -> Sequence[Expr]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Or(Expr):
    left: Expr
    right: Expr
    return_type: DataType = BOOLEAN

    def eval(self, chunk: DataChunk) -> pa.Array:
        return pc.or_kleene(self.left.eval(chunk), self.right.eval(chunk))

    def children(self) -> Sequence[Expr]:
        return (self.left, self.right)


@dataclass(frozen=True)
class IsNull(Expr):
    arg: Expr
    return_type: DataType = BOOLEAN

    def eval(self, chunk: DataChunk) -> pa.Array:
        return self.arg.eval(chunk).is_null()

    def children(self) -> Sequence[Expr]:
        return (self.arg,)


@dataclass(frozen=True)
class Add(Expr):
    left: Expr
    right: Expr
    return_type: DataType

    def eval(self, chunk: DataChunk) -> pa.Array:
        t = self.return_type.arrow
        return pc.add_checked(self.left.eval(chunk).cast(t), self.right.eval(chunk).cast(t))

    def children(self) -> Sequence[Expr]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Mod(Expr):
    left: Expr
    right: int
    return_type: DataType

    def eval(self, chunk: DataChunk) -> pa.Array:
        v = self.left.eval(chunk)
        return pc.subtract(v, pc.multiply(pc.divide(v, self.right), self.right)).cast(self.return_type.arrow)

    def children(self) -> Sequence[Expr]:
        return (self.left,)


def col(i: int, t: DataType) -> InputRef:
    return InputRef(i, t)


def lit(v: object, t: DataType) -> Literal:
    return Literal(v, t)
