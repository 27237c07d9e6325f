"""Temporal filters (``WHERE ts > now() - INTERVAL '1 hour'``): the plan (Now feeding a
DynamicFilter), the MVs against DuckDB evaluated at the committed epoch's now() after every epoch
of random changes while the clock moves, the state the filters keep, and the refused forms."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.common.epoch import EpochGenerator, epoch_from_ms
from piestream.common.errors import PiestreamError
from piestream.plan.dynamic_filter import DynamicFilterNode
from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session
from piestream.storage.table.storage_table import StorageTable
from piestream.stream.executors.now import epoch_now

TABLE = "CREATE TABLE t (k INT PRIMARY KEY, v INT, ts TIMESTAMPTZ, t2 TIMESTAMP)"
DUCK_TABLE = "CREATE TABLE t (k INT PRIMARY KEY, v INT, ts TIMESTAMPTZ, t2 TIMESTAMP)"

MVS = {
    "gt": "SELECT k, v FROM t WHERE ts > now() - INTERVAL '1 hour'",
    "ge_and": "SELECT k, ts FROM t WHERE v > 3 AND ts >= now() - INTERVAL '30 minutes'",
    "lt": "SELECT k, v FROM t WHERE ts < now()",
    "le_expr": "SELECT k FROM t WHERE ts + INTERVAL '10 minutes' <= now() AND v IS NOT NULL",
    "band": "SELECT k, v, t2 FROM t WHERE t2 BETWEEN now() - INTERVAL '1 hour' AND now()",
    "flipped": "SELECT k FROM t WHERE now() - INTERVAL '2 hours' < ts",
    "agg": "SELECT count(*) AS n, sum(v) AS s FROM t WHERE ts > now() - INTERVAL '45 minutes'",
    "or_gt": "SELECT k, v FROM t WHERE v = 2 OR ts > now() - INTERVAL '1 hour' OR v IS NULL",
    "grouped": "SELECT v % 3 AS g, count(*) AS n FROM t WHERE ts >= now() - INTERVAL '1 hour' GROUP BY v % 3",
    # ORs of several temporal disjuncts: a UNION ALL of disjoint branches
    "or_two": "SELECT k, v FROM t WHERE ts > now() - INTERVAL '1 hour' OR ts < now() - INTERVAL '3 hours'",
    "or_and": "SELECT k, ts FROM t WHERE (ts > now() - INTERVAL '40 minutes' AND v > 3) "
    "OR t2 BETWEEN now() - INTERVAL '2 hours' AND now() - INTERVAL '1 hour'",
}

BASE_MS = 1_800_000_000_000  # 2027-01-15: later than the wall clock, so the test clock rules


class Clock:
    """The barrier manager's clock, moved by the test: each epoch's now() is known in advance."""

    def __init__(self, db: Database) -> None:
        self.ms = BASE_MS
        db.barriers.epochs = EpochGenerator(db.barriers.epochs.last, clock_ms=lambda: self.ms)

    def advance(self, db: Database, ms: int) -> None:
        """Move the clock and run epochs until one of the new time has committed (the epoch
        being filled when the clock moves was numbered before it)."""
        self.ms += ms
        while db.barriers.committed_epoch < epoch_from_ms(self.ms):
            db.execute("FLUSH")

    @property
    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.ms / 1000, dt.UTC)


def _open(path: Path) -> tuple[Database, Clock]:
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    db = Database(path, config=cfg)
    return db, Clock(db)


def _lit(x: Any) -> str:
    if x is None:
        return "NULL"
    if isinstance(x, dt.datetime):
        return f"TIMESTAMPTZ '{x.isoformat(sep=' ')}'" if x.tzinfo else f"TIMESTAMP '{x.isoformat(sep=' ')}'"
    return str(x)


def _random_dml(rng: random.Random, keys: set[int], now: dt.datetime) -> list[str]:
    """A few statements changing many rows each (every statement is an epoch of its own)."""
    out = []
    rows = []
    for k in rng.sample(sorted(set(range(80)) - keys), rng.randint(1, 8)):
        v = rng.choice([None, *range(-3, 10)])
        # around now: some already behind every bound, some still in the future
        ts = None if rng.random() < 0.08 else now + dt.timedelta(minutes=rng.randint(-150, 90))
        t2 = None if ts is None else ts.replace(tzinfo=None) + dt.timedelta(minutes=rng.randint(-5, 5))
        rows.append(f"({k}, {_lit(v)}, {_lit(ts)}, {_lit(t2)})")
        keys.add(k)
    out.append("INSERT INTO t VALUES " + ", ".join(rows))
    m, r = rng.randint(3, 7), rng.randint(0, 6)
    d = rng.choice([-40, -10, 5, 30])
    # moves rows across the bounds both ways
    out.append(
        f"UPDATE t SET ts = ts + INTERVAL '{d} minutes', t2 = t2 - INTERVAL '{d} minutes', v = v + 1 "
        f"WHERE k % {m} = {r % m}"
    )
    if rng.random() < 0.6:
        m, r = rng.randint(4, 9), rng.randint(0, 8)
        out.append(f"DELETE FROM t WHERE k % {m} = {r % m}")
        keys -= {k for k in keys if k % m == r % m}
    return out


def _check(db: Database, duck: Any, name: str) -> None:
    now = epoch_now(db.barriers.committed_epoch)
    got = norm_rows(db.execute(f"SELECT * FROM {name}")[0].rows)
    want = norm_rows(duck.execute(MVS[name].replace("now()", _lit(now))).fetchall())
    assert got == want, f"{name} at {now}:\n{diff_text(got, want)}"


def _drive(db: Database, clock: Clock, rounds: int, seed: int) -> None:
    s = db.session()
    duck = duck_connect()
    s.execute(TABLE)
    duck.execute(DUCK_TABLE)
    rng = random.Random(seed)
    keys: set[int] = set()
    late = list(MVS)[::2]  # these backfill over existing rows, the others see them all arrive
    for name in list(MVS)[1::2]:
        s.execute(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name]}")
    for i in range(rounds):
        if i == 2:
            for name in late:
                s.execute(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name]}")
        for stmt in _random_dml(rng, keys, clock.now):
            s.execute(stmt)
            duck.execute(stmt)
        # time passes: sometimes not at all, sometimes past many rows' bounds at once
        clock.ms += rng.choice([0, 1, 60_000, 7 * 60_000, 25 * 60_000, 70 * 60_000])
        s.execute("FLUSH")
        db.hummock.compact_until_idle()  # as a running database would: reads merge few SSTs
        for name in MVS if i >= 2 else list(MVS)[1::2]:
            _check(db, duck, name)


@pytest.mark.parametrize("seed", [0])
def test_temporal_filters_equal_duckdb_at_every_epochs_now(tmp_path: Path, seed: int) -> None:
    db, clock = _open(tmp_path / "d")
    with db:
        _drive(db, clock, rounds=7, seed=seed)


@pytest.mark.spark
def test_temporal_filters_on_spark(tmp_path: Path, spark: Any) -> None:
    """The Now fragment broadcast across Spark stages; every epoch's bound is the sealed epoch's
    time in each actor, so the MVs still equal DuckDB at every committed epoch's now()."""
    cfg = DatabaseConfig(runner="spark", barrier_interval=3600, parallelism=2, background_compaction=False)
    db = Database(tmp_path / "d", spark=spark, config=cfg)
    with db:
        _drive(db, Clock(db), rounds=2, seed=7)


def _explain(s: Session, sql: str) -> str:
    return "\n".join(r[0] for r in s.execute_one(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql}").rows)


def test_plan_is_now_feeding_a_dynamic_filter(s: Session) -> None:
    s.execute(TABLE)
    text = _explain(s, MVS["gt"])
    assert "DynamicFilter { predicate: $2 > $expr0, temporal: now() never decreases }" in text, text
    assert "─Now {" in text and "Broadcast" in text and "HashJoin" not in text, text
    between = _explain(s, MVS["band"])
    # one Now and one DynamicFilter (each with its right table) per bound
    assert between.count("columns: [now]") == 2 and between.count("columns: [rhs]") == 2, between
    # an ordinary subquery's dynamic filter keeps every row: its bound may move either way
    s.execute("CREATE TABLE u (v INT)")
    assert "temporal" not in _explain(s, "SELECT k FROM t WHERE v > (SELECT max(v) FROM u)")


def _internal_rows(db: Database, name: str) -> dict[str, int]:
    """Rows in each DynamicFilter's left table of MV `name`, at the committed epoch."""
    rel = db.catalog.get(name)
    assert rel is not None and rel.job_id is not None
    nodes = [n for f in db.catalog.job_fragments(rel.job_id) for n in f.root.walk()]
    dfs = [n for n in nodes if isinstance(n, DynamicFilterNode)]
    storage, epoch, vpin, spin = db.snapshot_storage()
    try:
        return {
            n.comparator: sum(1 for _ in StorageTable(n.left_table, storage, epoch).iter_rows()) for n in dfs
        }
    finally:
        db.release_snapshot(vpin, spin)


def test_state_keeps_only_rows_whose_outcome_can_still_change(tmp_path: Path) -> None:
    db, clock = _open(tmp_path / "d")
    with db:
        s = db.session()
        s.execute(TABLE)
        for name in ("gt", "lt", "band"):
            s.execute(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name]}")
        now = clock.now
        rows = [(k, now + dt.timedelta(minutes=m)) for k, m in enumerate(range(-90, 90, 10))]  # 18 rows
        s.execute(
            "INSERT INTO t VALUES "
            + ", ".join(f"({k}, 1, {_lit(ts)}, {_lit(ts.replace(tzinfo=None))})" for k, ts in rows)
        )
        s.execute("FLUSH")
        at = epoch_now(db.barriers.committed_epoch)
        # ts > now - 1h keeps the passing rows; ts < now keeps the rows still to come
        assert _internal_rows(db, "gt") == {">": sum(ts > at - dt.timedelta(hours=1) for _, ts in rows)}
        assert _internal_rows(db, "lt") == {"<": sum(ts >= at for _, ts in rows)}
        clock.advance(db, 4 * 3600 * 1000)  # every row is behind both bounds now
        assert db.execute("SELECT count(*) FROM gt")[0].rows == [(0,)]
        assert db.execute("SELECT count(*) FROM lt")[0].rows == [(18,)]
        assert db.execute("SELECT count(*) FROM band")[0].rows == [(0,)]
        assert _internal_rows(db, "gt") == {">": 0}
        assert _internal_rows(db, "lt") == {"<": 0}
        assert _internal_rows(db, "band") == {">=": 0, "<=": 0}
        # a late row behind the bound is never stored; deleting a settled row is consistent
        s.execute(f"INSERT INTO t VALUES (100, 1, {_lit(now)}, NULL)")
        s.execute("DELETE FROM t WHERE k < 5")
        s.execute("FLUSH")
        assert _internal_rows(db, "gt") == {">": 0}
        assert db.execute("SELECT count(*) FROM lt")[0].rows == [(14,)]


def test_the_bound_continues_after_a_restart(tmp_path: Path) -> None:
    db, clock = _open(tmp_path / "d")
    with db:
        s = db.session()
        s.execute(TABLE)
        s.execute(f"CREATE MATERIALIZED VIEW gt AS {MVS['gt']}")
        s.execute(f"INSERT INTO t VALUES (1, 1, {_lit(clock.now)}, NULL), (2, 2, {_lit(clock.now)}, NULL)")
        s.execute("FLUSH")
        ms = clock.ms
    db, clock = _open(tmp_path / "d")
    with db:
        clock.ms = ms
        clock.advance(db, 30 * 60_000)
        assert db.execute("SELECT k FROM gt ORDER BY k")[0].rows == [(1,), (2,)]
        clock.advance(db, 31 * 60_000)
        assert db.execute("SELECT count(*) FROM gt")[0].rows == [(0,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, now() AS n FROM t",
        "SELECT k FROM t WHERE ts > now() - INTERVAL '1 hour' OR ts = now()",
        "SELECT k FROM t WHERE ts = now()",
        "SELECT k FROM t WHERE ts > date_trunc('hour', now())",
        "SELECT k FROM t WHERE now() > TIMESTAMPTZ '2020-01-01 00:00:00+00'",
        "SELECT count(*) FILTER (WHERE ts > now()) FROM t",
    ],
)
def test_other_uses_of_now_are_refused(s: Session, sql: str) -> None:
    s.execute(TABLE)
    with pytest.raises(PiestreamError) as e:
        s.execute(f"CREATE MATERIALIZED VIEW x AS {sql}")
    assert e.value.sqlstate == "0A000" and "now()" in str(e.value), str(e.value)
