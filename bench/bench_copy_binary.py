"""Arrow clients over pgwire: ADBC's ``fetch_arrow_table()`` of an N-row MV (default 4M; ADBC runs
``COPY (query) TO STDOUT (FORMAT binary)``) and ADBC's ``adbc_ingest`` of N rows (a binary
``COPY ... FROM STDIN``), side by side in one run with psycopg's text COPY both ways and
psycopg's binary COPY FROM of the same rows. Targets: >= 1M rows/s read, >= 500K rows/s ingest.

    .venv/bin/python bench/bench_copy_binary.py [--rows N] [--runner local|spark]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

READ_TARGET = 1_000_000
INGEST_TARGET = 500_000
DDL = "CREATE TABLE {name} (id bigint PRIMARY KEY, customer int, amount double precision, status varchar)"
MV = "CREATE MATERIALIZED VIEW orders_mv AS SELECT id, customer, amount, status FROM orders"


def make_table(n: int, start: int = 0, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "customer": pa.array(rng.integers(0, 100_000, n, dtype=np.int32)),
            "amount": pa.array(np.round(rng.random(n) * 1000, 2)),
            "status": pa.array(np.array(["new", "paid", "shipped", "returned"])[rng.integers(0, 4, n)]),
        }
    )


def binary_copy_stream(table: pa.Table) -> bytes:
    """The table as a PostgreSQL binary COPY stream (the server's encoder, its frames removed)."""
    from piestream.common.types import BIGINT, DOUBLE, INT, VARCHAR
    from piestream.server.pgwire.copy_binary import encode_messages

    messages = encode_messages(table, [BIGINT, INT, DOUBLE, VARCHAR])
    view = memoryview(messages)
    parts, pos = [], 0
    while pos < len(messages):  # per CopyData message: strips the 5-byte frame headers (setup only)
        length = int.from_bytes(messages[pos + 1 : pos + 5], "big")
        parts.append(view[pos + 5 : pos + 1 + length])
        pos += 1 + length
    return b"".join(parts)


def report(label: str, rows: int, seconds: float, cpu: float) -> float:
    """One line: the rate by wall clock, and the CPU seconds of the whole process (server and
    client, all threads), which under a loaded machine say more than the wall clock."""
    rate = rows / seconds
    print(f"{label:<60} {rate:>12,.0f} rows/s  ({seconds:7.2f} s wall, {cpu:6.2f} s CPU, {rows:,} rows)")
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--runner", choices=("local", "spark", "spark-shuffle", "spark-leased"), default="local")
    args = ap.parse_args()

    import adbc_driver_postgresql.dbapi as adbc
    import psycopg

    from piestream.server.database import Database, DatabaseConfig
    from piestream.server.pgwire import PgServer

    n = args.rows
    table = make_table(n)
    stream = binary_copy_stream(table)
    print(f"piestream binary COPY benchmark: {n:,} rows, {len(stream) / 1e6:.0f} MB, runner={args.runner}")
    read_rate = ingest_rate = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(Path(tmp) / "db", config=DatabaseConfig(runner=args.runner, barrier_interval=0.5))
        srv = PgServer(db, port=0).start()
        try:
            dsn = f"host=127.0.0.1 port={srv.port} user=root dbname=dev"
            uri = f"postgresql://root@127.0.0.1:{srv.port}/dev"
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(DDL.format(name="orders"))
                c.execute(MV)
                cur = c.cursor()
                t0, c0 = time.perf_counter(), time.process_time()
                with cur.copy("COPY orders FROM STDIN (FORMAT binary)") as cp:
                    view = memoryview(stream)
                    for lo in range(0, len(stream), 1 << 20):
                        cp.write(view[lo : lo + (1 << 20)])
                report(
                    "COPY FROM STDIN binary, psycopg -> table + MV",
                    n,
                    time.perf_counter() - t0,
                    time.process_time() - c0,
                )
                assert c.execute("SELECT count(*) FROM orders_mv").fetchone() == (n,)

                t0, c0 = time.perf_counter(), time.process_time()
                with adbc.connect(uri) as ac, ac.cursor() as acur:
                    acur.execute("SELECT * FROM orders_mv")
                    got = acur.fetch_arrow_table()
                assert got.num_rows == n
                read_rate = report(
                    "ADBC fetch_arrow_table(SELECT * FROM mv) (binary COPY)",
                    n,
                    time.perf_counter() - t0,
                    time.process_time() - c0,
                )

                t0, c0 = time.perf_counter(), time.process_time()
                size = 0
                with cur.copy("COPY (SELECT * FROM orders_mv) TO STDOUT") as cp:
                    for chunk in cp:
                        size += len(chunk)
                report(
                    "COPY (SELECT * FROM mv) TO STDOUT text, psycopg",
                    n,
                    time.perf_counter() - t0,
                    time.process_time() - c0,
                )

                c.execute(DDL.format(name="ingested"))
                try:
                    t0, c0 = time.perf_counter(), time.process_time()
                    with adbc.connect(uri) as ac, ac.cursor() as acur:
                        acur.adbc_ingest("ingested", table, mode="append")
                        ac.commit()
                    ingest_rate = report(
                        "ADBC adbc_ingest(append) (binary COPY FROM)",
                        n,
                        time.perf_counter() - t0,
                        time.process_time() - c0,
                    )
                except adbc.Error as e:  # ADBC names the table schema-qualified ("public"."ingested")
                    print(f"ADBC adbc_ingest failed: {str(e).splitlines()[0]}")
        finally:
            srv.stop()
            db.close()
    for what, rate, target in (("read", read_rate, READ_TARGET), ("ingest", ingest_rate, INGEST_TARGET)):
        verdict = "meets" if rate >= target else "MISSES"
        print(f"ADBC {what} {rate:,.0f} rows/s {verdict} the target of {target:,} rows/s")


if __name__ == "__main__":
    main()
