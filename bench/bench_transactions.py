"""What transaction blocks cost: buffering statements, the one-epoch COMMIT, merged reads.

All on the in-process runner (no Spark: the epoch itself is the same job either way), over a
table ``t (k BIGINT PRIMARY KEY, g INT, v VARCHAR)`` with an MV ``SELECT g, count(*), sum(k)``.

(a) `--statements` INSERT statements of `--rows` rows each: in autocommit (each waits for its own
    epoch), and in one transaction block (buffered; COMMIT runs one epoch). Anchor: DuckDB
    running the same statements in one transaction (an in-process engine with no streaming).
(b) COMMIT of a block that buffered N rows against one autocommit INSERT ... SELECT of the same
    N rows (the epoch work is the same; the difference is the buffer's change stream and the
    conflict check).
(c) a full scan of a `--table-rows` table inside a block that changed `--changed` of its rows
    (snapshot merged with the buffer) against the same scan outside a block.

    .venv/bin/python bench/bench_transactions.py [--statements N] [--rows N] [--table-rows N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb

import piestream


def _values(lo: int, n: int) -> str:
    return ", ".join(f"({k}, {k % 7}, 'v{k % 100}')" for k in range(lo, lo + n))


def _setup(conn: piestream.Connection, name: str) -> None:
    conn.sql(f"CREATE TABLE {name} (k BIGINT PRIMARY KEY, g INT, v VARCHAR)")
    conn.sql(
        f"CREATE MATERIALIZED VIEW {name}_mv AS SELECT g, count(*) AS n, sum(k) AS s FROM {name} GROUP BY g"
    )


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def bench_statements(conn: piestream.Connection, statements: int, rows: int) -> None:
    sqls = [_values(i * rows, rows) for i in range(statements)]
    _setup(conn, "a_auto")
    _setup(conn, "a_txn")

    def autocommit() -> None:
        for v in sqls:
            conn.sql(f"INSERT INTO a_auto VALUES {v}")

    buffered = [0.0]

    def block() -> None:
        conn.begin()
        started = time.perf_counter()
        for v in sqls:
            conn.sql(f"INSERT INTO a_txn VALUES {v}")
        buffered[0] = time.perf_counter() - started
        conn.commit()

    t_auto = _timed(autocommit)
    t_txn = _timed(block)
    db = duckdb.connect()
    db.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, g INT, v VARCHAR)")

    def duck() -> None:
        db.execute("BEGIN")
        for v in sqls:
            db.execute(f"INSERT INTO t VALUES {v}")
        db.execute("COMMIT")

    t_duck = _timed(duck)
    assert conn.sql("SELECT sum(n) FROM a_txn_mv").scalar() == statements * rows
    total = statements * rows
    print(f"(a) {statements} INSERT statements x {rows} rows ({total} rows)")
    print(f"    {'':34} {'seconds':>9} {'rows/s':>10} {'statements/s':>13}")
    for label, t in (
        ("piestream autocommit (1 epoch each)", t_auto),
        ("piestream transaction block", t_txn),
        ("  of which buffering the statements", buffered[0]),
        ("  of which COMMIT (one epoch)", t_txn - buffered[0]),
        ("DuckDB, one transaction (anchor)", t_duck),
    ):
        print(f"    {label:34} {t:9.3f} {total / t:10.0f} {statements / t:13.1f}")


def bench_commit(conn: piestream.Connection, n: int) -> None:
    _setup(conn, "b_src")
    _setup(conn, "b_auto")
    _setup(conn, "b_txn")
    for lo in range(0, n, 5000):
        conn.sql(f"INSERT INTO b_src VALUES {_values(lo, min(5000, n - lo))}")
    t_auto = _timed(lambda: conn.sql("INSERT INTO b_auto SELECT * FROM b_src"))
    conn.begin()
    t_buffer = _timed(lambda: conn.sql("INSERT INTO b_txn SELECT * FROM b_src"))
    t_commit = _timed(conn.commit)
    assert conn.sql("SELECT sum(n) FROM b_txn_mv").scalar() == n
    print(f"(b) {n} rows into a table and its MV")
    print(f"    autocommit INSERT ... SELECT (anchor)   {t_auto:7.3f} s")
    print(f"    the same INSERT inside a block          {t_buffer:7.3f} s (buffered)")
    print(f"    its COMMIT (one epoch)                  {t_commit:7.3f} s")


def bench_scan(conn: piestream.Connection, table_rows: int, changed: int) -> None:
    _setup(conn, "c")
    for lo in range(0, table_rows, 5000):
        conn.sql(f"INSERT INTO c VALUES {_values(lo, min(5000, table_rows - lo))}")
    query = "SELECT count(*), sum(k) FROM c"

    def best(runs: int = 5) -> float:
        return min(_timed(lambda: conn.sql(query)) for _ in range(runs))

    plain = best()
    conn.begin()
    conn.sql(f"UPDATE c SET v = 'changed' WHERE k < {changed}")
    merged = best()
    conn.rollback()
    print(f"(c) full scan + aggregate of {table_rows} rows, best of 5")
    for label, t in (
        ("outside a block (anchor)", plain),
        (f"in a block that changed {changed} rows", merged),
    ):
        print(f"    {label:42} {t:7.3f} s  {table_rows / t:10.0f} rows/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--statements", type=int, default=100)
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--commit-rows", type=int, default=200_000)
    ap.add_argument("--table-rows", type=int, default=500_000)
    ap.add_argument("--changed", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        conn = piestream.connect(Path(tmp) / "db", runner="local", barrier_interval=0.05)
        conn.sql("SET transaction_buffer_limit = 0")
        try:
            bench_statements(conn, args.statements, args.rows)
            bench_commit(conn, args.commit_rows)
            bench_scan(conn, args.table_rows, args.changed)
        finally:
            conn.close()


if __name__ == "__main__":
    main()
