"""Output column names and error texts come from the user's SQL, as PostgreSQL figures them.

sqlglot turns calls into its own nodes (string_agg -> GroupConcat, unnest -> Explode, strpos ->
StrPosition, date_trunc -> TimestampTrunc); the names users see must still be the ones they
wrote. Every expected name below is what PostgreSQL 15 printed for the same select item.
"""

from __future__ import annotations

import pytest

from piestream.common.errors import PiestreamError
from piestream.server.session import Session

_FROM = " FROM (SELECT 'a'::varchar AS x, TIMESTAMP '2020-01-01' AS t, ARRAY[1, 2] AS a) s"

#: (select item, PostgreSQL 15's column name)
NAMES = [
    ("string_agg(x, ',')", "string_agg"),
    ("upper(x)", "upper"),
    ("length(x)", "length"),
    ("char_length(x)", "char_length"),
    ("ceiling(1.5)", "ceiling"),
    ("ceil(1.5)", "ceil"),
    ("substring(x from 1)", "substring"),
    ("substr(x, 1)", "substr"),
    ("now()", "now"),
    ("current_timestamp", "current_timestamp"),
    ("sum(1) FILTER (WHERE true)", "sum"),
    ("strpos(x, 'a')", "strpos"),
    ("position('a' in x)", "position"),
    ("date_trunc('day', t)", "date_trunc"),
    ("date_trunc('day', t)::date", "date_trunc"),
    ("extract(year from t)", "extract"),
    ("date_part('year', t)", "date_part"),
    ("coalesce(x, x)", "coalesce"),
    ("greatest(1, 2)", "greatest"),
    ("nullif(1, 2)", "nullif"),
    ("mod(5, 2)", "mod"),
    ("5 % 2", "?column?"),
    ("pow(2, 3)", "pow"),
    ("power(2, 3)", "power"),
    ("trim(x)", "btrim"),
    ("trim(leading 'a' from x)", "ltrim"),
    ("ltrim(x)", "ltrim"),
    ("bool_and(true)", "bool_and"),
    ("bool_or(true)", "bool_or"),
    ("every(true)", "every"),
    ("stddev(1)", "stddev"),
    ("count(*)", "count"),
    ("x ~ 'a'", "?column?"),
    ("1::int", "int4"),
    ("1::bigint", "int8"),
    ("1::smallint", "int2"),
    ("1::real", "float4"),
    ("1::double precision", "float8"),
    ("1::float", "float8"),
    ("1::decimal", "numeric"),
    ("1.5::numeric(10,2)", "numeric"),
    ("true::boolean", "bool"),
    ("cast(1 as varchar)", "varchar"),
    ("'a'::text", "text"),
    ("'{}'::int[]", "int4"),
    ("x::text", "x"),
    ("interval '1 day'", "interval"),
    ("date '2020-01-01'", "date"),
    ("array[1]", "array"),
    ("(1, 2)", "row"),
    ("row(1, 2)", "row"),
    ("array[]::int[]", "array"),
    ("a[1]", "a"),
    ("case when true then 1 end", "case"),
    ("case when true then 1 else x::int end", "x"),
    ("-1", "?column?"),
    ("'a'", "?column?"),
]


@pytest.mark.parametrize(("item", "name"), NAMES)
def test_select_item_names_follow_postgres(s: Session, item: str, name: str) -> None:
    (res,) = s.execute(f"SELECT {item}{_FROM}")
    assert res.columns[0][0] == name


def test_a_materialized_view_names_its_columns_the_same_way(s: Session) -> None:
    s.execute("CREATE TABLE t (k int, v varchar)")
    s.execute(
        "CREATE MATERIALIZED VIEW m AS "
        "SELECT k, string_agg(v, ',' ORDER BY v), strpos(min(v), 'a') FROM t GROUP BY k"
    )
    s.execute("INSERT INTO t VALUES (1, 'b'), (1, 'a')")
    s.execute("FLUSH")
    (res,) = s.execute("SELECT * FROM m")
    assert [c[0] for c in res.columns] == ["k", "string_agg", "strpos"]
    assert res.rows == [(1, "a,b", 1)]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT unnest(1)", "function unnest(integer) does not exist"),
        ("SELECT string_agg(1, 2)", "function string_agg(integer, integer) does not exist"),
        ("SELECT ceiling('a'::text)", "function ceiling(text) does not exist"),
        ("SELECT strpos(1, 2)", "function strpos(integer, integer) does not exist"),
        ("SELECT date_trunc('day', 1)", "function date_trunc(unknown, integer) does not exist"),
    ],
)
def test_errors_name_the_function_as_written(s: Session, sql: str, message: str) -> None:
    with pytest.raises(PiestreamError) as info:
        s.execute(sql)
    assert info.value.sqlstate == "42883"
    assert str(info.value).startswith(message), str(info.value)


def test_a_column_list_renames_a_materialized_views_columns(s: Session) -> None:
    """CREATE MATERIALIZED VIEW mv (a, b) AS ...: the list names the leading columns (fewer names
    than columns keep the rest, as PostgreSQL does); the names reach the catalog and the MV's
    own queries, and the MV stays incremental under its new names."""
    s.execute("CREATE TABLE t (k int, v int)")
    s.execute("CREATE MATERIALIZED VIEW m (key, total) AS SELECT k, sum(v) FROM t GROUP BY k")
    s.execute("CREATE MATERIALIZED VIEW m1 (key) AS SELECT k, count(*) FROM t GROUP BY k")
    s.execute("INSERT INTO t VALUES (1, 2), (1, 3), (2, 5)")
    s.execute("FLUSH")
    (res,) = s.execute("SELECT key, total FROM m ORDER BY key")
    assert [c[0] for c in res.columns] == ["key", "total"]
    assert res.rows == [(1, 5), (2, 5)]
    (res,) = s.execute("SELECT * FROM m1 ORDER BY key")
    assert [c[0] for c in res.columns] == ["key", "count"]
    assert res.rows == [(1, 2), (2, 1)]
    with pytest.raises(PiestreamError) as info:
        s.execute("SELECT k FROM m")
    assert info.value.sqlstate == "42703"


def test_a_column_list_longer_than_the_query_is_refused(s: Session) -> None:
    s.execute("CREATE TABLE t (k int, v int)")
    with pytest.raises(PiestreamError) as info:
        s.execute("CREATE MATERIALIZED VIEW m (a, b, c) AS SELECT k, v FROM t")
    assert info.value.sqlstate == "42601"
    assert str(info.value).startswith("too many column names were specified")
    s.execute("CREATE MATERIALIZED VIEW m AS SELECT k FROM t")  # the name was not taken
