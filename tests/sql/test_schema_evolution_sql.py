"""Schema evolution (issue 31) against DuckDB: MVs created before ALTER TABLE ADD COLUMN /
RENAME COLUMN / RENAME TO / DROP COLUMN / TRUNCATE keep running and equal their queries over
random DML before and after each change, across a restart of the data directory; new MVs and
batch SELECTs see the new columns, old rows read the column's default without a rewrite."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.common.errors import PiestreamError
from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session

CFG = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)

#: MV name -> query with {t} (the table's name) and {g} (its renamed column) placeholders; the
#: MVs are created before any ALTER.
MVS = {
    "m_star": "SELECT * FROM {t}",
    "m_agg": "SELECT {g}, count(*) AS n, sum(v) AS sv FROM {t} GROUP BY {g}",
    "m_filter": "SELECT k, v FROM {t} WHERE {g} > 2",
    "m_join": "SELECT a.k, b.k AS k2, a.v FROM {t} a JOIN u b ON a.{g} = b.g",
}
#: created after ADD COLUMN w: they read it
LATE_MVS = {
    "m_w": "SELECT w, count(*) AS n FROM {t} GROUP BY w",
    "m_w_star": "SELECT * FROM {t} WHERE w >= 5",
}


def _dml(rng: random.Random, table: str, cols: list[str], keys: set[int]) -> list[str]:
    out = []
    for _ in range(rng.randint(2, 8)):
        k = rng.randint(0, 25)
        vals = {c: rng.choice(["NULL", *map(str, range(-2, 9))]) for c in cols}
        if k in keys and rng.random() < 0.3:
            out.append(f"DELETE FROM {table} WHERE k = {k}")
            keys.discard(k)
        elif k in keys:
            c = rng.choice(cols)
            out.append(f"UPDATE {table} SET {c} = {vals[c]} WHERE k = {k}")
        else:
            names = ", ".join(["k", *cols])
            out.append(f"INSERT INTO {table} ({names}) VALUES ({k}, {', '.join(vals[c] for c in cols)})")
            keys.add(k)
    return out


class _Run:
    def __init__(self, s: Session, duck: object) -> None:
        self.s, self.duck = s, duck
        self.t, self.g = "t", "g"
        self.mvs: dict[str, str] = dict(MVS)

    def both(self, sql: str) -> None:
        self.s.execute(sql)
        self.duck.execute(sql)  # type: ignore[attr-defined]

    def check(self) -> None:
        for name, q in self.mvs.items():
            got = norm_rows(self.s.execute_one(f"SELECT * FROM {name}").rows)
            want = norm_rows(self.duck.execute(q.format(t=self.t, g=self.g)).fetchall())  # type: ignore[attr-defined]
            assert got == want, f"{name}: {q}\n{diff_text(got, want)}"
        got = norm_rows(self.s.execute_one(f"SELECT * FROM {self.t}").rows)
        want = norm_rows(self.duck.execute(f"SELECT * FROM {self.t}").fetchall())  # type: ignore[attr-defined]
        assert got == want, diff_text(got, want)


@pytest.mark.parametrize("seed", range(2))
def test_mvs_follow_their_queries_across_schema_changes_and_a_restart(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    duck = duck_connect()
    keys: set[int] = set()
    ukeys: set[int] = set()
    with Database(tmp_path / "d", config=CFG) as db:
        run = _Run(db.session(), duck)
        run.both("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT, x INT)")
        run.both("CREATE TABLE u (k INT PRIMARY KEY, g INT)")
        for stmt in _dml(rng, "t", ["g", "v", "x"], keys) + _dml(rng, "u", ["g"], ukeys):
            run.both(stmt)
        for name, q in MVS.items():
            run.s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q.format(t='t', g='g')}")
        run.check()
        # ADD COLUMN with a default: old rows read 5, m_star keeps its four columns
        run.both("ALTER TABLE t ADD COLUMN w INT DEFAULT 5")
        for name, q in LATE_MVS.items():
            run.s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q.format(t='t', g='g')}")
        run.mvs.update(LATE_MVS)
        run.mvs["m_star"] = "SELECT k, g, v, x FROM {t}"  # its columns at CREATE
        run.check()
        for stmt in _dml(rng, "t", ["g", "v", "w"], keys):
            run.both(stmt)
        run.check()
        # RENAME COLUMN and RENAME TO: MVs bound by id keep running
        run.both("ALTER TABLE t RENAME COLUMN g TO gg")
        run.g = "gg"
        run.mvs["m_star"] = "SELECT k, gg, v, x FROM {t}"
        run.both("ALTER TABLE t RENAME TO t2")
        run.t = "t2"
        for stmt in _dml(rng, "t2", ["gg", "v", "w"], keys) + _dml(rng, "u", ["g"], ukeys):
            run.both(stmt)
        run.check()
    # the data directory reopens with the altered catalog, plans and rows
    with Database(tmp_path / "d", config=CFG) as db:
        run.s = db.session()
        run.check()
        # DROP COLUMN x, which only the two SELECT * MVs read: refused, then CASCADE drops them
        with pytest.raises(PiestreamError) as err:
            run.s.execute("ALTER TABLE t2 DROP COLUMN x")
        assert err.value.sqlstate == "2BP01"
        assert "materialized view m_star depends on column x of table t2" in (err.value.detail or "")
        run.s.execute("ALTER TABLE t2 DROP COLUMN x CASCADE")
        duck.execute("ALTER TABLE t2 DROP COLUMN x")
        del run.mvs["m_star"], run.mvs["m_w_star"]
        names = {r.name for r in db.catalog.snapshot().relations()}
        assert not {"m_star", "m_w_star"} & names and {"m_agg", "m_filter", "m_join", "m_w"} <= names
        for stmt in _dml(rng, "t2", ["gg", "v", "w"], keys):
            run.both(stmt)
        run.check()
        # TRUNCATE: every delete reaches the MVs in one epoch
        before = db.barriers.committed_epoch
        run.both("TRUNCATE t2")
        assert db.barriers.committed_epoch > before
        run.check()
        for stmt in _dml(rng, "t2", ["gg", "v", "w"], set()):
            run.both(stmt)
        run.check()


def test_alter_source_add_column_reaches_new_jobs_only(tmp_path: Path) -> None:
    """A source stores no rows: a job planned after ADD COLUMN decodes the new field from the
    messages, one planned before keeps the columns it read (its SELECT * included)."""
    files = tmp_path / "in"
    files.mkdir()
    (files / "a.json").write_text("".join(f'{{"a": {i}, "b": {i * 10}}}\n' for i in range(5)))
    with Database(tmp_path / "d", config=CFG) as db:
        s = db.session()
        s.execute(
            f"CREATE SOURCE src (a INT) WITH (connector = 'file', path = '{files}') FORMAT PLAIN ENCODE JSON"
        )
        s.execute("CREATE MATERIALIZED VIEW before AS SELECT * FROM src")
        assert s.execute_one("ALTER SOURCE src ADD COLUMN b INT").tag == "ALTER SOURCE"
        s.execute("CREATE MATERIALIZED VIEW after AS SELECT * FROM src")
        for _ in range(3):
            s.execute("FLUSH")
        assert sorted(s.execute_one("SELECT * FROM before").rows) == [(i,) for i in range(5)]
        assert sorted(s.execute_one("SELECT * FROM after").rows) == [(i, i * 10) for i in range(5)]
        (ddl,) = s.execute_one("SHOW CREATE SOURCE src").rows
        assert ddl[1].startswith("CREATE SOURCE src (a INT, b INT) WITH")
        with pytest.raises(PiestreamError) as err:
            s.execute("ALTER SOURCE src ADD COLUMN c INT DEFAULT 1")
        assert err.value.sqlstate == "0A000"
