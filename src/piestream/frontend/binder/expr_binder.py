"""Binding expressions: sqlglot syntax trees to typed `Expr`s over a scope.

Column references resolve through the scope; literals, operators and function calls go through
`piestream.expr.bind` (PostgreSQL type inference and implicit casts). Aggregates, window
functions and subqueries are not expressions over the current row, so the binder hands them to
hooks the query binder installs (they turn into plan nodes and come back as column references).
"""

from __future__ import annotations

import decimal
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError, SyntaxError_, UndefinedTable
from piestream.common.interval import Interval
from piestream.common.types import VARCHAR, DataType, TypeKind, parse_type
from piestream.expr.bind import UnknownLiteral, bind_call, cast, literal
from piestream.expr.expr import Expr, InputRef
from piestream.expr.table_function import TABLE_FUNCTIONS, bind_table_function
from piestream.frontend.binder.scope import GroupingError, OuterRef, Scope
from piestream.frontend.binder.user_functions import bind_user_call, binding_database
from piestream.frontend.parser.base import WRITTEN_NAME

AggHook = Callable[[exp.Expression, "ExprBinder"], Expr]
SubqueryHook = Callable[[str, exp.Expression, Expr | None, "ExprBinder"], Expr]


def position(node: exp.Expression | None) -> int | None:
    """1-based character position of a node in the SQL text, when sqlglot recorded it."""
    while node is not None:
        meta = getattr(node, "_meta", None) or {}
        if "start" in meta:
            return int(meta["start"]) + 1
        children = [c for c in node.iter_expressions()]
        node = children[0] if children else None
    return None


AGG_FUNCS: dict[type[exp.Expression], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
    exp.ArrayAgg: "array_agg",
    exp.GroupConcat: "string_agg",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.Stddev: "stddev_samp",
    exp.StddevPop: "stddev_pop",
    exp.StddevSamp: "stddev_samp",
    exp.Variance: "var_samp",
    exp.VariancePop: "var_pop",
    exp.BitwiseAndAgg: "bit_and",
    exp.BitwiseOrAgg: "bit_or",
    exp.BitwiseXorAgg: "bit_xor",
}
AGG_NAMES = {
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "stddev_samp",
    "stddev_pop",
    "var_samp",
    "var_pop",
    "every",
    "bit_and",
    "bit_or",
    "bit_xor",
}

_BINARY: dict[type[exp.Expression], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.Pow: "^",
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.DPipe: "||",
    exp.NullSafeEQ: "is_not_distinct_from",
    exp.NullSafeNEQ: "is_distinct_from",
}

#: jsonb's operators, as sqlglot's postgres dialect parses them (`#-` and `@?` have their own kinds).
JSON_BINARY: dict[type[exp.Expression], str] = {
    exp.JSONExtract: "->",
    exp.JSONExtractScalar: "->>",
    exp.JSONBExtract: "#>",
    exp.JSONBExtractScalar: "#>>",
    exp.ArrayContainsAll: "@>",
    exp.ArrayContainedBy: "<@",
    exp.JSONBContainsTopKey: "?",
    exp.JSONBContainsAnyTopKeys: "?|",
    exp.JSONBContainsAllTopKeys: "?&",
    exp.JSONBDeleteAtPath: "#-",
}

_QUANTIFIABLE = frozenset((exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE))


def _quantifier(node: exp.Expression) -> tuple[str, exp.Expression] | None:
    """("op_any" | "op_all", the array operand) when `node` is ANY / SOME / ALL (...); sqlglot
    parses ANY into exp.Any and SOME / ALL (...) into functions of those names."""
    kind = None
    if isinstance(node, exp.Any):
        kind, operand = "op_any", node.this
    elif isinstance(node, exp.All):
        kind, operand = "op_all", node.this
    elif isinstance(node, exp.Anonymous) and len(node.expressions) == 1:
        name = str(node.this).upper()
        if name in ("ANY", "SOME", "ALL"):
            kind, operand = ("op_all" if name == "ALL" else "op_any"), node.expressions[0]
    if kind is None:
        return None
    while isinstance(operand, exp.Paren):
        operand = operand.this
    return kind, operand


_INTERVAL_UNITS = {
    "YEAR": Interval(12, 0, 0),
    "MONTH": Interval(1, 0, 0),
    "WEEK": Interval(0, 7, 0),
    "DAY": Interval(0, 1, 0),
    "HOUR": Interval(0, 0, 3_600_000_000),
    "MINUTE": Interval(0, 0, 60_000_000),
    "SECOND": Interval(0, 0, 1_000_000),
    "MILLISECOND": Interval(0, 0, 1_000),
    "MICROSECOND": Interval(0, 0, 1),
}


def convert_type(dt: exp.DataType) -> DataType:
    """A sqlglot type to ours (PostgreSQL spelling through our type parser)."""
    if dt.this == exp.DataType.Type.ARRAY:
        inner = dt.expressions[0] if dt.expressions else None
        if not isinstance(inner, exp.DataType):
            raise FeatureNotSupported(f"type {dt.sql('postgres')} is not supported")
        from piestream.common.types import list_of

        return list_of(convert_type(inner))
    if dt.this == exp.DataType.Type.STRUCT:
        from piestream.common.types import struct_of

        fields = []
        for f in dt.expressions:
            if isinstance(f, exp.ColumnDef):
                fields.append((f.name, convert_type(f.args["kind"])))
            else:
                raise FeatureNotSupported(f"type {dt.sql('postgres')} is not supported")
        if not fields:  # as the DDL type parser says (`parser.type_names`)
            raise FeatureNotSupported("a struct needs at least one field")
        return struct_of(*fields)
    text = dt.sql("postgres")
    try:
        return parse_type(text)
    except PiestreamError as err:
        if err.sqlstate in ("0A000", "22023"):  # numeric(p, s) out of range: its own error
            raise
        raise FeatureNotSupported(f"type {text} is not supported") from None


@dataclass
class ExprBinder:
    """Binds expressions over `scope`; `on_agg`/`on_window`/`on_subquery` handle the rest."""

    scope: Scope
    on_agg: AggHook | None = None
    on_window: AggHook | None = None
    on_subquery: SubqueryHook | None = None
    params: Sequence[Any] = ()
    context: str = "expression"
    outer_refs: list[OuterRef] = field(default_factory=list)
    allow_srf: bool = False  # set-returning functions (a select list) become `TableFunction`s

    def bind(self, node: exp.Expression) -> Expr:
        method = getattr(self, f"_bind_{type(node).__name__.lower()}", None)
        if method is not None:
            return method(node)
        if type(node) in _QUANTIFIABLE and (q := _quantifier(node.expression)) is not None:
            return self._quantified(node, *q)
        if type(node) in _BINARY:
            return self._call(_BINARY[type(node)], [node.this, node.expression], node)
        if type(node) in JSON_BINARY:
            return self._call(JSON_BINARY[type(node)], [node.this, node.expression], node)
        if type(node) in AGG_FUNCS:
            return self._agg(node)
        if isinstance(node, exp.Func):
            return self._generic_func(node)
        raise FeatureNotSupported(
            f"expression {node.sql('postgres')!r} is not supported", position=position(node)
        )

    def _quantified(self, node: exp.Expression, name: str, array: exp.Expression) -> Expr:
        """``x op ANY / SOME / ALL (array)`` (the subquery forms = ANY / <> ALL were rewritten
        into IN / NOT IN before binding; the others are refused)."""
        if isinstance(array, (exp.Subquery, exp.Select, exp.Union)):
            raise FeatureNotSupported(
                f"{_BINARY[type(node)]} {name[3:].upper()} (subquery) is not supported "
                "(= ANY and <> ALL over a subquery are)",
                position=position(node),
            )
        op = literal(_BINARY[type(node)], VARCHAR)
        bound = [self.bind(node.this), self.bind(array), op]
        return bind_call(name, bound, position=position(node))

    # -- leaves ---------------------------------------------------------------------------------
    def _bind_column(self, node: exp.Column) -> Expr:
        """``[schema.]table.column``, ``column``, and field paths into STRUCT columns:
        ``table.column.field...`` (PostgreSQL) and ``column.field...`` (RisingWave's spelling)."""
        parts = [node.text(k) for k in ("catalog", "db", "table") if node.args.get(k) is not None]
        parts.append(node.name)
        pos = position(node)
        # db.s.t.x and s.t.x name t's column x (FROM checked that t is s.t in this database)
        if len(parts) >= 4 and not self._qualifier_known(parts[0]) and self._qualifier_known(parts[2]):
            if parts[0] != binding_database():  # PostgreSQL's 0A000, never another database's t
                raise FeatureNotSupported(
                    f"cross-database references are not implemented: {'.'.join(parts)}", position=pos
                )
            parts = parts[2:]
        elif len(parts) >= 3 and not self._qualifier_known(parts[0]) and self._qualifier_known(parts[1]):
            parts = parts[1:]
        if len(parts) == 1:
            depth, idx = self.scope.resolve(None, parts[0], pos)
            return self._ref(depth, idx)
        if self._qualifier_known(parts[0]):
            depth, idx = self.scope.resolve(parts[0], parts[1], pos)
            return self._fields(self._ref(depth, idx), parts[2:], pos)
        # `f.x` where f is a struct column, not a table
        try:
            depth, idx = self.scope.resolve(None, parts[0], pos)
        except PiestreamError:
            depth = -1
        if depth >= 0:
            base = self._ref(depth, idx)
            if base.return_type.kind is TypeKind.STRUCT:
                return self._fields(base, parts[1:], pos)
        missing = ".".join(parts[:-1]) if len(parts) > 2 else parts[0]
        raise UndefinedTable(f'missing FROM-clause entry for table "{missing}"', position=pos)

    @staticmethod
    def _fields(base: Expr, names: Sequence[str], pos: int | None) -> Expr:
        for name in names:
            base = bind_call("field", [base, literal(name)], position=pos)
        return base

    def _qualifier_known(self, qualifier: str) -> bool:
        s: Scope | None = self.scope
        while s is not None:
            if s.has_qualifier(qualifier):
                return True
            s = s.parent
        return False

    def _ref(self, depth: int, idx: int) -> Expr:
        s: Scope = self.scope
        for _ in range(depth):
            assert s.parent is not None
            s = s.parent
        t = s.columns[idx].data_type
        if depth == 0:
            return InputRef(idx, t)
        ref = OuterRef(depth, idx, t)
        self.outer_refs.append(ref)
        return ref

    def _bind_literal(self, node: exp.Literal) -> Expr:
        if node.is_string:
            return literal(node.this)
        text = str(node.this)
        if any(ch in text for ch in ".eE"):
            return literal(decimal.Decimal(text))
        return literal(int(text))

    def _bind_boolean(self, node: exp.Boolean) -> Expr:
        return literal(bool(node.this))

    def _bind_null(self, node: exp.Null) -> Expr:
        return literal(None)

    def _bind_placeholder(self, node: exp.Expression) -> Expr:
        name = str(node.name or node.this or "")
        try:
            idx = int(name.lstrip("$")) - 1
            value = self.params[idx]
        except (ValueError, IndexError):
            raise SyntaxError_(f"there is no parameter ${name}", position=position(node)) from None
        return value if isinstance(value, Expr) else literal(value)

    _bind_parameter = _bind_placeholder

    def _bind_paren(self, node: exp.Paren) -> Expr:
        return self.bind(node.this)

    def _bind_alias(self, node: exp.Alias) -> Expr:
        return self.bind(node.this)

    # -- operators ------------------------------------------------------------------------------
    def _bind_and(self, node: exp.And) -> Expr:
        return self._call("and", [node.this, node.expression], node)

    def _bind_or(self, node: exp.Or) -> Expr:
        return self._call("or", [node.this, node.expression], node)

    def _bind_not(self, node: exp.Not) -> Expr:
        inner = node.this
        if isinstance(inner, exp.In):
            return self._in(inner, negate=True)
        if isinstance(inner, exp.Exists) and self.on_subquery is not None:
            return self.on_subquery("not_exists", inner.this, None, self)
        if isinstance(inner, exp.Is):
            return self._is(inner, negate=True)
        if isinstance(inner, exp.Between):
            return self._between(inner, negate=True)
        return self._call("not", [inner], node)

    def _bind_neg(self, node: exp.Neg) -> Expr:
        inner = node.this
        if isinstance(inner, exp.Literal) and not inner.is_string:  # -2147483648 fits INT
            text = "-" + str(inner.this)
            return literal(decimal.Decimal(text)) if any(ch in text for ch in ".eE") else literal(int(text))
        return self._call("neg", [inner], node)

    def _bind_like(self, node: exp.Like) -> Expr:
        return self._call(
            "not_like" if node.args.get("negate") else "like", [node.this, node.expression], node
        )

    def _bind_ilike(self, node: exp.ILike) -> Expr:
        return self._call(
            "not_ilike" if node.args.get("negate") else "ilike", [node.this, node.expression], node
        )

    def _bind_is(self, node: exp.Is) -> Expr:
        return self._is(node, negate=False)

    def _is(self, node: exp.Is, negate: bool) -> Expr:
        # sqlglot spells `x IS NOT NULL` as Is(negate=True); NOT (x IS NOT NULL) negates twice
        negate = negate != bool(node.args.get("negate"))
        rhs = node.expression
        if isinstance(rhs, exp.Null):
            return self._call("is_not_null" if negate else "is_null", [node.this], node)
        if isinstance(rhs, exp.Boolean):
            kind = (
                ("is_not_true" if negate else "is_true")
                if rhs.this
                else ("is_not_false" if negate else "is_false")
            )
            return self._call(kind, [node.this], node)
        raise FeatureNotSupported(f"IS {rhs.sql('postgres')} is not supported", position=position(node))

    def _bind_between(self, node: exp.Between) -> Expr:
        return self._between(node, negate=False)

    def _between(self, node: exp.Between, negate: bool) -> Expr:
        """[NOT] BETWEEN [SYMMETRIC]: SYMMETRIC is PostgreSQL's `(x BETWEEN a AND b) OR (x BETWEEN
        b AND a)`, and NOT negates the whole."""
        x, low, high = (self.bind(node.args[k]) for k in ("this", "low", "high"))
        pos = position(node)
        fn = "not_between" if negate else "between"
        out = bind_call(fn, [x, low, high], position=pos)
        if node.args.get("symmetric"):
            swapped = bind_call(fn, [x, high, low], position=pos)
            out = bind_call("and" if negate else "or", [out, swapped], position=pos)
        return out

    def _bind_in(self, node: exp.In) -> Expr:
        return self._in(node, negate=False)

    def _in(self, node: exp.In, negate: bool) -> Expr:
        query = node.args.get("query")
        if query is not None:
            if self.on_subquery is None:
                raise FeatureNotSupported("subquery here is not supported", position=position(node))
            lhs = self.bind(node.this)
            sub = query.this if isinstance(query, exp.Subquery) else query
            return self.on_subquery("not_in" if negate else "in", sub, lhs, self)
        args = [node.this, *node.expressions]
        return self._call("not_in" if negate else "in", args, node)

    def _bind_exists(self, node: exp.Exists) -> Expr:
        if self.on_subquery is None:
            raise FeatureNotSupported("EXISTS here is not supported", position=position(node))
        return self.on_subquery("exists", node.this, None, self)

    def _bind_subquery(self, node: exp.Subquery) -> Expr:
        if self.on_subquery is None:
            raise FeatureNotSupported("subquery here is not supported", position=position(node))
        return self.on_subquery("scalar", node.this, None, self)

    def _bind_case(self, node: exp.Case) -> Expr:
        subject = node.this
        args: list[Expr] = []
        subj = self.bind(subject) if subject is not None else None
        for branch in node.args.get("ifs") or []:
            cond = self.bind(branch.this)
            if subj is not None:
                cond = bind_call("=", [subj, cond], position=position(branch))
            args += [cond, self.bind(branch.args["true"])]
        default = node.args.get("default")
        args.append(self.bind(default) if default is not None else literal(None))
        return bind_call("case", args, position=position(node))

    def _bind_cast(self, node: exp.Cast) -> Expr:
        target = convert_type(node.args["to"])
        if isinstance(node.this, exp.Array) and not node.this.expressions and target.kind is TypeKind.LIST:
            return literal([], target)  # ARRAY[]::int[]: an empty array takes the cast's type
        return cast(self.bind(node.this), target, explicit=True, position=position(node))

    def _bind_tuple(self, node: exp.Tuple) -> Expr:
        """``(a, b, ...)``: PostgreSQL's implicit ROW constructor (at least two fields)."""
        return self._call("row", list(node.expressions), node)

    def _bind_interval(self, node: exp.Interval) -> Expr:
        value = node.this
        unit = node.args.get("unit")
        text = value.name if isinstance(value, exp.Literal) else value.sql("postgres")
        if unit is not None:
            u = unit.name.upper().rstrip("S") if unit.name.upper() not in ("S",) else "SECOND"
            if u not in _INTERVAL_UNITS:
                raise FeatureNotSupported(
                    f"interval unit {unit.name} is not supported", position=position(node)
                )
            try:
                n = decimal.Decimal(text)
            except decimal.InvalidOperation:
                return cast(literal(f"{text} {unit.name}"), parse_type("interval"), position=position(node))
            base = _INTERVAL_UNITS[u]
            if n == int(n):
                k = int(n)
                return literal(Interval(base.months * k, base.days * k, base.usecs * k))
            return cast(literal(f"{text} {u.lower()}"), parse_type("interval"), position=position(node))
        return cast(literal(text), parse_type("interval"), position=position(node))

    def _bind_dot(self, node: exp.Dot) -> Expr:
        return bind_call(
            "field", [self.bind(node.this), literal(node.expression.name)], position=position(node)
        )

    def _bind_bracket(self, node: exp.Bracket) -> Expr:
        base = self.bind(node.this)
        if len(node.expressions) != 1:
            raise FeatureNotSupported("array slices are not supported", position=position(node))
        idx = self.bind(node.expressions[0])  # the parser keeps PostgreSQL's 1-based subscripts
        return bind_call("array_access", [base, idx], position=position(node))

    def _bind_array(self, node: exp.Array) -> Expr:
        return bind_call("array", [self.bind(e) for e in node.expressions], position=position(node))

    def _bind_coalesce(self, node: exp.Coalesce) -> Expr:
        return self._call("coalesce", [node.this, *node.expressions], node)

    def _bind_nullif(self, node: exp.Nullif) -> Expr:
        return self._call("nullif", [node.this, node.expression], node)

    def _bind_greatest(self, node: exp.Greatest) -> Expr:
        return self._call("greatest", [node.this, *node.expressions], node)

    def _bind_least(self, node: exp.Least) -> Expr:
        return self._call("least", [node.this, *node.expressions], node)

    def _bind_extract(self, node: exp.Extract) -> Expr:
        return bind_call(
            "extract", [literal(node.this.name.lower()), self.bind(node.expression)], position=position(node)
        )

    def _bind_timestamptrunc(self, node: exp.TimestampTrunc) -> Expr:
        unit = node.args["unit"]
        return bind_call(
            "date_trunc", [literal(unit.name.lower()), self.bind(node.this)], position=position(node)
        )

    _bind_datetrunc = _bind_timestamptrunc

    def _bind_substring(self, node: exp.Substring) -> Expr:
        args = [node.this, node.args.get("start"), node.args.get("length")]
        return self._call("substr", [a for a in args if a is not None], node)

    def _bind_trim(self, node: exp.Trim) -> Expr:
        where = str(node.args.get("position") or "BOTH").upper()
        fn = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(where, "btrim")
        args = [node.this] + ([node.expression] if node.expression is not None else [])
        return self._call(fn, args, node)

    def _bind_strposition(self, node: exp.StrPosition) -> Expr:
        return self._call("strpos", [node.this, node.args["substr"]], node)

    def _bind_currenttimestamp(self, node: exp.Expression) -> Expr:
        return bind_call("now", [], position=position(node))

    def _bind_firstvalue(self, node: exp.FirstValue) -> Expr:
        return self._first_of_ordered(node, last=False)

    def _bind_lastvalue(self, node: exp.LastValue) -> Expr:
        return self._first_of_ordered(node, last=True)

    def _first_of_ordered(self, node: exp.Expression, last: bool) -> Expr:
        """RisingWave's aggregates ``first_value(x ORDER BY ...)`` / ``last_value(...)``, NULLs
        included, as ``(array_agg(x ORDER BY ...))[1]`` (last_value: the order reversed, NULLS
        placement with it), so MVs maintain them as the ordered array_agg (retractable)."""
        arg = node.this
        if not isinstance(arg, exp.Order):
            raise FeatureNotSupported(
                f"{'last_value' if last else 'first_value'} as an aggregate needs ORDER BY",
                position=position(node),
            )
        order = arg.copy()
        if last:
            flipped = []
            for o in order.expressions:
                desc = bool(o.args.get("desc"))
                nf = o.args.get("nulls_first")
                nulls_first = (
                    (not desc) if nf is None else bool(nf)
                )  # PostgreSQL's default: NULLS LAST for ASC
                flipped.append(exp.Ordered(this=o.this, desc=not desc, nulls_first=not nulls_first))
            order.set("expressions", flipped)
        agg = exp.ArrayAgg(this=order)
        return self.bind(exp.Bracket(this=exp.Paren(this=agg), expressions=[exp.Literal.number(1)]))

    def _bind_anonymous(self, node: exp.Anonymous) -> Expr:
        name = str(node.this).lower()
        if name == "proctime":  # RisingWave's rule: a source column's value, not a function
            raise FeatureNotSupported(
                "Function `PROCTIME()` is only allowed in CREATE TABLE/SOURCE. Is `NOW()` what you want?"
            )
        if name in AGG_NAMES:
            return self._agg(node)
        if name in TABLE_FUNCTIONS:
            return self._table_function(name, list(node.expressions), node)
        return self._call(name, list(node.expressions), node)

    def _call(self, name: str, args: Sequence[exp.Expression], node: exp.Expression) -> Expr:
        bound = [self.bind(a) for a in args]
        user = bind_user_call(name, bound, position(node))
        if user is not None:
            return user
        return bind_call(name, bound, position=position(node), display=node.meta.get(WRITTEN_NAME))

    def _bind_explode(self, node: exp.Explode) -> Expr:
        """sqlglot's name for PostgreSQL's unnest in a select list."""
        return self._table_function("unnest", [node.this, *node.expressions], node)

    def _table_function(self, name: str, args: list[exp.Expression], node: exp.Expression) -> Expr:
        if not self.allow_srf:
            raise FeatureNotSupported(
                f"set-returning functions are not allowed in {self.context}", position=position(node)
            )
        try:
            return bind_table_function(name, [self.bind(a) for a in args])
        except PiestreamError as e:
            e.position = e.position or position(node)
            raise

    def _bind_filter(self, node: exp.Filter) -> Expr:
        return self._agg(node)

    def _bind_window(self, node: exp.Window) -> Expr:
        if self.on_window is None and self.context == "aggregate function calls":
            raise GroupingError(
                "aggregate function calls cannot contain window function calls", position=position(node)
            )
        if self.on_window is None and self.context == "window function calls":
            raise PiestreamError(
                "window function calls cannot be nested", sqlstate="42P20", position=position(node)
            )
        if self.on_window is None:
            raise PiestreamError(  # PostgreSQL's windowing error
                f"window functions are not allowed in {self.context}",
                sqlstate="42P20",
                position=position(node),
            )
        return self.on_window(node, self)

    def _bind_star(self, node: exp.Star) -> Expr:
        raise SyntaxError_("* is not allowed here", position=position(node))

    def _bind_grouping(self, node: exp.Grouping) -> Expr:
        """GROUPING(a, ...): the grouping binder's hook reads it (binder/grouping_sets.py)."""
        if self.on_agg is None:
            raise GroupingError(
                f"grouping operations are not allowed in {self.context}", position=position(node)
            )
        return self.on_agg(node, self)

    def _agg(self, node: exp.Expression) -> Expr:
        if self.on_agg is None:
            raise GroupingError(
                f"aggregate functions are not allowed in {self.context}", position=position(node)
            )
        return self.on_agg(node, self)

    def _generic_func(self, node: exp.Func) -> Expr:
        name = node.sql_name().lower()
        args: list[exp.Expression] = []
        for key in node.arg_types:
            v = node.args.get(key)
            if v is None:
                continue
            # flags such as Concat(safe=True, coalesce=True) are not arguments
            args += [a for a in (v if isinstance(v, list) else [v]) if isinstance(a, exp.Expression)]
        return self._call(name, args, typing.cast(exp.Expression, node))


def is_unknown_literal(e: Expr) -> bool:
    return isinstance(e, UnknownLiteral)
