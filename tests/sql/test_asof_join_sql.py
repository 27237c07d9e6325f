"""ASOF [LEFT] JOIN (RisingWave's syntax and semantics) against DuckDB's ASOF JOIN: materialized
views equal the query at every committed epoch under random INSERT / UPDATE / DELETE on both
sides (ties in the inequality column, NULL keys and NULL times included), batch SELECT equals it
too, and the refused forms name themselves with 0A000.

Which of several tied right rows (same key and time) is chosen is unspecified in both systems:
the comparison is on the left row and the right row's key and time, and each chosen right row is
checked to be a live row with that key and time."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from piestream.common.errors import FeatureNotSupported
from piestream.plan.asof_join import AsOfJoinNode
from piestream.server.database import Database, DatabaseConfig

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


def _open(path: Path) -> Database:
    cfg = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2, background_compaction=False)
    return Database(path, config=cfg)  # barriers run: a DML statement returns once committed


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = _open(tmp_path / "db")
    yield d
    d.close()


def _val(x: int | None) -> str:
    return "NULL" if x is None else str(x)


class Both:
    """The same statements on piestream and DuckDB."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.duck = duckdb.connect()

    def run(self, sql: str) -> None:
        self.db.execute(sql)
        self.duck.execute(sql)


def _statement(rng: random.Random, table: str, ids: set[int], next_id: list[int]) -> str:
    def key() -> int | None:
        return None if rng.random() < 0.08 else rng.randint(0, 3)

    def t() -> int | None:
        return None if rng.random() < 0.05 else rng.randint(0, 12)  # a small range: many ties

    r = rng.random()
    if r < 0.5 or len(ids) < 3:
        rows = []
        for _ in range(rng.randint(1, 4)):
            ids.add(next_id[0])
            rows.append(f"({next_id[0]}, {_val(key())}, {_val(t())}, {rng.randint(0, 99)})")
            next_id[0] += 1
        return f"INSERT INTO {table} VALUES {', '.join(rows)}"
    picked = rng.sample(sorted(ids), min(len(ids), rng.randint(1, 3)))
    where = f"id IN ({', '.join(map(str, picked))})"
    if r < 0.8:
        sets = rng.choice(
            [f"t = {_val(t())}", f"k = {_val(key())}", "t = t + 1", f"v = {rng.randint(0, 99)}"]
        )
        return f"UPDATE {table} SET {sets} WHERE {where}"
    ids.difference_update(picked)
    return f"DELETE FROM {table} WHERE {where}"


def _check(both: Both, name: str, step: int) -> None:
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
    both = Both(_open(tmp_path / "db"))
    try:
        _differential(both, tmp_path / "db", seed)
    finally:
        both.db.close()


def _differential(both: Both, path: Path, seed: int) -> None:
    db = both.db
    rng = random.Random(seed)
    for t in ("a", "b"):
        both.run(f"CREATE TABLE {t} (id INT PRIMARY KEY, k INT, t INT, v INT)")
    ids: dict[str, set[int]] = {"a": set(), "b": set()}
    next_id = [0]
    for _ in range(4):  # rows before the MVs: they are backfilled
        for t in ("a", "b"):
            both.run(_statement(rng, t, ids[t], next_id))
    for name in CASES:
        db.execute(f"CREATE MATERIALIZED VIEW {name} AS {query(name, with_id=True)}")
    for step in range(40):
        if step == 20:
            db.close()
            db = both.db = _open(path)
        table = rng.choice(["a", "b", "b"])
        both.run(_statement(rng, table, ids[table], next_id))
        for name in CASES:
            _check(both, name, step)
        if step % 10 == 9:  # batch SELECT of the same query
            for name in CASES:
                got = Counter(db.execute(query(name, with_id=False))[0].rows)
                assert got == Counter(both.duck.execute(query(name, with_id=False)).fetchall()), name
    sizes = {n: len(db.execute(f"SELECT * FROM {n}")[0].rows) for n in CASES}
    assert all(s > 3 for s in sizes.values()), sizes
    nulls = db.execute("SELECT count(*) FROM j_left_gt WHERE bid IS NULL")[0].rows[0][0]
    assert nulls > 0  # unmatched left rows are padded
    rel = db.catalog.get("j_ge")
    assert rel is not None and rel.job_id is not None
    nodes = [n for f in db.catalog.job_fragments(rel.job_id) for n in f.root.walk()]
    assert any(isinstance(n, AsOfJoinNode) for n in nodes)


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
