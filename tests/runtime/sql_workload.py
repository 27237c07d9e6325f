"""A SQL workload for end-to-end runtime tests, and its reference computed from scratch in DuckDB.

Tables `a` (pk, upserts), `b` (pk, the join's other side) and `log` (no pk: a hidden row id, so
a change applied twice shows up as a duplicate row), and MVs over them: a hash aggregation with
min/max on retractable input, a simple aggregation, an inner and a left outer join, a filter +
projection and an aggregation of `log`. Statement `i` of a workload is a pure function of
(seed, i), so a crashed process and the test that checks it agree on what was sent.

The reference replays the statements that were applied into a fresh DuckDB database (an upsert
INSERT becomes INSERT OR REPLACE there) and runs each MV's query: the MV must equal it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

TABLES = {
    "a": "CREATE TABLE a (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)",
    "b": "CREATE TABLE b (g BIGINT PRIMARY KEY, w BIGINT)",
    "log": "CREATE TABLE log (id BIGINT, g BIGINT, v BIGINT)",
}
MVS = {
    "agg": "SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM a GROUP BY g",
    "tot": "SELECT count(*) AS n, sum(v) AS s FROM a",
    "j": "SELECT a.k, a.v, b.w FROM a JOIN b ON a.g = b.g",
    "lj": "SELECT a.k, b.w FROM a LEFT JOIN b ON a.g = b.g",
    "f": "SELECT k, v * 2 AS v2 FROM a WHERE v > 10",
    "lagg": "SELECT g, count(*) AS n, sum(v) AS s FROM log GROUP BY g",
}
DUCK_TABLES = {
    "a": TABLES["a"],
    "b": TABLES["b"],
    "log": "CREATE TABLE log (id BIGINT, g BIGINT, v BIGINT)",
}

Statement = tuple[str, str]  # (piestream SQL, DuckDB SQL)


def schema_statements() -> list[str]:
    """DDL creating the workload's tables and MVs (MVs after a little data: they backfill)."""
    return [*TABLES.values()]


def mv_statements(names: Iterable[str] | None = None) -> list[str]:
    return [f"CREATE MATERIALIZED VIEW {n} AS {MVS[n]}" for n in (MVS if names is None else names)]


def statement(seed: int, i: int) -> Statement:
    """The i-th DML statement of workload `seed`."""
    r = random.Random(f"{seed}:{i}")
    kind = r.choices(
        ["ins_a", "upd_v", "upd_g", "del_v", "del_k", "ups_b", "del_b", "ins_log", "del_log"],
        weights=[5, 2, 1, 1, 1, 2, 1, 3, 1],
    )[0]
    if kind == "ins_a":
        keys = r.sample(range(60), r.randint(1, 6))
        vals = ", ".join(f"({k}, {r.randint(0, 7)}, {r.randint(-20, 60)})" for k in keys)
        return f"INSERT INTO a VALUES {vals}", f"INSERT OR REPLACE INTO a VALUES {vals}"
    if kind == "upd_v":
        sql = f"UPDATE a SET v = v + {r.randint(-15, 15)} WHERE g = {r.randint(0, 7)}"
        return sql, sql
    if kind == "upd_g":
        sql = f"UPDATE a SET g = {r.randint(0, 7)} WHERE k % 7 = {r.randint(0, 6)}"
        return sql, sql
    if kind == "del_v":
        sql = f"DELETE FROM a WHERE v < {r.randint(-20, 5)}"
        return sql, sql
    if kind == "del_k":
        sql = f"DELETE FROM a WHERE k = {r.randrange(60)}"
        return sql, sql
    if kind == "ups_b":
        vals = f"({r.randint(0, 7)}, {r.randint(0, 1000)})"
        return f"INSERT INTO b VALUES {vals}", f"INSERT OR REPLACE INTO b VALUES {vals}"
    if kind == "del_b":
        sql = f"DELETE FROM b WHERE g = {r.randint(0, 7)}"
        return sql, sql
    if kind == "ins_log":
        vals = ", ".join(
            f"({i * 10 + j}, {r.randint(0, 4)}, {r.randint(0, 100)})" for j in range(r.randint(1, 5))
        )
        sql = f"INSERT INTO log VALUES {vals}"
        return sql, sql
    sql = f"DELETE FROM log WHERE id % 9 = {r.randint(0, 8)}"
    return sql, sql


def normalize(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows as comparable tuples (NUMERIC sums from piestream and HUGEINT sums from DuckDB agree)."""
    out = []
    for row in rows:
        t = []
        for x in row:
            if isinstance(x, Decimal):
                x = int(x) if x == x.to_integral_value() else float(x)
            t.append(x)
        out.append(tuple(t))
    return sorted(out, key=lambda t: tuple((v is None, v if v is not None else 0) for v in t))


class Reference:
    """DuckDB over exactly the statements applied so far."""

    def __init__(self, duck_statements: Iterable[str] = ()) -> None:
        import duckdb

        self.con = duckdb.connect()
        for ddl in DUCK_TABLES.values():
            self.con.execute(ddl)
        for s in duck_statements:
            self.apply(s)

    def apply(self, duck_sql: str) -> None:
        self.con.execute(duck_sql)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return normalize(self.con.execute(sql).fetchall())

    def table(self, name: str) -> list[tuple[Any, ...]]:
        return self.query(f"SELECT * FROM {name}")

    def mv(self, name: str, query: str | None = None) -> list[tuple[Any, ...]]:
        return self.query(query or MVS[name])

    def close(self) -> None:
        self.con.close()


def piestream_rows(session: Any, name: str) -> list[tuple[Any, ...]]:
    return normalize(session.execute(f"SELECT * FROM {name}")[0].rows)


def mismatches(
    session: Any, ref: Reference, extra_mvs: dict[str, str] | None = None, mvs: Iterable[str] | None = None
) -> dict[str, tuple[list, list]]:
    """{relation: (piestream rows, reference rows)} for every table and MV that differs: the
    workload's MVs (or those named in `mvs`), and `extra_mvs` created later (name -> query)."""
    queries = {n: MVS[n] for n in (MVS if mvs is None else mvs)}
    queries.update(extra_mvs or {})
    bad = {}
    for name in [*TABLES, *queries]:
        got = piestream_rows(session, name)
        want = ref.table(name) if name in TABLES else ref.mv(name, queries[name])
        if got != want:
            bad[name] = (got, want)
    return bad
