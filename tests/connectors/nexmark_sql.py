"""Shared SQL and expectations of the Nexmark source tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.generator import EventKind, event_kinds, generate

BID_COLUMNS = "auction, bidder, price, date_time"


def bid_table(n_events: int, *, gap_ns: int = 200_000, splits: int = 2, name: str = "bid") -> str:
    return (
        f"CREATE TABLE {name} (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP) "
        f"WITH (connector = 'nexmark', nexmark.table.type = 'Bid', nexmark.split.num = '{splits}', "
        f"nexmark.event.num = '{n_events}', nexmark.min.event.gap.in.ns = '{gap_ns}')"
    )


def expected_bids(n_events: int) -> list[tuple]:
    """The bids among events [0, n_events), sorted."""
    cfg = NexmarkConfig()
    n = np.arange(n_events, dtype=np.int64)
    b = generate(cfg, EventKind.BID, n[event_kinds(cfg, n) == EventKind.BID], BID_COLUMNS.split(", "))
    return sorted(zip(*(b.column(i).to_pylist() for i in range(b.num_columns)), strict=True))


def wait_until(cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
