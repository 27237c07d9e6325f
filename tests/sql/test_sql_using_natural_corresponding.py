"""NATURAL JOIN, JOIN ... USING with its merged column, and UNION [ALL] CORRESPONDING [BY]: the
issue's repros give PostgreSQL's rows and column names, and a fixed set of shapes equals DuckDB in
MVs maintained through rounds of DML and in batch SELECTs (the random generator has them too)."""

from __future__ import annotations

from typing import Any

import pytest
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.common.errors import PiestreamError
from piestream.server.session import Session


def result(s: Session, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    r = s.execute(sql)[-1]
    return r.names, sorted(r.rows, key=repr)


# -- the issue's repros, with PostgreSQL 15's answers ---------------------------------------------


def test_natural_join_repro_in_mv_and_batch(s: Session) -> None:
    s.execute("CREATE TABLE e (id int, name varchar, department_id int)")
    s.execute("CREATE TABLE d (department_name varchar, department_id int)")
    s.execute("CREATE MATERIALIZED VIEW m AS SELECT name, department_name FROM e NATURAL JOIN d")
    s.execute("INSERT INTO e VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 1)")
    s.execute("INSERT INTO d VALUES ('x', 1), ('y', 2)")
    want = [("a", "x"), ("b", "y"), ("c", "x")]
    assert result(s, "SELECT * FROM m") == (["name", "department_name"], want)
    assert result(s, "SELECT name, department_name FROM e NATURAL JOIN d") == (
        ["name", "department_name"],
        want,
    )
    # PostgreSQL: the common column once, first; then the rest of each side
    assert result(s, "SELECT * FROM e NATURAL JOIN d") == (
        ["department_id", "id", "name", "department_name"],
        [(1, 1, "a", "x"), (1, 3, "c", "x"), (2, 2, "b", "y")],
    )
    s.execute("DELETE FROM d WHERE department_id = 1")
    assert result(s, "SELECT * FROM m") == (["name", "department_name"], [("b", "y")])


GT = (
    "CREATE TABLE t (g int, k int, v int); CREATE TABLE u (k int, g bigint, w int);"
    "INSERT INTO t VALUES (1, 1, 10), (2, 2, 20), (NULL, 3, 30);"
    "INSERT INTO u VALUES (1, 1, 100), (5, 3, 300), (6, NULL, 600);"
)


@pytest.mark.parametrize(
    ("sql", "names", "rows"),
    [
        ("SELECT g, x.k, y.k FROM t x JOIN u y USING (g)", ["g", "k", "k"], [(1, 1, 1)]),
        (
            "SELECT * FROM t x FULL JOIN u y USING (g)",
            ["g", "k", "v", "k", "w"],
            [
                (1, 1, 10, 1, 100),
                (2, 2, 20, None, None),
                (3, None, None, 5, 300),
                (None, 3, 30, None, None),
                (None, None, None, 6, 600),
            ],
        ),
        (
            "SELECT g, x.g, y.g FROM t x RIGHT JOIN u y USING (g)",
            ["g", "g", "g"],
            [(1, 1, 1), (3, None, 3), (None, None, None)],
        ),
        (
            "SELECT * FROM t x NATURAL FULL JOIN u y",
            ["g", "k", "v", "w"],
            [(1, 1, 10, 100), (2, 2, 20, None), (3, 5, None, 300), (None, 3, 30, None), (None, 6, None, 600)],
        ),
        (
            "SELECT x.*, y.* FROM t x JOIN u y USING (g)",
            ["g", "k", "v", "k", "g", "w"],
            [(1, 1, 10, 1, 1, 100)],
        ),
        (
            "SELECT * FROM t x JOIN u y USING (k) JOIN u z USING (k)",
            ["k", "g", "v", "g", "w", "g", "w"],
            [(1, 1, 10, 1, 100, 1, 100)],
        ),
        (
            "SELECT * FROM t NATURAL JOIN (SELECT 1 AS zz) s",
            ["g", "k", "v", "zz"],
            [(1, 1, 10, 1), (2, 2, 20, 1), (None, 3, 30, 1)],
        ),
        ("SELECT * FROM (t x JOIN u y USING (g)) j", ["g", "k", "v", "k", "w"], [(1, 1, 10, 1, 100)]),
        (
            "SELECT j.* FROM (t x JOIN u y USING (g)) AS j(a, b)",
            ["a", "b", "v", "k", "w"],
            [(1, 1, 10, 1, 100)],
        ),
    ],
)
def test_using_and_natural_match_postgresql(s: Session, sql: str, names: list[str], rows: list[Any]) -> None:
    """Rows and column names as PostgreSQL 15 prints them for the same statements."""
    s.execute(GT)
    assert result(s, sql) == (names, sorted(rows, key=repr))


def test_using_merged_column_type_is_the_common_type(s: Session) -> None:
    s.execute(GT)
    r = s.execute("SELECT g FROM t x JOIN u y USING (g)")[-1]
    assert str(r.columns[0][1]) == "bigint"


@pytest.mark.parametrize(
    ("sql", "sqlstate", "message"),
    [
        (
            "SELECT * FROM t x JOIN u y USING (g, g)",
            "42701",
            'column name "g" appears more than once in USING',
        ),
        ("SELECT * FROM t x JOIN u y USING (zz)", "42703", "does not exist in left table"),
        ("SELECT * FROM u y JOIN (SELECT 1 AS g) x USING (w)", "42703", "does not exist in right table"),
        (
            "SELECT * FROM (t x CROSS JOIN u y) JOIN u z USING (k)",
            "42702",
            "appears more than once in left table",
        ),
        (
            "SELECT * FROM (SELECT 1 AS a) s NATURAL JOIN (SELECT 1 AS a, 2 AS a) r",
            "42702",
            'common column name "a" appears more than once in right table',
        ),
        (
            "SELECT * FROM t x JOIN (SELECT 'a'::text AS g) y USING (g)",
            "42804",
            "JOIN/USING types integer and text cannot be matched",
        ),
        ("SELECT g FROM t x JOIN u y ON x.g = y.g", "42702", 'column reference "g" is ambiguous'),
        ("SELECT x.v FROM (t x JOIN u y USING (g)) j", "42P01", 'missing FROM-clause entry for table "x"'),
        ("SELECT * FROM t LEFT JOIN u", "42601", "LEFT JOIN needs ON, USING or NATURAL"),
        ("SELECT * FROM t NATURAL CROSS JOIN u", "42601", "CROSS JOIN takes no join condition"),
        # CORRESPONDING (not in PostgreSQL; the SQL standard's rules, as RisingWave has them)
        ("SELECT k FROM t UNION CORRESPONDING SELECT w FROM u", "42601", "no column name in common"),
        ("SELECT * FROM t UNION CORRESPONDING BY (v) SELECT * FROM u", "42703", '"v" of CORRESPONDING BY'),
        (
            "SELECT * FROM t UNION CORRESPONDING BY (k, k) SELECT * FROM u",
            "42701",
            "more than once in CORRESPONDING",
        ),
        (
            "SELECT k, k FROM t UNION CORRESPONDING SELECT k FROM u",
            "42702",
            "more than once in the left query",
        ),
        ("SELECT k FROM t UNION BY NAME SELECT k FROM u", "0A000", "BY NAME"),
    ],
)
def test_errors_match_postgresql(s: Session, sql: str, sqlstate: str, message: str) -> None:
    s.execute(GT)
    with pytest.raises(PiestreamError) as info:
        s.execute(sql)
    assert info.value.sqlstate == sqlstate and message in str(info.value), info.value


def test_union_corresponding_repro_in_mv_and_batch(s: Session) -> None:
    s.execute("CREATE TABLE t1 (v1 int, v2 int, v4 int); CREATE TABLE t2 (v1 int, v3 int, v4 int)")
    q = "SELECT * FROM t1 UNION ALL CORRESPONDING SELECT * FROM t2"
    s.execute(f"CREATE MATERIALIZED VIEW mc AS {q}")
    s.execute(
        "CREATE MATERIALIZED VIEW mb AS SELECT * FROM t1 UNION CORRESPONDING BY (v4, v1) SELECT * FROM t2"
    )
    s.execute("INSERT INTO t1 VALUES (1, 2, 3); INSERT INTO t2 VALUES (1, 2, 3)")
    assert result(s, q) == (["v1", "v4"], [(1, 3), (1, 3)])
    assert result(s, "SELECT * FROM mc") == (["v1", "v4"], [(1, 3), (1, 3)])
    assert result(s, "SELECT * FROM mb") == (["v4", "v1"], [(3, 1)])
    s.execute("UPDATE t2 SET v4 = 7 WHERE v1 = 1")
    assert result(s, "SELECT * FROM mc") == (["v1", "v4"], [(1, 3), (1, 7)])
    assert result(s, "SELECT * FROM mb") == (["v4", "v1"], [(3, 1), (7, 1)])


# -- differential against DuckDB: MVs through DML rounds, and batch ----------------------------------

SCHEMA = [
    "CREATE TABLE t1 (id INT PRIMARY KEY, g INT, a VARCHAR, n INT)",
    "CREATE TABLE t2 (id2 INT PRIMARY KEY, g BIGINT, b VARCHAR, n INT)",
    "CREATE TABLE t3 (z INT, w VARCHAR)",
]

#: (name, piestream SQL, DuckDB SQL or None when the same); select lists are explicit where
#: DuckDB's `*` orders USING columns differently from PostgreSQL
CASES: list[tuple[str, str, str | None]] = [
    (
        "natural_inner",
        "SELECT * FROM t1 NATURAL JOIN t2",
        "SELECT g, n, id, a, id2, b FROM t1 NATURAL JOIN t2",
    ),
    (
        "natural_left",
        "SELECT * FROM t1 NATURAL LEFT JOIN t2",
        "SELECT g, n, id, a, id2, b FROM t1 NATURAL LEFT JOIN t2",
    ),
    (
        "natural_right",
        "SELECT * FROM t1 NATURAL RIGHT JOIN t2",
        "SELECT g, n, id, a, id2, b FROM t1 NATURAL RIGHT JOIN t2",
    ),
    (
        "natural_full",
        "SELECT * FROM t1 NATURAL FULL JOIN t2",
        "SELECT g, n, id, a, id2, b FROM t1 NATURAL FULL JOIN t2",
    ),
    ("natural_cross", "SELECT * FROM t1 NATURAL JOIN t3", "SELECT * FROM t1 CROSS JOIN t3"),
    (
        "natural_left_no_common",
        "SELECT * FROM t1 NATURAL LEFT JOIN t3",
        "SELECT * FROM t1 LEFT JOIN t3 ON TRUE",
    ),
    (
        "natural_subqueries",
        "SELECT * FROM (SELECT id, g FROM t1) x NATURAL JOIN (SELECT id2 AS id, g, b FROM t2) y",
        None,
    ),
    ("using_inner", "SELECT g, t1.id, t2.id2, a, b FROM t1 JOIN t2 USING (g)", None),
    ("using_left_two", "SELECT g, n, id, a, b FROM t1 LEFT JOIN t2 USING (g, n)", None),
    ("using_right", "SELECT g, t1.g AS lg, t2.g AS rg, id, b FROM t1 RIGHT JOIN t2 USING (g)", None),
    (  # `*` lists both n columns: renamed, since an MV's columns need distinct names
        "using_full",
        "SELECT * FROM (SELECT * FROM t1 FULL JOIN t2 USING (g)) AS j (g, id, a, n1, id2, b, n2)",
        "SELECT g, t1.id, a, t1.n, id2, b, t2.n FROM t1 FULL JOIN t2 USING (g)",
    ),
    (
        "using_full_agg",
        "SELECT g, count(*) AS c, count(id) AS ci, max(b) AS mb FROM t1 FULL JOIN t2 USING (g) GROUP BY g",
        None,
    ),
    (
        "using_chain",
        "SELECT g, t1.id, t2.id2, x.id AS xid FROM t1 JOIN t2 USING (g) FULL JOIN t1 AS x USING (g)",
        None,
    ),
    ("using_where", "SELECT g, a, b FROM t1 LEFT JOIN t2 USING (g) WHERE g > 1 OR g IS NULL", None),
    (
        "corresponding_all",
        "SELECT * FROM t1 UNION ALL CORRESPONDING SELECT * FROM t2",
        "SELECT g, n FROM t1 UNION ALL SELECT g, n FROM t2",
    ),
    (
        "corresponding_by",
        "SELECT id, g, a FROM t1 UNION CORRESPONDING BY (g) SELECT g, b FROM t2",
        "SELECT g FROM t1 UNION SELECT g FROM t2",
    ),
    (
        "corresponding_distinct",
        "SELECT n, g, id FROM t1 UNION CORRESPONDING SELECT g, n, b FROM t2",
        "SELECT n, g FROM t1 UNION SELECT n, g FROM t2",
    ),
]

ROUNDS = [
    [
        "INSERT INTO t1 VALUES (1, 1, 'a', 10), (2, 2, 'b', 20), (3, NULL, 'c', 30), (4, 1, NULL, 10)",
        "INSERT INTO t2 VALUES (1, 1, 'x', 10), (2, 3, 'y', 30), (3, NULL, 'z', NULL), (4, 1, 'w', 11)",
        "INSERT INTO t3 VALUES (7, 'p'), (8, NULL)",
    ],
    ["INSERT INTO t2 VALUES (5, 2, 'v', 20), (6, 2, 'u', 21)", "DELETE FROM t1 WHERE id = 4"],
    ["UPDATE t1 SET g = 3, n = 30 WHERE id = 3", "UPDATE t2 SET g = NULL WHERE id2 = 1"],
    ["DELETE FROM t2 WHERE g = 2", "INSERT INTO t1 VALUES (5, 2, 'e', 21), (6, NULL, NULL, NULL)"],
    ["DELETE FROM t3 WHERE z = 7", "UPDATE t1 SET a = 'q' WHERE g IS NULL", "DELETE FROM t1 WHERE id = 1"],
]


def test_shapes_equal_duckdb_in_mvs_and_batch(s: Session) -> None:
    duck = duck_connect()
    for stmt in SCHEMA:
        s.execute(stmt)
        duck.execute(stmt)
    for name, pg, _ in CASES:
        s.execute(f"CREATE MATERIALIZED VIEW {name} AS {pg}")

    nonempty: set[str] = set()

    def check(when: str) -> None:
        for name, pg, dk in CASES:
            want = norm_rows(duck.execute(dk or pg).fetchall())
            if want:
                nonempty.add(name)
            for what, got_rows in (
                ("MV", s.execute(f"SELECT * FROM {name}")[-1].rows),
                ("batch", s.execute(pg)[-1].rows),
            ):
                got = norm_rows(got_rows)
                assert got == want, f"{what} {name} {when}\n{pg}\n{diff_text(got, want)}"

    check("before any data")
    for i, round_ in enumerate(ROUNDS):
        for stmt in round_:
            s.execute(stmt)
            duck.execute(stmt)
        check(f"after round {i}")
    assert nonempty == {name for name, _, _ in CASES}  # the data reaches every shape
