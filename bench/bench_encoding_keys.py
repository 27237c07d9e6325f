"""Throughput of memcomparable key encoding: vectorized (numpy) vs. per-row Python.

Builds N rows of (BIGINT, VARCHAR of 5-20 random chars, TIMESTAMP) as Arrow columns and times
`encode_columns` with all three columns and with the fixed-width pair, `decode_keys` back, and a
per-row `encode_row` loop on a smaller sample for comparison. Prints rows/s for each.

    .venv/bin/python bench/bench_encoding_keys.py [--rows N] [--repeat R]
"""

from __future__ import annotations

import argparse

import numpy as np
import pyarrow as pa

from piestream.common.order import ASC
from piestream.common.scalar import columns_to_rows
from piestream.common.types import BIGINT, TIMESTAMP, VARCHAR
from piestream.encoding.memcomparable import decode_keys, encode_columns, encode_row
from timing import best_of


def make_columns(n: int, seed: int = 42) -> list[pa.Array]:
    """(BIGINT, VARCHAR 5-20 lowercase chars, TIMESTAMP around 2024) without nulls."""
    rng = np.random.default_rng(seed)
    ids = pa.array(rng.integers(-(2**62), 2**62, n, dtype=np.int64))
    lens = rng.integers(5, 21, n, dtype=np.int64)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    names = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])
    base = 1_704_067_200_000_000  # 2024-01-01 in micros
    ts = pa.array(base + rng.integers(0, 365 * 86_400_000_000, n, dtype=np.int64), pa.timestamp("us"))
    return [ids, names, ts]


def report(label: str, rows: int, seconds: float) -> None:
    print(f"{label:<48} {rows / seconds:>14,.0f} rows/s  ({seconds * 1e3:8.1f} ms for {rows:,} rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows for the vectorized runs")
    ap.add_argument("--loop-rows", type=int, default=100_000, help="rows for the per-row loop")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (best is reported)")
    args = ap.parse_args()
    n = args.rows

    cols = make_columns(n)
    all_types, all_orders = [BIGINT, VARCHAR, TIMESTAMP], [ASC, ASC, ASC]
    fixed_cols, fixed_types, fixed_orders = [cols[0], cols[2]], [BIGINT, TIMESTAMP], [ASC, ASC]

    keys_all = encode_columns(cols, all_types, all_orders)
    keys_fixed = encode_columns(fixed_cols, fixed_types, fixed_orders)
    avg = keys_all.offsets[-1] / max(n, 1)
    print(f"rows={n:,}  avg key bytes: all={avg:.1f} fixed={keys_fixed.offsets[-1] / max(n, 1):.1f}")

    report(
        "encode_columns (BIGINT, TIMESTAMP)",
        n,
        best_of(lambda: encode_columns(fixed_cols, fixed_types, fixed_orders), args.repeat),
    )
    report(
        "encode_columns (BIGINT, VARCHAR, TIMESTAMP)",
        n,
        best_of(lambda: encode_columns(cols, all_types, all_orders), args.repeat),
    )
    report(
        "encode_columns_arrow incl. to_arrow (all three)",
        n,
        best_of(lambda: encode_columns(cols, all_types, all_orders).to_arrow(), args.repeat),
    )
    report(
        "decode_keys (BIGINT, TIMESTAMP)",
        n,
        best_of(lambda: decode_keys(keys_fixed, fixed_types, fixed_orders), args.repeat),
    )
    report(
        "decode_keys (BIGINT, VARCHAR, TIMESTAMP)",
        n,
        best_of(lambda: decode_keys(keys_all, all_types, all_orders), args.repeat),
    )

    m = min(args.loop_rows, n)
    rows = columns_to_rows([c.slice(0, m) for c in cols], all_types)

    def loop() -> None:
        for r in rows:
            encode_row(r, all_types, all_orders)

    report("per-row encode_row loop (all three)", m, best_of(loop, 1))
    # sanity: the vectorized keys equal the per-row ones and decode back to the input
    k = min(1000, m)
    assert [encode_row(r, all_types, all_orders) for r in rows[:k]] == keys_all.to_list()[:k]
    decoded, _ = decode_keys(keys_all, all_types, all_orders)
    assert all(d.equals(c) for d, c in zip(decoded, cols, strict=True))


if __name__ == "__main__":
    main()
