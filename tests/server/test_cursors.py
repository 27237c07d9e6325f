"""Query cursors over pgwire: DECLARE / FETCH / MOVE / CLOSE by hand, psycopg2's named cursors and
psycopg 3's server-side cursors; a cursor reads the snapshot of its DECLARE; without HOLD only in
a transaction block (25P01) and closed at its end, WITH HOLD surviving COMMIT."""

from __future__ import annotations

import psycopg
import psycopg2
import pytest


@pytest.fixture(scope="module")
def conn(dsn: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute("CREATE TABLE cur_t (k int PRIMARY KEY, v varchar)")
    c.execute("INSERT INTO cur_t SELECT g, 'v' || g::varchar FROM generate_series(1, 10) AS g")
    c.execute("CREATE MATERIALIZED VIEW cur_mv AS SELECT k % 3 AS m, count(*) AS n FROM cur_t GROUP BY k % 3")
    yield c
    c.close()


def test_fetch_move_close_in_a_block(conn: psycopg.Connection) -> None:
    cur = conn.cursor()
    with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
        cur.execute("DECLARE c CURSOR FOR SELECT k FROM cur_t")
    cur.execute("BEGIN")
    cur.execute("DECLARE c NO SCROLL CURSOR WITHOUT HOLD FOR SELECT k, v FROM cur_t ORDER BY k")
    assert cur.statusmessage == "DECLARE CURSOR"
    cur.execute("INSERT INTO cur_t VALUES (100, 'late')")  # after DECLARE: not in the cursor's snapshot
    cur.execute("FETCH 2 FROM c")
    assert cur.fetchall() == [(1, "v1"), (2, "v2")] and cur.statusmessage == "FETCH 2"
    cur.execute("FETCH NEXT IN c")
    assert cur.fetchall() == [(3, "v3")]
    cur.execute("MOVE FORWARD 4 FROM c")
    assert cur.statusmessage == "MOVE 4" and cur.description is None
    cur.execute("FETCH ALL FROM c")
    assert [r[0] for r in cur.fetchall()] == [8, 9, 10]
    cur.execute("FETCH 5 FROM c")
    assert cur.fetchall() == [] and cur.statusmessage == "FETCH 0"
    cur.execute("DECLARE d CURSOR FOR SELECT * FROM cur_t")
    cur.execute("CLOSE d")
    with pytest.raises(psycopg.errors.InvalidCursorName):
        cur.execute("FETCH 1 FROM d")
    cur.execute("ROLLBACK")
    with pytest.raises(psycopg.errors.InvalidCursorName):  # closed with its block
        cur.execute("FETCH 1 FROM c")


def test_with_hold_survives_commit_not_rollback(conn: psycopg.Connection) -> None:
    cur = conn.cursor()
    cur.execute("BEGIN")
    cur.execute("DECLARE kept CURSOR WITH HOLD FOR SELECT m, n FROM cur_mv ORDER BY m")
    cur.execute("DECLARE gone CURSOR FOR SELECT 1")
    cur.execute("COMMIT")
    cur.execute("FETCH ALL FROM kept")
    assert cur.fetchall() == [(0, 3), (1, 4), (2, 3)]
    with pytest.raises(psycopg.errors.InvalidCursorName):
        cur.execute("FETCH 1 FROM gone")
    cur.execute("BEGIN")
    cur.execute("DECLARE undone CURSOR WITH HOLD FOR SELECT 1")
    cur.execute("ROLLBACK")
    with pytest.raises(psycopg.errors.InvalidCursorName):
        cur.execute("FETCH 1 FROM undone")
    cur.execute("CLOSE ALL")
    with pytest.raises(psycopg.errors.InvalidCursorName):
        cur.execute("FETCH 1 FROM kept")


def test_binary_cursor_sends_binary_rows(conn: psycopg.Connection) -> None:
    cur = conn.cursor(binary=False)
    cur.execute("DECLARE b BINARY CURSOR WITH HOLD FOR SELECT k, v FROM cur_t WHERE k <= 2 ORDER BY k")
    res = conn.pgconn.exec_(b"FETCH ALL FROM b")
    assert [res.fformat(i) for i in range(res.nfields)] == [1, 1]
    assert [res.get_value(0, 0), res.get_value(1, 1)] == [b"\x00\x00\x00\x01", b"v2"]
    cur.execute("CLOSE b")


def test_psycopg2_named_cursor(dsn: str) -> None:
    c = psycopg2.connect(dsn)
    try:
        with c.cursor(name="named") as cur:
            cur.itersize = 4
            cur.execute("SELECT k, v FROM cur_t WHERE k <= %s ORDER BY k", (10,))
            assert cur.fetchone() == (1, "v1")
            assert cur.fetchmany(2) == [(2, "v2"), (3, "v3")]
            assert [r[0] for r in cur] == [4, 5, 6, 7, 8, 9, 10]
        c.commit()
        with c.cursor(name="held", withhold=True) as cur:
            cur.execute("SELECT m, n FROM cur_mv ORDER BY m")
            c.commit()  # WITH HOLD: still readable after the block's COMMIT
            assert cur.fetchall() == [(0, 3), (1, 4), (2, 3)]
    finally:
        c.close()


def test_psycopg3_server_side_cursor(dsn: str) -> None:
    with psycopg.connect(dsn) as c, c.cursor(name="srv") as cur:
        cur.execute("SELECT k, v FROM cur_t WHERE k > %s ORDER BY k", (7,))
        assert [d.name for d in cur.description] == ["k", "v"]
        assert cur.fetchone() == (8, "v8")
        assert cur.fetchall() == [(9, "v9"), (10, "v10")]
