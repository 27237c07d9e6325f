"""Set-returning functions (PostgreSQL's SRFs, RisingWave's table functions) and ProjectSet's
evaluation over a whole chunk.

A `TableFunction` is an expression node that yields any number of values per input row:
``unnest(array)``, ``generate_series(start, stop [, step])`` (integers, numeric, timestamps with an
interval step), RisingWave's ``range(...)`` (the same with the stop excluded) and
``regexp_matches(text, pattern [, flags])`` (one text[] per match). It only appears in a
ProjectSet's select list; `TableFunction.eval` refuses to run as a scalar.

`project_set` evaluates a select list of scalar expressions and table functions the way
PostgreSQL 10+ does: per input row, every table function is expanded, they are zipped to the
longest (shorter ones padded with NULL), scalar items repeat on every output row, and a row whose
table functions are all empty yields nothing. Each output row carries `projected_row_id`, its
index within its input row (RisingWave's `_rw_projected_row_id`), so (input key, projected row
id) is a stream key. All of it is vectorized: expansions are computed as (values, count per row)
and the zip is index arithmetic; only regexp_matches runs Python per row (the `re` engine).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk
from piestream.common.errors import FeatureNotSupported, InternalError, InvalidInput, PiestreamError
from piestream.common.scalar import from_arrow, to_arrow
from piestream.common.types import (
    BIGINT,
    INT,
    INTERVAL,
    JSONB,
    NUMERIC,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    DataType,
    TypeKind,
    list_of,
    struct_of,
)
from piestream.expr.bind import arg_type, coerce_to
from piestream.expr.expr import Expr, FuncCall
from piestream.expr.functions.datetime_arith import add_interval_us, check_us
from piestream.expr.functions.vec import USECS_PER_DAY, interval_parts

#: evaluates an argument or a scalar item over a chunk
Evaluate = Callable[[Expr, DataChunk], pa.Array | pa.ChunkedArray]

#: The set-returning functions, by name.
TABLE_FUNCTIONS = frozenset(
    {
        "unnest",
        "generate_series",
        "range",
        "regexp_matches",
        "jsonb_array_elements",
        "jsonb_array_elements_text",
        "jsonb_object_keys",
        "jsonb_path_query",
        "jsonb_each",
        "jsonb_each_text",
    }
)

#: jsonb's set-returning functions: their result type
_JSONB_SRFS = {
    "jsonb_array_elements": JSONB,
    "jsonb_array_elements_text": VARCHAR,
    "jsonb_object_keys": VARCHAR,
    "jsonb_path_query": JSONB,
    # a record (key, value): in FROM its fields are the columns (binder/table_functions.py)
    "jsonb_each": struct_of(("key", VARCHAR), ("value", JSONB)),
    "jsonb_each_text": struct_of(("key", VARCHAR), ("value", VARCHAR)),
}

#: Most values one series expansion may produce (1 GiB of BIGINTs): past it the statement fails
#: with 54000 instead of exhausting memory (PostgreSQL would try, and run out or run for hours).
MAX_SERIES_VALUES = 1 << 27


def _too_many(n: float) -> PiestreamError:
    return PiestreamError(
        f"generate_series would produce about {n:.3g} values, more than {MAX_SERIES_VALUES:,} "
        "(split the range into several statements)",
        sqlstate="54000",
    )


@dataclass(frozen=True)
class TableFunction(Expr):
    """A call of a set-returning function (see the module docstring)."""

    child_fields = ("args",)

    name: str
    args: tuple[Expr, ...]
    return_type: DataType

    def eval(self, chunk: DataChunk) -> pa.Array:
        raise InternalError(f"set-returning function {self.name} evaluated as a scalar")

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(a) for a in self.args)})"


def contains_table_function(e: Expr) -> bool:
    return any(isinstance(x, TableFunction) for x in e.walk())


# -- binding ----------------------------------------------------------------------------------------


def _no_such(name: str, args: Sequence[Expr]) -> PiestreamError:
    from piestream.expr.bind import no_such

    return no_such(name, args)


def bind_table_function(name: str, args: Sequence[Expr]) -> TableFunction:
    """A typed call of `name` (one of `TABLE_FUNCTIONS`), arguments coerced to its signature."""
    name = name.lower()
    types = [arg_type(a) for a in args]
    if name == "unnest":
        if len(args) != 1:
            raise FeatureNotSupported("unnest with several arrays is only supported in FROM")
        t = types[0]
        if t is None or t.kind is not TypeKind.LIST or t.elem is None:
            raise _no_such(name, args)
        return TableFunction(name, (args[0],), t.elem)
    if name in ("generate_series", "range"):
        return _bind_series(name, list(args), types)
    if name == "regexp_matches":
        if len(args) not in (2, 3) or any(t not in (None, VARCHAR) for t in types):
            raise _no_such(name, args)
        return TableFunction(name, tuple(coerce_to(a, VARCHAR) for a in args), list_of(VARCHAR))
    if name == "jsonb_path_query":
        return TableFunction(name, _jsonpath_args(name, args), JSONB)
    if name in _JSONB_SRFS:
        if len(args) != 1 or types[0] not in (None, JSONB):
            raise _no_such(name, args)
        # the document's kind is checked by a scalar call (a data error there is NULL in streaming)
        checked = FuncCall(f"{name}_check", (coerce_to(args[0], JSONB),), JSONB)
        return TableFunction(name, (checked,), _JSONB_SRFS[name])
    raise _no_such(name, args)


def _jsonpath_args(name: str, args: Sequence[Expr]) -> tuple[Expr, ...]:
    """(target jsonb, path text): a constant path is checked while binding (0A000 outside the subset)."""
    from piestream.expr.expr import Literal
    from piestream.expr.functions.jsonpath import parse_path

    if len(args) > 2:
        raise FeatureNotSupported(f"{name} with vars or silent is not supported")
    if len(args) != 2 or any(arg_type(a) not in (None, JSONB, VARCHAR) for a in args):
        raise _no_such(name, args)
    path = coerce_to(args[1], VARCHAR)
    if isinstance(path, Literal) and path.value is not None:
        parse_path(str(path.value))
    return (coerce_to(args[0], JSONB), path)


def _bind_series(name: str, args: list[Expr], types: list[DataType | None]) -> TableFunction:
    if len(args) not in (2, 3):
        raise _no_such(name, args)
    known = [t for t in types[:2] if t is not None]
    if known and all(t.kind in (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ, TypeKind.DATE) for t in known):
        # PostgreSQL's resolution: dates alone take the preferred timestamptz form
        kinds = {x.kind for x in known}
        t = TIMESTAMP if TypeKind.TIMESTAMP in kinds and TypeKind.TIMESTAMPTZ not in kinds else TIMESTAMPTZ
        if len(args) != 3 or types[2] not in (None, INTERVAL):
            raise _no_such(name, args)
        bound = (coerce_to(args[0], t), coerce_to(args[1], t), coerce_to(args[2], INTERVAL))
        return TableFunction(name, bound, t)
    if any(t is not None and not t.is_numeric for t in types):
        raise _no_such(name, args)
    kinds = {t.kind for t in types if t is not None}
    if kinds & {TypeKind.NUMERIC, TypeKind.REAL, TypeKind.DOUBLE}:
        if kinds & {TypeKind.REAL, TypeKind.DOUBLE}:
            raise _no_such(name, args)  # PostgreSQL has no generate_series over floats
        t = NUMERIC
    elif TypeKind.BIGINT in kinds:
        t = BIGINT
    else:
        t = INT
    return TableFunction(name, tuple(coerce_to(a, t) for a in args), t)


# -- expansion --------------------------------------------------------------------------------------


def _eval(e: Expr, chunk: DataChunk) -> pa.Array | pa.ChunkedArray:
    return e.eval(chunk)


def expand(tf: TableFunction, chunk: DataChunk, evaluate: Evaluate = _eval) -> tuple[pa.Array, np.ndarray]:
    """Every row's values, concatenated in row order, and the number of values of each row.
    `evaluate` evaluates the arguments (streaming passes its NULL-on-data-error evaluation)."""
    args = [_array(evaluate(a, chunk), a.return_type) for a in tf.args]
    n = chunk.capacity
    if tf.name == "unnest":
        return _unnest(args[0], n)
    if tf.name in ("generate_series", "range"):
        return _series(tf, args, n)
    if tf.name == "regexp_matches":
        return _regexp_matches(args, n)
    if tf.name in _JSONB_SRFS:
        from piestream.expr.functions.jsonb import expand_jsonb

        return expand_jsonb(tf.name, *args)
    raise InternalError(f"unknown set-returning function {tf.name}")


def _array(a: pa.Array | pa.ChunkedArray, t: DataType) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return a if a.type == t.arrow else a.cast(t.arrow)


def _unnest(lists: pa.Array, n: int) -> tuple[pa.Array, np.ndarray]:
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return pc.list_flatten(lists), lengths


def _series(tf: TableFunction, args: list[pa.Array], n: int) -> tuple[pa.Array, np.ndarray]:
    inclusive = tf.name == "generate_series"
    valid = np.ones(n, np.bool_)
    for a in args:
        if a.null_count:
            valid &= a.is_valid().to_numpy(zero_copy_only=False)
    t = tf.return_type
    if t.kind in (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ):
        return _timestamp_series(args, valid, inclusive, t)
    if t.kind is TypeKind.NUMERIC:
        return _numeric_series(args, valid, inclusive, t)
    start = _ints(args[0], valid)
    stop = _ints(args[1], valid)
    step = _ints(args[2], valid) if len(args) > 2 else np.ones(n, np.int64)
    if (step[valid] == 0).any():
        raise InvalidInput("step size cannot equal zero", sqlstate="22023")
    safe = np.where(step == 0, 1, step)
    # the size in floats first: the int64 span itself may overflow (-2^63 .. 2^63 - 1)
    approx = np.maximum((stop.astype(np.float64) - start.astype(np.float64)) / safe, 0)[valid].sum()
    if approx >= MAX_SERIES_VALUES:
        raise _too_many(float(approx))
    # values start + k * step for k = 0 .. count - 1, where count rounds toward the stop
    span = stop - start
    if inclusive:
        count = np.where((span >= 0) == (safe > 0), span // safe + 1, 0)
        count = np.where(span == 0, 1, count)
    else:
        count = np.where((span > 0) == (safe > 0), -(-span // safe), 0)
        count = np.where(span == 0, 0, count)
    count = np.where(valid, np.maximum(count, 0), 0).astype(np.int64)
    total = int(count.sum())
    row = np.repeat(np.arange(n, dtype=np.int64), count)
    k = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    values = start[row] + k * safe[row]
    return pa.array(values, pa.int64()).cast(t.arrow), count


def _ints(a: pa.Array, valid: np.ndarray) -> np.ndarray:
    return np.where(valid, pc.fill_null(a.cast(pa.int64()), 0).to_numpy(zero_copy_only=False), 0).astype(
        np.int64
    )


def _numeric_series(
    args: list[pa.Array], valid: np.ndarray, inclusive: bool, t: DataType
) -> tuple[pa.Array, np.ndarray]:
    """NUMERIC bounds: exact decimal steps (per row: few rows ask for numeric series)."""
    cols = [from_arrow(a, t) for a in args]
    values: list[Decimal] = []
    counts = np.zeros(len(valid), np.int64)
    for i in np.flatnonzero(valid).tolist():  # per row: Decimal arithmetic has no vector form
        start, stop = cols[0][i], cols[1][i]
        step = cols[2][i] if len(cols) > 2 else Decimal(1)
        assert isinstance(start, Decimal) and isinstance(stop, Decimal) and isinstance(step, Decimal)
        if step == 0:
            raise InvalidInput("step size cannot equal zero", sqlstate="22023")
        if (stop - start) / step + len(values) >= MAX_SERIES_VALUES:
            raise _too_many(float((stop - start) / step) + len(values))
        v, c = start, 0
        while (v <= stop if inclusive else v < stop) if step > 0 else (v >= stop if inclusive else v > stop):
            values.append(v)
            v += step
            c += 1
        counts[i] = c
    return to_arrow(values, t), counts


def _calendar_series(
    step: pa.Array, start: np.ndarray, stop: np.ndarray, valid: np.ndarray, inclusive: bool, t: DataType
) -> tuple[pa.Array, np.ndarray]:
    """Steps with months: each value is the previous one plus the step, as in PostgreSQL
    (Jan 31 + 1 month = Feb 29, then Mar 29), so all rows advance together one step a round."""
    months, days, usecs = interval_parts(step)
    # PostgreSQL compares an interval with zero as months * 30 days + days + microseconds
    span = months * (30 * USECS_PER_DAY) + days * USECS_PER_DAY + usecs
    if (valid & (span == 0)).any():
        raise InvalidInput("step size cannot equal zero", sqlstate="22023")
    up = span > 0

    def within(cur: np.ndarray) -> np.ndarray:
        if inclusive:
            return np.where(up, cur <= stop, cur >= stop)
        return np.where(up, cur < stop, cur > stop)

    cur = start
    alive = valid & within(cur)
    values: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    while alive.any():  # one round per step of the longest series, every row's step at once
        idx = np.flatnonzero(alive)
        values.append(cur[idx])
        rows.append(idx)
        cur = add_interval_us(cur, step)
        check_us(cur, alive)
        alive &= within(cur)
    if not values:
        return pa.nulls(0, t.arrow), np.zeros(len(valid), np.int64)
    row = np.concatenate(rows)
    order = np.argsort(row, kind="stable")
    out = np.concatenate(values)[order]
    counts = np.bincount(row, minlength=len(valid)).astype(np.int64)
    return pa.array(out, pa.int64()).cast(t.arrow), counts


def _timestamp_series(
    args: list[pa.Array], valid: np.ndarray, inclusive: bool, t: DataType
) -> tuple[pa.Array, np.ndarray]:
    """Timestamps stepping by an interval: fixed-length steps (days and smaller) are integer
    series; a step with months is calendar arithmetic (`_calendar_series`)."""
    n = len(valid)
    start = _ints(args[0].cast(pa.int64()), valid)
    stop = _ints(args[1].cast(pa.int64()), valid)
    steps = args[2].to_pylist()
    months = np.array([s.months if s is not None else 0 for s in steps], np.int64)
    if (months[valid] != 0).any():
        return _calendar_series(args[2], start, stop, valid, inclusive, t)
    usecs = np.array(
        [s.days * 86_400_000_000 + s.nanoseconds // 1000 if s is not None else 0 for s in steps], np.int64
    )
    fake = [pa.array(start), pa.array(stop), pa.array(usecs)]
    ints = TableFunction("generate_series" if inclusive else "range", (), BIGINT)
    values, counts = _series(ints, fake, n) if n else (pa.array([], pa.int64()), np.zeros(0, np.int64))
    if not valid.all():
        keep = np.repeat(valid, counts)
        values = values.filter(pa.array(keep))
        counts = np.where(valid, counts, 0)
    return values.cast(t.arrow), counts


def _regexp_matches(args: list[pa.Array], n: int) -> tuple[pa.Array, np.ndarray]:
    from piestream.expr.functions.regexp import compile_regex

    strings, patterns = args[0].to_pylist(), args[1].to_pylist()
    flags = args[2].to_pylist() if len(args) > 2 else [""] * n
    out: list[list[str | None]] = []
    counts = np.zeros(n, np.int64)
    for i in range(n):  # per row: Python's `re` is the regex engine (no Arrow kernel finds all matches)
        s, p, f = strings[i], patterns[i], flags[i]
        if s is None or p is None or f is None:
            continue
        rx, is_global = compile_regex(p, f)
        for m in rx.finditer(s):
            out.append(list(m.groups()) if rx.groups else [m.group(0)])
            counts[i] += 1
            if not is_global:
                break
    return pa.array(out, pa.list_(pa.string())), counts


# -- ProjectSet -------------------------------------------------------------------------------------


def project_set(
    items: Sequence[Expr], chunk: DataChunk, evaluate: Evaluate = _eval
) -> tuple[np.ndarray, np.ndarray, list[pa.Array]]:
    """(input row of each output row, projected row id, one column per item); see the module
    docstring. Scalar items are evaluated once per input row and repeated."""
    n = chunk.capacity
    expansions: dict[int, tuple[pa.Array, np.ndarray]] = {}
    for i, e in enumerate(items):
        if isinstance(e, TableFunction):
            expansions[i] = expand(e, chunk, evaluate)
        elif contains_table_function(e):
            raise InternalError("a set-returning function nested in a ProjectSet item")
    if expansions:
        rows_per = np.max(np.stack([c for _, c in expansions.values()]), axis=0)
    else:
        rows_per = np.ones(n, np.int64)
    total = int(rows_per.sum())
    row = np.repeat(np.arange(n, dtype=np.int64), rows_per)
    rid = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(rows_per) - rows_per, rows_per)
    take_row = pa.array(row, pa.int64())
    out: list[pa.Array] = []
    for i, e in enumerate(items):
        if i in expansions:
            values, counts = expansions[i]
            starts = np.cumsum(counts) - counts
            inside = rid < counts[row]
            src = np.where(inside, starts[row] + rid, 0)
            idx = pa.array(src, pa.int64(), mask=~inside)
            out.append(
                _array(values, e.return_type).take(idx)
                if len(values)
                else pa.nulls(total, e.return_type.arrow)
            )
        else:
            out.append(_array(evaluate(e, chunk), e.return_type).take(take_row))
    return row, rid, out
