"""bench/bench_flat_state.py at a tiny size: the three time-bounded jobs run over Nexmark sources
and the bench reads each job's internal state rows (the figures of the 10M-event run)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_flat_state
from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.spark_baseline import event_table


def test_the_flat_state_bench_runs_and_counts_state(tmp_path: Path) -> None:
    out = io.StringIO()
    samples = bench_flat_state.run(6_000, 3_000, 1, tmp_path, tf_seconds=3600, out=out)
    assert samples and samples[-1].events >= 6_000
    last = samples[-1]
    # a 1 h temporal filter keeps every bid, in its MV and in the DynamicFilter's state (besides
    # a few rows: the Now executor's, the watermark filters')
    bids = event_table(NexmarkConfig(), "bid", 0, 6_000).num_rows
    assert last.output["tf"] == bids and bids <= last.state["tf"] < bids + 10
    # under one second of event time: no 10 s window closed yet; its group row (and the
    # watermark filters' rows) in state
    assert last.output["eowc"] == 0 and 0 < last.state["eowc"] <= 4
    assert last.state["ij"] > 0 and last.output["ij"] > 0
    assert "tf state" in out.getvalue() and "ij: MV rows at the end" in out.getvalue()
