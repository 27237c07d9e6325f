"""Benchmark of the value encoding (piestream.encoding.value).

Rows of (BIGINT, VARCHAR of 5-20 chars, TIMESTAMP) as Arrow columns, about 1 % NULLs: times the
vectorized `encode_columns` and `decode_values` on all rows, and the per-row `encode_row` on
100K rows, and prints rows/s. Run: ``.venv/bin/python bench/bench_encoding_values.py [--rows N]``.
"""

from __future__ import annotations

import argparse

import numpy as np
import pyarrow as pa

from piestream.common.scalar import columns_to_rows
from piestream.common.types import BIGINT, TIMESTAMP, VARCHAR, DataType
from piestream.encoding.value import decode_values, encode_columns, encode_row
from timing import best_of

TYPES: list[DataType] = [BIGINT, VARCHAR, TIMESTAMP]
ROW_ENCODE_ROWS = 100_000


def make_columns(n: int, seed: int = 0) -> list[pa.Array]:
    """n rows of random ids, 5-20 letter names and timestamps around 2024, 1 % NULL each."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(-(2**62), 2**62, n)
    lengths = rng.integers(5, 21, n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    letters = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    names = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(letters)])
    ts = rng.integers(1_700_000_000_000_000, 1_740_000_000_000_000, n)

    def nulls() -> np.ndarray:
        return rng.random(n) < 0.01

    return [
        pa.array(ids, pa.int64(), mask=nulls()),
        pa.array(names.to_numpy(zero_copy_only=False), pa.string(), mask=nulls()),
        pa.array(ts, pa.timestamp("us"), mask=nulls()),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows for the vectorized runs")
    args = parser.parse_args()
    n = args.rows

    columns = make_columns(n)
    encoded = encode_columns(columns, TYPES)
    avg = (encoded.offsets[-1] - encoded.offsets[0]) / max(n, 1)
    print(f"{n:,} rows of (BIGINT, VARCHAR 5-20, TIMESTAMP), ~1% NULLs; {avg:.1f} bytes/row encoded")

    t_enc = best_of(lambda: encode_columns(columns, TYPES))
    print(f"encode_columns   {t_enc * 1e3:9.1f} ms   {n / t_enc:14,.0f} rows/s")

    decoded = decode_values(encoded, TYPES)
    assert all(d.equals(c) for d, c in zip(decoded, columns, strict=True)), "round trip failed"
    t_dec = best_of(lambda: decode_values(encoded, TYPES))
    print(f"decode_values    {t_dec * 1e3:9.1f} ms   {n / t_dec:14,.0f} rows/s")

    one = [columns[0]]
    t_key = best_of(lambda: encode_columns(one, TYPES[:1]))
    print(f"encode_columns (BIGINT only, a vnode key)  {t_key * 1e3:7.1f} ms   {n / t_key:14,.0f} rows/s")

    m = min(n, ROW_ENCODE_ROWS)
    rows = columns_to_rows([c.slice(0, m) for c in columns], TYPES)
    t_row = best_of(lambda: [encode_row(r, TYPES) for r in rows])
    print(
        f"encode_row       {t_row * 1e3:9.1f} ms   {m / t_row:14,.0f} rows/s   ({m:,} rows, a call per row)"
    )


if __name__ == "__main__":
    main()
