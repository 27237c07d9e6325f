"""Spark really runs: a mapInArrow job over Arrow batches in the shared local session."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytestmark = pytest.mark.spark


def _double(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        yield pa.RecordBatch.from_arrays([b.column(0), pc.multiply(b.column(1), 2)], names=["k", "v"])


def test_map_in_arrow_runs_python_on_executors(spark) -> None:  # type: ignore[no-untyped-def]
    df = spark.range(0, 1000, numPartitions=2).selectExpr("id % 7 as k", "id as v")
    out = df.mapInArrow(_double, "k long, v long").toArrow()
    assert out.num_rows == 1000
    assert pc.sum(out.column("v")).as_py() == 2 * sum(range(1000))
    # the job really ran in 2 tasks
    assert df.rdd.getNumPartitions() == 2
