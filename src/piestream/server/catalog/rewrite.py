"""PostgreSQL catalog queries rewritten into SQL that SQLite runs over the emulated catalogs.

psql's ``OPERATOR(pg_catalog.~)`` and ``~`` become a regex function, ``COLLATE`` goes,
``x::regclass`` / ``::regtype`` casts become lookups and other casts SQLite types,
``= ANY(ARRAY[...])`` becomes ``IN``, ``ARRAY(SELECT ...)`` and ``array_agg`` an aggregate that
builds the array's text, ``$n`` becomes ``?n``, and typed system-function nodes become calls of
the SQLite functions of the same name.
"""

from __future__ import annotations

from sqlglot import exp

from piestream.server.catalog.routing import TYPED_FUNCS, type_name

_COMPARISONS: dict[str, type[exp.Expression]] = {
    "=": exp.EQ,
    "<>": exp.NEQ,
    "!=": exp.NEQ,
    "<": exp.LT,
    ">": exp.GT,
    "<=": exp.LTE,
    ">=": exp.GTE,
}


def rewrite_for_sqlite(tree: exp.Expr) -> exp.Expression:
    """`tree` (a parsed PostgreSQL query) as a query SQLite can run."""
    return tree.transform(_rewrite)


def _sub(node: exp.Expression) -> exp.Expression:
    """Rewrite a subtree (sqlglot's transform does not descend into replacements)."""
    return node.transform(_rewrite)


def _rewrite(node: exp.Expression) -> exp.Expression:
    """One node as SQLite takes it (for ``transform``; rewritten nodes have rewritten children)."""
    if isinstance(node, exp.Collate):
        return _sub(node.this)
    if (
        isinstance(node, exp.Dot)
        and isinstance(node.this, exp.Identifier)
        and node.this.name.lower() == "pg_catalog"
    ):
        return _sub(node.expression)
    if type(node) in TYPED_FUNCS:
        args = [_sub(a) for a in node.args.values() if isinstance(a, exp.Expression)]
        return exp.Anonymous(this=TYPED_FUNCS[type(node)], expressions=args)
    if isinstance(node, exp.Operator):
        op = str(node.args.get("operator", "")).removeprefix("pg_catalog.")
        lhs, rhs = _sub(node.this), _sub(node.expression)
        if op == "~":
            return exp.Anonymous(this="regexp_like", expressions=[lhs, rhs])
        if op == "~*":
            return exp.Anonymous(this="regexp_i_like", expressions=[lhs, rhs])
        if op == "!~":
            return exp.Not(this=exp.Anonymous(this="regexp_like", expressions=[lhs, rhs]))
        plain = _COMPARISONS.get(op)
        if plain is not None:  # pg_dump's ``relkind OPERATOR(pg_catalog.=) ANY (array[...])``
            return _sub(plain(this=node.this, expression=node.expression))
        return node
    if isinstance(node, exp.RegexpLike):
        return exp.Anonymous(this="regexp_like", expressions=[_sub(node.this), _sub(node.expression)])
    if isinstance(node, exp.RegexpILike):
        args = [_sub(node.this), _sub(node.expression)]
        return exp.Anonymous(this="regexp_i_like", expressions=args)
    if isinstance(node, exp.ByteString):
        return exp.Literal.string(_unescape(str(node.this)))
    if isinstance(node, exp.Parameter | exp.Placeholder):
        n = str(node.this.name if isinstance(node.this, exp.Expression) else node.this or node.name or "")
        if n.lstrip("$").isdigit():
            return exp.Var(this=f"?{n.lstrip('$')}")
        return node
    if isinstance(node, exp.Cast):
        return _rewrite_cast(node)
    if isinstance(node, exp.EQ | exp.NEQ) and isinstance(node.expression, exp.Any | exp.All):
        inner = node.expression.this
        if isinstance(inner, exp.Paren):
            inner = inner.this
        lhs = _sub(node.this)
        if isinstance(inner, exp.Array):
            into = exp.In(this=lhs, expressions=[_sub(e) for e in inner.expressions])
            return exp.Not(this=into) if isinstance(node, exp.NEQ) else into
        contains = exp.Anonymous(this="array_contains_pg", expressions=[_sub(inner), lhs])
        return exp.Not(this=contains) if isinstance(node, exp.NEQ) else contains
    if (
        isinstance(node, exp.Array)
        and len(node.expressions) == 1
        and isinstance(node.expressions[0], exp.Select)
    ):
        inner = node.expressions[0]
        if any(not isinstance(t.this, exp.Identifier) for t in inner.find_all(exp.Table)):
            return exp.Null()  # ARRAY(SELECT ... FROM unnest(options) / pg_options_to_table(...))
        inner = _sub(inner)
        assert isinstance(inner, exp.Select)
        first = inner.expressions[0]
        inner.set("expressions", [exp.alias_(first.this if isinstance(first, exp.Alias) else first, "_v")])
        agg = exp.Anonymous(this="array_agg_pg", expressions=[exp.column("_v")])
        return exp.Subquery(
            this=exp.select(agg).from_(
                exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("_a")))
            )
        )
    if isinstance(node, exp.ArrayAgg):
        arg = node.this.this if isinstance(node.this, exp.Order) else node.this
        return exp.Anonymous(this="array_agg_pg", expressions=[_sub(arg)])
    if (
        isinstance(node, exp.Column)
        and not node.table
        and node.name.lower() in ("user", "current_user", "session_user")
    ):
        return exp.Anonymous(this="current_user", expressions=[])
    return node


def _rewrite_cast(node: exp.Cast) -> exp.Expression:
    target = type_name(node.args["to"])
    original = node.this
    inner = _sub(original)
    if target == "regclass":
        return exp.Anonymous(this="to_regclass_oid", expressions=[inner])
    if target == "regtype":
        return exp.Anonymous(this="to_regtype_oid", expressions=[inner])
    if target in ("text", "name", "varchar", "character varying", "char", "bpchar", '"char"'):
        src = type_name(original.args["to"]) if isinstance(original, exp.Cast) else None
        if src == "regclass":
            return exp.Anonymous(this="regclass_name", expressions=[inner])
        if src == "regtype":
            return exp.Anonymous(this="regtype_name", expressions=[inner])
        return exp.Cast(this=inner, to=exp.DataType.build("TEXT"))
    if target in (
        "oid",
        "int2",
        "int4",
        "int8",
        "smallint",
        "integer",
        "int",
        "bigint",
        "regproc",
        "regnamespace",
    ):
        return exp.Cast(this=inner, to=exp.DataType.build("INTEGER"))
    if target in ("float4", "float8", "real", "double precision", "numeric", "decimal"):
        return exp.Cast(this=inner, to=exp.DataType.build("REAL"))
    return inner  # bool, arrays, pg_node_tree, ...: SQLite keeps the value as it is


def _unescape(s: str) -> str:
    try:
        return s.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return s
