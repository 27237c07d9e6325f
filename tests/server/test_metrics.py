"""`/metrics` on the dashboard port: a real server, work through psycopg, scrapes parsed with
prometheus_client's own text parser; the numbers move with the work done between two scrapes."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pgwire_helpers import start_server
from prometheus_client.parser import text_string_to_metric_families

from piestream.server.dashboard import Dashboard
from piestream.server.pgwire import PgServer

GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "piestream.json"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PgServer, Dashboard]]:
    srv = start_server(tmp_path_factory.mktemp("metrics"))
    dash = Dashboard(srv.database, port=0, pgwire=srv).start()
    yield srv, dash
    dash.stop()
    srv.stop()


def scrape(dash: Dashboard) -> tuple[Samples, str]:
    with urllib.request.urlopen(dash.url + "metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out, text


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when there are none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def has(samples: Samples, name: str, **labels: str) -> bool:
    want = set(labels.items())
    return any(n == name and want <= ls for (n, ls) in samples)


def test_metrics_move_with_the_work(served: tuple[PgServer, Dashboard]) -> None:
    srv, dash = served
    dsn = f"host=127.0.0.1 port={srv.port} user=root dbname=dev"
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
        pg.execute("CREATE MATERIALIZED VIEW mv AS SELECT v % 3 AS g, count(*) AS n FROM t GROUP BY v % 3")
        pg.execute("CREATE MATERIALIZED VIEW bad AS SELECT k, 10 / v AS r FROM t")
        pg.execute("CREATE SINK sk FROM mv WITH (connector = 'blackhole')")
        pg.execute(
            "CREATE SOURCE src (id BIGINT) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
            "datagen.rows.per.second = '1000') FORMAT PLAIN ENCODE JSON"
        )
        pg.execute("CREATE MATERIALIZED VIEW srcmv AS SELECT count(*) AS n FROM src")
        pg.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 50) AS g")
        pg.execute("FLUSH")
        first, text = scrape(dash)
        assert "# TYPE meta_barrier_duration_seconds histogram" in text

        pg.execute("INSERT INTO t VALUES (100, 0)")  # a division by zero in `bad`
        pg.execute("INSERT INTO t SELECT g, g FROM generate_series(101, 130) AS g")
        pg.execute("FLUSH")
        pg.execute("SELECT * FROM mv").fetchall()
        with pytest.raises(psycopg.Error):
            pg.execute("SELECT * FROM no_such_table")
        pg.execute("FLUSH")
        second, _ = scrape(dash)

    # epochs: the latency histogram counts every committed epoch, and grows
    n1 = value(first, "meta_barrier_duration_seconds_count")
    n2 = value(second, "meta_barrier_duration_seconds_count")
    assert n1 >= 1 and n2 > n1
    assert value(second, "meta_barrier_epochs_committed_total") >= n2
    assert value(second, "meta_barrier_duration_seconds_bucket", le="+Inf") == n2
    assert value(second, "meta_barrier_duration_seconds_sum") > 0
    assert value(second, "meta_barrier_commit_duration_seconds_count") == n2
    assert value(second, "stream_spark_job_duration_seconds_count") == n2
    assert value(second, "storage_max_committed_epoch") > value(first, "storage_max_committed_epoch") > 0

    # rows: exactly what was inserted reached the table and the MVs over it
    assert value(first, "stream_mview_input_row_count_total", table_name="t") == 50
    assert value(second, "stream_mview_input_row_count_total", table_name="t") == 81
    assert value(second, "stream_mview_input_row_count_total", table_name="bad") == 81
    assert (
        value(second, "stream_dml_input_row_count_total") - value(first, "stream_dml_input_row_count_total")
        == 31
    )
    # mv's groups changed: the sink got at least its first 3 groups' rows
    assert value(second, "stream_mview_input_row_count_total", table_name="mv") >= 3
    assert value(second, "stream_sink_input_row_count_total", sink_name="sk") >= 3
    assert value(second, "stream_actor_in_record_cnt_total", relation="mv") > value(
        first, "stream_actor_in_record_cnt_total", relation="mv"
    )
    src1 = value(first, "stream_source_output_rows_counts_total", source_name="src")
    src2 = value(second, "stream_source_output_rows_counts_total", source_name="src")
    assert src2 > src1 > 0

    # state: tables hold bytes and keys, named by relation
    assert value(second, "state_store_table_size_bytes", table_name="t") > 0
    # (an SST holding several tables has its keys split evenly among them: approximate)
    assert value(second, "state_store_table_key_count", table_name="t") > 0
    assert value(second, "state_store_table_size_bytes", table_name="mv") > 0
    # operator caches were consulted (the aggregation's groups)
    assert value(second, "stream_operator_cache_lookups_total", relation="mv") > 0

    # streaming errors: the division by zero in `bad`
    assert value(first, "user_compute_error_count_total", relation="bad") == 0
    assert value(second, "user_compute_error_count_total", relation="bad", sqlstate="22012") >= 1

    # backfills finished
    assert value(second, "stream_backfill_progress_ratio", relation="mv") == 1.0
    assert not has(second, "stream_backfill_snapshot_total_row_count", relation="mv")  # only while running

    # the wire protocol: the session is gone, statements were timed by kind, one failed
    assert value(second, "pgwire_connections_total") >= 1
    assert (
        value(second, "pgwire_statement_duration_seconds_count", kind="insert")
        - value(first, "pgwire_statement_duration_seconds_count", kind="insert")
        == 2
    )
    assert has(second, "pgwire_statement_duration_seconds_bucket", kind="query")
    assert value(second, "pgwire_statement_errors_total") >= 1
    assert value(second, "pgwire_active_sessions") >= 1  # the scrape happened inside the session
    deadline = time.monotonic() + 30  # the server ends the session after the client has gone
    while (value(after := scrape(dash)[0], "pgwire_active_sessions")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert value(after, "pgwire_active_sessions") == 0

    # the Grafana dashboard in the repo queries only series the server exports
    panels = json.loads(GRAFANA.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    names = {
        m for e in exprs for m in re.findall(r"\b([a-z_]+(?:_total|_bucket|_count|_sum)?)\b(?=[\[{ )]|$)", e)
    }
    exported = {n for n, _ in second}
    wanted = {
        n for n in names if n.startswith(("meta_", "stream_", "state_", "storage_", "pgwire_", "user_"))
    }
    assert len(wanted) >= 15 and wanted <= exported, wanted - exported


def test_metrics_endpoint_without_pgwire_and_other_paths(served: tuple[PgServer, Dashboard]) -> None:
    srv, _ = served
    dash = Dashboard(srv.database, port=0).start()  # the embedded case: no wire protocol
    try:
        samples, text = scrape(dash)
        assert has(samples, "meta_barrier_duration_seconds_count")
        assert "pgwire_" not in text
        with urllib.request.urlopen(dash.url + "health", timeout=10) as r:
            assert r.read() == b"ok"
    finally:
        dash.stop()
