"""The Nexmark generator's configuration (reference §8; performance-anchors §1.3).

Defaults are those of the Java generator and nexmark-rs. Options come from ``WITH (...)`` as
``nexmark.<name>`` (dots or underscores, e.g. ``nexmark.active.people``); unknown ``nexmark.``
options are rejected so a typo does not silently fall back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from piestream.connectors.options import InvalidOption, parse_int

#: 2015-07-15 00:00:00 UTC: RisingWave's base time in the per-table (legacy) mode.
LEGACY_BASE_TIME_MS = 1_436_918_400_000


@dataclass(frozen=True)
class NexmarkConfig:
    base_time_ms: int = LEGACY_BASE_TIME_MS
    first_event_rate: int = 10_000  # events per second of *event time* (timestamps), all generators
    active_people: int = 1000
    in_flight_auctions: int = 100
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    hot_seller_ratio: int = 4
    hot_auction_ratio: int = 2
    hot_bidder_ratio: int = 4
    hot_channel_ratio: int = 2
    num_categories: int = 5
    auction_id_lead: int = 10
    person_id_lead: int = 10
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    first_auction_id: int = 1000
    first_person_id: int = 1000
    first_category_id: int = 10

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    @property
    def inter_event_delay_us(self) -> float:
        return 1_000_000 / self.first_event_rate

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "base_time_ms" and v < (0 if f.name.endswith("lead") else 1):
                raise InvalidOption(f"nexmark.{f.name.replace('_', '.')} must be positive, got {v}")


# "nexmark.<key>" → config field; RisingWave's spellings (and a few aliases)
_FIELD_OPTIONS = {f.name.replace("_", "."): f.name for f in fields(NexmarkConfig)}
_FIELD_OPTIONS.update(
    {
        "base.time": "base_time_ms",
        "hot.sellers.ratio": "hot_seller_ratio",
        "hot.auctions.ratio": "hot_auction_ratio",
        "hot.bidders.ratio": "hot_bidder_ratio",
        "hot.channels.ratio": "hot_channel_ratio",
        "events.per.sec": "first_event_rate",
    }
)
#: options the source reads itself (not generator model parameters)
SOURCE_OPTIONS = {
    "event.rate",
    "split.num",
    "event.num",
    "table.type",
    "max.chunk.size",
    "min.event.gap.in.ns",
    "use.real.time",
    "next.event.rate",
    "rate.shape",
    "rate.period",
    "threads",
    "out.of.order.group.size",
    "sine.approx.steps",
    "us.per.unit",
}


def nexmark_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``nexmark.*`` options, keys normalized to dotted lower case without the prefix."""
    out = {}
    for k, v in options.items():
        k = k.lower()
        if k.startswith("nexmark."):
            out[k.removeprefix("nexmark.").replace("_", ".")] = v
    return out


def config_from_options(options: Mapping[str, str]) -> NexmarkConfig:
    opts = nexmark_options(options)
    changes: dict[str, int] = {}
    for k, v in opts.items():
        if k in _FIELD_OPTIONS:
            changes[_FIELD_OPTIONS[k]] = parse_int(f"nexmark.{k}", v)
        elif k not in SOURCE_OPTIONS:
            raise InvalidOption(f'unknown nexmark option "nexmark.{k}"')
    if "next.event.rate" in opts and parse_int(
        "nexmark.next.event.rate", opts["next.event.rate"]
    ) != changes.get("first_event_rate", NexmarkConfig.first_event_rate):
        raise InvalidOption(
            "nexmark.next.event.rate must equal nexmark.first.event.rate (constant rate only)"
        )
    if opts.get("out.of.order.group.size", "1").strip() != "1":
        raise InvalidOption("nexmark.out.of.order.group.size other than 1 is not supported")
    if opts.get("use.real.time", "false").strip().lower() not in ("false", "0", "off"):
        raise InvalidOption("nexmark.use.real.time = true is not supported (event times are deterministic)")
    return replace(NexmarkConfig(), **changes)
