"""Bound expressions, evaluated over whole Arrow columns (DESIGN layer 4).

An expression tree is plain data (dataclasses with the `TreeNode` protocol, serialized with the
plan nodes that hold them); `eval(chunk)` turns it into one Arrow array for all rows of a chunk by
calling vectorized kernels. The same evaluator serves streaming executors and batch queries, so an
MV and its SELECT agree.

Rows are evaluated for every physical row of the chunk, so callers hand over compacted chunks:
a row a filter removed must not raise (e.g. a division by zero in a row WHERE dropped).
Conditional forms (CASE, COALESCE, AND, OR) evaluate a branch only on the rows that reach it,
so ``CASE WHEN x <> 0 THEN 1 / x END`` never divides by zero.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.scalar import Datum, to_arrow
from piestream.common.tree import TreeNode
from piestream.common.types import VARCHAR, DataType


class Expr(TreeNode, ABC):
    """A typed expression over the columns of an input chunk."""

    return_type: DataType

    @abstractmethod
    def eval(self, chunk: DataChunk) -> pa.Array:
        """One value per physical row of `chunk`."""

    def input_refs(self) -> set[int]:
        """Indices of the input columns this expression reads."""
        return {e.index for e in self.walk() if isinstance(e, InputRef)}


@dataclass(frozen=True)
class InputRef(Expr):
    index: int
    return_type: DataType

    def eval(self, chunk: DataChunk) -> pa.Array:
        return chunk.columns[self.index]

    def __str__(self) -> str:
        return f"${self.index}"


@dataclass(frozen=True)
class Literal(Expr):
    value: Datum
    return_type: DataType

    def eval(self, chunk: DataChunk) -> pa.Array:
        return constant_array(self.value, self.return_type, chunk.capacity)

    def __eq__(self, other: object) -> bool:
        """Value and type, and a NUMERIC's display scale too: ``1.0`` and ``1.00`` print
        differently, so ``x * 1.0`` does not stand for a ``GROUP BY x * 1.00`` key (PostgreSQL
        compares such constants byte for byte and refuses that query with 42803)."""
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Literal)
        return (self.value, self.return_type, self.return_type.dscale) == (
            other.value,
            other.return_type,
            other.return_type.dscale,
        )

    def __hash__(self) -> int:
        return hash((self.value, self.return_type))

    def __str__(self) -> str:
        if self.value is None:
            return "NULL"
        if isinstance(self.value, str):
            return "'" + self.value.replace("'", "''") + "'"
        from piestream.common.text import format_datum

        text = format_datum(self.value, self.return_type)
        if self.return_type.is_numeric or isinstance(self.value, bool):
            return text
        return f"'{text}'::{self.return_type}"


@dataclass(frozen=True)
class UnknownLiteral(Literal):
    """A quoted string (or NULL) whose type PostgreSQL takes from context ("unknown").

    ``ts_col > '2021-01-01'`` reads the text as a timestamp; ``NULL + 1`` makes the NULL an integer.
    Until something resolves it, it evaluates as VARCHAR (PostgreSQL's text default). `value` is
    the text, or None for NULL.
    """

    value: str | None
    return_type: DataType = VARCHAR

    def __str__(self) -> str:
        return "NULL" if self.value is None else "'" + self.value.replace("'", "''") + "'"


def constant_array(value: Datum, t: DataType, n: int) -> pa.Array:
    """`n` copies of one datum as an Arrow array of `t`'s layout (no Python per row)."""
    one = to_arrow([value], t)
    if n <= 1:
        return one.slice(0, n)  # pa.repeat refuses 0 copies of a list or struct
    return pa.repeat(one[0], n)


@dataclass(frozen=True)
class FuncCall(Expr):
    """A call of a registered vectorized function (see `piestream.expr.functions`).

    `options` holds call constants that are not SQL arguments, e.g. a statement time frozen
    into ``now()`` (see `piestream.expr.functions.datetime`).
    """

    child_fields = ("args",)

    name: str
    args: tuple[Expr, ...]
    return_type: DataType
    options: tuple[tuple[str, Datum], ...] = field(default=())

    def eval(self, chunk: DataChunk) -> pa.Array:
        from piestream.expr.functions.registry import evaluate_call

        return evaluate_call(self, chunk)

    def option(self, key: str, default: Datum = None) -> Datum:
        for k, v in self.options:
            if k == key:
                return v
        return default

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(a) for a in self.args)})"


def eval_exprs(exprs: Sequence[Expr], chunk: DataChunk) -> list[pa.Array]:
    return [e.eval(chunk) for e in exprs]
