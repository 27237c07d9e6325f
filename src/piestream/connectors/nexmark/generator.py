"""The Nexmark event generator, vectorized: whole arrays of event numbers at once.

The model is the Java generator's (nexmark/nexmark, ported by nexmark-rs; performance-anchors
§1.3). Event number ``n`` decides everything about its event:

- kind: ``n mod 50`` — offset 0 a person, 1–3 auctions, 4–49 bids (proportions 1:3:46);
- ids: dense per kind (``first_person_id + n div 50`` for the person of a cycle, auctions
  ``first_auction_id + 3·(n div 50) + offset − 1``);
- time: ``base_time + n · 1000 / first_event_rate`` milliseconds;
- every random choice: bits of a counter-based hash of ``n`` (`piestream.connectors.rand`), so
  the same number always gives the same event, in any split, batch or process.

Distributions follow the Java code: bids go to a hot auction (the first of the latest batch of
100) with probability 1 − 1/hot_auction_ratio, else uniformly to one of the last 100 in-flight
auctions (+10 lead); bidders and sellers likewise with the hot ratios and the 1000 active people;
prices ``round(10^(6u) · 100)``; channels from 4 hot ones or ``channel-<k>`` with cached URLs;
auction expiry ``ts + 1 + U[0, 2·horizon)``; ``extra`` padded to the average byte sizes.
Strings are drawn from pools (`strings`), so a column costs a few Arrow kernels, not a Python
loop. Only requested columns are built.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.types import BIGINT, TIMESTAMP, VARCHAR, DataType
from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.strings import (
    channel_pools,
    city_pool,
    extra_pool,
    name_pool,
    state_pool,
    text_pool,
)
from piestream.connectors.rand import below, draws, field, unit

#: batches of 100 people/auctions whose first (or second) member is "hot" (Java constants)
HOT_BATCH = 100


class EventKind(enum.IntEnum):
    PERSON = 0
    AUCTION = 1
    BID = 2


PERSON_COLUMNS: dict[str, DataType] = {
    "id": BIGINT,
    "name": VARCHAR,
    "email_address": VARCHAR,
    "credit_card": VARCHAR,
    "city": VARCHAR,
    "state": VARCHAR,
    "date_time": TIMESTAMP,
    "extra": VARCHAR,
}
AUCTION_COLUMNS: dict[str, DataType] = {
    "id": BIGINT,
    "item_name": VARCHAR,
    "description": VARCHAR,
    "initial_bid": BIGINT,
    "reserve": BIGINT,
    "date_time": TIMESTAMP,
    "expires": TIMESTAMP,
    "seller": BIGINT,
    "category": BIGINT,
    "extra": VARCHAR,
}
BID_COLUMNS: dict[str, DataType] = {
    "auction": BIGINT,
    "bidder": BIGINT,
    "price": BIGINT,
    "channel": VARCHAR,
    "url": VARCHAR,
    "date_time": TIMESTAMP,
    "extra": VARCHAR,
}
COLUMNS_OF: dict[EventKind, dict[str, DataType]] = {
    EventKind.PERSON: PERSON_COLUMNS,
    EventKind.AUCTION: AUCTION_COLUMNS,
    EventKind.BID: BID_COLUMNS,
}


# -- the event-number model --------------------------------------------------------------------------


def event_kinds(cfg: NexmarkConfig, n: np.ndarray) -> np.ndarray:
    """The kind of each event number (int8 `EventKind`)."""
    off = np.asarray(n, np.int64) % cfg.total_proportion
    kind = np.full(len(off), EventKind.BID, np.int8)
    kind[off < cfg.person_proportion + cfg.auction_proportion] = EventKind.AUCTION
    kind[off < cfg.person_proportion] = EventKind.PERSON
    return kind


def timestamps_ms(cfg: NexmarkConfig, n: np.ndarray) -> np.ndarray:
    """Event time in Unix milliseconds: ``base_time + n · 1000 / rate`` (integer milliseconds)."""
    return cfg.base_time_ms + (np.asarray(n, np.int64) * 1000) // cfg.first_event_rate


def last_base0_person_id(cfg: NexmarkConfig, n: np.ndarray) -> np.ndarray:
    """Id (from 0) of the latest person generated at or before event `n`."""
    epoch, off = np.divmod(np.asarray(n, np.int64), cfg.total_proportion)
    return epoch * cfg.person_proportion + np.minimum(off, cfg.person_proportion - 1)


def last_base0_auction_id(cfg: NexmarkConfig, n: np.ndarray) -> np.ndarray:
    """Id (from 0) of the latest auction generated at or before event `n` (−1 before the first)."""
    epoch, off = np.divmod(np.asarray(n, np.int64), cfg.total_proportion)
    p, a = cfg.person_proportion, cfg.auction_proportion
    return np.where(off < p, epoch * a - 1, epoch * a + np.minimum(off - p, a - 1))


def next_base0_person_id(cfg: NexmarkConfig, n: np.ndarray, u: np.ndarray) -> np.ndarray:
    """A random one of the active people (plus a lead of ids not generated yet)."""
    num_people = last_base0_person_id(cfg, n) + 1
    active = np.minimum(num_people, cfg.active_people)
    return num_people - active + np.floor(u * (active + cfg.person_id_lead)).astype(np.int64)


def next_base0_auction_id(cfg: NexmarkConfig, n: np.ndarray, u: np.ndarray) -> np.ndarray:
    """A random one of the in-flight auctions (plus a lead of ids not generated yet)."""
    max_a = last_base0_auction_id(cfg, n)
    min_a = np.maximum(max_a - cfg.in_flight_auctions, 0)
    return min_a + np.floor(u * (max_a - min_a + 1 + cfg.auction_id_lead)).astype(np.int64)


def prices(u: np.ndarray) -> np.ndarray:
    """``round(10^(6u) · 100)``: log-uniform over [100, 1e8]."""
    return np.floor(np.power(10.0, u * 6.0) * 100.0 + 0.5).astype(np.int64)


def extra_lengths(cfg_avg: int, current: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """``nextExtra``'s size: the average minus what the event has, ±20% (0 if already over)."""
    desired = cfg_avg - np.asarray(current, np.int64)
    delta = np.floor(desired * 0.2 + 0.5).astype(np.int64)
    spread = np.where(delta > 0, (bits % np.maximum(2 * delta, 1)), 0)
    return np.where(desired > 0, desired - delta + spread, 0)


def _ts_array(ms: np.ndarray) -> pa.Array:
    return pa.array(np.asarray(ms, np.int64) * 1000, pa.timestamp("us"))


def _i64(a: np.ndarray) -> pa.Array:
    return pa.array(np.asarray(a, np.int64), pa.int64())


class _Lazy:
    """Columns computed on first use, sharing intermediate arrays between columns."""

    def __init__(self) -> None:
        self._memo: dict[str, object] = {}

    def get(self, key: str, fn: Callable[[], object]) -> object:
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]


# -- people --------------------------------------------------------------------------------------------


def persons(cfg: NexmarkConfig, n: np.ndarray, columns: Sequence[str]) -> dict[str, pa.Array]:
    """Person events for event numbers `n` (all of them person events)."""
    n = np.asarray(n, np.int64)
    m = _Lazy()
    r0 = draws(n, 10)
    r1 = draws(n, 11)
    names, cities, states = name_pool(), city_pool(), state_pool()

    def name_idx() -> np.ndarray:
        first = field(r0, 0, 16) % 11
        last = field(r0, 16, 16) % 9
        return first * 9 + last

    def city_idx() -> np.ndarray:
        return field(r0, 32, 16) % len(cities.values)

    def state_idx() -> np.ndarray:
        return field(r0, 48, 16) % len(states.values)

    def email_lens() -> tuple[np.ndarray, np.ndarray]:
        return 3 + field(r1, 0, 8) % 4, 3 + field(r1, 8, 8) % 2  # nextString(7) @ nextString(5) .com

    def email() -> pa.Array:
        local_len, domain_len = email_lens()
        pool = text_pool()
        local = pool.pick(local_len, field(r1, 16, 16))
        domain = pool.pick(domain_len, field(r1, 32, 16))
        return pc.binary_join_element_wise(local, "@", domain, ".com", "")

    def credit_card() -> pa.Array:
        a = (draws(n, 12) % np.uint64(10**8)).astype(np.int64)
        b = (draws(n, 13) % np.uint64(10**8)).astype(np.int64)
        out = np.full((len(n), 19), ord(" "), np.uint8)
        for i in range(8):
            p = 10 ** (7 - i)
            col = i + i // 4
            out[:, col] = (a // p) % 10 + ord("0")
            out[:, col + 10] = (b // p) % 10 + ord("0")
        offsets = np.arange(0, 19 * len(n) + 1, 19, dtype=np.int32)
        return pa.Array.from_buffers(pa.string(), len(n), [None, pa.py_buffer(offsets), pa.py_buffer(out)])

    def extra() -> pa.Array:
        local_len, domain_len = email_lens()
        current = (
            8
            + names.lengths()[name_idx()]
            + (local_len + domain_len + 5)
            + 19
            + cities.lengths()[city_idx()]
            + 2
        )
        r = draws(n, 14)
        return extra_pool().pick(
            extra_lengths(cfg.avg_person_byte_size, current, field(r, 0, 32)), field(r, 32, 32)
        )

    builders: dict[str, Callable[[], pa.Array]] = {
        "id": lambda: _i64(last_base0_person_id(cfg, n) + cfg.first_person_id),
        "name": lambda: names.take(name_idx()),
        "email_address": email,
        "credit_card": credit_card,
        "city": lambda: cities.take(city_idx()),
        "state": lambda: states.take(state_idx()),
        "date_time": lambda: _ts_array(timestamps_ms(cfg, n)),
        "extra": extra,
    }
    return {c: m.get(c, builders[c]) for c in columns}


# -- auctions --------------------------------------------------------------------------------------------


def auctions(cfg: NexmarkConfig, n: np.ndarray, columns: Sequence[str]) -> dict[str, pa.Array]:
    """Auction events for event numbers `n` (all of them auction events)."""
    n = np.asarray(n, np.int64)
    m = _Lazy()
    r0 = draws(n, 20)
    r5 = draws(n, 25)

    def ts() -> np.ndarray:
        return m.get("_ts", lambda: timestamps_ms(cfg, n))  # type: ignore[return-value]

    def item_len() -> np.ndarray:
        return 3 + field(r0, 32, 16) % 17  # nextString(20)

    def desc_len() -> np.ndarray:
        return 3 + field(r0, 48, 16) % 97  # nextString(100)

    def initial_bid() -> np.ndarray:
        return m.get("_initial", lambda: prices(unit(draws(n, 22))))  # type: ignore[return-value]

    def seller() -> pa.Array:
        hot = field(r0, 0, 16) % cfg.hot_seller_ratio > 0
        hot_id = (last_base0_person_id(cfg, n) // HOT_BATCH) * HOT_BATCH
        other = next_base0_person_id(cfg, n, unit(draws(n, 21)))
        return _i64(np.where(hot, hot_id, other) + cfg.first_person_id)

    def expires() -> pa.Array:
        events_ahead = cfg.in_flight_auctions * cfg.total_proportion // cfg.auction_proportion
        horizon = timestamps_ms(cfg, n + events_ahead) - ts()
        length = 1 + below(draws(n, 24), np.maximum(horizon * 2, 1))
        return _ts_array(ts() + length)

    def extra() -> pa.Array:
        current = 8 + item_len() + desc_len() + 8 * 5
        return extra_pool().pick(
            extra_lengths(cfg.avg_auction_byte_size, current, field(r5, 32, 16)), field(r5, 48, 16)
        )

    builders: dict[str, Callable[[], pa.Array]] = {
        "id": lambda: _i64(last_base0_auction_id(cfg, n) + cfg.first_auction_id),
        "item_name": lambda: text_pool().pick(item_len(), field(r5, 0, 16)),
        "description": lambda: text_pool().pick(desc_len(), field(r5, 16, 16)),
        "initial_bid": lambda: _i64(initial_bid()),
        "reserve": lambda: _i64(initial_bid() + prices(unit(draws(n, 23)))),
        "date_time": lambda: _ts_array(ts()),
        "expires": expires,
        "seller": seller,
        "category": lambda: _i64(cfg.first_category_id + field(r0, 16, 16) % cfg.num_categories),
        "extra": extra,
    }
    return {c: m.get(c, builders[c]) for c in columns}


# -- bids ------------------------------------------------------------------------------------------------


def bids(cfg: NexmarkConfig, n: np.ndarray, columns: Sequence[str]) -> dict[str, pa.Array]:
    """Bid events for event numbers `n` (all of them bid events)."""
    n = np.asarray(n, np.int64)
    m = _Lazy()
    r0 = draws(n, 30)
    r3 = draws(n, 33)

    def auction() -> pa.Array:
        hot = field(r0, 0, 16) % cfg.hot_auction_ratio > 0
        hot_id = (last_base0_auction_id(cfg, n) // HOT_BATCH) * HOT_BATCH
        u = field(draws(n, 32), 0, 32) / float(1 << 32)
        return _i64(np.where(hot, hot_id, next_base0_auction_id(cfg, n, u)) + cfg.first_auction_id)

    def bidder() -> pa.Array:
        hot = field(r0, 16, 16) % cfg.hot_bidder_ratio > 0
        hot_id = (last_base0_person_id(cfg, n) // HOT_BATCH) * HOT_BATCH + 1
        u = field(draws(n, 32), 32, 32) / float(1 << 32)
        return _i64(np.where(hot, hot_id, next_base0_person_id(cfg, n, u)) + cfg.first_person_id)

    def channel_idx() -> np.ndarray:
        def compute() -> np.ndarray:
            hot = field(r0, 32, 16) % cfg.hot_channel_ratio > 0
            hot_i = field(r0, 48, 16) % 4
            other = 4 + field(r3, 0, 32) % 10_000
            return np.where(hot, hot_i, other)

        return m.get("_channel", compute)  # type: ignore[return-value]

    def extra() -> pa.Array:
        lengths = extra_lengths(cfg.avg_bid_byte_size, np.full(len(n), 32, np.int64), field(r3, 32, 16))
        return extra_pool().pick(lengths, field(r3, 48, 16))

    builders: dict[str, Callable[[], pa.Array]] = {
        "auction": auction,
        "bidder": bidder,
        "price": lambda: _i64(prices(unit(draws(n, 31)))),
        "channel": lambda: channel_pools()[0].take(channel_idx()),
        "url": lambda: channel_pools()[1].take(channel_idx()),
        "date_time": lambda: _ts_array(timestamps_ms(cfg, n)),
        "extra": extra,
    }
    return {c: m.get(c, builders[c]) for c in columns}


GENERATORS: dict[EventKind, Callable[[NexmarkConfig, np.ndarray, Sequence[str]], dict[str, pa.Array]]] = {
    EventKind.PERSON: persons,
    EventKind.AUCTION: auctions,
    EventKind.BID: bids,
}


def generate(
    cfg: NexmarkConfig, kind: EventKind, n: np.ndarray, columns: Sequence[str] | None = None
) -> pa.RecordBatch:
    """Events of one kind as a record batch (natural column types), for tests and tools."""
    cols = list(columns or COLUMNS_OF[kind])
    arrays = GENERATORS[kind](cfg, n, cols)
    return pa.RecordBatch.from_arrays([arrays[c] for c in cols], names=cols)
