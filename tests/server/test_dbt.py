"""dbt (dbt-core's dbtRunner) with the dbt-piestream adapter on integrations/dbt/example against
a server: ``dbt seed``, ``dbt run`` (twice: unchanged streaming jobs kept, a changed one and the
CTAS table rebuilt), ``dbt test``, ``dbt docs generate``, and the models' rows, including a
materialized view that keeps up with rows inserted after it was built, a sink, a connector table
and indexes."""

from __future__ import annotations

import json
import shutil
import time
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from dbt.cli.main import dbtRunner, dbtRunnerResult

from piestream.server.pgwire import PgServer

EXAMPLE = Path(__file__).resolve().parents[2] / "integrations" / "dbt" / "example"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, server: PgServer, dsn: str) -> Path:
    with psycopg.connect(dsn, autocommit=True) as c:  # the source the example reads
        c.execute("CREATE TABLE events (kind VARCHAR, at TIMESTAMP)")
        c.execute("INSERT INTO events VALUES ('click', now()), ('view', now()), ('click', now())")
    path = tmp_path_factory.mktemp("dbt") / "example"
    shutil.copytree(EXAMPLE, path)
    return path


def dbt(project: Path, server: PgServer, monkeypatch: pytest.MonkeyPatch, *args: str) -> dbtRunnerResult:
    monkeypatch.setenv("PIESTREAM_PORT", str(server.port))
    monkeypatch.setenv("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    return dbtRunner().invoke(
        [*args, "--project-dir", str(project), "--profiles-dir", str(project), "--no-use-colors"]
    )


def rows(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute(sql).fetchall()


def wait_for(dsn: str, sql: str, expected: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    deadline = time.monotonic() + 60
    got = rows(dsn, sql)
    while got != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        got = rows(dsn, sql)
    return got


def test_seed_run_test_and_the_models_rows(
    project: Path, server: PgServer, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded = dbt(project, server, monkeypatch, "seed")
    assert seeded.success, seeded.exception
    assert rows(dsn, 'SELECT id, name, region FROM "dev"."public"."customers" ORDER BY id') == [
        (1, "ann", "north"),
        (2, "bob", "south"),
        (3, "cid", "north"),
    ]
    oids = "SELECT relname, oid FROM pg_catalog.pg_class WHERE relnamespace = 'public'::regnamespace"
    built = {}
    counts_sql = project / "models" / "event_counts.sql"
    original = counts_sql.read_text()
    for i in range(2):
        if i == 1:  # the second run: one model's SQL changed, the others not
            counts_sql.write_text(original.replace("group by kind", "where kind <> 'view' group by kind"))
        try:
            ran = dbt(project, server, monkeypatch, "run")
        finally:
            counts_sql.write_text(original)
        assert ran.success, ran.exception
        assert sorted(r.node.name for r in ran.result) == [  # type: ignore[union-attr]
            "big_orders",
            "big_orders_sink",
            "customer_snapshot",
            "event_counts",
            "region_totals",
            "region_totals_by_orders",
            "stg_orders",
            "ticks",
        ]
        built[i] = dict(rows(dsn, oids))
    first, second = built[0], built[1]
    # unchanged streaming jobs, views, connectors and indexes are kept (same oid), not rebuilt
    for kept in ("region_totals", "big_orders", "stg_orders", "ticks", "region_totals_by_orders"):
        assert second[kept] == first[kept], kept
    assert second["event_counts"] != first["event_counts"]  # its SQL changed: rebuilt
    assert second["customer_snapshot"] != first["customer_snapshot"]  # a table: built and swapped in
    assert not [n for n in second if "__dbt_" in n]  # no intermediate / backup left
    assert rows(dsn, "SHOW SINKS") == [("big_orders_sink",)]
    assert rows(dsn, "SELECT indexname FROM pg_catalog.pg_indexes WHERE tablename = 'region_totals'") == [
        ("region_totals_by_orders",)
    ]
    (big_index,) = rows(dsn, "SELECT indexdef FROM pg_catalog.pg_indexes WHERE tablename = 'big_orders'")
    assert "(amount)" in str(big_index[0])  # the model's `indexes:` config
    ticks = [(1,), (2,), (3,), (4,)]
    assert wait_for(dsn, "SELECT n FROM ticks ORDER BY n", ticks) == ticks
    totals = "SELECT region, orders, total FROM region_totals ORDER BY region"
    assert rows(dsn, totals) == [("north", 3, Decimal("8.5")), ("south", 1, Decimal("7.25"))]
    assert rows(dsn, "SELECT kind, n FROM event_counts ORDER BY kind") == [("click", 2)]  # the new SQL
    assert rows(dsn, "SELECT id FROM big_orders ORDER BY id") == [(10,), (12,)]

    tested = dbt(project, server, monkeypatch, "test")
    assert tested.success, tested.exception
    assert len(tested.result) == 6 and all(r.status == "pass" for r in tested.result)  # type: ignore[union-attr,arg-type]

    # the materialized views are streaming jobs: new orders reach them; the CTAS table stays as it was
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("INSERT INTO orders VALUES (14, 2, 10.00)")
        c.execute("INSERT INTO customers VALUES (4, 'dee', 'south')")
    after = [("north", 3, Decimal("8.5")), ("south", 2, Decimal("17.25"))]
    assert wait_for(dsn, totals, after) == after
    assert wait_for(dsn, "SELECT id FROM big_orders ORDER BY id", [(10,), (12,), (14,)]) == [
        (10,),
        (12,),
        (14,),
    ]
    assert rows(dsn, "SELECT count(*) FROM customer_snapshot") == [(3,)]

    # a seed re-run empties (TRUNCATE) and refills its table
    reseeded = dbt(project, server, monkeypatch, "seed", "--select", "customers")
    assert reseeded.success, reseeded.exception
    assert rows(dsn, "SELECT count(*) FROM customers") == [(3,)]

    docs = dbt(project, server, monkeypatch, "docs", "generate")
    assert docs.success, docs.exception
    catalog = json.loads((project / "target" / "catalog.json").read_text())
    assert catalog["errors"] is None
    region = catalog["nodes"]["model.piestream_example.region_totals"]
    assert region["metadata"]["type"] == "MATERIALIZED VIEW"
    assert list(region["columns"]) == ["region", "orders", "total"]
    assert catalog["nodes"]["model.piestream_example.customer_snapshot"]["metadata"]["type"] == "BASE TABLE"


def test_incremental_with_is_incremental_is_refused(
    project: Path, server: PgServer, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "models" / "new_orders.sql").write_text(
        "{{ config(materialized='incremental') }}\nselect id from {{ ref('orders') }}\n"
        "{% if is_incremental() %} where id > (select max(id) from {{ this }}) {% endif %}\n"
    )
    try:
        ran = dbt(project, server, monkeypatch, "run", "--select", "new_orders")
    finally:
        (project / "models" / "new_orders.sql").unlink()
    assert not ran.success
    (result,) = ran.result  # type: ignore[misc]
    assert "uses is_incremental()" in str(result.message)
    assert rows(dsn, "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'new_orders'") == [(0,)]
