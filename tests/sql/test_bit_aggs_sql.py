"""PostgreSQL's bit_and / bit_or / bit_xor over smallint, integer and bigint, against DuckDB:
materialized views equal the query at every committed epoch under random INSERT / UPDATE / DELETE
(negative and 63-bit values, NULL inputs, emptied groups, FILTER, DISTINCT, a ROLLUP and a global
aggregate over a table that empties), across a restart, batch SELECT too; other argument types are
42883."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from paired import DmlGen, Paired, open_db

from piestream.common.errors import PiestreamError
from piestream.server.database import Database

QUERIES = {
    "bk": "SELECT k, bit_and(s) AS a_s, bit_or(s) AS o_s, bit_xor(s) AS x_s, bit_and(x) AS a_x, "
    "bit_or(x) AS o_x, bit_xor(x) AS x_x, bit_and(b) AS a_b, bit_or(b) AS o_b, bit_xor(b) AS x_b, "
    "count(*) AS c FROM t GROUP BY k",
    "bf": "SELECT k, bit_xor(DISTINCT s) AS xd, bit_or(x) FILTER (WHERE b > 0) AS of, "
    "bit_and(b) FILTER (WHERE s < 100) AS af FROM t GROUP BY k",
    "br": "SELECT k, bit_or(x) AS o, bit_xor(b) AS x FROM t GROUP BY ROLLUP (k)",
    "bg": "SELECT bit_and(x) AS a, bit_or(s) AS o, bit_xor(b) AS x FROM t",
}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = open_db(tmp_path / "db")
    yield d
    d.close()


def _dml(rng: random.Random) -> DmlGen:
    def maybe(f):  # type: ignore[no-untyped-def]
        return lambda: None if rng.random() < 0.1 else f()

    columns = {
        "k": maybe(lambda: rng.randint(0, 3)),
        "s": maybe(lambda: rng.randint(-300, 300)),
        "x": maybe(lambda: rng.getrandbits(31) - rng.choice([0, 2**30])),
        "b": maybe(lambda: rng.randint(-(2**63), 2**63 - 1)),
    }
    return DmlGen(rng, "t", columns, updates=("s", "x", "b", "k", "x = x + 1"))


def test_bit_aggregates_equal_duckdb_at_every_epoch(tmp_path: Path) -> None:
    both = Paired(tmp_path / "db")
    try:
        dml = _dml(random.Random(32))
        both.start("CREATE TABLE t (id INT PRIMARY KEY, k INT, s SMALLINT, x INT, b BIGINT)", dml, QUERIES)
        for step in range(30):
            if step == 12:
                both.restart()
            sql = {20: "DELETE FROM t WHERE k = 1", 26: "DELETE FROM t"}.get(step) or dml.statement()
            if step == 26:
                dml.live.clear()
            both.run(sql)
            for name, q in QUERIES.items():
                want = both.duck_rows(q)
                assert both.rows(f"SELECT * FROM {name}") == want, (name, step, sql)
                if step % 6 == 5 or step == 26:
                    assert both.rows(q) == want, (name, step)
            if step == 26:  # the table emptied: no groups, and NULLs from the global aggregate
                assert both.rows("SELECT * FROM bg") == {(None, None, None): 1}
                assert not both.rows("SELECT * FROM bk")
    finally:
        both.close()


def test_bit_aggregate_types_and_errors(db: Database) -> None:
    r = db.execute(
        "SELECT bit_and(x), bit_or(x), bit_xor(x), bit_and(x::smallint), bit_or(x::bigint) "
        "FROM (VALUES (12), (10), (NULL), (14)) v(x)"
    )[0]
    assert [c for c, _ in r.columns] == ["bit_and", "bit_or", "bit_xor", "bit_and", "bit_or"]
    assert [str(t) for _, t in r.columns] == ["integer"] * 3 + ["smallint", "bigint"]
    assert r.rows == [(8, 14, 8, 8, 14)]  # 12 & 10 & 14, 12 | 10 | 14, 12 ^ 10 ^ 14
    assert db.execute("SELECT bit_xor(x) FROM (VALUES (NULL::int)) v(x)")[0].rows == [(None,)]
    shorts = "(VALUES (-5::smallint), (7::smallint), ('-32768'::smallint)) v(x)"  # 0xFFFB 0x0007 0x8000
    assert db.execute(f"SELECT bit_and(x), bit_or(x), bit_xor(x) FROM {shorts}")[0].rows == [(0, -1, 32764)]
    # in an MV the state is a count per bit (value state), not the group's materialized input
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, s SMALLINT, x INT, b BIGINT)")
    plan = [r[0] for r in db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW m AS {QUERIES['bk']}")[0].rows]
    tables = [line for line in plan if line.startswith("Table ")]
    assert len(tables) == 3, tables  # the MV, the agg state, the backfill progress
    state = next(line for line in tables if "_bit_and_0_count" in line)
    assert "_bit_and_0_bit15," in state and "_bit_and_0_bit16" not in state and "_bit_xor_8_bit63" in state
    for sql, arg in [
        ("SELECT bit_and(x) FROM (VALUES ('a')) v(x)", "text"),
        ("SELECT bit_or(x) FROM (VALUES (1.5)) v(x)", "numeric"),
        ("SELECT bit_xor(x) FROM (VALUES (true)) v(x)", "boolean"),
    ]:
        with pytest.raises(PiestreamError, match=rf"bit_\w+\({arg}\) does not exist") as e:
            db.execute(sql)
        assert e.value.sqlstate == "42883", sql
    with pytest.raises(PiestreamError, match="bit_or as a window function is not supported") as e:
        db.execute("SELECT bit_or(x) OVER (ORDER BY x) FROM (VALUES (1)) v(x)")
    assert e.value.sqlstate == "0A000"
