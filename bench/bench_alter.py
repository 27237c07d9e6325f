"""ALTER TABLE ADD COLUMN on a large table with 3 MVs over it: the statement's time (no row is
rewritten, so it does not grow with the table) and the MVs committing afterwards.

    .venv/bin/python bench/bench_alter.py [rows]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

import piestream


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as d, piestream.connect(d, runner="local", barrier_interval=3600) as c:
        c.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g INT, v BIGINT)")
        for name, q in (
            ("m1", "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g"),
            ("m2", "SELECT * FROM t WHERE v % 7 = 0"),
            ("m3", "SELECT max(v) AS mx FROM t"),
        ):
            c.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        step = 1_000_000
        t0 = time.perf_counter()
        for lo in range(0, rows, step):
            k = np.arange(lo, min(rows, lo + step), dtype=np.int64)
            c.insert("t", pa.table({"k": k, "g": (k % 100).astype(np.int32), "v": k * 3}))
        loaded = time.perf_counter() - t0
        t1 = time.perf_counter()
        c.sql("ALTER TABLE t ADD COLUMN w INT DEFAULT 5")
        alter = time.perf_counter() - t1
        c.sql(f"INSERT INTO t VALUES ({rows}, 1, 7, 9)")
        n = c.sql("SELECT count(*) FROM m2").scalar()
        w = c.sql("SELECT count(*) FROM t WHERE w = 5").scalar()
        print(
            f"{rows} rows (loaded in {loaded:.1f} s), 3 MVs: ALTER TABLE ADD COLUMN {alter * 1000:.1f} ms; "
            f"after it m2 has {n} rows, {w} rows read w = 5; load average {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
