"""CREATE INDEX used by batch queries: equality on the index key becomes a prefix of the index's
pk, comparisons on the next key column a range; answers equal DuckDB's over random changes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session

TABLE = "CREATE TABLE t (k INT PRIMARY KEY, g INT, s VARCHAR, d DOUBLE PRECISION)"
DUCK_TABLE = "CREATE TABLE t (k INT PRIMARY KEY, g INT, s VARCHAR, d DOUBLE)"
INDEXES = [
    "CREATE INDEX t_g ON t (g)",
    "CREATE INDEX t_s_g ON t (s DESC, g) INCLUDE (k)",
    "CREATE INDEX t_d ON t (d)",
]


def _lit(rng: random.Random, col: str) -> str:
    if col == "s":
        return rng.choice(["'a'", "'b'", "'c'", "'d'"])
    if col == "d":
        return f"{rng.uniform(-5, 5):.2f}"
    return str(rng.randint(-3, 12))


def _query(rng: random.Random) -> tuple[str, str]:
    """(SQL, the index EXPLAIN must show)."""
    shape = rng.randrange(6)
    if shape == 0:
        return f"SELECT * FROM t WHERE g = {_lit(rng, 'g')}", "table: t_g, columns: [k, g, s, d], prefix"
    if shape == 1:
        lo, hi = sorted([rng.randint(-3, 12), rng.randint(-3, 12)])
        return f"SELECT k, g FROM t WHERE g > {lo} AND g <= {hi}", "table: t_g"
    if shape == 2:
        return f"SELECT k, s FROM t WHERE s = {_lit(rng, 's')} AND g < {_lit(rng, 'g')}", "table: t_s_g"
    if shape == 3:
        return f"SELECT k, s, g FROM t WHERE s >= {_lit(rng, 's')}", "table: t_s_g"
    if shape == 4:
        return f"SELECT k, d FROM t WHERE {_lit(rng, 'd')} < d", "table: t_d"
    return f"SELECT count(*) FROM t WHERE g = {_lit(rng, 'g')} AND d IS NOT NULL", "table: t_g"


def _dml(rng: random.Random, keys: set[int]) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 8)):
        k = rng.randint(0, 30)
        g = rng.choice(["NULL", *map(str, range(-3, 12))])
        s = rng.choice(["NULL", "'a'", "'b'", "'c'", "'d'"])
        d = rng.choice(["NULL", f"{rng.uniform(-5, 5):.2f}"])
        if k in keys and rng.random() < 0.3:
            out.append(f"DELETE FROM t WHERE k = {k}")
            keys.discard(k)
        elif k in keys:
            out.append(f"UPDATE t SET g = {g}, s = {s}, d = {d} WHERE k = {k}")
        else:
            out.append(f"INSERT INTO t VALUES ({k}, {g}, {s}, {d})")
            keys.add(k)
    return out


def _explain(s: Session, q: str) -> str:
    return "\n".join(r[0] for r in s.execute_one(f"EXPLAIN {q}").rows)


@pytest.mark.parametrize("seed", range(3))
def test_index_scans_equal_duckdb(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    duck = duck_connect()
    duck.execute(DUCK_TABLE)
    keys: set[int] = set()
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute(TABLE)
        for epoch in range(8):
            if epoch == 2:  # indexes backfill over the rows so far
                for ddl in INDEXES:
                    s.execute(ddl)
            for stmt in _dml(rng, keys):
                s.execute(stmt)
                duck.execute(stmt)
            if epoch < 2:
                continue
            for _ in range(6):
                q, uses = _query(rng)
                assert uses in _explain(s, q), (q, _explain(s, q))
                got = norm_rows(s.execute_one(q).rows)
                want = norm_rows(duck.execute(q).fetchall())
                assert got == want, f"{q}\n{diff_text(got, want)}"


def test_index_not_used_when_it_lacks_a_column_or_the_table_key_is_better(s: Session) -> None:
    s.execute(TABLE)
    s.execute("CREATE INDEX t_s ON t (s) INCLUDE (g)")
    assert "table: t," in _explain(s, "SELECT d FROM t WHERE s = 'a'")  # d is not in the index
    assert "table: t_s" in _explain(s, "SELECT g FROM t WHERE s = 'a'")
    assert "point_get: [1]" in _explain(s, "SELECT g FROM t WHERE k = 1 AND s = 'a'")
