"""With the streaming job on Spark: Python UDFs run inside Spark's Python workers when an MV uses
them (the function's source travels with the plan and is compiled there) and in batch queries;
and a Delta Lake sink of that MV, whose actors stage each epoch's rows in the workers, gets each
committed epoch once (the driver commits it to the Delta table)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import piestream

pytestmark = pytest.mark.spark

WORKER_PID = """CREATE FUNCTION worker_pid(x int) RETURNS bigint LANGUAGE python AS $$
def worker_pid(x):
    import os
    return os.getpid()
$$"""
DOUBLE_VEC = """CREATE FUNCTION double_vec(x int) RETURNS bigint LANGUAGE python
WITH (vectorized = true) AS $$
def double_vec(x):
    import pyarrow.compute as pc
    return pc.multiply(x.cast("int64"), 2)
$$"""


def test_python_udfs_run_in_spark_workers(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with piestream.connect(tmp_path / "db", spark=spark, barrier_interval=0.5) as conn:
        conn.execute(WORKER_PID)
        conn.execute(DOUBLE_VEC)
        conn.sql(
            "CREATE FUNCTION count_char(s varchar, c varchar) RETURNS int LANGUAGE sql "
            "AS $$ SELECT length(s) - length(replace(s, c, '')) $$"
        )
        conn.sql("CREATE TABLE t (k int PRIMARY KEY, s varchar)")
        conn.sql(
            "CREATE MATERIALIZED VIEW mv AS SELECT k, worker_pid(k) AS pid, double_vec(k) AS d, "
            "count_char(s, 'c') AS c FROM t"
        )
        location = tmp_path / "delta"
        conn.sql(
            f"CREATE SINK s FROM mv WITH (connector = 'delta', location = '{location}', type = 'upsert')"
        )
        conn.sql("INSERT INTO t VALUES (1, 'cc'), (2, 'c'), (3, 'x'), (4, 'y')")
        conn.sql("DELETE FROM t WHERE k = 4")
        rows = conn.sql("SELECT k, pid, d, c FROM mv ORDER BY k").rows
        assert [(k, d, c) for k, _, d, c in rows] == [(1, 2, 2), (2, 4, 1), (3, 6, 0)]
        assert all(pid != os.getpid() for _, pid, _, _ in rows)  # computed in a Spark Python worker
        assert conn.sql("SELECT double_vec(k) FROM t ORDER BY k").rows == [(2,), (4,), (6,)]

        from deltalake import DeltaTable

        deadline = time.monotonic() + 60
        while (
            sorted(tuple(r.values()) for r in DeltaTable(str(location)).to_pyarrow_table().to_pylist())
            != rows
        ):
            assert time.monotonic() < deadline, "the Delta table did not catch up with the MV"
            time.sleep(0.2)
        epochs = [
            int(h["piestream.epoch"]) for h in DeltaTable(str(location)).history() if "piestream.epoch" in h
        ]
        assert len(epochs) == len(set(epochs)) >= 1
