"""Exactly once under task failures: faults injected into actor tasks at random points.

A `TaskHook` fails tasks on input, after the executors ran, after the SSTs were uploaded, after
part of the output was emitted, or after the report. On Spark (`local[2,4]`) the failed task is
retried by Spark; in-process, the barrier manager retries the epoch. Either way every table and
MV must equal DuckDB's result over exactly the statements that were acknowledged, and the SSTs
that failed attempts uploaded are orphans that full GC removes while every live object stays.
A fault that exhausts every retry fails the epoch: its statement gets an error, nothing of it is
committed, and the following epochs are correct.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from faults import AlwaysFail, AnyOf, RandomFaults, read_log
from sql_workload import Reference, mismatches, mv_statements, schema_statements, statement

from piestream.common.errors import PiestreamError
from piestream.runtime.actor_task import HOOK_POINTS
from piestream.runtime.runners import EpochRunner, LocalRunner, SparkRunner
from piestream.server.database import Database, DatabaseConfig
from piestream.storage.hummock.version import object_id_of_path


def _open(path: Path, runner: EpochRunner, spark: object = None) -> Database:
    config = DatabaseConfig(barrier_interval=3600, parallelism=2, background_compaction=False)
    db = Database(path, spark=spark, config=config, runner=runner)  # type: ignore[arg-type]
    # these tests are about epochs that fail as a whole (retried, or their input given up), not
    # about isolating a job that keeps failing (tests/server/test_streaming_errors.py)
    db.barriers.isolate_failing_jobs = False
    return db


#: On Spark a smaller graph (each actor task costs tens of ms, a failed one a new Python worker)
SPARK_MVS = ("agg", "j")


def _setup(db: Database, ref: Reference, seed: int, mvs: tuple[str, ...] | None = None) -> object:
    """Tables, a few rows, then the MVs (their first epoch backfills), on a fresh database."""
    s = db.session()
    for ddl in schema_statements():
        s.execute(ddl)
    _drive(s, ref, seed, 0, 4)
    for ddl in mv_statements(mvs):
        s.execute(ddl)
    return s


def _drive(s: object, ref: Reference, seed: int, start: int, n: int) -> None:
    for i in range(start, start + n):
        pg, duck = statement(seed, i)
        s.execute(pg)  # type: ignore[attr-defined]  # returns once its epoch committed
        ref.apply(duck)


def _sst_objects(db: Database) -> set[int]:
    ids = {object_id_of_path(o.path) for o in db.sstables.store.list("hummock/sst/")}
    return {i for i in ids if i is not None}


def _check_gc(db: Database) -> set[int]:
    """Full GC deletes exactly the objects no version references; returns the orphans."""
    live = db.hummock.version.object_ids()
    before = _sst_objects(db)
    assert live <= before, f"live objects missing: {sorted(live - before)}"
    orphans = before - live
    assert db.hummock.full_gc(retention_sec=0) == len(orphans)
    assert _sst_objects(db) == live
    return orphans


def _assert_equal(s: object, ref: Reference, mvs: tuple[str, ...] | None = None) -> None:
    bad = mismatches(s, ref, mvs=mvs)
    assert not bad, "\n".join(f"{n}: piestream {g} != reference {w}" for n, (g, w) in bad.items())


def test_epoch_retries_exactly_once_in_process(tmp_path: Path) -> None:
    """LocalRunner: a failed task fails its epoch attempt; the barrier manager re-runs the epoch
    from the same committed state, so no change is lost or applied twice."""
    # rate 0.9: ~20 epochs, each with a fault unless its point is 'emitting' and the chosen
    # actor emits nothing, so far more than 8 hit however the clock-based epochs fall
    hook = RandomFaults(seed=11, rate=0.9, log_dir=str(tmp_path), one_per_epoch=True)
    db = _open(tmp_path / "db", LocalRunner(hook))
    ref = Reference()
    try:
        s = _setup(db, ref, seed=3)
        _drive(s, ref, 3, 4, 20)
        _assert_equal(s, ref)
        faults = read_log(tmp_path)
        # epochs are clock-based, so which faults hit varies between runs; enough always do
        assert len(faults) >= 8
        assert len({p for _, _, p, _ in faults}) >= 3
        assert _check_gc(db), "failed attempts after 'synced' must have left orphaned SSTs"
        _assert_equal(s, ref)  # GC removed nothing live
        _drive(s, ref, 3, 24, 3)
        _assert_equal(s, ref)
    finally:
        db.close()
        ref.close()


def test_failed_epoch_is_not_committed_and_later_epochs_are_correct_in_process(tmp_path: Path) -> None:
    runner = LocalRunner()
    db = _open(tmp_path / "db", runner)
    ref = Reference()
    try:
        s = _setup(db, ref, seed=5)
        committed = db.barriers.committed_epoch
        agg = db.catalog.get("agg")
        assert agg is not None
        runner.hook = AlwaysFail(agg.fragment_id, "synced", str(tmp_path))
        with pytest.raises(PiestreamError, match="streaming epoch failed"):
            s.execute("INSERT INTO a VALUES (1000, 1, 1), (1001, 2, 2)")  # type: ignore[attr-defined]
        assert db.barriers.committed_epoch == committed
        assert db.barriers.pending_dml() == 0
        failed_epochs = {e for e, _, _, _ in read_log(tmp_path)}
        committed_epochs: list[int] = []
        db.barriers.on_commit.append(committed_epochs.append)
        runner.hook = None
        _assert_equal(s, ref)  # the failed statement left no trace
        _drive(s, ref, 5, 4, 8)
        _assert_equal(s, ref)
        # a failed epoch is abandoned: no later epoch reuses its number (executor caches are
        # keyed by epoch, and a cache filled by an attempt of the failed epoch must never pass
        # for committed state)
        assert failed_epochs
        assert not failed_epochs & set(committed_epochs)
        _check_gc(db)
    finally:
        db.close()
        ref.close()


@pytest.mark.spark
def test_spark_task_retries_exactly_once(tmp_path: Path, spark: object) -> None:
    """Spark retries failed tasks (local[2,4]); each retry uploads SSTs under fresh names, one
    report per actor is committed, and the failed attempts' uploads are orphans for GC."""
    anywhere = RandomFaults(seed=7, rate=0.06, log_dir=str(tmp_path), max_failed_attempts=2)
    runner = SparkRunner(spark, anywhere)  # type: ignore[arg-type]
    db = _open(tmp_path / "db", runner, spark)
    ref = Reference()
    try:
        s = _setup(db, ref, seed=9, mvs=SPARK_MVS)
        # and, for sure, some of table a's tasks fail after uploading their SSTs
        a = db.catalog.get("a")
        assert a is not None
        after_upload = RandomFaults(
            seed=8,
            rate=0.4,
            log_dir=str(tmp_path),
            points=("synced", "reported"),
            fragment_id=a.fragment_id,
        )
        runner.hook = AnyOf((anywhere, after_upload))
        # the faults drawn depend on the epochs' numbers (from the clock): statements go on, in
        # rounds of 10, until the faults cover what the assertions below need (one round usually)
        for start in range(4, 44, 10):
            _drive(s, ref, 9, start, 10)
            _assert_equal(s, ref, SPARK_MVS)
            faults = read_log(tmp_path)
            points = {p for _, _, p, _ in faults}
            if len(faults) >= 4 and len(points) >= 3 and any(n > 0 for _, _, _, n in faults):
                break
        assert len(faults) >= 4 and len(points) >= 3, faults
        assert any(n > 0 for _, _, _, n in faults), "some task should have failed twice"
        assert set(HOOK_POINTS) >= points
        assert _check_gc(db), "failed attempts after 'synced' must have left orphaned SSTs"
        _assert_equal(s, ref, SPARK_MVS)
    finally:
        db.close()
        ref.close()


@pytest.mark.spark
def test_spark_failure_exhausting_retries(tmp_path: Path, spark: object) -> None:
    """Every attempt of one MV's tasks fails: Spark gives up after 4 attempts, the barrier
    manager after its epoch retries; the statement gets an error, nothing of the epoch is
    committed, and the next epochs (faults gone) are correct."""
    runner = SparkRunner(spark)  # type: ignore[arg-type]
    db = _open(tmp_path / "db", runner, spark)
    ref = Reference()
    try:
        s = _setup(db, ref, seed=13, mvs=SPARK_MVS)
        committed = db.barriers.committed_epoch
        a = db.catalog.get("a")
        assert a is not None  # the table's actors fail after emitting part of their changes
        runner.hook = AlwaysFail(a.fragment_id, "emitting", str(tmp_path))
        with pytest.raises(PiestreamError, match="streaming epoch failed"):
            s.execute("INSERT INTO a VALUES (1000, 1, 1), (1001, 2, 2)")  # type: ignore[attr-defined]
        assert db.barriers.committed_epoch == committed
        assert db.barriers.pending_dml() == 0
        failed_epochs = {e for e, _, _, _ in read_log(tmp_path)}
        committed_epochs: list[int] = []
        db.barriers.on_commit.append(committed_epochs.append)
        runner.hook = None
        _assert_equal(s, ref, SPARK_MVS)
        _drive(s, ref, 13, 4, 4)
        _assert_equal(s, ref, SPARK_MVS)
        assert not failed_epochs & set(committed_epochs)
        _check_gc(db)
    finally:
        db.close()
        ref.close()
