"""A real Spark standalone cluster: a Master and two one-core Workers from the pinned pyspark
(`standalone.StandaloneCluster`), `piestream serve --master spark://...` as the driver (the test
suite's own SparkSession is local: a cluster needs a driver of its own), objects in an S3 bucket
on a loopback S3 server, the meta store with the driver.

1. MVs (an aggregation, a join, a top-n) over random DML equal their queries (DuckDB over the
   tables' contents) after every round, and both executors ran the actors.
2. Chaos: a Worker and its executor are SIGKILLed while inserts stream in: every acknowledged
   insert is there, the MVs equal their queries, epochs go on with one slot, the ADAPTIVE table
   follows the cluster's task slots (Spark's own count of them) down to 1 and back to 2, and a
   Worker that joins afterwards gets work (its executor runs Python workers).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import duckdb
import psycopg
import pytest
from server_proc import ServerProcess, start_server
from standalone import StandaloneCluster, executor_pids, moto_bucket_url, python_children

pytestmark = pytest.mark.spark

MVS = {
    "agg": "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM a GROUP BY g",
    "j": "SELECT a.k, a.v, b.w FROM a JOIN b ON a.g = b.g",
    "top": "SELECT k, v FROM a ORDER BY v DESC, k LIMIT 5",
}
CHAOS_MVS = {
    "cagg": "SELECT k % 7 AS g, count(*) AS n, sum(v) AS s FROM c GROUP BY k % 7",
    "ctop": "SELECT k, v FROM c ORDER BY v DESC, k LIMIT 3",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    try:
        c.start(workers=2)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def server(cluster: StandaloneCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("standalone-db") / "data"
    env = {"AWS_EC2_METADATA_DISABLED": "true"}
    with moto_bucket_url("piestream-standalone") as url:
        args = ("--master", cluster.url, "--barrier-interval", "30", "--object-store", url, "--no-dashboard")
        srv = start_server(data, *args, env=env)
        try:
            yield srv
        finally:
            srv.stop()


def _rows(conn: psycopg.Connection[Any], sql: str) -> list[tuple[Any, ...]]:
    rows = conn.execute(sql).fetchall()  # type: ignore[call-overload]
    return sorted(tuple(int(x) if hasattr(x, "to_integral_value") else x for x in r) for r in rows)


def _check_views(conn: psycopg.Connection[Any], tables: dict[str, str], views: dict[str, str]) -> None:
    """Every view equals its query, run by DuckDB over the tables' current contents."""
    duck = duckdb.connect()
    for name, ddl in tables.items():
        duck.execute(ddl)
        rows = _rows(conn, f"SELECT * FROM {name}")
        if rows:
            duck.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    for name, q in views.items():
        want = sorted(duck.execute(q).fetchall())
        assert _rows(conn, f"SELECT * FROM {name}") == want, name
    duck.close()


def test_mvs_equal_their_queries_on_a_standalone_cluster(
    cluster: StandaloneCluster, server: ServerProcess
) -> None:
    rng = random.Random(27)
    tables = {
        "a": "CREATE TABLE a (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)",
        "b": "CREATE TABLE b (g BIGINT PRIMARY KEY, w VARCHAR)",
    }
    model: dict[int, tuple[int, int]] = {}
    with psycopg.connect(server.dsn, autocommit=True) as c:
        for ddl in tables.values():
            c.execute(ddl)  # type: ignore[call-overload]
        c.execute("INSERT INTO b VALUES " + ", ".join(f"({g}, 'w{g}')" for g in range(0, 6)))
        for name, q in MVS.items():
            c.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")  # type: ignore[call-overload]
        next_k = 0
        for r in range(4):
            rows = []
            for _ in range(40):
                model[next_k] = (rng.randrange(8), rng.randrange(1000))
                rows.append(f"({next_k}, {model[next_k][0]}, {model[next_k][1]})")
                next_k += 1
            c.execute("INSERT INTO a VALUES " + ", ".join(rows))  # type: ignore[call-overload]
            moved = rng.sample(sorted(model), 10)
            for k in moved:
                g, v = model[k]
                model[k] = ((g + 1) % 8, v + 7)
            keys = ", ".join(map(str, moved))
            c.execute(f"UPDATE a SET g = (g + 1) % 8, v = v + 7 WHERE k IN ({keys})")  # type: ignore[call-overload]
            gone = rng.sample(sorted(model), 8)
            for k in gone:
                del model[k]
            c.execute(f"DELETE FROM a WHERE k IN ({', '.join(map(str, gone))})")  # type: ignore[call-overload]
            c.execute(f"UPDATE b SET w = 'r{r}' WHERE g = {r}")  # type: ignore[call-overload]
            assert _rows(c, "SELECT * FROM a") == sorted((k, g, v) for k, (g, v) in model.items())
            _check_views(c, tables, MVS)
    # the actors ran on both executors, not in the driver
    executors = [pid for w in cluster.workers for pid in executor_pids(w)]
    assert len(executors) == 2, executors
    assert all(python_children(pid) >= 1 for pid in executors), executors


def _table_parallelism(conn: psycopg.Connection[Any]) -> set[int]:
    rows = _rows(conn, "SELECT parallelism FROM rw_catalog.rw_fragments WHERE job_name = 'c'")
    return {p for (p,) in rows}


def test_a_worker_killed_mid_stream_loses_nothing_and_a_new_one_gets_work(
    cluster: StandaloneCluster, server: ServerProcess
) -> None:
    tables = {"c": "CREATE TABLE c (k BIGINT PRIMARY KEY, v BIGINT)"}
    acked: list[int] = []  # first keys of the acknowledged batches
    unknown: list[int] = []  # ... of batches whose statement failed (may or may not be in)
    stop = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        batch = 0
        conn = psycopg.connect(server.dsn, autocommit=True)
        while not stop.is_set():
            first = batch * 10
            values = ", ".join(f"({k}, {k * 13 % 101})" for k in range(first, first + 10))
            try:
                conn.execute(f"INSERT INTO c VALUES {values}")  # type: ignore[call-overload]
                acked.append(first)
            except psycopg.Error as e:
                unknown.append(first)
                errors.append(str(e))
                if conn.closed:
                    conn = psycopg.connect(server.dsn, autocommit=True)
            batch += 1
        conn.close()

    def wait_acked(n: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        target = len(acked) + n
        while len(acked) < target:
            assert time.monotonic() < deadline, f"epochs stopped: {len(acked)} acked, errors {errors[-3:]}"
            time.sleep(0.1)

    def wait_parallelism(conn: psycopg.Connection[Any], n: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while _table_parallelism(conn) != {n}:
            assert time.monotonic() < deadline, f"table c stays at {_table_parallelism(conn)}, not {n}"
            wait_acked(1)

    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(tables["c"])  # type: ignore[call-overload]
        for name, q in CHAOS_MVS.items():
            c.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")  # type: ignore[call-overload]
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        try:
            wait_acked(3)
            victim = cluster.workers[1]
            assert executor_pids(victim), "the victim Worker runs no executor"
            # ADAPTIVE (the default): the table's fragments run one actor per task slot
            assert (
                dict(_rows(c, "SELECT name, parallelism FROM rw_catalog.rw_streaming_jobs"))["c"]
                == "ADAPTIVE"
            )
            assert _table_parallelism(c) == {2}
            victim.kill()  # the Worker and its executor JVM, mid-stream
            wait_acked(3)  # epochs go on, on the slot that remains
            wait_parallelism(c, 1)  # ... and the adaptive job follows the cluster down to it
            newcomer = cluster.add_workers(1)[0]
            wait_parallelism(c, 2)  # ... and up again when a Worker joins
            deadline = time.monotonic() + 90
            while not any(python_children(p) for p in executor_pids(newcomer)):
                assert time.monotonic() < deadline, "the new Worker's executor never ran an actor"
                wait_acked(1)
        finally:
            stop.set()
            t.join(60)
        present = {k for (k,) in _rows(c, "SELECT k FROM c")}
        for first in acked:  # every acknowledged insert is there ...
            assert set(range(first, first + 10)) <= present, first
        allowed = {k for first in acked + unknown for k in range(first, first + 10)}
        assert present <= allowed  # ... and nothing else
        _check_views(c, tables, CHAOS_MVS)
