"""Epochs (monotonic, spill bits) and vnodes (stable across processes, vectorized = scalar)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from piestream.common.epoch import (
    EpochGenerator,
    EpochPair,
    epoch_from_ms,
    epoch_to_unix_ms,
    pure_epoch,
    spill_offset,
    with_spill,
)
from piestream.common.row_id import make_row_ids, vnode_of_row_ids
from piestream.common.types import BIGINT, SERIAL, VARCHAR
from piestream.common.vnode import VnodeBitmap, actor_of_vnodes, actor_vnodes, split_vnodes
from piestream.encoding.distribution import compute_vnode, compute_vnodes


def test_epoch_layout() -> None:
    e = epoch_from_ms(1_617_235_200_000 + 5)
    assert e == 5 << 16
    assert epoch_to_unix_ms(e) == 1_617_235_200_005
    s = with_spill(e, 3)
    assert pure_epoch(s) == e and spill_offset(s) == 3 and s > e
    with pytest.raises(ValueError):
        with_spill(s, 1)


def test_generator_never_goes_backwards_when_clock_does() -> None:
    clock = iter([2_000_000_000_000, 1_900_000_000_000, 1_900_000_000_000, 2_100_000_000_000])
    gen = EpochGenerator(clock_ms=lambda: next(clock))
    epochs = [gen.next() for _ in range(4)]
    assert epochs == sorted(epochs) and len(set(epochs)) == 4
    assert all(spill_offset(e) == 0 for e in epochs)


def test_epoch_pair_must_advance() -> None:
    p = EpochPair.initial(10 << 16)
    assert p.next(20 << 16) == EpochPair(20 << 16, 10 << 16)
    with pytest.raises(ValueError):
        EpochPair(5 << 16, 10 << 16)


def test_vnode_vectorized_equals_scalar_and_spreads() -> None:
    ks = list(range(-500, 500))
    names = [f"name{i}" if i % 7 else None for i in range(1000)]
    vec = compute_vnodes([pa.array(ks, pa.int64()), pa.array(names, pa.string())], [BIGINT, VARCHAR], 256)
    scalar = [compute_vnode([k, n], [BIGINT, VARCHAR], 256) for k, n in zip(ks, names, strict=True)]
    assert vec.tolist() == scalar
    assert len(set(scalar)) > 200  # well spread over the 256 vnodes


def test_vnode_stable_across_processes() -> None:
    code = (
        "from piestream.encoding.distribution import compute_vnode;"
        "from piestream.common.types import BIGINT, VARCHAR;"
        "print([compute_vnode([k, f'x{k}'], [BIGINT, VARCHAR], 256) for k in range(50)])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PATH": ""},
        ).stdout
        for seed in (1, 2)
    }
    here = str([compute_vnode([k, f"x{k}"], [BIGINT, VARCHAR], 256) for k in range(50)]) + "\n"
    assert outs == {here}


def test_row_id_carries_its_vnode() -> None:
    ids = make_row_ids(12345, np.array([0, 17, 255]), np.array([0, 1, 4095]), 256)
    assert vnode_of_row_ids(ids, 256).tolist() == [0, 17, 255]
    assert compute_vnodes([pa.array(ids)], [SERIAL], 256).tolist() == [0, 17, 255]


def test_vnode_bitmaps_split_and_map_back() -> None:
    parts = split_vnodes(3)
    assert sum(len(p) for p in parts) == 256
    assert [p.ranges() for p in parts] == [[(0, 85)], [(85, 170)], [(170, 256)]]
    v = np.arange(256)
    owner = actor_of_vnodes(v, 3)
    for i, p in enumerate(parts):
        assert (owner[p.vnodes()] == i).all()
    b = VnodeBitmap.from_vnodes([1, 2, 3, 200])
    assert VnodeBitmap.from_bytes(b.to_bytes()) == b and b.ranges() == [(1, 4), (200, 201)]
    for n, count in ((1, 256), (3, 256), (7, 256), (4, 16), (16, 16)):  # one actor's, alone
        assert [actor_vnodes(n, i, count) for i in range(n)] == split_vnodes(n, count)
    with pytest.raises(IndexError):
        actor_vnodes(3, 3)
    with pytest.raises(ValueError):
        actor_vnodes(0, 0)
