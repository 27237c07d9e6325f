"""The binder's guard against dropped clauses (binder/clauses.py): every argument of every sqlglot
node kind is either handled by the binder or rejected with 0A000 naming the clause."""

from __future__ import annotations

from typing import Any

import pytest
from sqlglot import exp

from piestream.common.errors import FeatureNotSupported
from piestream.frontend.binder import clauses
from piestream.frontend.binder.clauses import RULES, check_supported, coverage_problems
from piestream.frontend.parser import parse_one


def all_node_kinds() -> list[type[exp.Expression]]:
    """Every expression class sqlglot defines: whatever its parser can put in a tree."""
    seen: set[type[exp.Expression]] = set()
    stack: list[type[exp.Expression]] = [exp.Expression]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    return sorted(seen, key=lambda c: (c.__module__, c.__name__))


def query(sql: str) -> exp.Expression:
    stmt = parse_one(sql)
    node = getattr(stmt, "query", stmt)
    assert isinstance(node, exp.Expression)
    return node


def test_every_node_kind_is_handled_or_rejected() -> None:
    kinds = all_node_kinds()
    assert len(kinds) > 1000  # sqlglot's whole class tree, not a sample
    assert coverage_problems(kinds) == []


def test_the_walk_fails_on_a_deliberately_unhandled_argument(monkeypatch: Any) -> None:
    """A newer sqlglot adds an argument to a node kind the binder reads: the coverage walk names it,
    and a query whose tree carries it is refused instead of bound without it."""
    monkeypatch.setattr(exp.Between, "arg_types", {**exp.Between.arg_types, "bogus": False})
    assert coverage_problems(all_node_kinds()) == ["Between.bogus: neither handled nor rejected"]
    node = query("SELECT 1 WHERE 2 BETWEEN 1 AND 3")
    node.find(exp.Between).set("bogus", exp.Literal.number(5))  # type: ignore[union-attr]
    with pytest.raises(FeatureNotSupported) as info:
        check_supported(node)
    assert info.value.sqlstate == "0A000" and "bogus of Between" in str(info.value)


def test_the_walk_fails_on_a_dedicated_binding_without_a_rule(monkeypatch: Any) -> None:
    """The expression binder binds Between itself (reading chosen arguments): without a rule,
    nothing would say which arguments it honours."""
    monkeypatch.delitem(RULES, exp.Between)
    assert coverage_problems([exp.Between]) == ["Between: bound by the expression binder but has no rule"]


def test_the_walk_fails_on_a_declared_argument_sqlglot_does_not_have(monkeypatch: Any) -> None:
    monkeypatch.setitem(RULES, exp.Between, clauses.rule("this low high symmetric escape"))
    assert coverage_problems([exp.Between]) == ["Between.escape: declared but sqlglot has no such argument"]


def test_a_generic_function_passes_its_arguments_and_refuses_flags() -> None:
    check_supported(query("SELECT abs(-1), round(2.5, 0), upper('a') || 'b'"))
    node = query("SELECT abs(-1)")
    node.find(exp.Abs).set("safe", True)  # type: ignore[union-attr]
    with pytest.raises(FeatureNotSupported, match="option safe of function abs"):
        check_supported(node)


def test_a_safe_modulo_is_refused() -> None:
    """sqlglot 30.31 marks `%` of dialects whose modulo yields NULL on zero as `safe`; PostgreSQL's
    raises 22012, so such a tree is refused naming the clause, never bound as plain `%`."""
    check_supported(query("SELECT 7 % 2"))
    node = query("SELECT 7 % 2")
    node.find(exp.Mod).set("safe", True)  # type: ignore[union-attr]
    with pytest.raises(FeatureNotSupported) as info:
        check_supported(node)
    assert info.value.sqlstate == "0A000" and "modulo that yields NULL on zero" in str(info.value)


@pytest.mark.parametrize(
    ("sql", "clause"),
    [
        # clauses the binder used to drop without a word (each answered something else before)
        ("SELECT sum(a) OVER (ORDER BY a ROWS 1 PRECEDING EXCLUDE CURRENT ROW) FROM t", "EXCLUDE"),
        ("SELECT a FROM t FOR UPDATE", "FOR UPDATE"),
        ("SELECT a FROM t TABLESAMPLE SYSTEM (10)", "TABLESAMPLE"),
        ("SELECT try_cast(a AS INT) FROM t", "TRY_CAST"),
        ("SELECT rank(a) OVER (ORDER BY a) FROM t", "rank() with arguments"),
        ("SELECT date_trunc('day', ts, 'UTC') FROM t", "time zone"),
        ("SELECT current_timestamp(0)", "CURRENT_TIMESTAMP(precision)"),
        ("SELECT count(a, b) FROM t", "count with several arguments"),
        ("SELECT min(a, b) FROM t", "min with several arguments"),
        # refused before too, now named by the guard
        # MySQL's WITH ROLLUP / WITH CUBE (PostgreSQL's ROLLUP (...) / CUBE (...) are bound)
        ("SELECT a FROM t GROUP BY a WITH ROLLUP", "ROLLUP"),
        ("SELECT a FROM t GROUP BY a WITH CUBE", "CUBE"),
        ("SELECT s LIKE 'x!%' ESCAPE '!' FROM t", "ESCAPE"),
        ("SELECT ts AT TIME ZONE 'UTC' FROM t", "AT TIME ZONE"),
    ],
)
def test_rejected_clauses_are_named(sql: str, clause: str) -> None:
    with pytest.raises(FeatureNotSupported) as info:
        check_supported(query(sql))
    assert info.value.sqlstate == "0A000"
    assert clause in str(info.value)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t NATURAL FULL JOIN u",
        "SELECT g, x.k FROM t x LEFT JOIN u y USING (g)",
        "SELECT * FROM (t x JOIN u y USING (g)) AS j (a, b)",
        "SELECT * FROM t UNION ALL CORRESPONDING BY (a) SELECT * FROM u",
        "SELECT * EXCEPT (a) FROM public.t AS x (a, b)",
        "WITH c AS MATERIALIZED (SELECT a FROM t) SELECT DISTINCT a FROM c ORDER BY a LIMIT ALL",
        "(SELECT a FROM t ORDER BY a) LIMIT 1",
        "VALUES (1), (2) ORDER BY 1 DESC OFFSET 1 ROWS FETCH NEXT 1 ROW ONLY",
        "SELECT a FROM t WHERE a NOT BETWEEN SYMMETRIC 3 AND 1 AND s ILIKE 'x%' AND a IN (1, 2)",
        "SELECT a FROM t WHERE a = ANY(ARRAY[1, 2]) AND a <> ALL(ARRAY[3]) AND a < SOME(ARRAY[4])",
        "SELECT count(*) FILTER (WHERE a > 1), string_agg(DISTINCT s, ',' ORDER BY s), "
        "array_agg(a ORDER BY a) FROM t GROUP BY b HAVING sum(a) > 1",
        "SELECT row_number() OVER (PARTITION BY a ORDER BY b DESC NULLS LAST), "
        "rank() OVER (ORDER BY a) FROM t",
        "SELECT CAST(a AS VARCHAR(10)), a::numeric(10, 2), ARRAY[a, 1][1], x.s.f, $1 FROM t x",
        "SELECT CASE WHEN a > 1 THEN 'x' ELSE 'y' END, coalesce(a, 1), greatest(a, 2), concat(s, 'z') FROM t",
        "SELECT extract(year FROM ts), date_trunc('day', ts), ts + INTERVAL '1' DAY, now() FROM t",
        "SELECT substring(s FROM 1 FOR 2), trim(BOTH 'x' FROM s), position('a' IN s), a / 2 FROM t",
        "SELECT * FROM TUMBLE(t, ts, INTERVAL '1 minute') WHERE EXISTS (SELECT 1 FROM u WHERE u.a = t.a)",
    ],
)
def test_supported_queries_pass_the_guard(sql: str) -> None:
    check_supported(query(sql))
