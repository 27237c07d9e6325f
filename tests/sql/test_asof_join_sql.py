"""ASOF [LEFT] JOIN (RisingWave's syntax and semantics) against DuckDB's ASOF JOIN: materialized
views equal the query at every committed epoch under random INSERT / UPDATE / DELETE on both
sides (ties in the inequality column, NULL keys and NULL times included), batch SELECT equals it
too, and the refused forms name themselves with 0A000.

Which of several tied right rows (same key and time) is chosen is unspecified in both systems:
the comparison is on the left row and the right row's key and time, and each chosen right row is
checked to be a live row with that key and time."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from paired import DmlGen, Paired, open_db, plan_nodes

from piestream.common.errors import FeatureNotSupported
from piestream.plan.asof_join import AsOfJoinNode
from piestream.server.database import Database

#: name -> (join words, inequality); every MV selects a's row, b's key / time and b's id
CASES = {
    "j_ge": ("ASOF JOIN", "a.t >= b.t"),
    "j_left_gt": ("ASOF LEFT JOIN", "a.t > b.t"),
    "j_left_le": ("ASOF LEFT JOIN", "b.t >= a.t"),  # written the other way round: a.t <= b.t
    "j_lt": ("ASOF JOIN", "a.t < b.t"),
}


def query(name: str, with_id: bool) -> str:
    words, ineq = CASES[name]
    extra = ", b.id AS bid" if with_id else ""
    return f"SELECT a.id, a.k, a.t, a.v, b.k AS bk, b.t AS bt{extra} FROM a {words} b ON a.k = b.k AND {ineq}"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = open_db(tmp_path / "db")
    yield d
    d.close()


def _dml(rng: random.Random, table: str, ids: Iterator[int]) -> DmlGen:
    def key() -> int | None:
        return None if rng.random() < 0.08 else rng.randint(0, 3)

    def t() -> int | None:
        return None if rng.random() < 0.05 else rng.randint(0, 12)  # a small range: many ties

    columns = {"k": key, "t": t, "v": lambda: rng.randint(0, 99)}
    return DmlGen(rng, table, columns, updates=("t", "k", "t = t + 1", "v"), ids=ids)


def _check(both: Paired, name: str, step: int) -> None:
    got = both.db.execute(f"SELECT * FROM {name}")[0].rows
    want = Counter(both.duck.execute(query(name, with_id=False)).fetchall())
    assert Counter(r[:-1] for r in got) == want, (name, step)
    # a chosen right row is a live row of b with the key and time shown
    b = {i: (k, t) for i, k, t in both.duck.execute("SELECT id, k, t FROM b").fetchall()}
    for r in got:
        if r[-1] is not None:
            assert b[r[-1]] == (r[4], r[5]), (name, step, r)


@pytest.mark.parametrize("seed", [32, 7])
def test_asof_joins_equal_duckdb_at_every_epoch(tmp_path: Path, seed: int) -> None:
    """Every MV equals DuckDB after every statement, also after a restart halfway (the join's
    state is read back from storage)."""
    both = Paired(tmp_path / "db")
    try:
        _differential(both, seed)
    finally:
        both.close()


def _differential(both: Paired, seed: int) -> None:
    db = both.db
    rng = random.Random(seed)
    ids = itertools.count()
    dml = {t: _dml(rng, t, ids) for t in ("a", "b")}
    for t in ("a", "b"):
        both.run(f"CREATE TABLE {t} (id INT PRIMARY KEY, k INT, t INT, v INT)")
    for _ in range(4):  # rows before the MVs: they are backfilled
        for t in ("a", "b"):
            both.run(dml[t].statement())
    for name in CASES:
        db.execute(f"CREATE MATERIALIZED VIEW {name} AS {query(name, with_id=True)}")
    for step in range(40):
        if step == 20:
            db = both.restart()
        table = rng.choice(["a", "b", "b"])
        both.run(dml[table].statement())
        for name in CASES:
            _check(both, name, step)
        if step % 10 == 9:  # batch SELECT of the same query
            for name in CASES:
                want = both.duck_rows(query(name, with_id=False))
                assert both.rows(query(name, with_id=False)) == want, name
    sizes = {n: len(db.execute(f"SELECT * FROM {n}")[0].rows) for n in CASES}
    assert all(s > 3 for s in sizes.values()), sizes
    nulls = db.execute("SELECT count(*) FROM j_left_gt WHERE bid IS NULL")[0].rows[0][0]
    assert nulls > 0  # unmatched left rows are padded
    assert any(isinstance(n, AsOfJoinNode) for n in plan_nodes(db, "j_ge"))


def test_explain_and_refusals(db: Database) -> None:
    db.execute("CREATE TABLE a (id INT PRIMARY KEY, k INT, t INT, v INT)")
    db.execute("CREATE TABLE b (id INT PRIMARY KEY, k INT, t INT, v VARCHAR)")
    lines = [
        r[0] for r in db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {query('j_left_le', True)}")[0].rows
    ]
    assert any("AsOfJoin { type: LeftOuter, predicate: $1 = $5 AND $2 <= $6 }" in line for line in lines)
    lines = [r[0] for r in db.execute(f"EXPLAIN {query('j_ge', False)}")[0].rows]
    assert any("BatchAsOfJoin { type: inner, on: $1 = $5 AND $2 >= $6 }" in line for line in lines)
    refused = [
        ("SELECT * FROM a ASOF JOIN b ON a.t >= b.t", "AsOf join requires at least 1 equal condition"),
        ("SELECT * FROM a ASOF JOIN b ON a.k = b.k", "AsOf join requires exactly 1 inequality condition"),
        (
            "SELECT * FROM a ASOF JOIN b ON a.k = b.k AND a.t >= b.t AND a.id <= b.id",
            "AsOf join requires exactly 1 inequality condition",
        ),
        ("SELECT * FROM a ASOF JOIN b ON a.k = b.k AND a.t >= b.t AND b.v = 'x'", "ASOF JOIN equality"),
        ("SELECT * FROM a ASOF JOIN b ON a.k = b.k AND a.t + 1 >= b.t", "ASOF JOIN inequality"),
        ("SELECT * FROM a ASOF JOIN b ON a.k = b.k AND (a.t >= b.t OR a.v > 0)", "ASOF JOIN condition"),
        ("SELECT * FROM a ASOF JOIN b USING (k)", "only ASOF JOIN ... ON and ASOF LEFT JOIN ... ON"),
        ("SELECT * FROM a ASOF FULL JOIN b ON a.k = b.k AND a.t >= b.t", "only ASOF JOIN ... ON"),
    ]
    for sql, message in refused:
        for stmt in (sql, f"CREATE MATERIALIZED VIEW x AS {sql}"):
            with pytest.raises(FeatureNotSupported, match=message):
                db.execute(stmt)
