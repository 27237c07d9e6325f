"""What the binder understands of a sqlglot tree, declared per node kind and checked before binding.

sqlglot's nodes carry many optional arguments: clauses of other dialects, and modifiers that
PostgreSQL has and piestream does not implement. A binder that reads only the arguments it knows
drops the others without a word, and the query answers something else than what was asked
(NATURAL JOIN became a cross join that way). So before a query is bound, `check_supported` walks
its whole tree and, for every node:

- a node kind with a `Rule`: each argument that is set must be one the binder handles for that
  kind (it reads it, or raises its own error for the values it cannot take); an argument the rule
  rejects, or one the rule does not mention (a newer sqlglot's), fails with 0A000 naming the clause;
- a scalar function without a rule: the binder passes every argument to the function
  (`ExprBinder._generic_func`), so expression arguments are handled; a flag is not an argument,
  and one that is set fails with 0A000;
- any other node kind fails with 0A000, named by `KIND_NAMES` where it has a user-facing name.

`coverage_problems` is the other half of the mechanism: tests/frontend/test_binder_clauses.py
runs it over every sqlglot node class and fails when an argument is neither handled nor rejected,
or when the binder has a dedicated binding for a kind that has no rule here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported
from piestream.frontend.binder.expr_binder import _BINARY, AGG_FUNCS, JSON_BINARY, ExprBinder, position
from piestream.frontend.parser.base import WRITTEN_NAME


@dataclass(frozen=True)
class Rule:
    """The arguments of one node kind: `handled` ones the binder reads; `rejected` ones fail with
    0A000 naming the clause. `opaque`: the binder reads the whole subtree itself (a type name,
    through its text and piestream's type parser), so the walk does not descend into it."""

    handled: frozenset[str]
    rejected: Mapping[str, str] = field(default_factory=dict)
    opaque: bool = False


def rule(handled: str = "", **rejected: str) -> Rule:
    return Rule(frozenset(handled.split()), dict(rejected))


_QUERY_MODIFIERS_REJECTED = {
    "match": "MATCH_RECOGNIZE",
    "laterals": "LATERAL VIEW",
    "joins": "JOIN after a set operation or subquery",
    "connect": "CONNECT BY",
    "pivots": "PIVOT / UNPIVOT",
    "prewhere": "PREWHERE",
    "where": "WHERE after a set operation or subquery",
    "group": "GROUP BY after a set operation or subquery",
    "having": "HAVING after a set operation or subquery",
    "qualify": "QUALIFY",
    "windows": "WINDOW clause",
    "distribute": "DISTRIBUTE BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "locks": "FOR UPDATE / FOR SHARE",
    "sample": "TABLESAMPLE",
    "settings": "SETTINGS",
    "format": "FORMAT",
    "options": "OPTION (...)",
    "for_": "FOR XML / FOR JSON",
}


def _modifiers_except(*handled: str) -> dict[str, str]:
    return {k: v for k, v in _QUERY_MODIFIERS_REJECTED.items() if k not in handled}


_BINARY_RULE = rule("this expression")
_ONE_ARG = rule("this")

#: Every node kind the binder reads, with the arguments it handles and the ones it rejects.
RULES: dict[type[exp.Expression], Rule] = {
    # -- queries ---------------------------------------------------------------------------------
    exp.Select: rule(
        "with_ expressions distinct from_ joins where group having order limit offset windows",
        kind="SELECT AS STRUCT / AS VALUE",
        hint="optimizer hints",
        into="SELECT INTO",
        operation_modifiers="SELECT modifiers",
        exclude="SELECT * EXCLUDE",
        **_modifiers_except("joins", "where", "group", "having", "windows"),
    ),
    exp.Union: rule(
        "with_ this expression distinct by_name side kind on order limit offset", **_modifiers_except()
    ),
    exp.Intersect: rule(
        "with_ this expression distinct by_name side kind on order limit offset", **_modifiers_except()
    ),
    exp.Except: rule(
        "with_ this expression distinct by_name side kind on order limit offset", **_modifiers_except()
    ),
    exp.Values: rule("expressions alias order limit offset", pivots="PIVOT / UNPIVOT"),
    exp.Subquery: rule("this alias with_ order limit offset", **_modifiers_except()),
    exp.With: rule(
        "expressions",
        recursive="WITH RECURSIVE",
        search="SEARCH clause of WITH",
        cycle="CYCLE clause of WITH",
        udfs="WITH FUNCTION",
    ),
    # [NOT] MATERIALIZED only tells PostgreSQL's planner whether to inline the CTE: same answer
    exp.CTE: rule("this alias materialized", scalar="scalar CTE", key_expressions="USING KEY of a CTE"),
    exp.TableAlias: rule("this columns"),
    exp.From: rule("this"),
    exp.Join: rule(
        "this on side kind using method",
        global_="GLOBAL JOIN",
        hint="join hints",
        match_condition="ASOF JOIN",
        nearest="ASOF JOIN",
        directed="directed join",
        expressions="join expressions",
        pivots="PIVOT / UNPIVOT",
    ),
    # ONLY: piestream has no table inheritance, so ONLY t is t
    # WITH ORDINALITY: read for functions in FROM (`table_functions`), refused after a table
    # `version`: FOR SYSTEM_TIME AS OF PROCTIME() on a temporal join's right side (from_clause)
    exp.Table: rule(
        "this alias db catalog joins only ordinality version",
        laterals="LATERAL VIEW",
        pivots="PIVOT / UNPIVOT",
        hints="table hints",
        system_time="FOR SYSTEM_TIME AS OF",
        format="table FORMAT",
        pattern="table pattern",
        when="table WHEN",
        partition="PARTITION of a table",
        changes="CHANGES",
        rows_from="ROWS FROM",
        sample="TABLESAMPLE",
        indexed="INDEXED BY",
    ),
    # set-returning functions in FROM (binder/table_functions.py); `offset` is WITH ORDINALITY
    exp.Unnest: rule("expressions alias offset", explode_array="UNNEST of an array of structs"),
    exp.Lateral: rule(
        "this alias ordinality",
        view="LATERAL VIEW",
        outer="LATERAL VIEW OUTER",
        cross_apply="CROSS / OUTER APPLY",
    ),
    exp.Explode: rule("this expressions"),  # unnest in a select list
    exp.Where: _ONE_ARG,
    exp.Having: _ONE_ARG,
    exp.Group: rule(
        "expressions",
        grouping_sets="GROUPING SETS",
        cube="CUBE",
        rollup="ROLLUP",
        totals="WITH TOTALS",
        all="GROUP BY ALL",
    ),
    # GROUP BY items (binder/grouping_sets.py), and GROUPING(...) over them
    exp.GroupingSets: rule("expressions"),
    exp.Rollup: rule("expressions"),
    exp.Cube: rule("expressions"),
    exp.Grouping: rule("expressions"),
    exp.Order: rule("this expressions", siblings="ORDER SIBLINGS BY"),
    exp.Ordered: rule("this desc nulls_first", with_fill="WITH FILL"),
    exp.Distinct: rule("expressions on"),
    exp.Limit: rule(
        "expression",
        this="LIMIT on an expression",
        offset="LIMIT offset, count",
        limit_options="FETCH ... PERCENT / WITH TIES",
        expressions="LIMIT BY",
    ),
    exp.Offset: rule("expression", this="OFFSET on an expression", expressions="OFFSET BY"),
    exp.Fetch: rule("direction count limit_options"),
    exp.LimitOptions: rule("rows with_ties", percent="FETCH ... PERCENT"),
    exp.Tuple: rule("expressions"),  # VALUES rows, and ROW constructors (a, b) in expressions
    # -- names and leaves -------------------------------------------------------------------------
    exp.Identifier: rule("this quoted", global_="GLOBAL", temporary="TEMPORARY"),
    # four parts are table.column.field.field (the binder resolves the path or fails with 42P01)
    exp.Column: rule(
        "this table db catalog",
        join_mark="(+) outer join marker",
        shadow="shadowed column",
    ),
    exp.Star: rule("except_", replace="* REPLACE", rename="* RENAME", ilike="* ILIKE"),  # * EXCEPT (a)
    exp.Alias: rule("this alias"),
    exp.Literal: rule("this is_string"),
    exp.Boolean: _ONE_ARG,
    exp.Null: rule(),
    exp.Var: _ONE_ARG,  # units of EXTRACT / date_trunc / INTERVAL
    exp.Placeholder: rule("this", kind="typed placeholder", widget="placeholder widget", jdbc="JDBC ?"),
    exp.Parameter: rule("this", expression="parameter suffix"),
    exp.Paren: _ONE_ARG,
    # a type name is bound from its PostgreSQL text by piestream's type parser, which refuses what
    # it does not know
    # read whole by `from_clause.temporal_version` (only AS OF PROCTIME() binds)
    exp.Version: Rule(frozenset(("this", "kind", "expression")), opaque=True),
    exp.DataType: Rule(
        frozenset({"this", "expressions", "nested", "values", "kind", "nullable"}),
        {"collate": "COLLATE"},
        opaque=True,
    ),
    # -- operators ---------------------------------------------------------------------------------
    **{cls: _BINARY_RULE for cls in _BINARY if cls not in (exp.DPipe, exp.Div, exp.Mod)},
    exp.DPipe: rule("this expression safe"),  # `safe`: sqlglot's note that PG's || is strict
    # `typed`: int / int is integer division, as PostgreSQL's `/` (and piestream's) is
    exp.Div: rule("this expression typed", safe="division that yields NULL on zero"),
    exp.Mod: rule("this expression", safe="modulo that yields NULL on zero"),
    # jsonb operators: `expression` is the key, index or path as written (parser/dialect.py)
    **{cls: _BINARY_RULE for cls in JSON_BINARY if cls not in (exp.JSONExtract, exp.JSONExtractScalar)},
    exp.JSONBExtractScalar: rule("this expression", json_type="#>> with a JSON type"),
    exp.JSONExtract: rule(
        "this expression",
        only_json_types="-> on JSON types only",
        expressions="-> with several paths",
        variant_extract="variant extraction",
        json_query="JSON_QUERY",
        option="JSON_QUERY option",
        quote="JSON_QUERY quoting",
        on_condition="JSON_QUERY ON ERROR / ON EMPTY",
        requires_json="JSON extraction requiring JSON",
        emits="JSON extraction emitting",
    ),
    exp.JSONExtractScalar: rule(
        "this expression",
        only_json_types="->> on JSON types only",
        expressions="->> with several paths",
        json_type="->> with a JSON type",
        scalar_only="scalar-only JSON extraction",
        json_subtype="JSON subtype",
    ),
    exp.And: _BINARY_RULE,
    exp.Or: _BINARY_RULE,
    exp.Not: _ONE_ARG,
    exp.Neg: _ONE_ARG,
    exp.Like: rule("this expression negate"),
    exp.ILike: rule("this expression negate"),
    exp.Is: rule("this expression negate"),
    exp.Between: rule("this low high symmetric"),
    exp.In: rule("this expressions query", unnest="IN UNNEST", field="IN field", is_global="GLOBAL IN"),
    exp.Exists: rule("this", expression="EXISTS with a lambda"),
    # x op ANY / SOME / ALL (array): the expression binder binds them with their comparison
    exp.Any: rule("this"),
    exp.All: rule("this"),
    exp.Case: rule("this ifs default"),
    exp.If: rule("this true", false="IF(...) with an else branch"),
    exp.Cast: rule(
        "this to",
        format="CAST ... FORMAT",
        safe="TRY_CAST",
        action="CAST ... action",
        default="CAST ... DEFAULT ON CONVERSION ERROR",
    ),
    exp.Interval: rule("this unit", fraction_in_string="interval fraction"),
    exp.Dot: _BINARY_RULE,
    exp.Bracket: rule(
        "this expressions",
        offset="array subscript offset",
        safe="SAFE_OFFSET",
        returns_list_for_maps="map subscript",
        json_access="JSON subscript",
    ),
    exp.Array: rule(
        "expressions bracket_notation",  # ARRAY[...] and ARRAY(...) spell the same constructor
        struct_name_inheritance="struct array",
        value_constructor="array value constructor",
    ),
    # -- functions with their own binding ----------------------------------------------------------
    exp.Coalesce: rule("this expressions", is_nvl="NVL", is_null="ISNULL()"),
    exp.Nullif: _BINARY_RULE,
    # PostgreSQL's GREATEST / LEAST skip NULLs, which is what sqlglot's flag says
    exp.Greatest: rule("this expressions ignore_nulls"),
    exp.Least: rule("this expressions ignore_nulls"),
    exp.Extract: _BINARY_RULE,
    exp.TimestampTrunc: rule("this unit input_type_preserved", zone="date_trunc with a time zone"),
    exp.DateTrunc: rule("this unit input_type_preserved", zone="date_trunc with a time zone"),
    exp.Substring: rule("this start length", zero_start="0-based SUBSTRING"),
    exp.Trim: rule("this expression position", collation="TRIM ... COLLATE"),
    exp.StrPosition: rule(
        "this substr",
        position="strpos with a start position",
        occurrence="strpos with an occurrence",
        clamp_position="strpos clamping",
    ),
    exp.CurrentTimestamp: rule(this="CURRENT_TIMESTAMP(precision)", sysdate="SYSDATE"),
    exp.Anonymous: rule("this expressions"),
    # concat's flags say NULLs are skipped, which is PostgreSQL's concat()
    exp.Concat: rule("expressions safe coalesce"),
    # -- aggregates and windows ---------------------------------------------------------------------
    exp.Filter: _BINARY_RULE,
    exp.Count: rule("this big_int", expressions="count with several arguments"),  # count is bigint
    exp.Sum: _ONE_ARG,
    exp.Avg: _ONE_ARG,
    exp.Min: rule("this", expressions="min with several arguments", count="min(x, n)"),
    exp.Max: rule("this", expressions="max with several arguments", count="max(x, n)"),
    exp.ArrayAgg: rule("this", nulls_excluded="array_agg skipping NULLs"),
    exp.GroupConcat: rule("this separator", on_overflow="ON OVERFLOW"),
    exp.LogicalAnd: _ONE_ARG,
    exp.LogicalOr: _ONE_ARG,
    exp.Stddev: _ONE_ARG,
    exp.StddevPop: _ONE_ARG,
    exp.StddevSamp: _ONE_ARG,
    exp.Variance: _ONE_ARG,
    exp.VariancePop: _ONE_ARG,
    exp.BitwiseAndAgg: _ONE_ARG,
    exp.BitwiseOrAgg: _ONE_ARG,
    exp.BitwiseXorAgg: _ONE_ARG,
    # `alias`: a named window (OVER w, WINDOW w AS (...)); `spec`: the frame (binder/windows.py)
    exp.Window: rule("this partition_by order over spec alias", first="KEEP (DENSE_RANK FIRST / LAST)"),
    exp.WindowSpec: rule("kind start start_side end end_side", exclude="EXCLUDE in a window frame"),
    exp.Lag: rule("this offset default"),
    exp.Lead: rule("this offset default"),
    exp.FirstValue: _ONE_ARG,
    exp.LastValue: _ONE_ARG,
    exp.NthValue: rule("this offset", from_first="nth_value FROM FIRST / LAST"),
    exp.RowNumber: rule(this="row_number() with arguments"),
    exp.Rank: rule(expressions="rank() with arguments"),
    exp.DenseRank: rule(expressions="dense_rank() with arguments"),
}

#: User-facing names of node kinds the binder does not take (a fallback shows the SQL text).
KIND_NAMES: dict[type[exp.Expression], str] = {
    exp.Pivot: "PIVOT / UNPIVOT",
    exp.TableSample: "TABLESAMPLE",
    exp.Lock: "FOR UPDATE / FOR SHARE",
    exp.WithinGroup: "WITHIN GROUP",
    exp.Escape: "LIKE ... ESCAPE",
    exp.AtTimeZone: "AT TIME ZONE",
    exp.SimilarTo: "SIMILAR TO",
    exp.IgnoreNulls: "IGNORE NULLS",
    exp.RespectNulls: "RESPECT NULLS",
    exp.Slice: "an array slice",
    exp.Lambda: "a lambda expression",
    exp.Kwarg: "a named function argument",
    exp.PropertyEQ: "a named function argument",
    exp.IntervalSpan: "an interval range (DAY TO SECOND)",
    exp.TryCast: "TRY_CAST",
    exp.JSONBPathExists: "the @? operator",
}


def rule_for(cls: type[exp.Expression]) -> Rule | None:
    """The declared rule of a node kind; None for a generic scalar function or an unknown kind."""
    return RULES.get(cls)


def is_generic_function(cls: type[exp.Expression]) -> bool:
    """A scalar function the binder calls by name with all its arguments (`_generic_func`)."""
    return issubclass(cls, exp.Func) and cls not in RULES and cls not in KIND_NAMES and not _dedicated(cls)


def _dedicated(cls: type[exp.Expression]) -> bool:
    """Whether the expression binder has a binding of its own for `cls` (it reads chosen args)."""
    return (
        hasattr(ExprBinder, f"_bind_{cls.__name__.lower()}")
        or cls in _BINARY
        or cls in JSON_BINARY
        or cls in AGG_FUNCS
    )


def _is_set(value: object) -> bool:
    return value is not None and value is not False and value not in ("", [])


def _children(value: object) -> list[exp.Expression]:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, exp.Expression)]


def describe(node: exp.Expression) -> str:
    name = KIND_NAMES.get(type(node))
    if name is not None:
        return name
    if isinstance(node, exp.Func):
        return f"function {node.meta.get(WRITTEN_NAME) or node.sql_name().lower()}"
    text = node.sql("postgres")
    return f"{type(node).__name__} {text[:60]!r}" if text else type(node).__name__


def check_supported(tree: exp.Expression) -> None:
    """Raise 0A000 for the first clause in `tree` the binder would not honour (see module doc)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        cls = type(node)
        r = RULES.get(cls)
        if r is None and not is_generic_function(cls):
            raise FeatureNotSupported(f"{describe(node)} is not supported", position=position(node))
        for key, value in node.args.items():
            if not _is_set(value):
                continue
            children = _children(value)
            if r is None:  # a generic function: its expressions are its arguments
                if not children:
                    raise FeatureNotSupported(
                        f"option {key} of {describe(node)} is not supported", position=position(node)
                    )
            elif key not in r.handled:
                clause = r.rejected.get(key) or f"{key} of {type(node).__name__}"
                raise FeatureNotSupported(
                    f"{clause} is not supported", position=position(children[0] if children else node)
                )
            elif r.opaque:
                continue
            stack.extend(reversed(children))


def coverage_problems(classes: Iterable[type[exp.Expression]]) -> list[str]:
    """Node kinds and arguments the binder would neither handle nor reject (empty when sound).

    A kind with a rule must declare every argument sqlglot defines for it, each once; a kind the
    expression binder binds by itself must have a rule (its binding reads chosen arguments only,
    so an undeclared one would be dropped); every other kind is either a generic function or
    rejected whole by `check_supported`."""
    problems: list[str] = []
    for cls in classes:
        r = RULES.get(cls)
        if r is None:
            if _dedicated(cls) and cls not in KIND_NAMES:
                problems.append(f"{cls.__name__}: bound by the expression binder but has no rule")
            continue
        args = set(cls.arg_types)
        both = r.handled & set(r.rejected)
        if both:
            problems.append(f"{cls.__name__}: {sorted(both)} both handled and rejected")
        problems += [
            f"{cls.__name__}.{a}: neither handled nor rejected"
            for a in sorted(args - r.handled - set(r.rejected))
        ]
        problems += [
            f"{cls.__name__}.{a}: declared but sqlglot has no such argument"
            for a in sorted((r.handled | set(r.rejected)) - args)
        ]
    return problems
