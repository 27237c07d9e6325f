"""NUMERIC kernels on the old layout next to the per-value-scale layout issue 14 moved to.

Before the switch a NUMERIC column was Arrow decimal128(38, 10) (`piestream.expr.functions.decimal`
keeps those kernels); the live layout is struct<unscaled decimal128(38, 0), scale int8>
(`piestream.common.numeric`, kernels in `piestream.expr.functions.numeric_scaled`, encodings in
`piestream.encoding.numeric_value`). The same operations over the same `--rows` values (prices
of 2 fraction digits, 0.01 .. 99999.99, and small integer quantities), best of 3, wall and CPU
seconds of this process. DuckDB's DECIMAL(18,2) runs the arithmetic as the anchor.

    .venv/bin/python bench/bench_numeric_layout.py [--rows N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric_arrays as na
from piestream.common.text import format_datum
from piestream.common.types import NUMERIC
from piestream.encoding import value_encode
from piestream.encoding.numeric_value import key_bytes, value_payloads
from piestream.expr.functions import decimal as live
from piestream.expr.functions import numeric_scaled as new


def best(fn: Callable[[], object], repeat: int = 3) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of `repeat` runs."""
    runs = []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        runs.append((time.perf_counter() - w, time.process_time() - c))
    return min(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    n = ap.parse_args().rows
    rng = np.random.default_rng(14)
    cents = rng.integers(1, 10_000_000, n)
    qty = rng.integers(1, 100, n)

    def live_col(unscaled: np.ndarray, scale: int) -> pa.Array:  # decimal128(38, 10), the old layout
        return na.to_export_decimal(new.from_scaled(unscaled, scale, None))

    def new_col(unscaled: np.ndarray, scale: int) -> pa.Array:
        return new.from_scaled(unscaled, scale, None)

    lp, lq = live_col(cents, 2), live_col(qty, 0)
    np_, nq = new_col(cents, 2), new.from_integer(qty, None)
    lk, nk = live_col(np.full(n, 908), 3), new_col(np.full(n, 908), 3)
    l7, n7 = live_col(np.full(n, 7), 0), new.from_integer(np.full(n, 7), None)
    lt, nt = live_col(np.full(n, 1005), 1), new_col(np.full(n, 1005), 1)
    cases: list[tuple[str, Callable[[], object] | None, Callable[[], object]]] = [
        ("price * 0.908", lambda: live.multiply(lp, lk), lambda: new.multiply(np_, nk)),
        ("price + qty", lambda: live.add(lp, lq), lambda: new.add(np_, nq)),
        ("price / 7", lambda: live.divide(lp, l7), lambda: new.divide(np_, n7)),
        ("price > 100.5", lambda: pc.greater(lp, lt), lambda: na.compare(na.unpack(np_), na.unpack(nt)) > 0),
        ("round(price, 1)", lambda: live.rescale(lp, 1, "round"), lambda: new.rescale_to(np_, 1, "round")),
        (
            "value payloads",
            lambda: value_encode._numeric_payloads(lp, None),
            lambda: value_payloads(np_),
        ),
        ("key bytes", None, lambda: key_bytes(np_)),  # the decimal128 key path went with the switch
        ("to text", lambda: [format_datum(v, NUMERIC) for v in lp.to_pylist()], lambda: new.to_text(np_)),
    ]
    print(f"NUMERIC layouts, {n:,} rows, best of 3 (wall / CPU seconds of this process)")
    print(f"{'operation':<18} {'decimal128(38,10)':>22} {'struct per-value':>22} {'duckdb':>9}")
    try:
        import duckdb

        con = duckdb.connect()
        tbl = pa.table(
            {
                "price": pa.array([Decimal(int(c)).scaleb(-2) for c in cents[:n]], pa.decimal128(18, 2)),
                "qty": qty,
            }
        )
        con.register("t", tbl)
        duck = {
            "price * 0.908": "SELECT price * 0.908 FROM t",
            "price + qty": "SELECT price + qty FROM t",
            "price / 7": "SELECT price / 7 FROM t",
            "price > 100.5": "SELECT price > 100.5 FROM t",
            "round(price, 1)": "SELECT round(price, 1) FROM t",
        }
    except ImportError:
        con, duck = None, {}
    for name, old_fn, new_fn in cases:
        nw, ncpu = best(new_fn)
        if old_fn is None:
            print(f"{name:<18} {'n/a':>22} {nw:>9.3f} / {ncpu:>7.3f} s {'':>9}")
            continue
        ow, oc = best(old_fn)
        d = ""
        if con is not None and name in duck:
            query = duck[name]
            dw, _ = best(lambda: con.sql(query).to_arrow_table())  # noqa: B023 (called at once)
            d = f"{dw:.3f} s"
        print(f"{name:<18} {ow:>9.3f} / {oc:>7.3f} s {nw:>9.3f} / {ncpu:>7.3f} s {d:>9}")


if __name__ == "__main__":
    main()
