"""Loading test data with SQL: `INSERT ... SELECT` from generate_series, end to end.

Each statement runs on a fresh table of a local-runner database (local-directory object store in
a temp dir) and returns once its epoch is committed (durable and visible), as a client sees it:

  * `INSERT INTO t SELECT generate_series(1, N)` into a table without a primary key (row ids);
  * `INSERT INTO u SELECT x, x % 7 FROM generate_series(1, N) x` into a table with a BIGINT
    primary key (every row's key checked against the stored rows: upsert semantics);
  * the same with two MVs on the table (a grouped count / sum and a filter), kept up to date
    in the same epoch.

Side by side: the same rows as an Arrow table through `Connection.insert` (piestream's bulk
ingest, no SQL: the floor the SQL path should reach) and DuckDB running the same statements on
a database file (the anchor: a vectorized engine's INSERT ... SELECT). Best of `--runs`.

    .venv/bin/python bench/bench_sql_load.py [--rows N] [--runs R]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

import piestream
from bench_state_table import Clock  # wall and CPU seconds of a block
from piestream.server.api import Connection


def line(label: str, n: int, clk: Clock) -> None:
    rate = n / clk.wall if clk.wall > 0 else float("inf")
    cpu_rate = n / clk.cpu if clk.cpu > 0 else float("inf")
    print(f"{label:<52} {rate:>11,.0f} rows/s  cpu {cpu_rate:>11,.0f}  ({clk.wall:6.2f} s, {n:,})")


def best(runs: int, setup: Callable[[int], object], body: Callable[[int], object]) -> Clock:
    """The fastest of `runs` runs of `body` (each after its own `setup`, untimed)."""
    out: Clock | None = None
    for i in range(runs):
        setup(i)
        with Clock() as c:
            body(i)
        if out is None or c.wall < out.wall:
            out = c
    assert out is not None
    return out


def piestream_lines(conn: Connection, n: int, runs: int) -> None:
    def ddl(sql: str) -> Callable[[int], object]:
        return lambda i: conn.execute(sql.format(i=i))

    def check(table: str, want_sum: int) -> None:
        got = conn.sql(f"SELECT count(*), sum(x) FROM {table}").rows[0]
        assert tuple(got) == (n, want_sum), got

    total = n * (n + 1) // 2
    c = best(
        runs,
        ddl("CREATE TABLE t{i} (x INT)"),
        lambda i: conn.execute(f"INSERT INTO t{i} SELECT generate_series(1, {n})"),
    )
    check("t0", total)
    line("INSERT INTO t SELECT generate_series (no pk)", n, c)

    c = best(
        runs,
        ddl("CREATE TABLE u{i} (x BIGINT PRIMARY KEY, y INT)"),
        lambda i: conn.execute(f"INSERT INTO u{i} SELECT x, x % 7 FROM generate_series(1, {n}) x"),
    )
    check("u0", total)
    line("INSERT INTO u SELECT ... FROM generate_series x (pk)", n, c)

    c = best(
        runs,
        ddl(
            "CREATE TABLE m{i} (x BIGINT PRIMARY KEY, y INT);"
            "CREATE MATERIALIZED VIEW m{i}_g AS SELECT y, count(*) AS c, sum(x) AS s FROM m{i} GROUP BY y;"
            "CREATE MATERIALIZED VIEW m{i}_f AS SELECT x FROM m{i} WHERE y = 3"
        ),
        lambda i: conn.execute(f"INSERT INTO m{i} SELECT x, x % 7 FROM generate_series(1, {n}) x"),
    )
    got = conn.sql("SELECT sum(c), sum(s) FROM m0_g").rows[0]
    assert tuple(got) == (n, total), got
    line("  the same with 2 MVs on the table", n, c)

    xs = np.arange(1, n + 1, dtype=np.int64)
    data = pa.table({"x": xs, "y": pa.array((xs % 7).astype(np.int32))})
    pk_table = ddl("CREATE TABLE a{i} (x BIGINT PRIMARY KEY, y INT)")
    c = best(runs, pk_table, lambda i: conn.insert(f"a{i}", data))
    check("a0", total)
    line("  floor: Connection.insert of the same Arrow rows (pk)", n, c)


def duckdb_lines(path: Path, n: int, runs: int) -> None:
    con = duckdb.connect(str(path / "anchor.duckdb"))

    def ddl(sql: str) -> Callable[[int], object]:
        return lambda i: con.execute(sql.format(i=i))

    c = best(
        runs,
        ddl("CREATE TABLE t{i} (x INT)"),
        lambda i: con.execute(f"INSERT INTO t{i} SELECT * FROM generate_series(1, {n})"),
    )
    line("anchor: DuckDB INSERT INTO t SELECT generate_series", n, c)
    c = best(
        runs,
        ddl("CREATE TABLE u{i} (x BIGINT PRIMARY KEY, y INT)"),
        lambda i: con.execute(f"INSERT INTO u{i} SELECT x, x % 7 FROM generate_series(1, {n}) g(x)"),
    )
    line("anchor: DuckDB INSERT INTO u ... (pk)", n, c)
    con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows per INSERT")
    ap.add_argument("--runs", type=int, default=2, help="runs per line (the best is printed)")
    args = ap.parse_args()
    logging.getLogger("piestream").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="piestream-bench-") as tmp:
        print(f"rows={args.rows:,}  runs={args.runs} (best printed)  local runner, object store: local dir")
        print("(rates from wall time to the committed epoch; 'cpu' = rate from this process's CPU time)")
        with piestream.connect(Path(tmp) / "data", runner="local", barrier_interval=1.0) as conn:
            piestream_lines(conn, args.rows, args.runs)
        duckdb_lines(Path(tmp), args.rows, args.runs)


if __name__ == "__main__":
    main()
