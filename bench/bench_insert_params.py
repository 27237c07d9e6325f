"""A driver's batch INSERT: ``INSERT INTO t VALUES (%s,%s,%s), ...`` through psycopg with the
wire's maximum of 65,535 parameters (21,845 rows of int, varchar, bigint), end to end against a
piestream server on loopback (local runner), until the epoch holding the rows is committed.

Side by side: the same rows through COPY FROM STDIN on the same connection, and as an Arrow
table through `Connection.insert` (bulk ingest without SQL: the floor). Wall and process CPU
seconds (server and client share this process), best of `--runs`.

    .venv/bin/python bench/bench_insert_params.py [--runs R]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import psycopg
import pyarrow as pa

from bench_state_table import Clock  # wall and CPU seconds of a block
from piestream.server.api import Connection
from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer

ROWS = 21_845  # x 3 columns = 65,535 parameters


def line(label: str, clk: Clock) -> None:
    print(f"{label:<52} wall {clk.wall:6.2f} s  cpu {clk.cpu:6.2f} s  ({ROWS / clk.wall:>9,.0f} rows/s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    logging.getLogger("piestream").setLevel(logging.ERROR)
    data = [(i, f"s{i}", -i) for i in range(ROWS)]
    flat = [v for r in data for v in r]
    sql = "INSERT INTO t{n} VALUES " + ",".join(["(%s,%s,%s)"] * ROWS)
    with tempfile.TemporaryDirectory() as tmp:
        config = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2)
        srv = PgServer(Database(Path(tmp) / "d", config=config), port=0, shutdown_timeout=5).start()
        try:
            conn = psycopg.connect(f"host=127.0.0.1 port={srv.port} user=root dbname=dev", autocommit=True)
            api = Connection(srv.database)
            arrow = pa.table(
                {"a": [r[0] for r in data], "b": [r[1] for r in data], "c": [r[2] for r in data]}
            )
            best: dict[str, Clock] = {}
            for n in range(args.runs):
                for kind in ("insert", "copy", "arrow"):
                    table = f"t_{kind}_{n}"
                    conn.execute(f"CREATE TABLE {table} (a INT, b VARCHAR, c BIGINT)")
                    with Clock() as clk:
                        if kind == "insert":
                            conn.cursor().execute(sql.format(n=f"_{kind}_{n}"), flat)
                        elif kind == "copy":
                            with conn.cursor().copy(f"COPY {table} FROM STDIN") as cp:
                                for r in data:  # psycopg's own per-row API
                                    cp.write_row(r)
                        else:
                            api.insert(table, arrow)
                    got = conn.execute(f"SELECT count(*), sum(a) FROM {table}").fetchone()
                    assert got == (ROWS, sum(range(ROWS))), got
                    if kind not in best or clk.wall < best[kind].wall:
                        best[kind] = clk
            conn.close()
        finally:
            srv.stop()
    print(f"batch INSERT of {ROWS:,} rows x 3 columns (best of {args.runs})")
    line("psycopg INSERT ... VALUES, 65,535 parameters", best["insert"])
    line("psycopg COPY FROM STDIN (same rows)", best["copy"])
    line("Connection.insert of an Arrow table (floor)", best["arrow"])


if __name__ == "__main__":
    main()
