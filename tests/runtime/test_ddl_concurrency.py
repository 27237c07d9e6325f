"""DDL beside the barrier loop: epochs plan from an immutable snapshot of the graph, and a
statement's catalog, graph and first epoch change together or not at all (meta's DdlController).

Spark serializes each epoch's plan with cloudpickle while DDL statements plan, run SELECTs and
change the graph in other threads. When the plan held the catalog's own objects, a SELECT
computing a cached property of a shared `TableDesc` while cloudpickle walked it failed the epoch
with "dictionary changed size during iteration" (issue 13). `SparkLikeRunner` serializes every
plan the same way and runs the copy, as Spark does.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from pyspark import cloudpickle

from piestream.common.chunk import StreamChunk
from piestream.common.errors import PiestreamError
from piestream.runtime.epoch_plan import EpochPlan
from piestream.runtime.exchange import ActorReport
from piestream.runtime.runners import LocalRunner
from piestream.server.database import Database, DatabaseConfig


class SparkLikeRunner(LocalRunner):
    """Serializes each epoch plan with cloudpickle (Spark's serializer) and runs the copy."""

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[EpochPlan] = []
        self.failures: list[BaseException] = []

    def run(self, plan: EpochPlan, dml: Mapping[int, Sequence[StreamChunk]]) -> list[ActorReport]:
        try:
            data = cloudpickle.dumps(plan)
        except BaseException as e:
            self.failures.append(e)
            raise
        self.plans = [*self.plans[-1:], plan]
        return super().run(cloudpickle.loads(data), dml)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    config = DatabaseConfig(runner="local", barrier_interval=0.001, background_compaction=False)
    runner = SparkLikeRunner()
    database = Database(tmp_path / "data", config=config, runner=runner)
    database.execute(
        "CREATE TABLE t (k INT PRIMARY KEY, v INT, a VARCHAR[], s STRUCT<x INT, y VARCHAR>);"
        "INSERT INTO t VALUES (1, 1, ARRAY['a'], ROW(1, 'b')), (2, 2, NULL, NULL)"
    )
    yield database
    database.close()


def test_an_epoch_plan_shares_no_object_with_the_catalog(db: Database) -> None:
    db.execute("CREATE MATERIALIZED VIEW m AS SELECT k, v + 1 AS w FROM t")
    db.barriers.flush()
    runner = db.barriers.runner
    assert isinstance(runner, SparkLikeRunner)
    plan = runner.plans[-1]
    assert set(plan.fragments) == set(db.barriers.graph.fragments)
    for fid, data in plan.fragments.items():
        assert isinstance(data, bytes)  # a snapshot in the plan format, not the shared objects
        running = db.barriers.graph.fragments[fid]
        assert plan.fragment(fid) == running and plan.fragment(fid) is not running


def test_ddl_select_and_dml_beside_the_barrier_loop(db: Database) -> None:
    stop = time.monotonic() + 4.0
    errors: list[BaseException] = []

    def ddl(n: int) -> None:
        s = db.session()
        i = 0
        try:
            while time.monotonic() < stop:
                i += 1
                name = f"m{n}_{i}"
                s.execute(f"CREATE MATERIALIZED VIEW {name} AS SELECT k, v + 1 AS w, a, s FROM t WHERE v > 0")
                for _ in range(3):  # the first SELECT fills the MV's TableDesc cached properties
                    s.execute(f"SELECT * FROM {name}")
                s.execute(f"DROP MATERIALIZED VIEW {name}")
        except BaseException as e:
            errors.append(e)

    def dml() -> None:
        s = db.session()
        k = 100
        try:
            while time.monotonic() < stop:
                k += 1
                s.execute(f"INSERT INTO t VALUES ({k}, {k % 7}, ARRAY['x{k}'], ROW({k}, 'y'))")
        except BaseException as e:
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: races show up within seconds
    try:
        threads = [threading.Thread(target=ddl, args=(n,)) for n in range(3)]
        threads.append(threading.Thread(target=dml))
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    runner = db.barriers.runner
    assert isinstance(runner, SparkLikeRunner)
    assert errors == []
    assert runner.failures == []
    assert db.barriers.last_error is None  # no epoch attempt failed
    s = db.session()
    s.execute("CREATE MATERIALIZED VIEW final AS SELECT v, count(*) AS c FROM t GROUP BY v")
    want = sorted(s.execute_one("SELECT v, count(*) FROM t GROUP BY v").rows)
    assert sorted(s.execute_one("SELECT * FROM final").rows) == want
    assert [r.name for r in db.catalog.snapshot().relations()] == ["t", "final"]


def test_a_failed_first_epoch_restores_graph_and_catalog(db: Database) -> None:
    """The upstream table gained an output edge into the new job; after the backfill fails, the
    running and the stored table fragment are the ones before, and no fragment of the job is left."""
    graph = dict(db.barriers.graph.fragments)
    stored = {f.fragment_id: f for f in db.catalog.all_fragments()}
    db.set_strict_mode(True)  # a data error fails the backfill (by default it is a NULL)
    with pytest.raises(PiestreamError) as e:
        db.execute("CREATE MATERIALIZED VIEW bad AS SELECT k, 10 / (v - 1) AS x FROM t")
    assert e.value.sqlstate == "22012"
    assert dict(db.barriers.graph.fragments) == graph
    assert {f.fragment_id: f for f in db.catalog.all_fragments()} == stored
    assert db.catalog.get("bad") is None
    db.execute("CREATE MATERIALIZED VIEW good AS SELECT k, 10 / v AS x FROM t")  # and DDL goes on
    assert sorted(db.execute("SELECT * FROM good")[0].rows) == [(1, 10), (2, 5)]
