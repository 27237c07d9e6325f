"""NUMERIC-heavy work, this tree next to a baseline revision and DuckDB, in one run.

The same workload runs in two subprocesses, one importing this tree's `src`, one a baseline
revision's (``git archive`` into a temporary directory; default ``main``), and DuckDB's DECIMAL
runs the same SQL as the anchor. On `--rows` rows (default 1M) of (k BIGINT, g INT, price NUMERIC
with 2 fraction digits, qty INT):

- projection: the expressions of `EXPRS` evaluated over one in-memory chunk (the vectorized
  expression layer alone);
- insert: the rows written into a table in one epoch (value encoding into the LSM);
- batch: ``SELECT g, sum(price), avg(price), min(price), max(price), count(*) FROM t GROUP BY g``
  (1000 groups) over the table (scan, value decoding, aggregation);
- mv: the same aggregation as a materialized view, created over the loaded table (backfill) and
  then kept through an epoch updating 10 % of the rows.

    .venv/bin/python bench/bench_numeric.py [--rows N] [--baseline REV] [--no-baseline]

Figures are best-of-3 wall-clock seconds (mv: one run) on a shared machine; rows/s derived.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from timing import best_of

ROOT = Path(__file__).resolve().parent.parent
EXPRS = [
    "price * 0.908",
    "price + qty",
    "price - 1.5",
    "price / 7",
    "round(price * 1.1, 2)",
    "price > 100.5",
]
AGG = "SELECT g, sum(price), avg(price), min(price), max(price), count(*) FROM t GROUP BY g"


def _arrow(con: Any, sql: str) -> Any:
    return con.sql(sql).to_arrow_table()


def data(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(14)
    cents = rng.integers(1, 10_000_000, n)  # 0.01 .. 99999.99
    return rng.integers(0, 1000, n), cents, rng.integers(1, 100, n)


# -- the worker: runs inside a subprocess whose sys.path holds one tree's src ---------------------


def worker(n: int) -> dict[str, float]:
    import logging

    import pyarrow as pa

    from piestream.common.chunk import DataChunk, Op, StreamChunk
    from piestream.common.scalar import to_arrow
    from piestream.common.types import INT, NUMERIC
    from piestream.expr.bind import bind_call, literal
    from piestream.expr.expr import InputRef
    from piestream.server.database import Database, DatabaseConfig

    logging.getLogger("piestream").setLevel(logging.ERROR)
    g, cents, qty = data(n)
    prices = [Decimal(int(c)).scaleb(-2) for c in cents]
    price = to_arrow(prices, NUMERIC)
    chunk = DataChunk([price, pa.array(qty, pa.int32())])
    out: dict[str, float] = {}

    p_ref, q_ref = InputRef(0, NUMERIC), InputRef(1, INT)
    exprs = [
        bind_call("*", [p_ref, literal(Decimal("0.908"))]),
        bind_call("+", [p_ref, q_ref]),
        bind_call("-", [p_ref, literal(Decimal("1.5"))]),
        bind_call("/", [p_ref, literal(7)]),
        bind_call("round", [bind_call("*", [p_ref, literal(Decimal("1.1"))]), literal(2)]),
        bind_call(">", [p_ref, literal(Decimal("100.5"))]),
    ]
    for text, e in zip(EXPRS, exprs, strict=True):
        out[f"projection: {text}"] = best_of(functools.partial(e.eval, chunk))

    with tempfile.TemporaryDirectory() as d:
        db = Database(Path(d) / "data", config=DatabaseConfig(runner="local", barrier_interval=3600.0))
        try:
            s = db.session()
            s.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, g INT, price NUMERIC, qty INT)")
            rel = db.catalog.get("t")
            assert rel is not None and rel.table is not None
            tid = rel.table.table_id
            keys = pa.array(np.arange(n, dtype=np.int64), pa.int64())
            cols = [keys, pa.array(g, pa.int32()), price, pa.array(qty, pa.int32())]
            ins = StreamChunk(np.full(n, Op.INSERT, np.int8), cols, length=n)
            t0 = time.perf_counter()
            db.barriers.submit_dml(tid, ins)
            db.barriers.flush()
            out["insert (1 epoch)"] = time.perf_counter() - t0
            out["batch: GROUP BY g"] = best_of(lambda: s.execute(AGG))
            t0 = time.perf_counter()
            s.execute(f"CREATE MATERIALIZED VIEW m AS {AGG}")
            out["mv: create (backfill)"] = time.perf_counter() - t0
            m = n // 10
            upd_price = to_arrow([Decimal(int(c) + 1).scaleb(-2) for c in cents[:m]], NUMERIC)
            upd = [keys.slice(0, m), pa.array(g[:m], pa.int32()), upd_price, pa.array(qty[:m], pa.int32())]
            t0 = time.perf_counter()
            db.barriers.submit_dml(tid, StreamChunk(np.full(m, Op.INSERT, np.int8), upd, length=m))
            db.barriers.flush()
            out["mv: epoch of 10% upserts"] = time.perf_counter() - t0
        finally:
            db.close()
    return out


# -- DuckDB, the anchor ----------------------------------------------------------------------------


def duck(n: int) -> dict[str, float]:
    import duckdb
    import pyarrow as pa

    g, cents, qty = data(n)
    con = duckdb.connect()
    tbl = pa.table({"k": np.arange(n), "g": g.astype(np.int32), "cents": cents, "qty": qty.astype(np.int32)})
    con.register("src", tbl)
    con.execute("CREATE TABLE t AS SELECT k, g, CAST(cents AS DECIMAL(18,0)) / 100 AS price, qty FROM src")
    con.execute("CREATE TABLE tp AS SELECT CAST(price AS DECIMAL(18,2)) AS price, qty FROM t")
    out = {}
    for text in EXPRS:
        sql = f"SELECT {text} FROM tp"
        out[f"projection: {text}"] = best_of(functools.partial(_arrow, con, sql))
    out["batch: GROUP BY g"] = best_of(lambda: con.sql(AGG).to_arrow_table())
    return out


# -- driver ----------------------------------------------------------------------------------------


def run_tree(src: Path, n: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    res = subprocess.run(
        [sys.executable, __file__, "--worker", "--rows", str(n)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise SystemExit(f"worker on {src} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def baseline_src(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--baseline", default="main", help="git revision to compare with")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.rows
    if args.worker:
        print(json.dumps(worker(n)))
        return
    print(f"NUMERIC workload, {n:,} rows; load average {os.getloadavg()[0]:.2f} (a shared machine)")
    cur = run_tree(ROOT / "src", n)
    base: dict[str, Any] = {}
    rev = args.baseline
    if not args.no_baseline:
        with tempfile.TemporaryDirectory() as d:
            base = run_tree(baseline_src(rev, Path(d)), n)
    dk = duck(n)
    head = f"{'':34} {'this tree':>12} {'baseline ' + rev:>16} {'duckdb':>10}   rows/s (this tree)"
    print(head)
    for name, t in cur.items():
        b = f"{base[name]:.3f} s" if name in base else "-"
        d = f"{dk[name]:.3f} s" if name in dk else "-"
        rows = n // 10 if "10%" in name else n
        print(f"{name:34} {t:10.3f} s {b:>16} {d:>10}   {rows / t:12,.0f}")


if __name__ == "__main__":
    main()
