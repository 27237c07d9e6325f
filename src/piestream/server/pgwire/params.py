"""Parameters of prepared statements: their types, and their values from Bind messages.

PostgreSQL infers an unspecified parameter's type from where it stands. piestream does the common
cases syntactically — ``$n::type``, ``col <op> $n`` / ``$n <op> col`` (also IN and BETWEEN),
``INSERT ... VALUES`` positions, ``UPDATE ... SET col = $n``, ``LIMIT / OFFSET $n`` — and reports
text otherwise. Text values of parameters whose type stays unknown are bound as untyped literals,
so the binder types them from context exactly as it types ``'...'`` literals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.scalar import from_arrow, to_arrow
from piestream.common.types import BIGINT, DataType, TypeKind
from piestream.expr.bind import literal
from piestream.expr.expr import Literal
from piestream.frontend.catalog import Relation
from piestream.frontend.parser import ast
from piestream.frontend.parser.type_names import convert_type as _convert_type
from piestream.server.pgwire import codec

RelationLookup = Callable[[str], Relation | None]


def _param_index(node: exp.Expression) -> int | None:
    if isinstance(node, exp.Parameter | exp.Placeholder):
        inner = node.this
        text = str(inner.name if isinstance(inner, exp.Expression) else inner or node.name or "")
        text = text.lstrip("$")
        if text.isdigit():
            return int(text) - 1
    return None


def _relations_in(tree: exp.Expression, lookup: RelationLookup) -> dict[str, Relation]:
    out: dict[str, Relation] = {}
    for t in tree.find_all(exp.Table):
        rel = lookup(t.name)
        if rel is not None:
            out[(t.alias or t.name).lower()] = rel
            out.setdefault(t.name.lower(), rel)
    return out


def _column_type(col: exp.Column, rels: dict[str, Relation]) -> DataType | None:
    qual = col.table.lower() if col.table else ""
    candidates = [rels[qual]] if qual in rels else list(rels.values())
    for rel in candidates:
        i = rel.column_index(col.name)
        if i is not None:
            return rel.columns[i].data_type
    return None


def _cast_type(node: exp.Cast) -> DataType | None:
    try:
        return _convert_type(node.args["to"])
    except PiestreamError:
        return None


def infer_types(stmt: ast.Statement | None, n: int, lookup: RelationLookup) -> list[DataType | None]:
    """Best-effort types of ``$1..$n`` (None where the statement does not say)."""
    types: list[DataType | None] = [None] * n
    if stmt is None or n == 0:
        return types
    trees: list[exp.Expression] = []
    rels: dict[str, Relation] = {}
    if isinstance(stmt, ast.Query):
        trees.append(stmt.query)
    elif isinstance(stmt, ast.Insert):
        trees.append(stmt.source)
        target = lookup(stmt.table)
        if target is not None and stmt.param_rows is not None:
            names = stmt.columns or [c.name for c in target.visible_columns]
            for name, column in zip(names, stmt.param_rows.T, strict=False):
                k = target.column_index(name)
                if k is None:
                    continue
                t = target.columns[k].data_type
                for i in column.tolist():  # types is a list, one entry per parameter
                    if i < n:
                        types[i] = types[i] or t
        elif target is not None and isinstance(stmt.source, exp.Values):
            names = stmt.columns or [c.name for c in target.visible_columns]
            for row in stmt.source.expressions:
                for name, e in zip(names, row.expressions, strict=False):
                    i = _param_index(e)
                    k = target.column_index(name)
                    if i is not None and i < n and k is not None:
                        types[i] = types[i] or target.columns[k].data_type
    elif isinstance(stmt, ast.Update | ast.Delete):
        target = lookup(stmt.table)
        if target is not None:
            rels[(stmt.alias or stmt.table).lower()] = target
            rels.setdefault(stmt.table.lower(), target)
        if stmt.where is not None:
            trees.append(stmt.where)
        if isinstance(stmt, ast.Update) and target is not None:
            for a in stmt.assignments:
                i = _param_index(a.value)
                k = target.column_index(a.column)
                if i is not None and i < n and k is not None:
                    types[i] = types[i] or target.columns[k].data_type
                trees.append(a.value)
    for tree in trees:
        scope = {**_relations_in(tree, lookup), **rels}
        for node in tree.walk():
            _infer_node(node, scope, types)
    return types


def _infer_node(node: exp.Expr, rels: dict[str, Relation], types: list[DataType | None]) -> None:
    def put(param: exp.Expression, t: DataType | None) -> None:
        i = _param_index(param)
        if i is not None and i < len(types) and t is not None and types[i] is None:
            types[i] = t

    def type_of(e: exp.Expression) -> DataType | None:
        if isinstance(e, exp.Column):
            return _column_type(e, rels)
        if isinstance(e, exp.Cast):
            return _cast_type(e)
        return None

    if isinstance(node, exp.Cast):
        put(node.this, _cast_type(node))
    elif isinstance(node, exp.Binary) and not isinstance(node, exp.And | exp.Or):
        put(node.expression, type_of(node.this))
        put(node.this, type_of(node.expression))
    elif isinstance(node, exp.In):
        t = type_of(node.this)
        for e in node.expressions:
            put(e, t)
    elif isinstance(node, exp.Between):
        t = type_of(node.this)
        put(node.args["low"], t)
        put(node.args["high"], t)
    elif isinstance(node, exp.Limit | exp.Offset):
        put(node.expression, BIGINT)


def reported_oid(t: DataType | None) -> int:
    """What ParameterDescription says for a parameter: its type, or text when unknown."""
    return codec.TEXT_OID if t is None else t.pg_oid


def bind_values(
    raw: Sequence[bytes | None],
    formats: Sequence[int],
    oids: Sequence[int],
    types: Sequence[DataType | None],
) -> list[Any]:
    """Bind message values -> what the binder takes as params (typed literals or text).

    Each value is decoded on its own (one Python step per parameter: they arrive one by one);
    the typed ones are then normalized as `literal(value, type)` does, but one Arrow round trip
    per type, not per value (a batch INSERT sends thousands)."""
    out: list[Any] = []
    # positions in `out` of the non-NULL typed values, per type (typmod and scale included:
    # DataType equality ignores them)
    typed: dict[tuple[DataType, Any, Any], list[int]] = {}
    for i, value in enumerate(raw):
        fmt = formats[0] if len(formats) == 1 else (formats[i] if i < len(formats) else 0)
        oid = oids[i] if i < len(oids) else 0
        declared = codec.type_for_oid(oid) if oid not in (0, codec.UNKNOWN_OID) else None
        if oid not in (0, codec.UNKNOWN_OID) and declared is None:
            raise FeatureNotSupported(
                f"parameter ${i + 1} has type oid {oid}, which piestream does not support"
            )
        t = declared or (types[i] if i < len(types) else None)
        if value is None:
            out.append(literal(None, t) if t is not None else None)
            continue
        if fmt == 1:
            if t is None:
                t = codec.type_for_oid(codec.TEXT_OID)
            assert t is not None
            out.append(codec.decode_binary(value, t, oid))
        elif fmt == 0:
            if declared is None:
                try:
                    out.append(value.decode("utf-8"))  # untyped: the binder types it from context
                except UnicodeDecodeError:
                    raise PiestreamError(
                        'invalid byte sequence for encoding "UTF8"', sqlstate="22021"
                    ) from None
                continue
            t = declared
            out.append(codec.decode_text(value, t))
        else:
            raise PiestreamError(f"unsupported format code: {fmt}", sqlstate="08P01")
        typed.setdefault((t, t.typmod, t.dscale), []).append(i)
    for (t, _, _), where in typed.items():
        values = [out[i] for i in where]
        if t.kind not in (TypeKind.VARCHAR, TypeKind.JSONB) and any(isinstance(v, str) for v in values):
            lits = [literal(v, t) for v in values]  # text of a typed value: literal() parses it
        else:
            lits = [Literal(v, t) for v in from_arrow(to_arrow(values, t), t)]
        for i, lit in zip(where, lits, strict=True):
            out[i] = lit
    return out
