"""mysql-cdc reader alone against a MariaDB started here (as the tests do): the snapshot of a
`--rows`-row table copied in chunks of `--chunk` rows (rows/s), with PyMySQL's plain SELECT of
the table as the anchor; then `--changes` upstream changes (UPDATEs in transactions of 1,000)
read from the binlog (changes/s). The connector's own cost: no piestream engine in the loop.

    .venv/bin/python bench/bench_mysql_cdc.py [--rows 500000] [--changes 20000] [--chunk 100000]

Wall-clock figures on a shared machine: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "connectors"))

from mysql_server import PASSWORD, USER, start_server

from piestream.common.epoch import EpochPair
from piestream.common.types import BIGINT, INT, NUMERIC, TIMESTAMPTZ, VARCHAR
from piestream.connectors.cdc.mysql import check_upstream, mysql_cdc_connector
from piestream.plan.source import SourceSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--changes", type=int, default=20_000)
    ap.add_argument("--chunk", type=int, default=100_000, help="rows per read (max.rows.per.epoch)")
    args = ap.parse_args()
    my = start_server()
    try:
        my.sql(
            "CREATE TABLE orders (id bigint PRIMARY KEY, cust int, amount decimal(12,2), note text, "
            "ts timestamp NULL)"
        )
        t0 = time.perf_counter()
        my.sql(
            "INSERT INTO orders SELECT seq, seq % 1000, (seq % 100000) / 100, concat('note ', seq), "
            f"'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_{args.rows}"
        )
        print(f"upstream load of {args.rows} rows: {time.perf_counter() - t0:.1f}s")
        conn = my.connect()
        t0 = time.perf_counter()
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM orders")
            cur.fetchall()
        conn.close()
        print(f"anchor: PyMySQL SELECT * alone: {args.rows / (time.perf_counter() - t0):,.0f} rows/s")
        opts = {
            "connector": "mysql-cdc", "hostname": my.host, "port": str(my.port), "username": USER,
            "password": PASSWORD, "database.name": my.database, "table.name": "orders", "server.id": "777",
        }  # fmt: skip
        cols = (("id", BIGINT), ("cust", INT), ("amount", NUMERIC), ("note", VARCHAR), ("ts", TIMESTAMPTZ))
        spec = SourceSpec("orders", "mysql-cdc", cols, opts)
        check_upstream(spec, ["id"])
        reader, _ = mysql_cdc_connector(spec)
        split, offset, epoch = reader.splits()[0], None, EpochPair(2, 1)
        t0 = time.perf_counter()
        copied = 0
        while True:
            res = reader.read(split, offset, args.chunk, epoch)
            copied += res.consumed
            offset = res.offset
            if res.consumed < args.chunk:
                break
        dt = time.perf_counter() - t0
        print(f"reader alone: snapshot {copied:,} rows in {dt:.1f}s = {copied / dt:,.0f} rows/s")
        for start in range(0, args.changes, 1000):
            ids = ", ".join(str(i) for i in range(start + 1, min(args.changes, start + 1000) + 1))
            my.sql(f"START TRANSACTION; UPDATE orders SET cust = cust + 1 WHERE id IN ({ids}); COMMIT")
        t0 = time.perf_counter()
        streamed = 0
        while streamed < args.changes:
            res = reader.read(split, offset, args.chunk, epoch)
            if not res.consumed:
                break
            streamed += res.consumed
            offset = res.offset
        dt = time.perf_counter() - t0
        print(f"reader alone: stream {streamed:,} changes in {dt:.2f}s = {streamed / dt:,.0f} changes/s")
        print(f"load average: {os.getloadavg()[0]:.1f}")
    finally:
        my.destroy()


if __name__ == "__main__":
    main()
