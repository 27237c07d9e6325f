"""INSERT / UPDATE / DELETE: turned into change chunks for the table's streaming job.

The rows to write are computed by batch queries at the latest snapshot (the VALUES or SELECT of
an INSERT; the matching rows of UPDATE / DELETE with their full stored values), cast to the
table's column types, and handed to the barrier manager. With `implicit_flush` (the default) the
statement returns once the epoch holding the change is committed, so it is durable and visible.

Inside a transaction block the same rows are computed against what the transaction sees (its
snapshot and its own changes) and go to its buffer instead (`Transaction.write`): a statement is
"these rows removed, then these rows added", which COMMIT turns into change chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from sqlglot import exp

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.errors import (
    FeatureNotSupported,
    PiestreamError,
    SyntaxError_,
    UndefinedColumn,
    UndefinedTable,
)
from piestream.common.scalar import constant_array, to_arrow
from piestream.common.schema import Schema
from piestream.common.types import DataType, Field
from piestream.expr.bind import cast, literal
from piestream.expr.expr import Expr, InputRef, Literal, UnknownLiteral
from piestream.frontend.binder import BoundQuery, QueryBinder
from piestream.frontend.catalog import ColumnCatalog, Relation, RelationKind
from piestream.frontend.column_default import default_ast, default_expr, evaluate_default
from piestream.frontend.logical import Project
from piestream.frontend.parser import ast
from piestream.server.query import bind, run_bound
from piestream.server.results import QueryResult, command

if TYPE_CHECKING:
    from piestream.server.session import Session


def _table(s: Session, name: str, verb: str) -> Relation:
    if s.txn is not None:
        s.txn.check_writable(verb)
    rel = s.catalog().get_relation(name)
    if rel is None:
        raise UndefinedTable(f'relation "{name}" does not exist')
    if rel.kind is not RelationKind.TABLE:
        raise PiestreamError(f'cannot change "{name}": it is a {rel.kind.value}', sqlstate="42809")
    if rel.properties.get("connector"):
        raise FeatureNotSupported(f'cannot write to table "{name}" with a connector')
    return rel


def _write(
    s: Session,
    rel: Relation,
    deletes: list[pa.Array] | None,
    inserts: list[pa.Array] | None,
    chunk: StreamChunk,
) -> None:
    """Buffer the statement's changes in the transaction block, or send `chunk` (the same
    changes as one change chunk) to the table's job."""
    if s.txn is not None:
        s.txn.write(rel, deletes, inserts, s.buffer_limit)
        return
    if not chunk.cardinality:
        return
    assert rel.table is not None
    fut = s.db.barriers.submit_dml(rel.table.table_id, chunk)
    if s.implicit_flush:
        s.db.barriers.wake()
        fut.result()


def insert(s: Session, stmt: ast.Insert, params: Sequence[Any] = ()) -> QueryResult:
    if stmt.returning:
        raise FeatureNotSupported("INSERT ... RETURNING is not supported")
    rel = _table(s, stmt.table, "INSERT")
    visible = [c for c in rel.columns if not c.hidden]
    targets = stmt.columns or [c.name for c in visible]
    for t in targets:
        i = rel.column_index(t)
        if i is None or rel.columns[i].hidden:
            raise UndefinedColumn(f'column "{t}" of relation "{rel.name}" does not exist')
    target_types = [rel.columns[rel.column_index(t)].data_type for t in targets]  # type: ignore[index]
    if stmt.param_rows is not None:
        if not stmt.columns:
            targets = targets[: stmt.param_rows.shape[1]]  # the first N columns, as below
            target_types = target_types[: len(targets)]
        return _insert_param_rows(s, rel, targets, target_types, stmt.param_rows, params)
    source = _with_defaults(rel, targets, stmt.source)
    bound = QueryBinder(s.catalog(), params).bind_insert_source(source, target_types)
    if not stmt.columns and len(bound.names) < len(targets):
        # PostgreSQL: without a column list, N values fill the table's first N columns and the
        # rest take their DEFAULT (NULL); bound again so VALUES are assigned to those N types
        targets, target_types = targets[: len(bound.names)], target_types[: len(bound.names)]
        bound = QueryBinder(s.catalog(), params).bind_insert_source(source, target_types)
    _check_width(len(bound.names), len(targets))
    # one expression per table column: the value cast to the column type, else NULL
    exprs: list[Expr] = []
    for c in rel.columns:
        if c.name in targets:
            k = targets.index(c.name)
            exprs.append(cast(InputRef(k, bound.plan.types[k]), c.data_type, explicit=False))
        else:
            exprs.append(_default(c))
    schema = Schema(tuple(Field(c.name, c.data_type) for c in rel.columns))
    full = BoundQuery(Project(schema, bound.plan, exprs), [c.name for c in rel.columns])
    table = run_bound(s, full)
    cols = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    _check_not_null_pk(rel, cols)
    chunk = StreamChunk(np.full(table.num_rows, Op.INSERT, np.int8), cols, length=table.num_rows)
    _write(s, rel, None, cols, chunk)
    return command(f"INSERT 0 {table.num_rows}")


def _insert_param_rows(
    s: Session,
    rel: Relation,
    targets: list[str],
    target_types: list[DataType],
    grid: npt.NDArray[np.int64],
    params: Sequence[Any],
) -> QueryResult:
    """INSERT ... VALUES of bare parameters (`ast.Insert.param_rows`), a column at a time: the
    same values as binding every entry (each assigned to its column's type, PostgreSQL's rule for
    INSERT ... VALUES) without a bound tree and a one-row evaluation per entry."""
    _check_width(grid.shape[1], len(targets))
    missing = np.unique(grid[grid >= len(params)])
    if len(missing):
        raise SyntaxError_(f"there is no parameter ${int(missing[0]) + 1}")
    n = grid.shape[0]
    values = {
        name: _param_column(params, grid[:, j], t)
        for j, (name, t) in enumerate(zip(targets, target_types, strict=True))
    }
    cols = [values[c.name] if c.name in values else omitted_column(c, n) for c in rel.columns]
    _check_not_null_pk(rel, cols)
    _write(s, rel, None, cols, StreamChunk(np.full(n, Op.INSERT, np.int8), cols, length=n))
    return command(f"INSERT 0 {n}")


def _check_width(values: int, targets: int) -> None:
    """PostgreSQL's 42601 for an INSERT whose rows are wider or narrower than its columns."""
    if values > targets:
        raise PiestreamError("INSERT has more expressions than target columns", sqlstate="42601")
    if values < targets:
        raise PiestreamError("INSERT has more target columns than expressions", sqlstate="42601")


def _default(c: ColumnCatalog) -> Expr:
    """What an INSERT that omits column `c` writes: its DEFAULT (a constant, or ``now()``
    evaluated with the statement), else NULL."""
    if c.default_expr is not None:
        return default_expr(c.default_expr, c.data_type)
    return Literal(c.default, c.data_type)


def omitted_column(c: ColumnCatalog, n: int) -> pa.Array:
    """What `n` inserted rows that omit column `c` hold (COPY, `Connection.insert`, bare
    parameter rows): its DEFAULT, one value for the statement, else NULL."""
    value = c.default if c.default_expr is None else evaluate_default(c.default_expr, c.data_type)
    return constant_array(value, c.data_type, n)


def _with_defaults(rel: Relation, targets: list[str], source: exp.Expression) -> exp.Expression:
    """A VALUES list whose ``DEFAULT`` entries are their column's DEFAULT expression (PostgreSQL
    takes the keyword in INSERT's VALUES only); ``DEFAULT VALUES`` (one empty row) is a row of
    every target's DEFAULT."""
    if not isinstance(source, exp.Values):
        return source
    rows = source.expressions
    if len(rows) == 1 and isinstance(rows[0], exp.Tuple) and not rows[0].expressions:
        rows = [exp.Tuple(expressions=[exp.var("DEFAULT") for _ in targets])]
    elif not any(_is_default(e) for row in rows for e in row.expressions):
        return source
    columns = {c.name: c for c in rel.columns}
    out = source.copy()
    out.set(
        "expressions",
        [
            exp.Tuple(
                expressions=[
                    default_ast(columns[targets[k]]) if _is_default(e) and k < len(targets) else e
                    for k, e in enumerate(row.expressions)
                ]
            )
            for row in rows
        ],
    )
    return out


def _is_default(e: exp.Expression) -> bool:
    return isinstance(e, exp.Var) and e.name.upper() == "DEFAULT"


def _param_column(params: Sequence[Any], indices: npt.NDArray[np.int64], target: DataType) -> pa.Array:
    """The parameters at `indices`, each assigned to `target`. Bound parameters are typed literals
    (cast as a column, one kernel call per parameter type), untyped text (read by `target`'s input
    function, as an untyped literal is) or NULL. Python steps per value are unavoidable here: the
    values arrive as one Python object per parameter."""
    groups: dict[DataType | None, list[int]] = {}
    datums: list[Any] = []
    for k, i in enumerate(indices.tolist()):
        v = params[i]
        if v is not None and not isinstance(v, Expr):
            v = literal(v)  # a Python value: typed as the binder types a parameter
        if v is None or isinstance(v, UnknownLiteral):
            groups.setdefault(None, []).append(k)
            datums.append(None if v is None else v.value)
        elif isinstance(v, Literal):
            groups.setdefault(v.return_type, []).append(k)
            datums.append(v.value)
        else:  # the binder would bind any other expression; not what a Bind message makes
            raise FeatureNotSupported(f"parameter ${i + 1} is not a value")
    parts: list[pa.Array] = []
    for t, rows in groups.items():
        vals = [datums[k] for k in rows]
        if t is None:
            arr = _untyped(vals, target)
        else:
            arr = cast(InputRef(0, t), target, explicit=False).eval(DataChunk([to_arrow(vals, t)]))
        parts.append(arr if arr.type == target.arrow else arr.cast(target.arrow))
    if len(parts) == 1:
        return parts[0]
    order = np.concatenate([np.asarray(rows) for rows in groups.values()])
    where = np.empty(len(order), np.int64)
    where[order] = np.arange(len(order))  # row k of the result is row where[k] of the parts
    return pa.concat_arrays(parts).take(pa.array(where))


def _untyped(texts: list[str | None], target: DataType) -> pa.Array:
    """Untyped parameter text read as `target`: the binder's own cast of an untyped literal."""
    datums = []
    for text in texts:
        value = cast(UnknownLiteral(text), target, explicit=False)
        assert isinstance(value, Literal)  # a cast of a literal is evaluated at once
        datums.append(value.value)
    return to_arrow(datums, target)


#: Rows per change chunk of a bulk insert (one epoch takes them all; executors see chunks).
BULK_CHUNK_ROWS = 1 << 18


def cast_to_column(col: pa.ChunkedArray | pa.Array, t: DataType, name: str) -> pa.Array:
    """`col` cast by Arrow to column `name`'s type `t` (42804 when Arrow cannot)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.type == t.arrow:
        return arr
    try:
        return arr.cast(t.arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise PiestreamError(
            f'column "{name}" is of type {t} but the data is {arr.type}: {e}', sqlstate="42804"
        ) from None


def insert_arrow(s: Session, name: str, data: pa.Table) -> QueryResult:
    """Bulk INSERT of an Arrow table (the Python API's `Connection.insert`): columns are matched
    by name, cast to the column types by Arrow, missing columns are NULL; the rows go to the
    table's streaming job as a few large change chunks, with no per-row step on the way."""
    rel = _table(s, name, "INSERT")
    n = data.num_rows
    for col in data.column_names:
        i = rel.column_index(col)
        if i is None or rel.columns[i].hidden:
            raise UndefinedColumn(f'column "{col}" of relation "{rel.name}" does not exist')
    cols = []
    for c in rel.columns:
        if c.name in data.column_names:
            cols.append(cast_to_column(data.column(c.name), c.data_type, c.name))
        else:
            cols.append(omitted_column(c, n))
    _check_not_null_pk(rel, cols)
    if s.txn is not None:  # buffered like any INSERT of the transaction block
        s.txn.write(rel, None, cols, s.buffer_limit)
        return command(f"INSERT 0 {n}")
    chunk = StreamChunk(np.full(n, Op.INSERT, np.int8), cols, length=n)
    assert rel.table is not None
    futs = [
        s.db.barriers.submit_dml(rel.table.table_id, chunk.slice(lo, min(BULK_CHUNK_ROWS, n - lo)))
        for lo in range(0, n, BULK_CHUNK_ROWS)
    ]
    if futs and s.implicit_flush:
        s.db.barriers.wake()
        for f in futs:
            f.result()
    return command(f"INSERT 0 {n}")


def _check_not_null_pk(rel: Relation, cols: Sequence[pa.Array]) -> None:
    assert rel.table is not None
    if rel.row_id_index is not None:
        return
    for i in rel.table.pk:
        if cols[i].null_count:
            raise PiestreamError(
                f'null value in column "{rel.columns[i].name}" of relation "{rel.name}" '
                "violates not-null constraint",
                sqlstate="23502",
            )


def _select_rows(
    s: Session,
    rel: Relation,
    alias: str | None,
    where: exp.Expression | None,
    extra: Sequence[exp.Expression],
    params: Sequence[Any],
) -> tuple[pa.Table, int]:
    """The table's full rows (hidden columns too) matching WHERE, then `extra` expressions."""
    cols = [exp.column(c.name, table=alias or rel.name) for c in rel.columns]
    # qualified: the table need not be on the session's search_path (DELETE FROM s.t)
    table = exp.table_(exp.to_identifier(rel.name), db=exp.to_identifier(rel.schema_name))
    q = exp.select(*cols, *extra).from_(table.as_(alias) if alias else table)
    if where is not None:
        q = q.where(where)
    bound = bind(s, q, params)
    return run_bound(s, bound), len(rel.columns)


def _check_not_append_only(rel: Relation, verb: str) -> None:
    """An APPEND ONLY table never retracts a row: its downstream operators rely on that."""
    if rel.append_only:
        raise PiestreamError(f'cannot {verb} table "{rel.name}": it is APPEND ONLY', sqlstate="42809")


def delete(s: Session, stmt: ast.Delete, params: Sequence[Any] = ()) -> QueryResult:
    if stmt.returning:
        raise FeatureNotSupported("DELETE ... RETURNING is not supported")
    rel = _table(s, stmt.table, "DELETE")
    _check_not_append_only(rel, "delete from")
    table, width = _select_rows(s, rel, stmt.alias, stmt.where, [], params)
    cols = [table.column(i).combine_chunks() for i in range(width)]
    chunk = StreamChunk(np.full(table.num_rows, Op.DELETE, np.int8), cols, length=table.num_rows)
    _write(s, rel, cols, None, chunk)
    return command(f"DELETE {table.num_rows}")


def update(s: Session, stmt: ast.Update, params: Sequence[Any] = ()) -> QueryResult:
    if stmt.returning:
        raise FeatureNotSupported("UPDATE ... RETURNING is not supported")
    rel = _table(s, stmt.table, "UPDATE")
    _check_not_append_only(rel, "update")
    assert rel.table is not None
    assigned = {}
    for a in stmt.assignments:
        i = rel.column_index(a.column)
        if i is None or rel.columns[i].hidden:
            raise UndefinedColumn(f'column "{a.column}" of relation "{rel.name}" does not exist')
        assigned[i] = default_ast(rel.columns[i]) if _is_default(a.value) else a.value
    extra = [
        exp.cast(v, exp.DataType.build(str(rel.columns[i].data_type), dialect="postgres"))
        for i, v in assigned.items()
    ]
    table, width = _select_rows(s, rel, stmt.alias, stmt.where, extra, params)
    n = table.num_rows
    old = [table.column(i).combine_chunks() for i in range(width)]
    new = list(old)
    for k, i in enumerate(assigned):
        new[i] = table.column(width + k).combine_chunks().cast(rel.columns[i].data_type.arrow)
    new = [nw.cast(o.type) for o, nw in zip(old, new, strict=True)]
    _check_not_null_pk(rel, new)
    if any(i in rel.table.pk for i in assigned):
        # the pk changes: every old row goes, then every new row comes (a new key may be an old
        # key of another row: ``SET k = k + 1``), so not as U-/U+ pairs (their key is one key)
        ops = np.repeat(np.array([Op.DELETE, Op.INSERT], np.int8), n)
        gather = np.arange(2 * n)
    else:
        # U-/U+ pairs: row i's old and new values next to each other
        ops = np.tile(np.array([Op.UPDATE_DELETE, Op.UPDATE_INSERT], np.int8), n)
        gather = np.repeat(np.arange(n), 2) + np.tile(np.array([0, n]), n)
    cols = [pa.concat_arrays([o, nw]).take(pa.array(gather)) for o, nw in zip(old, new, strict=True)]
    _write(s, rel, old, new, StreamChunk(ops, cols, length=2 * n))
    return command(f"UPDATE {n}")
