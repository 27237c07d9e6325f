"""Row and array literals: nested row constructors with field access, and empty arrays typed by
their context, in batch queries and in materialized views kept up to date through DML."""

from __future__ import annotations

import pytest

from piestream.common.errors import PiestreamError
from piestream.server.session import Session


def rows(s: Session, sql: str) -> list[tuple[object, ...]]:
    return list(s.execute(sql)[-1].rows)


def test_nested_row_literals_and_field_paths(s: Session) -> None:
    s.execute("CREATE TABLE st (a int PRIMARY KEY, b struct<x int, y struct<p int, q varchar>>)")
    s.execute(
        "CREATE MATERIALIZED VIEW m AS SELECT a, b.y.q AS q, st.b.x AS x, (b).y.p AS p, (b.x, a) AS r FROM st"
    )
    s.execute("INSERT INTO st VALUES (1, (1, (1, 'one'))), (2, ROW(2, ROW(20, 'two')))")
    s.execute("INSERT INTO st SELECT 3, (3, (30, 'three'))")
    assert rows(s, "SELECT a, b FROM st ORDER BY a") == [
        (1, {"x": 1, "y": {"p": 1, "q": "one"}}),
        (2, {"x": 2, "y": {"p": 20, "q": "two"}}),
        (3, {"x": 3, "y": {"p": 30, "q": "three"}}),
    ]
    want = [(1, "one", 1, 1, {"f1": 1, "f2": 1}), (2, "two", 2, 20, {"f1": 2, "f2": 2})]
    want.append((3, "three", 3, 30, {"f1": 3, "f2": 3}))
    batch = "SELECT a, b.y.q, st.b.x, (b).y.p, (b.x, a) FROM st ORDER BY a"
    assert rows(s, batch) == want
    assert rows(s, "SELECT * FROM m ORDER BY a") == want
    s.execute("UPDATE st SET b = (9, (90, 'nine')) WHERE a = 1")
    s.execute("DELETE FROM st WHERE b.y.q = 'two'")
    want = [(1, "nine", 9, 90, {"f1": 9, "f2": 1}), (3, "three", 3, 30, {"f1": 3, "f2": 3})]
    assert rows(s, batch) == want
    assert rows(s, "SELECT * FROM m ORDER BY a") == want
    # an implicit ROW constructor compares field by field
    assert rows(s, "SELECT a FROM st WHERE (b.x, a) = (3, 3)") == [(3,)]
    assert rows(s, "SELECT (1, 'a') = (1, 'a'), (1, 2) < (1, 3), (1, 'x')") == [
        (True, True, {"f1": 1, "f2": "x"})
    ]


@pytest.mark.parametrize(
    ("sql", "sqlstate", "message"),
    [
        ("SELECT b.nope FROM st", "42703", 'column "nope" not found in data type'),
        ("SELECT nope.b FROM st", "42P01", 'missing FROM-clause entry for table "nope"'),
        ("SELECT a.x FROM st", "42P01", 'missing FROM-clause entry for table "a"'),
        ("SELECT other.public.st.a FROM st", "0A000", "cross-database references are not implemented"),
        ("INSERT INTO st VALUES (1, (1, 2, 3))", "42846", ""),
    ],
)
def test_bad_field_paths_and_rows(s: Session, sql: str, sqlstate: str, message: str) -> None:
    s.execute("CREATE TABLE st (a int, b struct<x int, y struct<p int, q varchar>>)")
    with pytest.raises(PiestreamError) as info:
        s.execute(sql)
    assert info.value.sqlstate == sqlstate, info.value
    assert message in str(info.value)


def test_an_empty_array_literal_takes_its_type_from_context(s: Session) -> None:
    s.execute("CREATE TABLE ta (k int, a int[], v varchar[])")
    s.execute("CREATE MATERIALIZED VIEW m AS SELECT k, coalesce(a, '{}') AS a, cardinality(a) AS n FROM ta")
    s.execute("INSERT INTO ta VALUES (1, '{}', '{}'), (2, '{1,2}', '{a,\"b c\"}')")
    s.execute("INSERT INTO ta VALUES (3, ARRAY[]::int[], ARRAY[]::varchar[]), (4, NULL, NULL)")
    s.execute("INSERT INTO ta SELECT 5, '{}', '{}'")
    s.execute("UPDATE ta SET a = '{}' WHERE k = 2")
    assert rows(s, "SELECT k, a, v FROM ta ORDER BY k") == [
        (1, [], []),
        (2, [], ["a", "b c"]),
        (3, [], []),
        (4, None, None),
        (5, [], []),
    ]
    want = [(1, [], 0), (2, [], 0), (3, [], 0), (4, [], None), (5, [], 0)]
    assert rows(s, "SELECT * FROM m ORDER BY k") == want
    assert rows(s, "SELECT k, a = '{}', array_cat(a, '{}') FROM ta WHERE k < 3 ORDER BY k") == [
        (1, True, []),
        (2, True, []),
    ]
    assert rows(s, "SELECT '{}'::int[], ARRAY[]::text[], CASE WHEN true THEN '{}' ELSE ARRAY[1] END") == [
        ([], [], [])
    ]
    with pytest.raises(PiestreamError) as info:
        s.execute("SELECT ARRAY[]")
    assert info.value.sqlstate == "42P18"  # PostgreSQL: cannot determine type of empty array
