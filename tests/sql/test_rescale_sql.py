"""ALTER ... SET PARALLELISM: MVs (agg, join, top-n) equal their DuckDB query after DML before
and after rescaling up and down, across a restart; rw_fragments shows the parallelism; what
cannot be rescaled safely is refused with 0A000. ADAPTIVE (the default for new jobs) follows the
runner's task slots: here the in-process runner's, whose `cluster_slots` (the one call the
database reads slots through) is changed by the test; tests/server/test_standalone_cluster.py
changes a real cluster's."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.common.errors import PiestreamError
from piestream.connectors.sinks import read_sink
from piestream.runtime.runners import LocalRunner
from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session

TABLES = ["CREATE TABLE t (k INT PRIMARY KEY, v BIGINT, g INT)", "CREATE TABLE u (g INT, w BIGINT)"]
MVS = {
    "agg": "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS m FROM t GROUP BY g",
    "joined": "SELECT t.k, t.v, u.w FROM t JOIN u ON t.g = u.g",
    "topn": "SELECT k, v FROM t ORDER BY v DESC, k LIMIT 4",
    "per_g": "SELECT g, sum(w) AS s, count(*) AS n FROM u GROUP BY g",
}


def _dml(rng: random.Random, keys: set[int]) -> list[str]:
    out = []
    for _ in range(rng.randint(3, 8)):
        r = rng.random()
        if r < 0.4:
            k, v, g = rng.randint(0, 60), rng.randint(-50, 50), rng.randint(0, 4)
            if k in keys:
                out.append(f"UPDATE t SET v = {v}, g = {g} WHERE k = {k}")
            else:
                out.append(f"INSERT INTO t VALUES ({k}, {v}, {g})")
                keys.add(k)
        elif r < 0.55 and keys:
            k = rng.choice(sorted(keys))
            out.append(f"DELETE FROM t WHERE k = {k}")
            keys.discard(k)
        elif r < 0.9:
            out.append(f"INSERT INTO u VALUES ({rng.randint(0, 4)}, {rng.randint(-9, 9)})")
        else:
            out.append(f"DELETE FROM u WHERE w > {rng.randint(0, 9)}")
    return out


def _check_all(s: Session, duck: Any) -> None:
    for name, q in MVS.items():
        got = norm_rows(s.execute_one(f"SELECT * FROM {name}").rows)
        want = norm_rows(duck.execute(q).fetchall())
        assert got == want, f"{name}:\n{diff_text(got, want)}"


def _parallelisms(s: Session, job: str) -> set[int]:
    rows = s.execute_one(
        f"SELECT parallelism, actor_vnodes FROM rw_catalog.rw_fragments WHERE job_name = '{job}'"
    ).rows
    for p, vnodes in rows:
        assert vnodes.count(":") == p  # one vnode range per actor
    return {p for p, _ in rows}


def _round(s: Session, duck: Any, rng: random.Random, keys: set[int]) -> None:
    for stmt in _dml(rng, keys):
        s.execute(stmt)
        duck.execute(stmt)
    s.execute("FLUSH")
    _check_all(s, duck)


def _drive(path: Path, cfg: DatabaseConfig, spark: Any = None, rounds: int = 3, runner: Any = None) -> None:
    rng = random.Random(7)
    duck = duck_connect()
    keys: set[int] = set()
    with Database(path, spark=spark, config=cfg, runner=runner) as db:
        s = db.session()
        for ddl in TABLES:
            s.execute(ddl)
            duck.execute(ddl.replace("BIGINT", "BIGINT"))
        for name, q in MVS.items():
            s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        for _ in range(rounds):
            _round(s, duck, rng, keys)
        s.execute("ALTER MATERIALIZED VIEW agg SET PARALLELISM = 4")
        s.execute("ALTER MATERIALIZED VIEW joined SET PARALLELISM TO 3")
        assert 4 in _parallelisms(s, "agg") and 3 in _parallelisms(s, "joined")
        for _ in range(rounds):
            _round(s, duck, rng, keys)
        s.execute("ALTER TABLE t SET PARALLELISM = 3")  # the MVs' no-shuffle readers follow
        s.execute("ALTER TABLE u SET PARALLELISM = 1")
        s.execute("ALTER MATERIALIZED VIEW agg SET PARALLELISM = 1")
        assert _parallelisms(s, "t") == {3} and _parallelisms(s, "u") == {1}
        for _ in range(rounds):
            _round(s, duck, rng, keys)
    with Database(path, spark=spark, config=cfg, runner=runner) as db:  # the catalog kept the new parallelism
        s = db.session()
        _check_all(s, duck)
        assert _parallelisms(s, "t") == {3} and 1 in _parallelisms(s, "agg")
        assert 3 in _parallelisms(s, "joined")
        for _ in range(rounds):
            _round(s, duck, rng, keys)
        s.execute("ALTER TABLE t SET PARALLELISM = 2")
        s.execute("ALTER MATERIALIZED VIEW joined SET PARALLELISM = 5")
        for _ in range(rounds):
            _round(s, duck, rng, keys)


def test_mvs_equal_duckdb_while_rescaled_up_and_down_and_after_a_restart(tmp_path: Path) -> None:
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    _drive(tmp_path / "d", cfg)


def _sqlstate(s: Session, sql: str) -> str:
    with pytest.raises(PiestreamError) as e:
        s.execute(sql)
    return e.value.sqlstate


def test_what_cannot_be_rescaled_is_refused(tmp_path: Path) -> None:
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute(TABLES[0])
        s.execute("CREATE MATERIALIZED VIEW filtered AS SELECT k, v FROM t WHERE v > 0")
        s.execute("CREATE VIEW plain AS SELECT 1 AS x")
        assert _sqlstate(s, "ALTER TABLE t SET PARALLELISM = 0") == "22023"
        assert _sqlstate(s, "ALTER TABLE t SET PARALLELISM = lots") == "22023"
        # ADAPTIVE refuses what a number refuses: it follows t
        assert _sqlstate(s, "ALTER MATERIALIZED VIEW filtered SET PARALLELISM = ADAPTIVE") == "0A000"
        # every fragment reads t without a shuffle: it follows t, and says so
        assert _sqlstate(s, "ALTER MATERIALIZED VIEW filtered SET PARALLELISM = 3") == "0A000"
        assert _sqlstate(s, "ALTER MATERIALIZED VIEW t SET PARALLELISM = 3") == "42809"
        assert _sqlstate(s, "ALTER SOURCE t SET PARALLELISM = 3") == "42809"
        assert _sqlstate(s, "ALTER TABLE nope SET PARALLELISM = 3") == "42P01"
        s.execute(
            "CREATE TABLE w (v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '10' SECOND) APPEND ONLY"
        )
        with pytest.raises(PiestreamError, match="watermark filter") as e:
            s.execute("ALTER TABLE w SET PARALLELISM = 3")  # its state is per actor index
        assert e.value.sqlstate == "0A000"
        assert _parallelisms(s, "w") == {2}  # the refusal changed nothing
        gen = (
            "(id BIGINT PRIMARY KEY) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
            "fields.id.start = '1', fields.id.end = '9', datagen.split.num = '2', "
            # unthrottled, one row per split and epoch: the rows keep coming across the ALTER
            # whatever the machine's speed (a rate made 100 quick FLUSHes read only ~6 rows)
            "datagen.rows.per.second = '0', max.rows.per.epoch = '2')"
        )
        s.execute("SET streaming_parallelism = 1")
        s.execute(f"CREATE TABLE fused {gen}")  # source and table in one fragment, no pk shuffle
        with pytest.raises(PiestreamError, match="primary key") as e:
            s.execute("ALTER TABLE fused SET PARALLELISM = 2")
        assert e.value.sqlstate == "0A000"
        s.execute("SET streaming_parallelism = 2")
        s.execute(f"CREATE TABLE shuffled {gen}")  # the source shuffles by pk into the table
        s.execute("ALTER TABLE shuffled SET PARALLELISM = 3")
        assert _parallelisms(s, "shuffled") == {2, 3}  # the source stays at one actor per split
        for _ in range(100):  # it reads on, each row once, into the actor owning its pk's vnode
            s.execute("FLUSH")
            if s.execute_one("SELECT count(*) FROM shuffled").rows == [(9,)]:
                break
        assert sorted(s.execute_one("SELECT id FROM shuffled").rows) == [(i,) for i in range(1, 10)]
        s.execute("INSERT INTO t VALUES (1, 5, 0), (2, -1, 0)")
        s.execute("ALTER TABLE t SET PARALLELISM = 3")
        s.execute("INSERT INTO t VALUES (3, 7, 1)")
        s.execute("FLUSH")
        assert _parallelisms(s, "filtered") == {3}
        assert sorted(s.execute_one("SELECT k FROM filtered").rows) == [(1,), (3,)]


def test_a_source_table_reassigns_its_splits_exactly_once(tmp_path: Path) -> None:
    """Rescaled 2 -> 4 -> 8 (capped at its 4 splits, with a notice) -> 1 while it reads: every
    row of the finite sequence arrives exactly once (offsets are kept per split, not per actor)."""
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute(
            "CREATE TABLE src (id BIGINT) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
            "fields.id.start = '1', fields.id.end = '400', datagen.rows.per.second = '0', "
            "datagen.split.num = '4', max.rows.per.epoch = '40')"  # 10 rows per split and epoch
        )
        s.execute(
            "CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n, count(DISTINCT id) AS d, sum(id) AS t "
            "FROM src"
        )
        steps = ["4", "8", "1", "3"]
        notices: list[str] = []
        seen: list[int] = []  # rows read when each rescale ran
        for _ in range(60):
            s.execute("FLUSH")
            (n, d, t) = s.execute_one("SELECT n, d, t FROM c").rows[0]
            if steps:
                seen.append(n)
                r = s.execute_one(f"ALTER TABLE src SET PARALLELISM = {steps.pop(0)}")
                notices.extend(r.notices)
                if len(steps) == 2:
                    assert _parallelisms(s, "src") == {4}  # 8 asked, 4 splits
            elif n >= 400:
                break
        assert seen[-1] < 400  # every rescale ran while the splits were being read
        assert (n, d, t) == (400, 400, 400 * 401 // 2)
        assert any("source split" in m for m in notices)
        assert _parallelisms(s, "src") == {3}


def test_a_sink_follows_its_table_and_writes_each_row_once(tmp_path: Path) -> None:
    """A sink reading a table without a shuffle follows ALTER TABLE (2 -> 4 -> 1 -> 3); its staged
    output is per (epoch, actor) and published once, so every row reaches the files exactly once."""
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    out = tmp_path / "out"
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute("CREATE TABLE log (id BIGINT, g INT) APPEND ONLY")
        s.execute(
            f"CREATE SINK o AS SELECT id, g FROM log WITH (connector = 'parquet', path = '{out}', "
            "type = 'append-only')"
        )
        assert _sqlstate(s, "ALTER SINK o SET PARALLELISM = 3") == "0A000"  # follows log
        want = []
        for step, p in enumerate(["4", "1", "3", "3"]):
            rows = [(step * 100 + i, i % 3) for i in range(25)]
            want.extend(rows)
            s.execute("INSERT INTO log VALUES " + ", ".join(f"({a}, {b})" for a, b in rows))
            s.execute("FLUSH")
            s.execute(f"ALTER TABLE log SET PARALLELISM = {p}")
            assert _parallelisms(s, "o") == {int(p)}
        s.execute("FLUSH")
        got = read_sink(str(out))
        assert sorted(zip(got.column("id").to_pylist(), got.column("g").to_pylist(), strict=True)) == want


@pytest.mark.spark
def test_rescaling_on_spark(tmp_path: Path, spark: Any) -> None:
    """The leased runner's stages and the task-to-task data plane follow the new actor counts."""
    cfg = DatabaseConfig(runner="spark", barrier_interval=3600, parallelism=2, background_compaction=False)
    _drive(tmp_path / "d", cfg, spark=spark, rounds=1)


def _policies(s: Session) -> dict[str, str]:
    rows = s.execute_one("SELECT name, parallelism FROM rw_catalog.rw_streaming_jobs").rows
    return dict(rows)


def _adaptive_round(s: Session, duck: Any, rng: random.Random, keys: set[int]) -> None:
    _round(s, duck, rng, keys)
    _round(s, duck, rng, keys)


def test_adaptive_is_the_default_and_follows_the_slots_across_rescales_and_a_restart(tmp_path: Path) -> None:
    """New jobs are ADAPTIVE (no --parallelism, no streaming_parallelism): they run as many actors
    as the runner has slots. An MV rescaled 2 -> 4 -> 1 -> ADAPTIVE under inserts, updates and
    deletes equals its query at every step; when the slot count changes the ADAPTIVE jobs follow
    (the FIXED ones do not), and after a restart the policies are kept and followed again."""
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, background_compaction=False)
    rng = random.Random(27)
    duck = duck_connect()
    keys: set[int] = set()
    path = tmp_path / "d"
    with Database(path, config=cfg) as db:
        s = db.session()
        assert s.execute_one("SHOW streaming_parallelism").rows == [("adaptive",)]
        for ddl in TABLES:
            s.execute(ddl)
            duck.execute(ddl)
        for name, q in MVS.items():
            s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        assert set(_policies(s).values()) == {"ADAPTIVE"}
        assert _parallelisms(s, "agg") == {2} and _parallelisms(s, "t") == {2}  # 2 slots
        _adaptive_round(s, duck, rng, keys)
        for p in ("2", "4", "1"):
            s.execute(f"ALTER MATERIALIZED VIEW agg SET PARALLELISM = {p}")
            assert _policies(s)["agg"] == f"FIXED({p})"
            assert int(p) in _parallelisms(s, "agg")
            _adaptive_round(s, duck, rng, keys)
        s.execute("ALTER MATERIALIZED VIEW agg SET PARALLELISM = ADAPTIVE")
        assert _policies(s)["agg"] == "ADAPTIVE" and 2 in _parallelisms(s, "agg")
        s.execute("ALTER MATERIALIZED VIEW joined SET PARALLELISM = 3")  # FIXED from now on
        _adaptive_round(s, duck, rng, keys)
        runner = db.barriers.runner
        assert isinstance(runner, LocalRunner)
        runner.slots = 5  # the cluster grew: at the next epoch boundary the ADAPTIVE jobs follow
        _adaptive_round(s, duck, rng, keys)
        assert _parallelisms(s, "t") == {5} and _parallelisms(s, "u") == {5}
        assert 5 in _parallelisms(s, "agg") and 5 in _parallelisms(s, "per_g")
        assert _parallelisms(s, "joined") == {3, 5}  # its join stays; its scans of t follow t
        s.execute("SET streaming_parallelism = 3")  # explicit in the session: FIXED
        s.execute("CREATE MATERIALIZED VIEW fixed3 AS SELECT g, count(*) AS n FROM u GROUP BY g")
        s.execute("SET streaming_parallelism = adaptive")
        s.execute("CREATE MATERIALIZED VIEW adapt AS SELECT v, count(*) AS n FROM t GROUP BY v")
        assert _policies(s)["fixed3"] == "FIXED(3)" and _policies(s)["adapt"] == "ADAPTIVE"
        assert 5 in _parallelisms(s, "adapt")
        s.execute(
            "CREATE MATERIALIZED VIEW w3 WITH (streaming_parallelism = 3) AS "
            "SELECT max(w) AS m FROM u GROUP BY g"
        )
        assert _policies(s)["w3"] == "FIXED(3)"
        assert _sqlstate(s, "CREATE MATERIALIZED VIEW w4 WITH (foo = 1) AS SELECT 1 AS x") == "0A000"
        with pytest.raises(PiestreamError) as e:
            s.execute("SET streaming_parallelism = many")
        assert e.value.sqlstate == "22023"
        runner.slots = 1  # it shrank
        _adaptive_round(s, duck, rng, keys)
        assert _parallelisms(s, "t") == {1} and _parallelisms(s, "agg") == {1}
        assert _parallelisms(s, "adapt") == {1} and 3 in _parallelisms(s, "fixed3")
    with Database(path, config=cfg) as db:  # restarted on 2 slots: kept policies, followed again
        s = db.session()
        _check_all(s, duck)
        policies = _policies(s)
        assert policies["agg"] == policies["t"] == policies["adapt"] == "ADAPTIVE"
        assert policies["joined"] == "FIXED(3)" and policies["fixed3"] == "FIXED(3)"
        _adaptive_round(s, duck, rng, keys)
        assert _parallelisms(s, "t") == {2} and 2 in _parallelisms(s, "agg")
        assert 3 in _parallelisms(s, "joined") and 3 in _parallelisms(s, "fixed3")
        s.execute("ALTER TABLE t SET PARALLELISM = 4")
        _adaptive_round(s, duck, rng, keys)
    fixed = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=3, background_compaction=False)
    with Database(path, config=fixed) as db:  # --parallelism given: new jobs are FIXED at it
        s = db.session()
        _check_all(s, duck)
        s.execute("CREATE MATERIALIZED VIEW later AS SELECT g, max(v) AS m FROM t GROUP BY g")
        assert _policies(s)["later"] == "FIXED(3)" and _policies(s)["t"] == "FIXED(4)"
