"""Bulk load over pgwire: ``COPY t FROM STDIN (FORMAT csv)`` of an N-row CSV (default 4M) into a
table with an MV on it, through psycopg against a running server, until the rows are committed
and the MV maintained. Side by side, in one run: pyarrow.csv parsing the same bytes (the parse
ceiling), the Python API's Arrow bulk insert of the parsed table (the ingest path without
pgwire), and multi-row INSERT statements over pgwire on a sample (what clients did before COPY).
Target: >= 500K rows/s for the COPY.

    .venv/bin/python bench/bench_copy.py [--rows N] [--runner local|spark] [--insert-rows N]
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

TARGET_ROWS_PER_SEC = 500_000
DDL = "CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount double precision, status varchar)"
MV = (
    "CREATE MATERIALIZED VIEW by_status AS "
    "SELECT status, count(*) AS n, sum(amount) AS total FROM orders GROUP BY status"
)


def make_csv(n: int, start: int = 0, seed: int = 7) -> bytes:
    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "customer": pa.array(rng.integers(0, 100_000, n, dtype=np.int32)),
            "amount": pa.array(np.round(rng.random(n) * 1000, 2)),
            "status": pa.array(np.array(["new", "paid", "shipped", "returned"])[rng.integers(0, 4, n)]),
        }
    )
    out = io.BytesIO()
    pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False))
    return out.getvalue()


def _cpu_seconds() -> tuple[float, float]:
    """(this process, its live descendants: the Spark JVM and its Python workers) user+sys CPU
    seconds, from /proc; zeros where /proc is missing."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = d.joinpath("stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(d.name)
        parent[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    me = os.getpid()
    below = 0.0
    for pid, seconds in cpu.items():
        p = parent.get(pid, 0)
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me and pid != me:
            below += seconds
    return cpu.get(me, 0.0), below


def report(label: str, rows: int, seconds: float) -> None:
    print(f"{label:<58} {rows / seconds:>12,.0f} rows/s  ({seconds:7.2f} s for {rows:,} rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--insert-rows", type=int, default=50_000, help="rows loaded by INSERT statements")
    ap.add_argument("--runner", choices=("local", "spark", "spark-shuffle", "spark-leased"), default="local")
    args = ap.parse_args()

    import psycopg

    from piestream.server.database import Database, DatabaseConfig
    from piestream.server.pgwire import PgServer

    n = args.rows
    data = make_csv(n)
    print(f"piestream COPY benchmark: {n:,} rows, {len(data) / 1e6:.0f} MB of CSV, runner={args.runner}")
    t0 = time.perf_counter()
    parsed = pacsv.read_csv(
        io.BytesIO(data), read_options=pacsv.ReadOptions(column_names=["id", "customer", "amount", "status"])
    )
    report("pyarrow.csv.read_csv (parse ceiling)", n, time.perf_counter() - t0)

    with tempfile.TemporaryDirectory() as tmp:
        config = DatabaseConfig(runner=args.runner, barrier_interval=0.5)
        db = Database(Path(tmp) / "db", config=config)
        srv = PgServer(db, port=0).start()
        try:
            dsn = f"host=127.0.0.1 port={srv.port} user=root dbname=dev"
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(DDL)
                c.execute(MV)
                cur = c.cursor()
                cpu0 = _cpu_seconds()
                t0 = time.perf_counter()
                with cur.copy("COPY orders FROM STDIN (FORMAT csv)") as cp:
                    view = memoryview(data)
                    for lo in range(0, len(data), 1 << 20):  # psycopg's own write size
                        cp.write(view[lo : lo + (1 << 20)])
                copy_s = time.perf_counter() - t0
                cpu1 = _cpu_seconds()
                assert cur.statusmessage == f"COPY {n}", cur.statusmessage
                total = c.execute("SELECT sum(n) FROM by_status").fetchone()
                assert total == (n,), total
                report("COPY FROM STDIN csv, psycopg -> table + MV, committed", n, copy_s)
                own, below = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
                print(
                    f"  COPY CPU (user+sys): {own:.2f} s this process (client + server + local runner), "
                    f"{below:.2f} s its children (Spark JVM + Python workers); load avg "
                    + " ".join(f"{x:.1f}" for x in os.getloadavg())
                )

                m = args.insert_rows
                # per row: the sample's statements are text, as an application would build them
                stmts = [
                    "INSERT INTO orders VALUES "
                    + ",".join(
                        f"({n + i},{i % 100_000},{i % 1000}.5,'new')" for i in range(lo, min(lo + 1000, m))
                    )
                    for lo in range(0, m, 1000)
                ]
                t0 = time.perf_counter()
                for stmt in stmts:
                    cur.execute(stmt)
                report("INSERT ... VALUES (1000 rows each), psycopg (anchor)", m, time.perf_counter() - t0)

            api_rows = parsed.rename_columns(["id", "customer", "amount", "status"])
            api_rows = api_rows.set_column(0, "id", pa.array(np.arange(n, dtype=np.int64) + n + m))
            from piestream.server.api import Connection

            conn = Connection(db)
            t0 = time.perf_counter()
            conn.insert("orders", api_rows)
            report("Python API Connection.insert(Arrow table) (no pgwire)", n, time.perf_counter() - t0)
        finally:
            srv.stop()
            db.close()
    rate = n / copy_s
    verdict = "meets" if rate >= TARGET_ROWS_PER_SEC else "MISSES"
    print(f"COPY {rate:,.0f} rows/s {verdict} the target of {TARGET_ROWS_PER_SEC:,} rows/s")


if __name__ == "__main__":
    main()
