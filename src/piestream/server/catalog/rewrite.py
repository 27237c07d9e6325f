"""PostgreSQL catalog queries rewritten into SQL that SQLite runs over the emulated catalogs.

psql's ``OPERATOR(pg_catalog.~)`` and ``~`` become a regex function, ``COLLATE`` goes,
``x::regclass`` / ``::regtype`` casts become lookups and other casts SQLite types,
``= ANY(ARRAY[...])`` becomes ``IN``, ``ARRAY(SELECT ...)`` and ``array_agg`` an aggregate that
builds the array's text, ``$n`` becomes ``?n``, and typed system-function nodes become calls of
the SQLite functions of the same name.

Set-returning functions in a select list (``unnest(i.indkey)``, ``generate_subscripts(c.conkey,
1)``: SQLAlchemy's key and index reflection) have no SQLite counterpart; a select list's SRFs
become one ``json_each`` joined laterally to its FROM, over the positions of the longest of their
arrays, each SRF reading its array at that position (NULL past its end): PostgreSQL's rule that
a select list's SRFs run in lockstep. With GROUP BY, HAVING or DISTINCT beside them they are 0A000.
"""

from __future__ import annotations

import itertools
import re

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported
from piestream.server.catalog.routing import TYPED_FUNCS, type_name
from piestream.server.catalog.tables import CATALOG_OIDS

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
    copied = tree.copy()
    assert isinstance(copied, exp.Expression)
    _system_columns(copied)
    _from_unnest(copied)
    _lateral_srfs(copied)
    return copied.transform(_rewrite)


def _srf_kind(node: exp.Expression) -> str | None:
    """ "unnest" / "subscripts" for a set-returning call in a select list, else None."""
    if isinstance(node, exp.Explode | exp.Unnest) and not isinstance(node.parent, exp.From | exp.Join):
        return "unnest"
    if isinstance(node, exp.Anonymous) and str(node.name).lower() == "generate_subscripts":
        return "subscripts"
    return None


def _system_columns(tree: exp.Expression) -> None:
    """``x.tableoid`` (every row's system column: its catalog's oid) as that oid (in place)."""
    for col in list(tree.find_all(exp.Column)):
        if col.name.lower() != "tableoid":
            continue
        scope = col.find_ancestor(exp.Select)
        tables = {}
        if scope is not None:
            for t in scope.find_all(exp.Table):
                if isinstance(t.this, exp.Identifier) and t.find_ancestor(exp.Select) is scope:
                    tables[(t.alias or t.name).lower()] = t.name.lower()
        qual = col.table.lower() if col.table else ""
        names = [tables[qual]] if qual in tables else ([] if qual else list(tables.values()))
        oids = {CATALOG_OIDS[n] for n in names if n in CATALOG_OIDS}
        if len(oids) != 1:
            raise FeatureNotSupported(f"system column {col.sql('postgres')} is not supported over pg_catalog")
        col.replace(exp.Literal.number(oids.pop()))


def _from_unnest(tree: exp.Expression) -> None:
    """``FROM unnest(arr) [WITH ORDINALITY] AS s(v [, n])`` as ``json_each`` over arr's positions,
    ``s.v`` as arr's element there and ``s.n`` as the position + 1 (in place)."""
    for item in list(tree.find_all(exp.Unnest, exp.Table)):
        if isinstance(item, exp.Table):
            if not isinstance(item.this, exp.Explode):
                continue
            arrays = [item.this.this]
        elif isinstance(item.parent, exp.From | exp.Join):
            arrays = list(item.expressions)
        else:
            continue
        if len(arrays) != 1:
            raise FeatureNotSupported("unnest of several arrays over pg_catalog is not supported")
        array = arrays[0]
        alias = item.args.get("alias")
        name = alias.name if alias is not None and alias.name else "unnest"
        columns = [c.name for c in alias.columns] if alias is not None else []
        value = columns[0] if columns else name
        offset = item.args.get("offset")
        ordinality = (
            columns[1] if len(columns) > 1 else (offset.name if isinstance(offset, exp.Expression) else None)
        )
        scope = item.find_ancestor(exp.Select)
        position = exp.column("value", table=name)
        if scope is not None:
            for col in list(scope.find_all(exp.Column)):
                if col.table and col.table != name:
                    continue
                if col.name == value:
                    col.replace(
                        exp.Anonymous(this="array_item_pg", expressions=[array.copy(), position.copy()])
                    )
                elif ordinality is not None and col.name == ordinality:
                    col.replace(exp.Add(this=position.copy(), expression=exp.Literal.number(1)))
        item.replace(
            exp.Table(
                this=exp.Anonymous(
                    this="json_each",
                    expressions=[exp.Anonymous(this="array_positions_pg", expressions=[array.copy()])],
                ),
                alias=exp.TableAlias(this=exp.to_identifier(name)),
            )
        )


def _lateral_srfs(tree: exp.Expression) -> None:
    """Every select list's set-returning calls as reads of one lateral ``json_each`` (in place)."""
    names = (f"_srf{i}" for i in itertools.count())
    for sel in list(tree.find_all(exp.Select)):
        calls = [
            (n, kind)
            for proj in sel.expressions
            for n in proj.walk()
            if (kind := _srf_kind(n)) is not None and n.find_ancestor(exp.Select) is sel
        ]
        if not calls:
            continue
        if sel.args.get("group") or sel.args.get("having") or sel.args.get("distinct"):
            raise FeatureNotSupported(
                "set-returning functions beside GROUP BY, HAVING or DISTINCT over pg_catalog "
                "are not supported"
            )
        alias = next(names)
        position = exp.column("value", table=alias)
        arrays: list[exp.Expression] = []
        for call, kind in calls:
            if kind == "unnest":
                args = [call.this] if isinstance(call, exp.Explode) else call.expressions
                if len(args) != 1:
                    raise FeatureNotSupported("unnest of several arrays over pg_catalog is not supported")
                array = args[0]
                read = "array_item_pg"
            else:  # generate_subscripts(array, dim): a 1-D array's subscripts for dim 1, none else
                array_arg, dim = [*call.expressions, exp.Literal.number(1)][:2]
                array = exp.Case(
                    ifs=[
                        exp.If(
                            this=exp.EQ(this=dim.copy(), expression=exp.Literal.number(1)),
                            true=array_arg.copy(),
                        )
                    ]
                )
                read = "array_subscript_pg"
            arrays.append(array.copy())
            call.replace(exp.Anonymous(this=read, expressions=[array.copy(), position.copy()]))
        driver = exp.Table(
            this=exp.Anonymous(
                this="json_each", expressions=[exp.Anonymous(this="array_positions_pg", expressions=arrays)]
            ),
            alias=exp.TableAlias(this=exp.to_identifier(alias)),
        )
        if sel.args.get("from_") is None:
            sel.from_(driver, copy=False)
        else:
            sel.join(driver, join_type="CROSS", copy=False)


def _sub(node: exp.Expression) -> exp.Expression:
    """Rewrite a subtree (sqlglot's transform does not descend into replacements)."""
    return node.transform(_rewrite)


#: SQLite keywords PostgreSQL takes as bare column aliases (pgcli's ``... default``): quoted
_SQLITE_KEYWORDS = frozenset(
    {
        *("default", "order", "group", "index", "key", "table", "values", "action", "column", "plan"),
        *("query", "temp", "view", "replace", "match", "offset", "limit", "row", "rows", "filter"),
        *("window", "range", "over", "do", "end", "check", "references", "primary", "unique"),
        *("natural", "cast", "collate"),
    }
)


def _rewrite(node: exp.Expression) -> exp.Expression:
    """One node as SQLite takes it (for ``transform``; rewritten nodes have rewritten children)."""
    if isinstance(node, exp.Identifier) and not node.quoted and node.name.lower() in _SQLITE_KEYWORDS:
        return exp.Identifier(this=node.name, quoted=True)
    if isinstance(node, exp.Collate):
        return _sub(node.this)
    if (
        isinstance(node, exp.Bracket)
        and isinstance(node.this, exp.Column)
        and node.this.name.lower().endswith("name")
        and len(node.expressions) == 1
    ):
        # a `name` is a fixed char array in PostgreSQL: pg_dump's ``typname[0] = '_'`` reads its
        # first byte (sqlglot keeps the index 1-based minus 1: typname[0] arrives as -1)
        start = exp.Add(this=_sub(node.expressions[0]), expression=exp.Literal.number(2))
        return exp.Substring(this=_sub(node.this), start=start, length=exp.Literal.number(1))
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
    quantifier = _quantifier(node.expression) if isinstance(node, _QUANTIFIED) else None
    if quantifier is not None:  # x op ANY / ALL (array)
        return _quantified(node, *quantifier)
    if (
        isinstance(node, exp.Array)
        and len(node.expressions) == 1
        and isinstance(node.expressions[0], exp.Select)
    ):
        inner = node.expressions[0]
        functions = [t.this for t in inner.find_all(exp.Table) if not isinstance(t.this, exp.Identifier)]
        options = [f for f in functions if str(getattr(f, "name", "")).lower() == "pg_options_to_table"]
        if options:
            # pg_dump's / psql's one use: `quote_ident(option_name) || ' ' || quote_literal(option_value)`,
            # rendered by options_pg (only a source's ftoptions hold any; the others are NULL)
            said = re.sub(r"\bpg_catalog\.", "", inner.expressions[0].sql(dialect="postgres").lower())
            if (
                said == "quote_ident(option_name) || ' ' || quote_literal(option_value)"
                and options[0].expressions
            ):
                return exp.Anonymous(this="options_pg", expressions=[_sub(options[0].expressions[0])])
            return exp.Literal.string("{}")
        rewritten = _sub(inner)
        assert isinstance(rewritten, exp.Select)
        first = rewritten.expressions[0]
        value = first.this if isinstance(first, exp.Alias) else first
        rewritten.set("expressions", [exp.alias_(value, "_v")])
        agg = exp.Anonymous(this="array_agg_pg", expressions=[exp.column("_v")])
        return exp.Subquery(
            this=exp.select(agg).from_(
                exp.Subquery(this=rewritten, alias=exp.TableAlias(this=exp.to_identifier("_a")))
            )
        )
    if isinstance(node, exp.Array) and not any(isinstance(e, exp.Query) for e in node.expressions):
        return exp.Anonymous(this="array_pg", expressions=[_sub(e) for e in node.expressions])
    if (
        isinstance(node, exp.Anonymous)
        and str(node.name).lower() == "array_agg"
        and len(node.expressions) == 1
    ):
        node = exp.ArrayAgg(this=node.expressions[0])  # pg_catalog.array_agg(...) parses as a call
    if isinstance(node, exp.ArrayAgg):
        keys: list[exp.Expression] = []
        arg = node.this
        if isinstance(arg, exp.Order):  # array_agg(x ORDER BY k, ...): the keys go to the aggregate
            for o in arg.expressions:
                if o.args.get("desc") or o.args.get("nulls_first"):
                    raise FeatureNotSupported(
                        "array_agg(... ORDER BY ... DESC) over pg_catalog is not supported"
                    )
                keys.append(_sub(o.this))
            arg = arg.this
        if node.args.get("distinct") or isinstance(arg, exp.Distinct):
            raise FeatureNotSupported("array_agg(DISTINCT ...) over pg_catalog is not supported")
        return exp.Anonymous(this="array_agg_pg", expressions=[_sub(arg), *keys])
    if (
        isinstance(node, exp.Column)
        and not node.table
        and node.name.lower() in ("user", "current_user", "session_user")
    ):
        return exp.Anonymous(this="current_user", expressions=[])
    return node


_QUANTIFIED = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _quantifier(e: exp.Expression) -> tuple[str, exp.Expression] | None:
    """("any" | "all", the array) of ``ANY (arr)`` / ``SOME (arr)`` / ``ALL (arr)``, else None
    (sqlglot parses ANY as a node, SOME and ALL after OPERATOR(...) as functions)."""
    if isinstance(e, exp.Any | exp.All):
        kind, inner = ("any" if isinstance(e, exp.Any) else "all"), e.this
    elif (
        isinstance(e, exp.Anonymous)
        and str(e.name).lower() in ("any", "some", "all")
        and len(e.expressions) == 1
    ):
        kind, inner = ("all" if str(e.name).lower() == "all" else "any"), e.expressions[0]
    else:
        return None
    return kind, inner.this if isinstance(inner, exp.Paren) else inner


def _quantified(node: exp.Expression, kind: str, array: exp.Expression) -> exp.Expression:
    """``x op ANY (arr)`` as an OR of comparisons (IN for =), ``x op ALL (arr)`` as an AND (NOT IN for
    <>): PostgreSQL's NULL rules, as IN / NOT IN have them. A non-literal array: = ANY and <> ALL."""
    lhs = _sub(node.this)
    if isinstance(array, exp.Array):
        items = [_sub(e) for e in array.expressions]
        if isinstance(node, exp.EQ) and kind == "any":
            return exp.In(this=lhs, expressions=items)
        if isinstance(node, exp.NEQ) and kind == "all":
            return exp.Not(this=exp.In(this=lhs, expressions=items))
        if not items:
            return exp.false() if kind == "any" else exp.true()
        parts = [type(node)(this=lhs.copy(), expression=i) for i in items]
        joined = parts[0]
        for p in parts[1:]:
            joined = (
                exp.Or(this=joined, expression=p) if kind == "any" else exp.And(this=joined, expression=p)
            )
        return exp.Paren(this=joined)
    if (isinstance(node, exp.EQ) and kind == "any") or (isinstance(node, exp.NEQ) and kind == "all"):
        contains = exp.Anonymous(this="array_contains_pg", expressions=[_sub(array), lhs])
        return exp.Not(this=contains) if isinstance(node, exp.NEQ) else contains
    raise FeatureNotSupported(f"{node.sql('postgres')} over pg_catalog is not supported")


def _rewrite_cast(node: exp.Cast) -> exp.Expression:
    target = type_name(node.args["to"])
    original = node.this
    inner = _sub(original)
    if target == "regclass":
        return exp.Anonymous(this="to_regclass_oid", expressions=[inner])
    if target == "regtype":
        return exp.Anonymous(this="to_regtype_oid", expressions=[inner])
    if target == "regnamespace" and isinstance(original, exp.Literal) and original.is_string:
        lookup = exp.select("oid").from_("pg_catalog.pg_namespace").where(exp.column("nspname").eq(inner))
        return exp.Subquery(this=lookup)
    if target in ("regproc", "regprocedure"):
        if isinstance(original, exp.Literal) and original.is_string:  # psql \sf's 'f'::regproc::oid
            return exp.Anonymous(this="to_regproc_oid", expressions=[inner])
        return exp.Anonymous(this="regproc_name", expressions=[inner])  # 0 is '-', as in PostgreSQL
    if target == "regtype[]":  # an oid array / oidvector as the array of its types' names
        return exp.Anonymous(this="regtype_array_pg", expressions=[inner])
    if target == "regclass[]":
        return exp.Anonymous(this="regclass_array_pg", expressions=[inner])
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
