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


def test_the_jvm_side_is_the_locked_pyspark_and_downloads_nothing(spark) -> None:  # type: ignore[no-untyped-def]
    """Spark's jars come from the pyspark wheel that uv.lock pins: the JVM runs that version, its
    class path is the wheel's own directory, and no setting asks Spark to fetch packages (no Maven
    repository is reachable where piestream is tested)."""
    import tomllib
    from pathlib import Path

    import pyspark

    lock = tomllib.loads((Path(__file__).parents[2] / "uv.lock").read_text())
    pinned = next(p["version"] for p in lock["package"] if p["name"] == "pyspark")
    assert pyspark.__version__ == pinned
    assert spark.version == pinned
    conf = spark.sparkContext.getConf()
    for key in ("spark.jars.packages", "spark.jars.repositories", "spark.jars.ivySettings", "spark.jars"):
        assert not conf.get(key, ""), key
    home = Path(pyspark.__file__).resolve().parent
    class_path = spark.sparkContext._jvm.java.lang.System.getProperty("java.class.path")
    entries = [Path(e).resolve() for e in class_path.split(":") if e]
    assert entries and all(home in e.parents for e in entries), class_path
