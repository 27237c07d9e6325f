"""Operator caches survive a pause between epochs on Spark: Spark stops a worker pool's idle
Python workers after a minute without activity (hard-coded), so the SparkRunner runs a no-op task
in every slot's worker while no epoch runs. The keep-alive never takes a worker an epoch needs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from piestream.runtime.runners import SparkRunner
from piestream.server.database import Database, DatabaseConfig

pytestmark = pytest.mark.spark


def _db(spark: Any, path: Path, runner: SparkRunner) -> Database:
    config = DatabaseConfig(runner="spark", barrier_interval=3600, parallelism=2, background_compaction=False)
    return Database(path, spark=spark, config=config, runner=runner)


def _epoch(db: Database, first: int | None) -> tuple[bool, int, int]:
    """Inserts 200 keys from `first` (None: none, so every key the epoch reads exists), updates
    a third of the rows, checks the MV; (every actor warm, cache hits, cache misses) of its epochs."""
    n0 = len(db.barriers.stats)
    s = db.session()
    if first is not None:
        s.execute(f"INSERT INTO t SELECT g, g % 7 FROM generate_series({first}, {first + 199}) AS g")
    s.execute("UPDATE t SET v = (v + 1) % 7 WHERE k % 3 = 0")
    s.execute("FLUSH")
    got = sorted(s.execute_one("SELECT * FROM m").rows)
    assert got == sorted(s.execute_one("SELECT v, count(*) FROM t GROUP BY v").rows)
    new = db.barriers.stats[n0:]
    warm = all(e.cache_warm_actors == e.actors for e in new)
    return warm, sum(e.cache_hits for e in new), sum(e.cache_misses for e in new)


def _warmed_db(spark: Any, tmp_path: Path, runner: SparkRunner) -> Database:
    """A table and a GROUP BY MV on it, after two epochs of inserts and updates."""
    db = _db(spark, tmp_path / "db", runner)
    s = db.session()
    s.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)")
    s.execute("CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n FROM t GROUP BY v")
    _epoch(db, 0)
    _epoch(db, 200)
    return db


def _warm_after_pause(
    spark: Any, tmp_path: Path, pause: float, keep_alive: float | None
) -> tuple[tuple[bool, int, int], list[int], list[int]]:
    runner = SparkRunner(spark, keep_alive_seconds=keep_alive)
    db = _warmed_db(spark, tmp_path, runner)
    try:
        before = runner.keep_alive()
        time.sleep(pause)
        after = runner.keep_alive()
        rec = _epoch(db, None)
        return rec, before, after
    finally:
        db.close()


def test_keep_alive_touches_each_slots_worker_and_leaves_the_caches_warm(spark: Any, tmp_path: Path) -> None:
    rec, before, after = _warm_after_pause(spark, tmp_path, 0.0, keep_alive=1.0)
    assert len(before) == 2 and len(set(before)) == 2  # one worker per slot
    assert after == before
    # every actor ran where its caches are, and they answered every key
    warm, hits, misses = rec
    assert warm and misses == 0 and hits > 0, rec


@pytest.mark.soak
def test_caches_survive_a_pause_longer_than_sparks_idle_worker_timeout(spark: Any, tmp_path: Path) -> None:
    """75 s without an epoch (Spark's idle timeout is 60 s, checked every 10 s)."""
    rec, before, after = _warm_after_pause(spark, tmp_path, 75.0, keep_alive=20.0)
    assert after == before  # the same worker processes as before the pause
    warm, hits, misses = rec
    assert warm and misses == 0 and hits > 0, rec


def _frozen_objects(it: Any) -> list[tuple[int, int]]:
    import gc

    return [(slot, gc.get_freeze_count()) for slot in it]


def test_slot_workers_keep_their_live_heap_out_of_pysparks_per_task_collection(
    spark: Any, tmp_path: Path
) -> None:
    """PySpark's daemon runs a full gc.collect() after every task of a reused worker; each epoch
    task freezes the worker's live objects first, so that collection scans only the task's own."""
    runner = SparkRunner(spark, keep_alive_seconds=None)
    db = _warmed_db(spark, tmp_path, runner)
    try:
        n = runner.task_slots
        src = spark.sparkContext.parallelize(range(n), n)
        outs = [runner._in_slot(src, p, _frozen_objects, False) for p in range(n)]
        frozen = dict(spark.sparkContext.union(outs).collect())
        # modules, classes and the decoded plans alone are tens of thousands of objects
        assert sorted(frozen) == list(range(n)) and min(frozen.values()) > 10_000, frozen
    finally:
        db.close()


def test_a_full_collection_every_so_many_tasks() -> None:
    """The freeze is undone every GC_FULL_EVERY tasks, so cycles that died after being frozen
    are collected (by the daemon's collection after that task)."""
    import gc

    from piestream.runtime import runners

    saved = runners._worker_tasks
    try:
        runners._worker_tasks = runners.GC_FULL_EVERY - 1
        runners.worker_gc_checkpoint()  # the GC_FULL_EVERY-th task: unfrozen
        assert gc.get_freeze_count() == 0
        runners.worker_gc_checkpoint()
        assert gc.get_freeze_count() > 0
    finally:
        runners._worker_tasks = saved
        gc.unfreeze()
