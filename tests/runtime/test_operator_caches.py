"""Operator caches (HashAgg groups, Materialize's conflict check, HashJoin sides, AppendOnlyDedup
keys) never change a result: with a
tiny memory budget that evicts in the middle of every epoch, with the default one, and with
failed epoch attempts in between (a failed attempt's caches are never used again), every MV equals
its query after every epoch."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from faults import RandomFaults, read_log

from piestream.runtime.runners import LocalRunner
from piestream.server.database import Database, DatabaseConfig
from piestream.stream.cache.registry import WORKER_CACHES
from piestream.stream.executor import StreamingConfig
from piestream.stream.executors.join import cache as join_cache

MVS = {
    "agg": "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM t GROUP BY g",
    "copy": "SELECT k, g, v FROM t",
    # joins: both sides cached (inner), a residual condition, and a left join (the right side
    # has no degree table, so it is cached; the left one keeps degrees in state)
    "j_inner": "SELECT t.k, u.k AS uk, t.v, u.w FROM t JOIN u ON t.g = u.g",
    "j_residual": "SELECT t.k, u.k AS uk FROM t JOIN u ON t.g = u.g AND t.v < u.w",
    "j_padded": "SELECT t.k, u.k AS uk, u.w FROM t LEFT JOIN u ON t.g = u.g",
    "dedup": "SELECT DISTINCT g, v FROM ev",
}


@pytest.mark.parametrize("budget", [4096, 1 << 30])
def test_mvs_equal_their_queries_with_any_cache_budget_and_failures(tmp_path: Path, budget: int) -> None:
    evictions = WORKER_CACHES.evictions
    hits = _run_checked(tmp_path, budget)
    if budget < 1 << 20:
        assert WORKER_CACHES.evictions > evictions
    else:
        assert hits > 0


def test_join_caches_retired_midway_change_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A join side's cache written far more than read is retired (emptied; storage only from
    then on) in the middle of the run: every MV still equals its query after every epoch."""
    monkeypatch.setattr(join_cache, "WRITE_GRACE_ROWS", 150)
    retired: list[int] = []
    write = join_cache.JoinSideCache.write

    def counting(self: join_cache.JoinSideCache, *a: Any) -> None:
        was = self.rows.retired
        write(self, *a)
        if self.rows.retired and not was:
            retired.append(self.state.desc.table_id)

    monkeypatch.setattr(join_cache.JoinSideCache, "write", counting)
    _run_checked(tmp_path, 1 << 30)
    assert retired, "no join cache was retired"


def _run_checked(tmp_path: Path, budget: int) -> int:
    """14 epochs of changes with injected failed attempts, every MV checked after each; returns
    the operator caches' hits."""
    faults = RandomFaults(seed=11, rate=0.4, log_dir=str(tmp_path), one_per_epoch=True)
    config = DatabaseConfig(
        barrier_interval=3600,
        parallelism=2,
        background_compaction=False,
        streaming=StreamingConfig(check_consistency=True, cache_budget_bytes=budget),
    )
    rng = random.Random(budget)
    db = Database(tmp_path / "db", config=config, runner=LocalRunner(hook=faults))
    try:
        s = db.session()
        s.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
        s.execute("CREATE TABLE u (k BIGINT PRIMARY KEY, g BIGINT, w BIGINT)")
        s.execute("CREATE TABLE ev (g BIGINT, v BIGINT) APPEND ONLY")
        for name, q in MVS.items():
            s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        for _ in range(14):
            # a round's six statements are one transaction, so one epoch (not six, with the MVs
            # checked only after the last): the caches see larger epochs and evict inside them
            s.execute("BEGIN")
            rows = [(rng.randint(0, 120), rng.randint(0, 15), rng.randint(-50, 50)) for _ in range(60)]
            s.execute("INSERT INTO t VALUES " + ", ".join(f"({k}, {g}, {v})" for k, g, v in rows))
            s.execute(f"DELETE FROM t WHERE k % 17 = {rng.randint(0, 16)}")
            s.execute(f"UPDATE t SET v = v + 1, g = g + 1 WHERE k % 13 = {rng.randint(0, 12)}")
            more = [(rng.randint(0, 80), rng.randint(0, 15), rng.randint(-50, 50)) for _ in range(20)]
            s.execute("INSERT INTO u VALUES " + ", ".join(f"({k}, {g}, {w})" for k, g, w in more))
            s.execute(f"DELETE FROM u WHERE k % 11 = {rng.randint(0, 10)}")
            s.execute("INSERT INTO ev VALUES " + ", ".join(f"({g % 9}, {v % 7})" for _, g, v in rows))
            s.execute("COMMIT")
            for name, q in MVS.items():
                got = sorted(s.execute_one(f"SELECT * FROM {name}").rows)
                assert got == sorted(s.execute_one(q).rows), name
        hits = sum(e.cache_hits for e in db.barriers.stats)
    finally:
        db.close()
    assert read_log(tmp_path), "no epoch attempt failed"
    return hits
