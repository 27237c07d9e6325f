"""The default runner ("spark": one leased job per epoch) keeps every actor's operator caches
warm from one epoch to the next: each epoch's job starts only once the previous job's tasks have
ended, so a slot has one Python worker, not two that alternate (each seeing the caches of two
epochs ago)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from piestream.runtime.epoch_plan import EpochPlan
from piestream.runtime.lease_task import LEASE_END
from piestream.runtime.leased import LeasedSparkRunner, spark_runner
from piestream.runtime.runners import SLOT_ENV
from piestream.server.database import Database, DatabaseConfig

pytestmark = pytest.mark.spark

SCHEMA = [
    "CREATE TABLE a (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)",
    "CREATE TABLE b (k BIGINT PRIMARY KEY, name VARCHAR)",
    "CREATE MATERIALIZED VIEW m_agg AS SELECT g, count(*) AS n, sum(v) AS s FROM a GROUP BY g",
    "CREATE MATERIALIZED VIEW m_join AS SELECT a.k, a.v, b.name FROM a JOIN b ON a.g = b.k",
]
EPOCHS = 6  # rounds of three epochs
WARM_UP = 3  # the first epochs may start Python workers (and a worker's caches start empty)


@dataclass(frozen=True)
class SlowEnd:
    """Slot 0's leased task takes `seconds` to end (as a loaded machine's may): on main the next
    epoch's job started meanwhile, and slot 1's end freed the core its slot-0 task took."""

    seconds: float

    def __call__(self, point: str, plan: EpochPlan, actor_id: int) -> None:
        if point == LEASE_END and os.environ.get(SLOT_ENV) == "0":
            time.sleep(self.seconds)


def test_every_actor_stays_warm_across_epochs_on_the_default_runner(spark: Any, tmp_path: Path) -> None:
    config = DatabaseConfig(runner="spark", barrier_interval=3600, parallelism=2, background_compaction=False)
    default = spark_runner(spark, "spark", barrier_interval=config.barrier_interval)
    assert isinstance(default, LeasedSparkRunner) and default.lease_seconds == 0.0
    # the default runner, its task end slowed
    runner = LeasedSparkRunner(spark, hook=SlowEnd(0.4), lease_seconds=0.0, idle_seconds=default.idle_seconds)
    db = Database(tmp_path / "db", spark=spark, config=config, runner=runner)
    # this test asserts where the actors ran, not how fast a loaded machine starts workers: no
    # epoch may fall back to a plain Spark job because a lease's tasks connected late
    runner.connect_timeout = runner.startup_timeout = 300.0
    try:
        for q in SCHEMA:
            db.execute(q)
        s = db.session()
        first = len(db.barriers.stats)
        for e in range(EPOCHS):
            rows = ", ".join(f"({e * 20 + i}, {i % 5}, {i})" for i in range(20))
            # three epochs back to back (each statement commits one), as a busy stream runs
            # them: the next epoch's job starts while the last one's tasks are ending
            s.execute(f"INSERT INTO a VALUES {rows}")
            s.execute(f"INSERT INTO b VALUES ({e}, 'n{e}')")
            s.execute("FLUSH")
        stats = db.barriers.stats[first:]
        views = {
            m: sorted(tuple(r) for r in s.execute_one(f"SELECT * FROM {m}").rows) for m in ("m_agg", "m_join")
        }
    finally:
        db.close()
    assert runner.plain_epochs == 0 and runner.leased_epochs >= EPOCHS
    assert len(stats) >= EPOCHS
    later = stats[WARM_UP:]
    cold = [(st.epoch, st.actors - st.cache_warm_actors, st.actors) for st in later]
    assert all(n == 0 for _, n, _ in cold), f"(epoch, cold actors, actors) after warm-up: {cold}"
    assert all(st.actors >= 8 for st in later)  # both tables and both MVs ran, two actors each
    # the MVs are right (warm caches are only worth having if they are)
    k = {i: (i % 20 % 5, i % 20) for i in range(EPOCHS * 20)}
    assert views["m_join"] == sorted((i, v, f"n{g}") for i, (g, v) in k.items() if g < EPOCHS)
    assert views["m_agg"] == sorted(
        (g, sum(1 for gg, _ in k.values() if gg == g), sum(v for gg, v in k.values() if gg == g))
        for g in range(5)
    )
