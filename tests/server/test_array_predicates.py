"""gen_random_uuid() and quantified comparisons over arrays (``x = ANY (array)``, ``<> ALL``, ``< SOME``) with
PostgreSQL's NULL rules, in SELECT and in an MV, and psycopg2's list parameters (sent as
ARRAY[...]), over pgwire."""

from __future__ import annotations

import time

import psycopg
import psycopg2
import pytest

ROWS = "(1, 1, ARRAY[1,2]), (2, NULL, ARRAY[1]), (3, 3, ARRAY[1,NULL]), (4, 4, NULL), (5, 5, ARRAY[]::int[]), (6, NULL, ARRAY[]::int[]), (7, 2, ARRAY[NULL,NULL]::int[])"  # noqa: E501

#: what PostgreSQL 15 returns per row k = 1..7 (ANY over no match with a NULL element is NULL; over
#: an empty array false even for a NULL x, ALL over it true; a NULL array gives NULL)
EXPECTED = {
    "x = ANY(a)": [True, None, None, None, False, False, None],
    "x <> ALL(a)": [False, None, None, None, True, True, None],
    "x < SOME(a)": [True, None, None, None, False, False, None],
    "x >= ALL(a)": [False, None, None, None, True, True, None],
    "x = ANY(ARRAY[1, 3])": [True, None, True, False, False, None, False],
    "x = ANY('{1,4}')": [True, None, False, True, False, None, False],
    "x = ANY(ARRAY[1, NULL])": [True, None, None, None, None, None, None],
    "x <> ALL(ARRAY[1, NULL])": [False, None, None, None, None, None, None],
}


@pytest.fixture(scope="module")
def conn(dsn: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute("CREATE TABLE arr_t (k int PRIMARY KEY, x int, a int[])")
    c.execute(f"INSERT INTO arr_t VALUES {ROWS}")
    yield c
    c.close()


@pytest.mark.parametrize("predicate", list(EXPECTED))
def test_quantified_comparison_null_semantics(conn: psycopg.Connection, predicate: str) -> None:
    got = conn.execute(f"SELECT {predicate} FROM arr_t ORDER BY k").fetchall()
    assert [r[0] for r in got] == EXPECTED[predicate]


def test_in_a_materialized_view(conn: psycopg.Connection) -> None:
    conn.execute("CREATE MATERIALIZED VIEW arr_mv AS SELECT k FROM arr_t WHERE x = ANY(a) OR x <> ALL(a)")
    conn.execute("INSERT INTO arr_t VALUES (8, 9, ARRAY[9]), (9, 9, ARRAY[1, 2])")
    conn.execute("FLUSH")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = conn.execute("SELECT k FROM arr_mv ORDER BY k").fetchall()
        if rows == [(1,), (5,), (6,), (8,), (9,)]:
            break
        time.sleep(0.1)
    assert rows == [(1,), (5,), (6,), (8,), (9,)]
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute("SELECT k FROM arr_t WHERE x < ANY (SELECT k FROM arr_t)")


def test_psycopg2_list_parameter(dsn: str, conn: psycopg.Connection) -> None:
    c = psycopg2.connect(dsn)
    try:
        cur = c.cursor()
        cur.execute("SELECT k FROM arr_t WHERE k = ANY(%s) ORDER BY k", ([2, 3, 42],))
        assert cur.fetchall() == [(2,), (3,)]
        cur.execute("SELECT k FROM arr_t WHERE k <> ALL(%s) AND k < 5 ORDER BY k", ([1, 2],))
        assert cur.fetchall() == [(3,), (4,)]
    finally:
        c.close()
    # psycopg 3 sends a list as a typed array parameter
    assert conn.execute("SELECT k FROM arr_t WHERE k = ANY(%s) ORDER BY k", ([4, 5],)).fetchall() == [
        (4,),
        (5,),
    ]


def test_gen_random_uuid(conn: psycopg.Connection) -> None:
    """Version-4 UUIDs (text: piestream has no uuid type), a new one per row; in an MV
    refused outside the select list (there it is stored per row: tests/sql/test_impure_mv_sql.py)."""
    import uuid

    rows = conn.execute("SELECT gen_random_uuid(), k FROM generate_series(1, 500) AS k").fetchall()
    ids = [uuid.UUID(u) for u, _ in rows]
    assert (
        len(set(ids)) == 500
        and {u.version for u in ids} == {4}
        and {u.variant for u in ids} == {uuid.RFC_4122}
    )
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="gen_random_uuid"):
        conn.execute("CREATE MATERIALIZED VIEW uuid_mv AS SELECT k FROM arr_t WHERE gen_random_uuid() > 'a'")
