"""DISTINCT / GROUP BY without aggregates over an append-only input plans an AppendOnlyDedup
(keys only, append-only output); the MVs equal DuckDB after every epoch."""

from __future__ import annotations

import random
from pathlib import Path

from sqldiff import diff_text, duck_connect, norm_rows

from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session

MVS = {
    "d": "SELECT DISTINCT g, s FROM ev",
    "by": "SELECT g FROM ev GROUP BY g",
    # above the dedup the input is append-only: max keeps value state only
    "top": "SELECT s, max(g) AS m, count(*) AS n FROM (SELECT DISTINCT g, s FROM ev) x GROUP BY s",
}


def _explain(s: Session, sql: str) -> str:
    return "\n".join(r[0] for r in s.execute_one(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql}").rows)


def test_plans(s: Session) -> None:
    s.execute("CREATE TABLE ev (g INT, s VARCHAR, v BIGINT) APPEND ONLY")
    s.execute("CREATE TABLE rt (g INT, s VARCHAR, v BIGINT)")
    text = _explain(s, MVS["d"])
    assert "AppendOnlyDedup { dedup_cols: [g, s] }" in text and "HashAgg" not in text, text
    top = _explain(s, MVS["top"])
    assert "AppendOnlyDedup" in top and "_row_count" in top
    assert "_a0 DESC" not in top  # no materialized-input (extreme) table for max
    # a retractable input still needs row counts, and max its extreme table
    assert "AppendOnlyDedup" not in _explain(s, "SELECT DISTINCT g, s FROM rt")
    assert "_a0 DESC" in _explain(s, MVS["top"].replace("ev", "rt"))


def test_equals_duckdb_after_every_epoch(tmp_path: Path) -> None:
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    duck = duck_connect()
    duck.execute("CREATE TABLE ev (g INT, s VARCHAR, v BIGINT)")
    rng = random.Random(5)
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute("CREATE TABLE ev (g INT, s VARCHAR, v BIGINT) APPEND ONLY")
        for i in range(10):
            if i == 3:
                for name, q in MVS.items():
                    s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
            vals = []
            for _ in range(rng.randint(1, 25)):
                g = rng.choice(["NULL", *map(str, range(8))])
                st = rng.choice(["NULL", "'a'", "'b'", "'c'"])
                vals.append(f"({g}, {st}, {rng.randint(0, 99)})")
            stmt = "INSERT INTO ev VALUES " + ", ".join(vals)
            s.execute(stmt)
            duck.execute(stmt)
            s.execute("FLUSH")
            if i < 3:
                continue
            for name, q in MVS.items():
                got = norm_rows(s.execute_one(f"SELECT * FROM {name}").rows)
                want = norm_rows(duck.execute(q).fetchall())
                assert got == want, f"{name}:\n{diff_text(got, want)}"
