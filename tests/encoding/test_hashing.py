"""The vectorized XXH64 equals the `xxhash` package's on every path: one length (a view of the
data, no gather), several lengths, rows split into blocks, and Ragged views that start mid-data."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from piestream.encoding import hashing
from piestream.encoding.ragged import Ragged


def _reference(r: Ragged) -> list[int]:
    return [xxhash.xxh64_intdigest(r[i]) for i in range(r.n)]


@pytest.mark.parametrize("block", [7, 1 << 15])
def test_xxh64_matches_xxhash_on_every_path(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    monkeypatch.setattr(hashing, "_BLOCK_ROWS", block)  # 7: many blocks, and a short last one
    rng = np.random.default_rng(11)
    for width in (1, 3, 4, 8, 10, 14, 22, 31, 32, 33, 70):
        m = rng.integers(0, 256, (300, width), dtype=np.uint8)
        fixed = Ragged.fixed(m)
        view = Ragged(fixed.offsets[17:250], fixed.data)  # starts mid-data, ends early
        for r in (fixed, view):
            assert hashing.xxh64_ragged(r).tolist() == _reference(r)
        assert hashing.xxh64_fixed(m).tolist() == _reference(fixed)
    # mixed lengths, with some lengths too rare for the vector path, and empty strings
    items = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 40, 2000)]
    items += [b"x" * 5] * 100
    mixed = Ragged.from_list(items)
    assert hashing.xxh64_ragged(mixed).tolist() == _reference(mixed)
    empty = Ragged.from_list([b""] * 50)
    assert hashing.xxh64_ragged(empty).tolist() == _reference(empty)
