"""Counter-based randomness: a random value is a pure function of (seed, stream, index).

Generators must be deterministic by row index (a retried task or a restarted job regenerates
exactly the same rows from an offset), and vectorized. A counter-based generator gives both:
the ``j``-th random draw of row ``i`` is ``splitmix64(seed, i, j)``, computed for a whole array
of indices at once with a few numpy integer operations, with no state to carry between epochs.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_STREAM = np.uint64(0xD1B54A32D192ED03)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_TWO_M53 = 1.0 / (1 << 53)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijective, well-mixed function of a uint64 array."""
    z = x + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def draws(index: np.ndarray, stream: int, seed: int = 0) -> np.ndarray:
    """64 random bits per index (uint64) for draw number `stream`."""
    base = np.uint64((seed * 0x632BE59BD9B4E019 + stream * 0x9E3779B97F4A7C15 + 1) & 0xFFFFFFFFFFFFFFFF)
    x = np.asarray(index).astype(np.uint64) * _STREAM + base
    return mix64(x)


def unit(bits: np.ndarray) -> np.ndarray:
    """Uniform floats in [0, 1) from 64 random bits (53 of them)."""
    return (bits >> np.uint64(11)).astype(np.float64) * _TWO_M53


def below(bits: np.ndarray, bound: np.ndarray | int) -> np.ndarray:
    """Uniform integers in [0, bound) (int64) from 64 random bits, bound ≥ 1 (per element or scalar)."""
    return np.floor(unit(bits) * bound).astype(np.int64)


def field(bits: np.ndarray, shift: int, width: int) -> np.ndarray:
    """`width` bits of `bits` starting at `shift`, as int64 (several small draws from one hash)."""
    return ((bits >> np.uint64(shift)) & np.uint64((1 << width) - 1)).astype(np.int64)
