"""postgres-cdc snapshot: a PostgreSQL 15 table of `--rows` rows (started here, as the tests do)
copied into a piestream CDC table with an MV over it; prints the copy's rows/s (CREATE to the MV
holding every row), and the time of the upstream COPY alone as the anchor. Then `--changes`
upstream changes streamed, with the time until the MV equals PostgreSQL's own answer.

    .venv/bin/python bench/bench_cdc.py [--rows 2000000] [--changes 20000]

Local runner (in-process), parallelism 1 (a CDC table is one split). Wall-clock figures on a
shared machine: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "connectors"))

from pg_server import PgServer, start_server

from piestream.common.epoch import EpochPair
from piestream.common.types import BIGINT, INT, NUMERIC, TIMESTAMPTZ, VARCHAR
from piestream.connectors.cdc.offset import CdcOffset
from piestream.connectors.cdc.postgres import check_upstream, postgres_cdc_connector
from piestream.plan.source import SourceSpec
from piestream.server.database import Database, DatabaseConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--changes", type=int, default=20_000)
    ap.add_argument("--chunk", type=int, default=200_000, help="rows per epoch (max.rows.per.epoch)")
    args = ap.parse_args()
    pg = start_server()
    try:
        pg.sql(
            "CREATE TABLE orders (id bigint PRIMARY KEY, cust int, amount numeric, note text, ts timestamptz)"
        )
        t0 = time.perf_counter()
        pg.sql(
            "INSERT INTO orders SELECT g, g % 1000, round((g % 100000) / 100.0, 2), 'note ' || g, "
            f"'2024-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, {args.rows}) g"
        )
        print(f"upstream load of {args.rows} rows: {time.perf_counter() - t0:.1f}s")
        t0 = time.perf_counter()
        with (
            tempfile.TemporaryFile() as f,
            psycopg.connect(pg.dsn()) as c,
            c.cursor().copy("COPY orders TO STDOUT WITH (FORMAT csv)") as cp,
        ):
            for block in cp:
                f.write(block)
        print(
            f"anchor: PostgreSQL COPY TO STDOUT alone: {args.rows / (time.perf_counter() - t0):,.0f} rows/s"
        )
        _reader_alone(pg, args.rows, args.chunk, args.changes)
        with tempfile.TemporaryDirectory(prefix="piestream-cdc-") as tmp:
            cfg = DatabaseConfig(runner="local", barrier_interval=0.5, background_compaction=True)
            with Database(Path(tmp), config=cfg) as db:
                t0 = time.perf_counter()
                opts = pg.with_options(table_name="orders")
                db.execute(
                    "CREATE TABLE orders (id bigint PRIMARY KEY, cust int, amount numeric, note varchar, "
                    f"ts timestamptz) WITH ({opts}, max.rows.per.epoch = '{args.chunk}')"
                )
                db.execute(
                    "CREATE MATERIALIZED VIEW per_cust AS "
                    "SELECT cust, count(*) AS n, sum(amount) AS s FROM orders GROUP BY cust"
                )
                while (db.execute("SELECT sum(n) FROM per_cust")[0].rows[0][0] or 0) < args.rows:
                    time.sleep(0.2)
                dt = time.perf_counter() - t0
                load = os.getloadavg()[0]
                print(
                    f"snapshot: {args.rows} rows in {dt:.1f}s = {args.rows / dt:,.0f} rows/s "
                    f"(load {load:.1f})"
                )
                n = args.changes
                t0 = time.perf_counter()
                pg.sql(f"UPDATE orders SET amount = amount + 1 WHERE id <= {n}")
                want = sorted(
                    tuple(r) for r in pg.sql("SELECT cust, count(*), sum(amount) FROM orders GROUP BY cust")
                )
                while sorted(db.execute("SELECT cust, n, s FROM per_cust")[0].rows) != want:
                    time.sleep(0.1)
                dt = time.perf_counter() - t0
                print(f"stream: {n} updates applied in {dt:.1f}s = {n / dt:,.0f} changes/s (one transaction)")
    finally:
        pg.destroy()


def _reader_alone(pg: PgServer, rows: int, chunk: int, changes: int) -> None:
    """The connector without the rest of piestream: the snapshot in chunks of `chunk` rows, COPY
    to Arrow columns (what a source executor gets per epoch); then one read of `changes` upstream
    updates from the slot (twice: unacknowledged, a peek reads the same again), with the CPU
    seconds of this process beside the wall time (the rest is PostgreSQL's logical decoding)."""
    t = {"bigint": BIGINT, "int": INT, "numeric": NUMERIC, "varchar": VARCHAR, "timestamptz": TIMESTAMPTZ}
    cols = (
        ("id", "bigint"),
        ("cust", "int"),
        ("amount", "numeric"),
        ("note", "varchar"),
        ("ts", "timestamptz"),
    )
    spec = SourceSpec(
        "orders",
        "postgres-cdc",
        tuple((n, t[k]) for n, k in cols),
        {**_options(pg), "table.name": "orders", "slot.name": "bench_reader"},
    )
    check_upstream(spec, ["id"])
    reader, _ = postgres_cdc_connector(spec)
    offset = None
    done = 0
    t0 = time.perf_counter()
    while done < rows:
        res = reader.read("orders", offset, chunk, EpochPair(2, 1))
        offset, done = res.offset, done + res.consumed
    dt = time.perf_counter() - t0
    print(f"reader alone: {rows} rows in {dt:.1f}s = {rows / dt:,.0f} rows/s (load {os.getloadavg()[0]:.1f})")
    while CdcOffset.from_json(offset or "").phase != "stream":  # a last, short chunk ends the copy
        offset = reader.read("orders", offset, chunk, EpochPair(2, 1)).offset
    step = 1000
    for lo in range(0, min(changes, rows), step):
        pg.sql(f"UPDATE orders SET cust = cust + 1 WHERE id > {lo} AND id <= {lo + step}")
    for _ in range(2):
        t0, c0 = time.perf_counter(), time.process_time()
        res = reader.read("orders", offset, changes, EpochPair(2, 1))
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"stream reader alone: {res.consumed} changes in {dt:.2f}s = {res.consumed / dt:,.0f} changes/s "
            f"(this process's CPU {dc:.2f}s = {res.consumed / max(dc, 1e-6):,.0f} per CPU second)"
        )
    pg.sql("SELECT pg_drop_replication_slot('bench_reader')")


def _options(pg: PgServer) -> dict[str, str]:
    return {
        k.strip(): v.strip().strip("'") for k, v in (kv.split("=", 1) for kv in pg.with_options().split(", "))
    }


if __name__ == "__main__":
    main()
