"""`Ragged.gather_by` against slicing in Python, on each of its paths: strings in order (Arrow's
take over the spans), out of order or overlapping (numpy's word and byte gathers, or views for
large gathers), empty strings, and bounds that would leave the data."""

from __future__ import annotations

import numpy as np
import pytest

from piestream.encoding import ragged
from piestream.encoding.ragged import Ragged


def _expected(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> list[bytes]:
    raw = data.tobytes()
    return [raw[s : s + n] for s, n in zip(starts.tolist(), lens.tolist(), strict=True)]


def _got(r: Ragged) -> list[bytes]:
    return [r.data[r.offsets[i] : r.offsets[i + 1]].tobytes() for i in range(r.n)]


@pytest.mark.parametrize("n", [1, 7, 5000])
@pytest.mark.parametrize("order", ["in_order", "shuffled", "overlapping"])
def test_gather_by_matches_slicing(n: int, order: str) -> None:
    rng = np.random.default_rng(n)
    lens = rng.integers(0, 30, n).astype(np.int64)
    gaps = rng.integers(0, 5, n).astype(np.int64)
    starts = np.cumsum(gaps) + np.concatenate([[0], np.cumsum(lens)[:-1]])
    if order == "shuffled":
        perm = rng.permutation(n)
        starts, lens = starts[perm], lens[perm]
    elif order == "overlapping":
        starts = starts // 2
    data = np.frombuffer(rng.bytes(int((starts + lens).max()) + 3), np.uint8)
    got = Ragged(np.zeros(1, np.int64), data).gather_by(starts, lens)
    assert _got(got) == _expected(data, starts, lens)
    assert got.offsets[0] == 0 and len(got.data) == int(lens.sum())


def test_in_order_path_is_taken_only_for_ordered_in_bounds_strings() -> None:
    data = np.frombuffer(b"abcdefghij", np.uint8)
    ordered = ragged._gather_in_order(data, np.array([0, 3, 3, 8]), np.array([2, 0, 4, 2]))
    assert ordered is not None and _got(ordered) == [b"ab", b"", b"defg", b"ij"]
    assert ragged._gather_in_order(data, np.array([3, 0]), np.array([2, 2])) is None  # out of order
    assert ragged._gather_in_order(data, np.array([0, 1]), np.array([2, 2])) is None  # overlapping
    assert ragged._gather_in_order(data, np.array([8]), np.array([3])) is None  # past the end
    assert ragged._gather_in_order(data, np.array([-1]), np.array([2])) is None  # before the start
    assert ragged._gather_in_order(data, np.array([4]), np.array([-1])) is None  # negative length
