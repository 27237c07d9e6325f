"""Epochs end to end on the in-process runner and on Spark: DML -> table -> MV, atomic commits."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from graph_fixtures import MV, TABLE, table_and_mv

from piestream.common.chunk import Op, StreamChunk
from piestream.common.types import BIGINT, INT
from piestream.meta.barrier_manager import BarrierManager
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.plan.serde import encode_fragment
from piestream.runtime.epoch_plan import plan_epoch
from piestream.runtime.runners import LocalRunner, SparkRunner
from piestream.storage.hummock import HummockStorage, SstableStore
from piestream.storage.object_store import open_object_store
from piestream.storage.table.storage_table import StorageTable


def _setup(tmp_path, runner):  # type: ignore[no-untyped-def]
    url = str(tmp_path / "store")
    sst = SstableStore(open_object_store(url))
    hm = HummockManager(MetaStore(tmp_path / "meta.db"), sst)
    bm = BarrierManager(hm, runner, url)
    bm.add_fragments(table_and_mv(2))
    return sst, hm, bm


def _read(sst, hm, desc):  # type: ignore[no-untyped-def]
    v = hm.version
    return sorted(StorageTable(desc, HummockStorage(sst, v), v.max_committed_epoch).iter_rows())


def _run_random_epochs(bm, n_epochs: int, seed: int):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    model: dict[int, int] = {}
    for _ in range(n_epochs):
        rows = []
        for _ in range(rng.randint(0, 30)):
            k = rng.randint(0, 40)
            if rng.random() < 0.25:
                rows.append((Op.DELETE, (k, 0)))
                model.pop(k, None)
            else:
                v = rng.randint(-5, 100)
                rows.append((Op.INSERT, (k, v)))
                model[k] = v
        futs = [bm.submit_dml(1, StreamChunk.from_rows(rows, [INT, BIGINT]))] if rows else []
        epoch = bm.run_epoch()
        assert all(f.result(timeout=0) == epoch for f in futs)
    return model


def test_local_runner_table_and_mv_equal_model(tmp_path) -> None:  # type: ignore[no-untyped-def]
    sst, hm, bm = _setup(tmp_path, LocalRunner())
    model = _run_random_epochs(bm, 12, seed=1)
    assert _read(sst, hm, TABLE) == sorted(model.items())
    assert _read(sst, hm, MV) == sorted((k, v * 2) for k, v in model.items() if v > 0)
    # every epoch committed both tables at once
    v = hm.version
    assert v.table_committed_epoch[1] == v.table_committed_epoch[2] == v.max_committed_epoch


@pytest.mark.spark
def test_spark_runner_table_and_mv_equal_model(tmp_path, spark) -> None:  # type: ignore[no-untyped-def]
    sst, hm, bm = _setup(tmp_path, SparkRunner(spark))
    model = _run_random_epochs(bm, 6, seed=2)
    assert _read(sst, hm, TABLE) == sorted(model.items())
    assert _read(sst, hm, MV) == sorted((k, v * 2) for k, v in model.items() if v > 0)


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_actors_grouped_into_task_slots(tmp_path, slots: int) -> None:  # type: ignore[no-untyped-def]
    """A stage with more actors than task slots runs several actors per task: each actor in
    exactly one partition, routed there, and the results are those of one task per actor."""
    sst, hm, bm = _setup(tmp_path, LocalRunner(task_slots=slots))
    plan = plan_epoch(
        bm.graph,
        {fid: encode_fragment(f) for fid, f in bm.graph.fragments.items()},
        data_epoch=bm._data_epoch,
        barrier=None,  # type: ignore[arg-type]
        committed_epoch=0,
        version=hm.version,
        store_url="",
    )
    plan = replace(plan, task_slots=slots)
    for k, actors in enumerate(plan.stages):
        n = plan.num_partitions(k)
        assert n == min(slots, len(actors))
        owned = [a for i in range(n) for a in plan.actors_of_partition(k, i)]
        assert sorted(owned) == sorted(actors)
        index = plan.partition_index(k)
        assert all(a in plan.actors_of_partition(k, index[a]) for a in actors)
    model = _run_random_epochs(bm, 8, seed=3)
    assert _read(sst, hm, TABLE) == sorted(model.items())
    assert _read(sst, hm, MV) == sorted((k, v * 2) for k, v in model.items() if v > 0)


def test_hash_agg_reads_previous_states_from_the_worker_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In one long-lived worker (the in-process runner) the HashAgg actors find their groups'
    states in the cache they filled at the committed epoch, and the MV stays exact."""
    from piestream.server.database import Database, DatabaseConfig

    config = DatabaseConfig(runner="local", barrier_interval=3600, background_compaction=False)
    db = Database(tmp_path / "db", config=config)
    try:
        s = db.session()
        s.execute("CREATE TABLE t (k INT, v BIGINT)")
        s.execute("CREATE MATERIALIZED VIEW m AS SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k")
        rng = random.Random(7)
        rows: list[tuple[int, int]] = []
        for _ in range(8):
            batch = [(rng.randint(0, 30), rng.randint(-9, 9)) for _ in range(40)]
            rows += batch
            s.execute("INSERT INTO t VALUES " + ", ".join(f"({k}, {v})" for k, v in batch))
        want = {}
        for k, v in rows:
            n, t = want.get(k, (0, 0))
            want[k] = (n + 1, t + v)
        got = s.execute_one("SELECT k, n, s FROM m ORDER BY k").rows
        assert got == [(k, n, t) for k, (n, t) in sorted(want.items())]
        stats = db.barriers.stats
        assert sum(e.cache_warm_actors for e in stats) > 0
        hits, misses = sum(e.cache_hits for e in stats), sum(e.cache_misses for e in stats)
        assert hits > misses > 0, (hits, misses)  # 31 groups read from storage once, then cached
    finally:
        db.close()


@pytest.mark.parametrize("slots", [0, 1, 2, 3])
def test_no_shuffle_fragments_run_in_their_upstreams_task(tmp_path, slots: int) -> None:  # type: ignore[no-untyped-def]
    """A fragment fed only by a no-shuffle edge (the scan of an MV on a table) shares its
    upstream's stage and each actor index its partition, so the table's rows reach it inside the
    task; the MVs (one on the other too) stay equal to their queries."""
    from piestream.plan.fragment import DispatchKind
    from piestream.server.database import Database, DatabaseConfig

    config = DatabaseConfig(runner="local", barrier_interval=3600, background_compaction=False)
    db = Database(tmp_path / "db", config=config, runner=LocalRunner(task_slots=slots))
    mvs = {
        "pos": "SELECT k, v FROM t WHERE v > 0",
        "agg": "SELECT v % 3 AS g, count(*) AS n, sum(v) AS s FROM t GROUP BY v % 3",
        "top": "SELECT g, n FROM agg WHERE n > 2",
    }
    try:
        s = db.session()
        s.execute("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
        for name, q in mvs.items():
            s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        bm = db.barriers
        graph = bm.graph
        plan = replace(
            plan_epoch(
                graph,
                {fid: encode_fragment(f) for fid, f in graph.fragments.items()},
                data_epoch=bm._data_epoch,
                barrier=None,  # type: ignore[arg-type]
                committed_epoch=0,
                version=db.hummock.version,
                store_url="",
            ),
            task_slots=slots,
        )
        stage_of = {f: k for k, actors in enumerate(plan.stages) for f, _ in actors}
        fused = 0
        for f in graph.fragments.values():
            for e in f.outputs:
                d = graph.fragments[e.downstream_fragment_id]
                if e.kind is DispatchKind.NO_SHUFFLE and d.upstream_fragment_ids() == [f.fragment_id]:
                    fused += 1
                    k = stage_of[f.fragment_id]
                    assert stage_of[d.fragment_id] == k
                    index = plan.partition_index(k)
                    for i in range(f.parallelism):
                        assert index[(d.fragment_id, i)] == index[(f.fragment_id, i)]
                        mine = plan.actors_of_partition(k, index[(f.fragment_id, i)])
                        assert mine.index((f.fragment_id, i)) < mine.index((d.fragment_id, i))
                elif e.kind is not DispatchKind.NO_SHUFFLE:
                    assert stage_of[d.fragment_id] > stage_of[f.fragment_id]
        assert fused >= 3  # t -> pos, t -> agg's scan, agg -> top
        for k in range(len(plan.stages)):
            owned = [a for i in range(plan.num_partitions(k)) for a in plan.actors_of_partition(k, i)]
            assert sorted(owned) == sorted(plan.stages[k])
        rng = random.Random(slots)
        for _ in range(6):
            rows = [(rng.randint(0, 50), rng.randint(-20, 100)) for _ in range(40)]
            s.execute("INSERT INTO t VALUES " + ", ".join(f"({k}, {v})" for k, v in rows))
            s.execute(f"DELETE FROM t WHERE k % 7 = {rng.randint(0, 6)}")
            s.execute("FLUSH")
            for name, q in mvs.items():
                assert sorted(s.execute_one(f"SELECT * FROM {name}").rows) == sorted(s.execute_one(q).rows)
    finally:
        db.close()
