"""dbt (dbt-core's dbtRunner) with the dbt-piestream adapter on integrations/dbt/example against
a server: ``dbt seed``, ``dbt run`` (twice), ``dbt test``, and the models' rows, including a
materialized view that keeps up with rows inserted after it was built."""

from __future__ import annotations

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
    for _ in range(2):  # a second run re-creates every model
        ran = dbt(project, server, monkeypatch, "run")
        assert ran.success, ran.exception
        assert sorted(r.node.name for r in ran.result) == [  # type: ignore[union-attr]
            "big_orders",
            "customer_snapshot",
            "event_counts",
            "region_totals",
            "stg_orders",
        ]
    kinds = dict(
        rows(
            dsn,
            "SELECT relname, relkind FROM pg_catalog.pg_class WHERE relnamespace = 'public'::regnamespace",
        )
    )
    assert kinds["region_totals"] == "m" and kinds["big_orders"] == "m" and kinds["event_counts"] == "m"
    assert kinds["customer_snapshot"] == "r" and kinds["stg_orders"] == "v"
    totals = "SELECT region, orders, total FROM region_totals ORDER BY region"
    assert rows(dsn, totals) == [("north", 3, Decimal("8.5")), ("south", 1, Decimal("7.25"))]
    assert rows(dsn, "SELECT kind, n FROM event_counts ORDER BY kind") == [("click", 2), ("view", 1)]
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

    # a seed re-run empties and refills its table (piestream has no TRUNCATE: DELETE)
    reseeded = dbt(project, server, monkeypatch, "seed", "--select", "customers")
    assert reseeded.success, reseeded.exception
    assert rows(dsn, "SELECT count(*) FROM customers") == [(3,)]


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
