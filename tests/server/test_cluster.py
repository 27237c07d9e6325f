"""A real multi-process Spark cluster: `piestream serve --master "local-cluster[2,1,1024]"`.

Spark's local-cluster mode starts two executor JVMs, each with its own Python workers, next to
the driver: actors run in other processes than the driver and than each other, so nothing may
rest on one process's memory. One test keeps the objects in the local data directory, the other
in an S3 bucket on a loopback S3 server (moto), so that no state rests on one machine's disk
either (only the meta store, a SQLite file, stays with the driver). Each runs tables, MVs (an
aggregation, a join, an MV on an MV), DML before and after the MVs, and checks every MV against
DuckDB; it also checks that both executors ran Python workers. After the S3 run a new server
process reads everything back from the bucket and goes on. The barrier interval is long: epochs
run for the statements (each waits for its own), not in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
from server_proc import ServerProcess, start_server
from standalone import moto_bucket_url

MASTER = "local-cluster[2,1,1024]"
TABLES = [
    "CREATE TABLE a (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)",
    "CREATE TABLE b (g BIGINT PRIMARY KEY, w VARCHAR)",
]
MVS = {
    "agg": "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM a GROUP BY g",
    "j": "SELECT a.k, a.v, b.w FROM a JOIN b ON a.g = b.g",
    "agg2": "SELECT n, count(*) AS groups FROM agg GROUP BY n",
}
BEFORE = [  # before the MVs exist (they backfill it)
    "INSERT INTO a VALUES " + ", ".join(f"({k}, {k % 5}, {k * 3 % 17})" for k in range(40)),
    "INSERT INTO b VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three')",
]
AFTER = [  # streamed through the MVs
    "INSERT INTO a VALUES " + ", ".join(f"({k}, {k % 7}, {k})" for k in range(30, 70)),
    "UPDATE a SET v = v + 100 WHERE g = 2",
    "DELETE FROM a WHERE k % 9 = 0",
    "INSERT INTO b VALUES (4, 'four'), (1, 'uno')",
    "DELETE FROM b WHERE g = 3",
]
DUCK_TABLES = [
    "CREATE TABLE a (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)",
    "CREATE TABLE b (g BIGINT PRIMARY KEY, w VARCHAR)",
]


def _duck_sql(sql: str) -> str:
    return sql.replace("INSERT INTO", "INSERT OR REPLACE INTO")  # piestream tables upsert on the pk


def _reference() -> dict[str, list[tuple[Any, ...]]]:
    con = duckdb.connect()
    for s in [*DUCK_TABLES, *BEFORE, *AFTER]:
        con.execute(_duck_sql(s))
    out = {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall()) for t in ("a", "b")}
    queries = {**MVS, "agg2": MVS["agg2"].replace("FROM agg", f"FROM ({MVS['agg']})")}
    for name, q in queries.items():
        out[name] = sorted(con.execute(q).fetchall())
    con.close()
    return out


def _contents(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name in ("a", "b", *MVS):
        rows = conn.execute(f"SELECT * FROM {name}").fetchall()  # type: ignore[arg-type]
        out[name] = sorted(tuple(int(x) if hasattr(x, "to_integral_value") else x for x in r) for r in rows)
    return out


def _python_workers_per_executor(server: ServerProcess) -> dict[int, int]:
    """{executor JVM pid: Python processes it started} for the executors in the server's
    process group (Spark's Python daemon puts itself into a group of its own)."""
    procs: dict[int, tuple[int, int, str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        procs[int(d.name)] = (int(fields[1]), int(fields[2]), cmd)
    executors = [
        pid
        for pid, (_, pgid, cmd) in procs.items()
        if pgid == server.proc.pid and "CoarseGrainedExecutorBackend" in cmd
    ]
    return {
        ex: sum(1 for ppid, _, cmd in procs.values() if ppid == ex and "python" in cmd) for ex in executors
    }


def _run_workload(server: ServerProcess) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as c:
        for s in [*TABLES, *BEFORE]:
            c.execute(s)  # type: ignore[arg-type]
        for name, q in MVS.items():
            c.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")  # type: ignore[arg-type]
        for s in AFTER:
            c.execute(s)  # type: ignore[arg-type]
        assert _contents(c) == _reference()


def _check_both_executors(server: ServerProcess) -> None:
    workers = _python_workers_per_executor(server)
    assert len(workers) == 2, f"want two executor JVMs, found {workers}"
    assert all(n >= 1 for n in workers.values()), f"an executor never ran a Python worker: {workers}"


@pytest.mark.spark
def test_local_cluster_with_local_data_dir(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--master", MASTER, "--barrier-interval", "30")
    try:
        _run_workload(server)
        _check_both_executors(server)
    finally:
        server.stop()
    assert list((tmp_path / "data" / "objects").rglob("*")), "no objects in the data directory"


@pytest.fixture
def s3_url(tmp_path: Path) -> Iterator[str]:
    """A bucket on a moto S3 server on 127.0.0.1, as an object store URL with its credentials."""
    with moto_bucket_url("piestream-cluster") as url:
        yield url


def _bucket_objects(url: str) -> list[str]:
    from piestream.storage.object_store import open_object_store

    return [m.path for m in open_object_store(url).list("")]


@pytest.mark.spark
def test_local_cluster_with_s3_object_store(tmp_path: Path, s3_url: str) -> None:
    env = {"AWS_EC2_METADATA_DISABLED": "true"}
    args = ("--master", MASTER, "--barrier-interval", "30", "--object-store", s3_url)
    server = start_server(tmp_path / "data", *args, env=env)
    try:
        _run_workload(server)
        _check_both_executors(server)
    finally:
        server.stop()
    assert not (tmp_path / "data" / "objects").exists(), "objects went to the local disk"
    assert any(p.endswith(".sst") or "sst" in p for p in _bucket_objects(s3_url)), "no SSTs in the bucket"
    # a new server process (in-process runner: no second cluster start-up in CI) reads
    # everything back from the bucket and goes on
    server = start_server(tmp_path / "data", "--runner", "local", "--object-store", s3_url, env=env)
    try:
        with psycopg.connect(server.dsn, autocommit=True) as c:
            assert _contents(c) == _reference()
            c.execute("INSERT INTO a VALUES (1000, 4, 1)")
            assert (4, "four") in c.execute("SELECT g, w FROM b").fetchall()
            assert c.execute("SELECT w FROM j WHERE k = 1000").fetchall() == [("four",)]
    finally:
        server.stop()
