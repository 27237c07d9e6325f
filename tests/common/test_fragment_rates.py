"""FragmentTotals' rates: the increase per second of a reported sum over the last window."""

from __future__ import annotations

import pytest

from piestream.common import metrics
from piestream.common.metrics import FragmentTotals


def test_rate_over_the_window_and_towards_zero_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: now[0])
    t = FragmentTotals(window_s=10.0)
    assert t.rate(1, "rows.source") is None
    for _ in range(20):  # 50 rows per 0.5 s epoch for 10 s
        now[0] += 0.5
        t.add(1, {"rows.source": 50.0}, ["rows.source"])
    assert t.rate(1, "rows.source") == pytest.approx(100.0, rel=0.06)  # from the first epoch on
    for _ in range(20):  # then 10 s of 200 rows per epoch: the window forgets the slow part
        now[0] += 0.5
        t.add(1, {"rows.source": 200.0}, ["rows.source"])
    assert t.rate(1, "rows.source") == pytest.approx(400.0, rel=0.06)
    now[0] += 90  # no epoch commits: the rate falls
    assert t.rate(1, "rows.source") < 50
    assert t.snapshot()[1]["rows.source"] == 20 * 50 + 20 * 200
