"""Vectorized random strings for the Nexmark generator.

Copying strings row by row is what makes Python generators slow. Instead every random string
comes from a *pool* built once per process: for each length L up to a maximum, K random strings
of exactly L characters, all in one Arrow ``large_string`` array. A row's string is chosen by
(length, slot) — both derived from the row's random bits — and a whole column is one Arrow
``take`` (C++) and a cast. The distribution matches the Java generator's (uniform length in a
range, characters ``[a-z]`` with a 1/13 chance of a special character, or letters only for
`extra` padding, which nexmark-rs likewise slices from a cached random string); the content is a
pure function of the row's random bits, so it is deterministic by event index.

Small categorical columns (names, cities, channels, URLs) are pools of their values.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

POOL_SLOTS = 32  # strings per length


def _letters(rng: np.random.Generator, n: int, special: int | None) -> np.ndarray:
    out = rng.integers(ord("a"), ord("z") + 1, size=n, dtype=np.uint8)
    if special is not None:
        out[rng.integers(0, 13, size=n) == 0] = special
    return out


class StringPool:
    """`slots` random strings of every length in [0, max_len]; `pick` builds a column."""

    def __init__(self, max_len: int, *, special: str | None, seed: int, slots: int = POOL_SLOTS) -> None:
        self.max_len = max_len
        self.slots = slots
        rng = np.random.default_rng(seed)
        lens = np.repeat(np.arange(max_len + 1, dtype=np.int64), slots)
        offsets = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        data = _letters(rng, int(offsets[-1]), None if special is None else ord(special))
        self.array = pa.Array.from_buffers(
            pa.large_string(), len(lens), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    def pick(self, lengths: np.ndarray, slot_bits: np.ndarray) -> pa.Array:
        """A string column: row i has length `lengths[i]` and content chosen by `slot_bits[i]`."""
        lens = np.clip(np.asarray(lengths, np.int64), 0, self.max_len)
        idx = lens * self.slots + (np.asarray(slot_bits, np.int64) % self.slots)
        return self.array.take(pa.array(idx, pa.int64())).cast(pa.string())


class ValuePool:
    """A fixed list of strings; `take` builds a column from indices."""

    def __init__(self, values: list[str]) -> None:
        self.values = values
        self.array = pa.array(values, pa.large_string())
        self._lengths = np.array([len(v.encode()) for v in values], np.int64)

    def take(self, idx: np.ndarray) -> pa.Array:
        return self.array.take(pa.array(np.asarray(idx, np.int64), pa.int64())).cast(pa.string())

    def lengths(self) -> np.ndarray:
        """Byte length of each value."""
        return self._lengths


FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]
US_CITIES = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
]
US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
HOT_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
CHANNELS_NUMBER = 10_000


def _url_parts(rng: np.random.Generator, n: int) -> list[str]:
    """`n` strings like Java's ``nextString(rng, 5, '_')``: 3-4 chars of [a-z], 1/13 ``_``."""
    lens = 3 + rng.integers(0, 2, size=n)
    data = _letters(rng, int(lens.sum()), ord("_")).tobytes().decode()
    ends = np.cumsum(lens).tolist()
    return [data[e - ln : e] for e, ln in zip(ends, lens.tolist(), strict=True)]


def _base_urls(rng: np.random.Generator, n: int) -> list[str]:
    p = _url_parts(rng, 3 * n)
    return [
        f"https://www.nexmark.com/{p[3 * i]}/{p[3 * i + 1]}/{p[3 * i + 2]}/item.htm?query=1" for i in range(n)
    ]


def _int_reverse_abs(k: int) -> int:
    """Java's ``Math.abs(Integer.reverse(k))`` (MIN_VALUE stays negative, as in Java)."""
    r = int(f"{k & 0xFFFFFFFF:032b}"[::-1], 2)
    if r >= 1 << 31:
        r -= 1 << 32
    return r if r == -(1 << 31) else abs(r)


@functools.cache
def channel_pools() -> tuple[ValuePool, ValuePool]:
    """(channel, url) pools: the 4 hot channels first, then ``channel-<k>`` for k < 10000.

    As in the Java generator, hot channels have fixed URLs and every other channel a cached
    random URL, 90% of them carrying ``&channel_id=<reversed k>``."""
    rng = np.random.default_rng(20150715)
    channels = list(HOT_CHANNELS) + [f"channel-{k}" for k in range(CHANNELS_NUMBER)]
    urls = _base_urls(rng, len(HOT_CHANNELS) + CHANNELS_NUMBER)
    with_id = rng.integers(0, 10, size=CHANNELS_NUMBER) > 0
    for k in np.flatnonzero(with_id).tolist():
        urls[len(HOT_CHANNELS) + k] += f"&channel_id={_int_reverse_abs(k)}"
    return ValuePool(channels), ValuePool(urls)


@functools.cache
def name_pool() -> ValuePool:
    return ValuePool([f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES])


@functools.cache
def city_pool() -> ValuePool:
    return ValuePool(US_CITIES)


@functools.cache
def state_pool() -> ValuePool:
    return ValuePool(US_STATES)


@functools.cache
def text_pool() -> StringPool:
    """``nextString``: [a-z] with a 1/13 chance of a space (item names, descriptions, emails)."""
    return StringPool(100, special=" ", seed=1)


@functools.cache
def extra_pool() -> StringPool:
    """``nextExtra`` padding: letters only, up to the largest padding any event needs."""
    return StringPool(640, special=None, seed=2)
