"""Errors a streaming job survives: counted per actor and epoch, reported to meta (DESIGN
"Errors in streaming"; RisingWave's non-strict mode).

* An *expression error* (a data error in a row: division by zero, overflow, a bad cast, invalid
  function input, a failing UDF) makes that expression NULL for that row; the epoch goes on.
* An *inconsistent op* (a double insert, a delete of a missing key) reaching a state table is
  applied sanely (the last op wins) instead of failing the epoch.

Each is recorded here, grouped by (kind, executor, SQLSTATE, message) with a count and one
sample row, and travels to the driver in the actor's report. Meta keeps them for the system
view ``rw_catalog.rw_streaming_errors`` and logs them (rate-limited). Strict mode
(``StreamingConfig.strict_mode`` / ``strict_consistency``) raises instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.errors import PiestreamError
from piestream.expr.evaluate import eval_non_strict
from piestream.expr.expr import Expr

EXPRESSION = "expression"
CONSISTENCY = "consistency"
#: distinct (kind, executor, SQLSTATE, message) groups one actor keeps per epoch; beyond it, an
#: error joins the group of its SQLSTATE (messages quoting values would be unbounded)
MAX_GROUPS = 64
_SAMPLE_CHARS = 200


@dataclass(frozen=True)
class StreamErrorRecord:
    """Errors of one kind one actor met in one epoch (plain data: reports carry it as JSON)."""

    kind: str  # EXPRESSION | CONSISTENCY
    fragment_id: int
    executor: str  # e.g. "Project", "StateTable 1003"
    sqlstate: str
    message: str
    count: int
    sample: str  # one input row that caused it, as text ("" if none)


class ActorErrors:
    """The errors one actor met in the current epoch."""

    def __init__(self, fragment_id: int = 0) -> None:
        self.fragment_id = fragment_id
        self._groups: dict[tuple[str, str, str, str], list[object]] = {}

    def add(self, kind: str, executor: str, sqlstate: str, message: str, count: int, sample: str) -> None:
        key = (kind, executor, sqlstate, message)
        if key not in self._groups and len(self._groups) >= MAX_GROUPS:
            key = next((k for k in self._groups if k[0] == kind and k[2] == sqlstate), key)
        g = self._groups.get(key)
        if g is None:
            self._groups[key] = [count, sample[:_SAMPLE_CHARS]]
        else:
            g[0] = int(g[0]) + count  # type: ignore[call-overload]

    def expression_errors(
        self, executor: str, errors: list[tuple[int, PiestreamError]], data: DataChunk
    ) -> None:
        """Record the (row, error) pairs of one evaluation; a sample row per distinct message.

        Per failing row (not per row of the chunk): errors are rare, and grouping needs their
        messages."""
        by_msg: dict[tuple[str, str], tuple[int, int]] = {}
        for row, err in errors:
            k = (err.sqlstate, err.message)
            n, first = by_msg.get(k, (0, row))
            by_msg[k] = (n + 1, first)
        for (sqlstate, message), (n, first) in by_msg.items():
            self.add(EXPRESSION, executor, sqlstate, message, n, sample_row(data, first))

    def records(self) -> tuple[StreamErrorRecord, ...]:
        return tuple(
            StreamErrorRecord(kind, self.fragment_id, executor, sqlstate, message, int(g[0]), str(g[1]))  # type: ignore[call-overload]
            for (kind, executor, sqlstate, message), g in self._groups.items()
        )

    def __len__(self) -> int:
        return len(self._groups)


def sample_row(data: DataChunk, row: int) -> str:
    """One row of a chunk as text, e.g. ``(1, 0)`` (for error records)."""
    values = [_value_text(c[row]) for c in data.columns]
    return "(" + ", ".join(values) + ")"


def _value_text(v: pa.Scalar) -> str:
    try:
        py = v.as_py()
    except (ValueError, OverflowError, pa.ArrowException):
        return str(v)
    return "NULL" if py is None else repr(py) if isinstance(py, str) else str(py)


def evaluate(expr: Expr, data: DataChunk, *, strict: bool, errors: ActorErrors, executor: str) -> pa.Array:
    """`expr` over `data` as a streaming executor evaluates it: strictly (a data error fails the
    epoch) or non-strictly (the failing rows get NULL and are recorded in `errors`)."""
    if strict:
        return expr.eval(data)
    out, failed = eval_non_strict(expr, data)
    if failed:
        errors.expression_errors(executor, failed, data)
    return out
