"""Watermark derivation steps (plan/watermark, frontend/watermark_derive): every bound they give
is at or below every value a row at or above the watermark can produce, and the cache drops
exactly the keys below a watermark."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pyarrow as pa

from piestream.common.interval import Interval
from piestream.common.order import ASC
from piestream.common.types import INT, INTERVAL, TIMESTAMP, TIMESTAMPTZ, VARCHAR
from piestream.encoding import memcomparable
from piestream.expr.expr import FuncCall, InputRef, Literal
from piestream.frontend.watermark_derive import derive_expr, hop_window_watermarks
from piestream.plan.watermark import ColumnWatermark, WatermarkSource, watermark_state_table
from piestream.stream.cache.keyed_rows import KeyedRows
from piestream.stream.executors.hop_window import window_starts

T0 = dt.datetime(2024, 1, 1)
SRC = ColumnWatermark((WatermarkSource(watermark_state_table(7, TIMESTAMP)),))


def _us(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


def test_hop_window_bounds_never_exceed_a_window_of_a_row_at_the_watermark() -> None:
    rng = random.Random(3)
    for _ in range(300):
        slide = rng.choice([1, 2, 3, 5]) * 1_000_000
        size = slide * rng.randint(1, 5)
        offset = rng.randrange(0, slide)
        w = T0 + dt.timedelta(microseconds=rng.randrange(0, 10**9))
        start, end = hop_window_watermarks(SRC, slide, size, offset)
        lo = start.bound({7: w})
        assert end.bound({7: w}) == lo + dt.timedelta(microseconds=size)
        # rows at the watermark and after: their earliest window starts at the bound or later
        ts = np.array([_us(w) + d for d in (0, 1, slide - 1, slide, size, rng.randrange(0, 10**8))], np.int64)
        starts = window_starts(ts, slide, size, offset)
        assert starts.min() >= _us(lo)
        assert starts[0].min() == _us(lo)  # tight: a row exactly at W has a window starting there


def test_monotonic_projections_carry_a_watermark_and_others_do_not() -> None:
    wms = {0: SRC}
    ts = InputRef(0, TIMESTAMP)
    w = T0 + dt.timedelta(seconds=17, microseconds=5)
    minus = derive_expr(
        FuncCall("subtract", (ts, Literal(Interval(0, 1, 4_000_000), INTERVAL)), TIMESTAMP), wms
    )
    assert minus is not None and minus.bound({7: w}) == w - dt.timedelta(days=1, seconds=4)
    tumble = derive_expr(
        FuncCall("tumble_start", (ts, Literal(Interval(0, 0, 10_000_000), INTERVAL)), TIMESTAMP), wms
    )
    assert tumble is not None and tumble.bound({7: w}) == T0 + dt.timedelta(seconds=10)
    trunc = derive_expr(FuncCall("date_trunc", (Literal("minute", VARCHAR), ts), TIMESTAMP), wms)
    assert trunc is not None and trunc.bound({7: w}) == T0
    # a month is not a fixed width, a day is not one for timestamptz, other columns carry none
    assert derive_expr(FuncCall("add", (ts, Literal(Interval(1, 0, 0), INTERVAL)), TIMESTAMP), wms) is None
    tz = InputRef(0, TIMESTAMPTZ)
    assert derive_expr(FuncCall("add", (tz, Literal(Interval(0, 1, 0), INTERVAL)), TIMESTAMPTZ), wms) is None
    assert derive_expr(InputRef(1, TIMESTAMP), wms) is None
    assert derive_expr(FuncCall("extract", (ts,), INT), wms) is None
    # unknown until the filter has seen a row
    assert SRC.bound({}) is None


def test_the_lower_of_two_watermarks_bounds_a_join_key() -> None:
    other = ColumnWatermark((WatermarkSource(watermark_state_table(8, TIMESTAMP)),))
    both = SRC.lower_with(other)
    assert both.bound({7: T0, 8: T0 + dt.timedelta(seconds=1)}) == T0
    assert both.bound({7: T0}) is None


def test_cache_remove_below_drops_exactly_the_keys_below() -> None:
    rng = random.Random(5)
    cache = KeyedRows([pa.int64()])
    times = [T0 + dt.timedelta(seconds=rng.randrange(0, 1000)) for _ in range(3000)]
    groups = [rng.randrange(0, 5) for _ in times]
    cols = [pa.array(times, pa.timestamp("us")), pa.array(groups, pa.int32())]
    keys = memcomparable.encode_columns(cols, [TIMESTAMP, INT], [ASC, ASC])
    uniq = {(t, g): i for i, (t, g) in enumerate(zip(times, groups, strict=True))}
    idx = pa.array(sorted(uniq.values()))
    keys = keys.take(np.asarray(idx))
    cache.put(keys, [pa.array(np.arange(len(idx)), pa.int64())], distinct=True)
    bound = T0 + dt.timedelta(seconds=400)
    n = cache.remove_below(memcomparable.encode_datum(bound, TIMESTAMP, ASC))
    kept_times = [times[i] for i in idx.to_pylist()]
    assert n == sum(t < bound for t in kept_times)
    hit, _ = cache.get(keys)
    assert hit.tolist() == [t >= bound for t in kept_times]
