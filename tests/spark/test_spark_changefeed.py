"""An MV's changes as a Spark Structured Streaming source: offsets are epochs, every change is
delivered exactly once, in commit order, across a query that fails in the middle and restarts
from its checkpoint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piestream.connectors.spark import register
from piestream.server.database import Database, DatabaseConfig

pytestmark = pytest.mark.spark


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(tmp_path / "db", config=DatabaseConfig(runner="local", barrier_interval=0.2))
    yield d
    d.close()


def _apply(state: Counter[tuple[Any, ...]], rows: list[dict[str, Any]]) -> None:
    """Replay changes on a multiset of rows (a delete must find its row)."""
    for r in rows:
        row = (r["p"], r["s"], r["n"])
        if r["op"] in ("insert", "update_insert"):
            state[row] += 1
        else:
            assert state[row] > 0, f"delete of a row not there: {r}"
            state[row] -= 1
            if not state[row]:
                del state[row]


def test_stream_of_mv_changes_exactly_once_across_a_restart(spark, db: Database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(spark)
    s = db.session()
    s.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
    s.execute("INSERT INTO t VALUES (1, 10), (2, 20), (3, 31)")
    s.execute(
        "CREATE MATERIALIZED VIEW mv AS SELECT v % 2 AS p, sum(v) AS s, count(*) AS n FROM t GROUP BY v % 2"
    )
    s.execute("CREATE SUBSCRIPTION sub FROM mv WITH (retention = '1h')")
    start = {(r[0], r[1], r[2]): 1 for r in s.execute("SELECT p, s, n FROM mv")[0].rows}

    seen: dict[int, list[dict[str, Any]]] = {}  # batch id -> rows (a replayed batch overwrites)
    attempts: list[tuple[int, list[dict[str, Any]]]] = []
    fail_batch: list[int] = []

    def sink(df: Any, batch_id: int) -> None:
        rows = [r.asDict() for r in df.collect()]
        attempts.append((batch_id, rows))
        if rows and not fail_batch:
            fail_batch.append(batch_id)
            raise RuntimeError("simulated crash in the middle of a micro-batch")
        seen[batch_id] = rows

    def start_query() -> Any:
        return (
            spark.readStream.format("piestream")
            .option("table", "mv")
            .option("changes", "true")
            .option("data_dir", str(db.data_dir))
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )

    q = start_query()
    q.processAllAvailable()
    s.execute("INSERT INTO t VALUES (4, 41)")
    s.execute("UPDATE t SET v = 11 WHERE k = 1")
    db.barriers.flush()
    with pytest.raises(Exception, match="simulated crash"):
        q.processAllAvailable()
    q.stop()
    # the failed batch was not committed; changes keep coming while the query is down
    s.execute("DELETE FROM t WHERE k = 2")
    s.execute("INSERT INTO t VALUES (5, 50), (6, 61)")

    q = start_query()  # resumes from the checkpoint: the failed batch again, then the rest
    q.processAllAvailable()
    s.execute("UPDATE t SET v = 100 WHERE k = 5")
    db.barriers.flush()
    q.processAllAvailable()
    q.stop()

    failed_id, failed_rows = attempts[0] if attempts[0][1] else next(a for a in attempts if a[1])
    assert seen[failed_id] == failed_rows  # the replayed micro-batch is the same epochs, same rows
    rows = [r for b in sorted(seen) for r in seen[b]]
    epochs = [r["epoch"] for r in rows]
    assert epochs == sorted(epochs)  # commit order
    log = s.execute("DECLARE c SUBSCRIPTION CURSOR FOR sub SINCE begin(); FETCH 1000 FROM c")[1]
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in log.rows] == [
        (r["p"], r["s"], r["n"], r["op"], r["epoch"]) for r in rows
    ]  # every change once: no gap, no duplicate
    state: Counter[tuple[Any, ...]] = Counter(start)
    _apply(state, rows)
    assert state == Counter({(r[0], r[1], r[2]): 1 for r in s.execute("SELECT p, s, n FROM mv")[0].rows})
    assert {r["op"] for r in rows} >= {"insert", "update_delete", "update_insert"}
