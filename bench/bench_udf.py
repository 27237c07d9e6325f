"""Cost of user-defined functions per row: Nexmark q14's count_char(extra, 'c') as a SQL function
(inlined into vectorized kernels), as a vectorized Python function over Arrow, and as a
row-by-row Python function; the anchor is the same expression written out in SQL (what q14
inlines). Binds each through a real catalog and evaluates the bound expression over one chunk of
N strings like Nexmark's ``extra`` column. Prints rows/s for each.

    .venv/bin/python bench/bench_udf.py [--rows N] [--repeat R]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.expr.expr import Expr
from piestream.frontend.binder import QueryBinder
from piestream.frontend.parser import Query, parse_one
from piestream.server.database import Database, DatabaseConfig

FUNCTIONS = [
    "CREATE FUNCTION count_char(s varchar, c varchar) RETURNS int LANGUAGE sql "
    "AS $$ SELECT length(s) - length(replace(s, c, '')) $$",
    "CREATE FUNCTION count_char_vec(s varchar, c varchar) RETURNS int LANGUAGE python "
    "WITH (vectorized = true) AS $$\nimport pyarrow.compute as pc\n"
    "def count_char_vec(s, c):\n    return pc.count_substring(s, c[0].as_py())\n$$",
    "CREATE FUNCTION count_char_py(s varchar, c varchar) RETURNS int LANGUAGE python "
    "AS $$\ndef count_char_py(s, c):\n    return None if s is None else s.count(c)\n$$",
]
CASES = {
    "inline SQL expression (anchor)": "length(extra) - length(replace(extra, 'c', ''))",
    "SQL function (inlined)": "count_char(extra, 'c')",
    "Python, vectorized over Arrow": "count_char_vec(extra, 'c')",
    "Python, row by row": "count_char_py(extra, 'c')",
}


def extra_column(n: int, seed: int = 7) -> pa.Array:
    """Strings of 10-60 random lowercase letters, like Nexmark's padding columns."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(10, 61, n, dtype=np.int64)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    chunk = DataChunk([extra_column(args.rows)])
    with tempfile.TemporaryDirectory() as d, Database(d, config=DatabaseConfig(runner="local")) as db:
        s = db.session()
        s.execute("CREATE TABLE bid (extra varchar)")
        for sql in FUNCTIONS:
            s.execute(sql)
        results = {}
        for label, text in CASES.items():
            stmt = parse_one(f"SELECT {text} FROM bid")
            assert isinstance(stmt, Query)
            bound = QueryBinder(db.catalog.snapshot()).bind_query(stmt.query)
            expr: Expr = bound.plan.exprs[0]  # type: ignore[attr-defined]
            results[label] = expr.eval(chunk)
            secs = best_of(args.repeat, lambda: expr.eval(chunk))  # noqa: B023 - called before the next case
            print(f"{label:<34} {args.rows / secs:>14,.0f} rows/s")
        first = next(iter(results.values()))
        assert all(r.equals(first) for r in results.values()), "the four forms disagree"


if __name__ == "__main__":
    main()
