"""SQLAlchemy's postgresql dialect (psycopg driver) and pandas against the server."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pandas as pd
import psycopg
import pytest
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.types import BIGINT, INTEGER, NUMERIC, TIMESTAMP, VARCHAR

from piestream.server.pgwire import PgServer


@pytest.fixture(scope="module")
def engine(server: PgServer, dsn: str) -> Iterator[Engine]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR, balance NUMERIC, opened TIMESTAMP)"
        )
        c.execute("CREATE TABLE log (n BIGINT)")
        c.execute(
            "INSERT INTO accounts VALUES (1, 'ann', 100.5, '2024-01-01 00:00:00'), (2, 'bob', 7, NULL), "
            "(3, 'cid', 0, '2024-03-01 12:30:00')"
        )
        c.execute("CREATE MATERIALIZED VIEW rich AS SELECT owner, balance FROM accounts WHERE balance > 50")
        c.execute("CREATE VIEW owners AS SELECT owner FROM accounts")
    eng = create_engine(f"postgresql+psycopg://root@127.0.0.1:{server.port}/dev")
    yield eng
    eng.dispose()


def test_inspect_tables_views_and_columns(engine: Engine) -> None:
    ins = inspect(engine)
    assert sorted(ins.get_table_names()) == ["accounts", "log"]
    assert ins.get_view_names() == ["owners"]
    assert ins.get_materialized_view_names() == ["rich"]
    assert ins.has_table("accounts") and not ins.has_table("nope")
    assert ins.get_schema_names() == ["information_schema", "public"]
    cols = {c["name"]: c for c in ins.get_columns("accounts")}
    assert list(cols) == ["id", "owner", "balance", "opened"]
    assert isinstance(cols["id"]["type"], INTEGER) and cols["id"]["nullable"] is False
    assert isinstance(cols["owner"]["type"], VARCHAR) and cols["owner"]["nullable"] is True
    assert isinstance(cols["balance"]["type"], NUMERIC)
    assert isinstance(cols["opened"]["type"], TIMESTAMP)
    assert isinstance(ins.get_columns("log")[0]["type"], BIGINT)
    assert [c["name"] for c in ins.get_columns("rich")] == ["owner", "balance"]


def test_text_queries_with_parameters(engine: Engine) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, owner FROM accounts WHERE balance > :b ORDER BY id"), {"b": 5}
        ).fetchall()
        assert [tuple(r) for r in rows] == [(1, "ann"), (2, "bob")]
        conn.execute(text("INSERT INTO log VALUES (:n)"), [{"n": 1}, {"n": 2}])
        conn.commit()
        assert conn.execute(text("SELECT sum(n) FROM log")).scalar() == 3
        assert conn.execute(text("SELECT balance FROM accounts WHERE id = 1")).scalar() == Decimal("100.5")


def test_pandas_read_sql(engine: Engine) -> None:
    df = pd.read_sql("SELECT * FROM accounts ORDER BY id", engine)
    assert list(df.columns) == ["id", "owner", "balance", "opened"]
    assert df["owner"].tolist() == ["ann", "bob", "cid"]
    assert str(df["opened"].dtype).startswith("datetime64")
    rich = pd.read_sql_table("rich", engine)
    assert rich["owner"].tolist() == ["ann"]
    params = pd.read_sql(text("SELECT owner FROM accounts WHERE id = :i"), engine, params={"i": 3})
    assert params["owner"].tolist() == ["cid"]
