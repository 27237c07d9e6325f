"""Which ON conditions make an interval join (frontend/interval_join): the band is read from
comparisons of two watermarked time columns, one per side, each optionally ± a fixed interval;
everything else leaves the join plain (no cleaning)."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlglot

from piestream.common.types import INT, TIMESTAMP, TIMESTAMPTZ
from piestream.frontend.binder.expr_binder import ExprBinder
from piestream.frontend.binder.scope import Scope, ScopeColumn
from piestream.frontend.interval_join import derive_band
from piestream.frontend.parser import DIALECT
from piestream.frontend.stream_piece import conjuncts
from piestream.plan.watermark import ColumnWatermark, WatermarkSource, watermark_state_table

#: left input (k, t, tz, u), right input (k, t, tz, u); t, tz watermarked on both sides, u never
COLUMNS = [("k", INT), ("t", TIMESTAMP), ("tz", TIMESTAMPTZ), ("u", TIMESTAMP)]
NL = len(COLUMNS)
S = 1_000_000


def _wm(table_id: int, t: object) -> ColumnWatermark:
    return ColumnWatermark((WatermarkSource(watermark_state_table(table_id, t)),))  # type: ignore[arg-type]


LEFT_WMS = {1: _wm(10, TIMESTAMP), 2: _wm(11, TIMESTAMPTZ)}
RIGHT_WMS = {1: _wm(20, TIMESTAMP), 2: _wm(21, TIMESTAMPTZ)}


def _band(on: str, *, left_append_only: bool = True, right_append_only: bool = True) -> object:
    scope = Scope.of(
        [ScopeColumn("a", n, t) for n, t in COLUMNS] + [ScopeColumn("b", n, t) for n, t in COLUMNS]
    )
    expr = ExprBinder(scope).bind(sqlglot.parse_one(f"SELECT {on}", read=DIALECT).expressions[0])
    return derive_band(
        conjuncts(expr),
        NL,
        LEFT_WMS,
        RIGHT_WMS,
        left_append_only=left_append_only,
        right_append_only=right_append_only,
    )


@pytest.mark.parametrize(
    ("on", "cols", "lower", "upper"),
    [
        ("b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t", (1, 1), -5 * S, 0),
        ("b.t >= a.t - INTERVAL '5' SECOND AND b.t <= a.t", (1, 1), -5 * S, 0),
        ("b.t > a.t AND b.t < a.t + INTERVAL '2' MINUTE", (1, 1), 0, 120 * S),
        # either side of the comparison, offsets on both, interval first
        ("a.t + INTERVAL '1' SECOND <= b.t AND INTERVAL '3' SECOND + a.t >= b.t", (1, 1), S, 3 * S),
        ("a.t - INTERVAL '2' SECOND < b.t + INTERVAL '1' SECOND AND a.k = b.k", (1, 1), -3 * S, None),
        ("b.t <= a.t AND a.k > 0", (1, 1), None, 0),
        # the tightest of several bounds
        (
            "b.t >= a.t - INTERVAL '5' SECOND AND b.t >= a.t - INTERVAL '2' SECOND AND b.t <= a.t",
            (1, 1),
            -2 * S,
            0,
        ),
        # days are fixed on timestamp, microseconds too
        ("b.t BETWEEN a.t - INTERVAL '1' DAY AND a.t + INTERVAL '0.5' SECOND", (1, 1), -86_400 * S, S // 2),
        # a half that is not a band leaves the other half: one side cleaned
        ("b.t BETWEEN a.t - INTERVAL '1' MONTH AND a.t", (1, 1), None, 0),
        ("b.tz BETWEEN a.tz - INTERVAL '1' DAY AND a.tz", (2, 2), None, 0),
        # timestamptz with seconds
        ("b.tz BETWEEN a.tz - INTERVAL '10' SECOND AND a.tz", (2, 2), -10 * S, 0),
    ],
)
def test_recognised_bands(on: str, cols: tuple[int, int], lower: int | None, upper: int | None) -> None:
    band = _band(on)
    assert band is not None
    assert (band.left_col, band.right_col) == cols  # type: ignore[attr-defined]
    assert (band.lower_usecs, band.upper_usecs) == (lower, upper)  # type: ignore[attr-defined]
    # each side is cleaned iff the band bounds the other side's reach into it
    assert (band.clean_left is not None) == (upper is not None)  # type: ignore[attr-defined]
    assert (band.clean_right is not None) == (lower is not None)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "on",
    [
        "b.u BETWEEN a.t - INTERVAL '5' SECOND AND a.t",  # b.u has no watermark
        "b.t BETWEEN a.u - INTERVAL '5' SECOND AND a.u",  # nor a.u
        "b.t NOT BETWEEN a.t - INTERVAL '5' SECOND AND a.t",  # not a band
        "b.t BETWEEN SYMMETRIC a.t - INTERVAL '5' SECOND AND a.t",  # an OR
        "b.t >= a.t - INTERVAL '5' SECOND OR b.t <= a.t",
        "b.t >= a.t - INTERVAL '1' MONTH",  # months are not fixed
        "b.tz <= a.tz + INTERVAL '1' DAY",  # nor days on timestamptz
        "a.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t",  # one side only
        "b.t = a.t",  # equality is an equi key, not a band
        "b.t::DATE >= a.t::DATE",  # casts
        "b.t - a.t <= INTERVAL '5' SECOND",  # a difference of times (not a column ± interval)
        "b.t >= a.tz",  # timestamp against timestamptz (a cast)
    ],
)
def test_unrecognised_conditions_leave_the_join_plain(on: str) -> None:
    assert _band(on) is None


def test_cleaning_bounds_follow_the_band_and_retractable_sides_wait_for_their_own_watermark() -> None:
    band = _band("b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t + INTERVAL '1' SECOND")
    w = {10: dt.datetime(2024, 1, 1, 0, 1), 20: dt.datetime(2024, 1, 1, 0, 2)}
    # left rows are dead below W_b - 1 s, right rows below W_a - 5 s
    assert band.clean_left.bound(w) == dt.datetime(2024, 1, 1, 0, 1, 59)  # type: ignore[attr-defined]
    assert band.clean_right.bound(w) == dt.datetime(2024, 1, 1, 0, 0, 55)  # type: ignore[attr-defined]
    # a side that may retract rows keeps them until its own watermark passes them as well
    capped = _band(
        "b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t + INTERVAL '1' SECOND",
        left_append_only=False,
        right_append_only=False,
    )
    assert capped.clean_left.bound(w) == w[10]  # type: ignore[attr-defined]
    assert capped.clean_right.bound(w) == dt.datetime(2024, 1, 1, 0, 0, 55)  # type: ignore[attr-defined]
