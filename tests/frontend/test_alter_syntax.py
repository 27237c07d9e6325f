"""ALTER / TRUNCATE / COMMENT ON parse into their statements, and the definition edits ALTER makes
change only what they must (names as identifiers, not as substrings, CTEs and aliases left)."""

from __future__ import annotations

from piestream.frontend import definition_text as dt
from piestream.frontend.parser import ast, parse_one


def test_statements() -> None:
    add = parse_one("ALTER TABLE IF EXISTS s.t ADD COLUMN IF NOT EXISTS c numeric(10, 2) DEFAULT 1.5")
    assert isinstance(add, ast.AlterAddColumn)
    assert (add.kind, add.name, add.name.schema, add.if_exists, add.if_not_exists) == (
        "table",
        "t",
        "s",
        True,
        True,
    )
    assert add.column.name == "c" and add.column_text == "c numeric(10, 2) DEFAULT 1.5"
    assert parse_one("ALTER TABLE t ADD c int").column.name == "c"  # type: ignore[attr-defined]
    assert parse_one("ALTER TABLE t DROP COLUMN IF EXISTS c CASCADE") == ast.AlterDropColumn(
        "t", "c", False, True, True
    )
    assert parse_one("ALTER TABLE t DROP c RESTRICT") == ast.AlterDropColumn("t", "c")
    assert parse_one('ALTER TABLE t RENAME COLUMN a TO "B"') == ast.AlterRename("table", "t", "B", "a")
    assert parse_one("ALTER TABLE t RENAME a TO b") == ast.AlterRename("table", "t", "b", "a")
    for kind in ("materialized view", "view", "source", "sink", "index"):
        assert parse_one(f"ALTER {kind} x RENAME TO y") == ast.AlterRename(kind, "x", "y")
    assert parse_one("ALTER MATERIALIZED VIEW m REBUILD") == ast.RebuildJob("materialized view", "m")
    for kind in ("table", "materialized view", "sink", "source"):
        assert parse_one(f"ALTER {kind} x SET PARALLELISM = 4") == ast.AlterParallelism(kind, "x", "4")
    assert parse_one("ALTER TABLE x SET PARALLELISM TO adaptive") == ast.AlterParallelism(
        "table", "x", "adaptive"
    )
    assert parse_one("ALTER SINK x SET PARALLELISM = DEFAULT") == ast.AlterParallelism("sink", "x", "default")
    assert parse_one("TRUNCATE TABLE a, s.b") == ast.Truncate(("a", "b"))
    assert parse_one("COMMENT ON COLUMN s.t.c IS 'x'") == ast.CommentOn("column", "t", "c", "x")
    assert parse_one("COMMENT ON MATERIALIZED VIEW m IS NULL") == ast.CommentOn(
        "materialized view", "m", None, None
    )


def test_table_definition_edits() -> None:
    d = 'CREATE TABLE t (k INT PRIMARY KEY, v NUMERIC(10, 2), "Odd" INT) APPEND ONLY'
    assert dt.add_column_text(d, "w INT DEFAULT 7") == (
        'CREATE TABLE t (k INT PRIMARY KEY, v NUMERIC(10, 2), "Odd" INT, w INT DEFAULT 7) APPEND ONLY'
    )
    assert dt.add_column_text("CREATE TABLE t AS SELECT 1 AS a", "w INT") is None
    assert dt.rename_column_text(d, "v", "vv") == (
        'CREATE TABLE t (k INT PRIMARY KEY, vv NUMERIC(10, 2), "Odd" INT) APPEND ONLY'
    )
    assert dt.rename_column_text("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a))", "a", "x") == (
        "CREATE TABLE t (x INT, b INT, PRIMARY KEY (x))"
    )
    assert dt.drop_column_text(d, "v") == 'CREATE TABLE t (k INT PRIMARY KEY, "Odd" INT) APPEND ONLY'
    assert dt.drop_column_text(d, "Odd") == "CREATE TABLE t (k INT PRIMARY KEY, v NUMERIC(10, 2)) APPEND ONLY"
    assert dt.drop_column_text("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a))", "a") is None
    assert dt.rename_object_text("CREATE MATERIALIZED VIEW IF NOT EXISTS s.m AS SELECT 1", "n") == (
        "CREATE MATERIALIZED VIEW IF NOT EXISTS s.n AS SELECT 1"
    )
    for created in (
        "SOURCE s (a INT) WITH (connector = 'x')",
        "SINK s FROM t WITH (connector = 'x')",
        "INDEX s ON t (a)",
    ):
        assert dt.rename_object_text(f"CREATE {created}", "n") == f"CREATE {created.replace('s', 'n', 1)}"
    assert dt.rename_object_text("SELECT a FROM t", "n") == "SELECT a FROM t"  # a view's query


def test_query_reference_edits() -> None:
    q = "SELECT t.a, b FROM t JOIN u ON t.a = u.a WHERE t.b > 1"
    assert dt.rename_references_text(q, "t", "public", "t2") == (
        "SELECT t2.a, b FROM t2 JOIN u ON t2.a = u.a WHERE t2.b > 1"
    )
    # a CTE named like the table, and an alias: left alone
    cte = "WITH t AS (SELECT * FROM s.t) SELECT t.a FROM t"
    assert dt.rename_references_text(cte, "t", "s", "x") == "WITH t AS (SELECT * FROM s.x) SELECT t.a FROM t"
    assert dt.rename_references_text('SELECT "T".a FROM "T"', "T", "public", "z") == "SELECT z.a FROM z"
    mv = "CREATE MATERIALIZED VIEW m AS SELECT a FROM t"
    assert dt.rename_references_in(mv, "t", "public", "n") == "CREATE MATERIALIZED VIEW m AS SELECT a FROM n"
    assert dt.rename_references_in("CREATE INDEX i ON t (a)", "t", "public", "n") == "CREATE INDEX i ON n (a)"
    cols = "SELECT a, x.a AS a2 FROM t AS x WHERE a > 0"
    assert dt.rename_column_references_text(cols, "t", "a", "b", set()) == (
        "SELECT b, x.b AS a2 FROM t AS x WHERE b > 0"
    )
    # another relation of the query has a column of that name: ambiguous to the rule, refused
    assert dt.rename_column_references_text("SELECT a FROM t, u", "t", "a", "b", {"a"}) is None
    assert dt.references_column("SELECT k FROM t", "a") is False
    assert dt.references_column("SELECT * FROM t", "a") is True
