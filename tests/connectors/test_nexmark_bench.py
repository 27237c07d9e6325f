"""`piestream bench nexmark`: the harness counts exactly N events, its MVs equal DuckDB over the same
generated events, unsupported queries are reported (not dropped), and Spark's SQL for every query
at least analyzes and runs on a few events."""

from __future__ import annotations

import dataclasses
import io
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from piestream.cli import main as cli_main
from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.queries import QUERIES, query_names
from piestream.connectors.nexmark.spark_baseline import (
    SPARK_QUERIES,
    event_table,
    run_spark_query,
    write_events,
)
from piestream.nexmark_bench import BenchConfig, Progress, format_report, run_bench, run_piestream
from piestream.server.database import Database

N = 6000


def _norm(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Sortable rows; numerics compared as Decimal (piestream NUMERIC vs DuckDB DECIMAL)."""
    out = [
        tuple(Decimal(str(v)).normalize() if isinstance(v, Decimal | float) else v for v in r) for r in rows
    ]
    return sorted(out, key=repr)


def _duckdb_rows(sql: str) -> list[tuple[Any, ...]]:
    bid = event_table(NexmarkConfig(), "bid", 0, N)
    # the generator's TIMESTAMP columns (no time zone), as piestream returns them
    bid = bid.cast(
        pa.schema([pa.field(f.name, pa.timestamp("us")) if f.name == "date_time" else f for f in bid.schema])
    )
    con = duckdb.connect()
    con.register("bid", bid)
    return con.execute(sql).fetchall()


@pytest.mark.parametrize("name", ["q0", "q1", "q2"])
def test_mv_equals_duckdb_and_counts_every_event(tmp_path: Path, name: str) -> None:
    cfg = BenchConfig(
        queries=[name], events=N, runner="local", sink="mv", epoch_events=2500, spark_baseline=False
    )
    got: list[tuple[Any, ...]] = []

    def read(db: Database) -> None:
        got.extend(db.execute(f"SELECT * FROM nexmark_{name}")[0].rows)

    run = run_piestream(name, cfg, tmp_path, None, Progress(io.StringIO()), keep=read)
    assert run.error is None
    assert run.events == N
    assert len(run.epochs) == 3  # 6000 events, at most 2500 per epoch
    sql = QUERIES[name].sql
    want = _duckdb_rows(sql.replace("0.908 * price", "CAST(0.908 AS DECIMAL(4, 3)) * price"))
    assert len(got) == len(want) > 0
    assert _norm(got) == _norm(want)


def test_report_lists_unsupported_queries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every Nexmark query is supported now: q6 with a GROUPS frame (refused with 0A000) stands in
    q6 = QUERIES["q6"]
    monkeypatch.setitem(
        QUERIES, "q6", dataclasses.replace(q6, sql=q6.sql.replace("ROWS BETWEEN", "GROUPS BETWEEN"))
    )
    out = io.StringIO()
    cfg = BenchConfig(queries=["q2", "q6"], events=3000, runner="local", spark_baseline=False)
    runs = run_bench(cfg, out=out, progress=Progress(io.StringIO()))
    assert [r.events for r in runs] == [3000, 0]
    text = out.getvalue()
    assert "q2 " in text and "150.0K" in text  # the target next to the figure
    assert "q6     not supported: 0A000:" in text
    assert "not supported / failed:" in text
    assert format_report(runs, cfg).count("\n") >= 3


def test_query_names_and_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert query_names("q0, q2,q0") == ["q0", "q2"]
    assert query_names("q20-q22") == ["q20", "q21", "q22"]
    assert query_names("all") == list(QUERIES)
    assert cli_main(["bench", "nexmark", "--queries", "q99", "--runner", "local"]) == 2
    assert "unknown query 'q99'" in capsys.readouterr().err


@pytest.mark.spark
def test_spark_queries_analyze_and_run(tmp_path: Path, spark: Any) -> None:
    """Every Spark baseline query analyzes; a stream runs one micro-batch per file, a recompute runs."""
    dirs = write_events(tmp_path / "events", 4000, 2000)
    assert sorted(p.name for p in dirs["bid"].iterdir()) == [
        "part-000000000000.parquet",
        "part-000000002000.parquet",
    ]
    assert set(SPARK_QUERIES) <= set(QUERIES)
    for t, d in dirs.items():
        spark.read.parquet(str(d)).createOrReplaceTempView(t)
    try:
        for name, q in SPARK_QUERIES.items():
            assert spark.sql(q.sql).schema.fields, name  # analysis only
    finally:
        for t in dirs:
            spark.catalog.dropTempView(t)
    for name in ("q2", "q3", "q17", "q4"):
        r = run_spark_query(spark, name, dirs, tmp_path, QUERIES[name].tables)
        assert r.mode == SPARK_QUERIES[name].mode and r.seconds > 0
        if r.mode == "stream":
            assert r.batches == 2, name
