"""The Python API (`piestream.connect`): results, conversions, display, connection lifecycle.

Runs the in-process runner (no Spark) so it stays fast; `tests/spark/test_api_spark.py` covers
a user's own SparkSession.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import piestream
from piestream.common.errors import PiestreamError, UndefinedTable


@pytest.fixture
def conn(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = piestream.connect(tmp_path / "db", runner="local", barrier_interval=0.2)
    yield c
    c.close()


def test_import_is_cheap() -> None:
    """`import piestream` must not pull in the engine (CLI start-up, Spark workers)."""
    code = "import sys, piestream; assert 'piestream.server.database' not in sys.modules, 'eager'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sql_returns_rows_columns_arrow_and_pandas(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE t (k int PRIMARY KEY, v varchar, n numeric, d date)")
    ins = conn.sql(
        "INSERT INTO t VALUES ($1, $2, $3, $4), (2, NULL, NULL, NULL)", (1, "a", "1.5", "2024-01-02")
    )
    assert ins.tag == "INSERT 0 2"
    assert len(ins) == 0 and ins.rows == []

    r = conn.sql("SELECT k, v, n, d FROM t ORDER BY k")
    assert r.tag == "SELECT 2"
    assert r.columns == ["k", "v", "n", "d"]
    assert [str(t) for t in r.types] == ["integer", "character varying", "numeric", "date"]
    assert r.rows == [(1, "a", Decimal("1.5"), dt.date(2024, 1, 2)), (2, None, None, None)]
    assert r.fetchall() == r.rows and list(r) == r.rows and r[0] == r.rows[0]
    assert r.fetchone() == r.rows[0]
    assert conn.sql("SELECT count(*) FROM t").scalar() == 2

    table = r.to_arrow()
    assert isinstance(table, pa.Table)
    assert table.column_names == ["k", "v", "n", "d"]
    assert table.schema.field("k").type == pa.int32()
    df = r.to_pandas()
    assert isinstance(df, pd.DataFrame)
    assert df["k"].tolist() == [1, 2]
    assert df["v"].tolist()[0] == "a" and pd.isna(df["v"].tolist()[1])


def test_execute_runs_a_script_and_sql_returns_the_last_result(conn: piestream.Connection) -> None:
    results = conn.execute("CREATE TABLE t (a int); INSERT INTO t VALUES (1), (2); SELECT sum(a) FROM t")
    assert [r.tag for r in results] == ["CREATE TABLE", "INSERT 0 2", "SELECT 1"]
    assert conn.sql("INSERT INTO t VALUES (3); SELECT sum(a) AS s FROM t").rows == [(6,)]
    # a command result converts to an empty table
    assert results[0].to_arrow().num_columns == 0


def test_materialized_view_updates_and_flush(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE t (k int, v int)")
    conn.sql("CREATE MATERIALIZED VIEW s AS SELECT k, sum(v) AS total FROM t GROUP BY k")
    conn.sql("SET implicit_flush = false")  # session settings persist across calls
    conn.sql("INSERT INTO t VALUES (1, 10), (1, 5), (2, 1)")
    epoch = conn.flush()
    assert epoch > 0
    assert conn.sql("SELECT k, total FROM s ORDER BY k").rows == [(1, 15), (2, 1)]


def test_repr_shows_a_small_table_and_html(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE t (k int, v varchar, i interval)")
    values = ", ".join(f"({g}, 'row {g}', interval '1 day')" for g in range(1, 26))
    conn.sql(f"INSERT INTO t VALUES {values}")
    r = conn.sql("SELECT k, v, i FROM t ORDER BY k")
    text = repr(r)
    lines = text.splitlines()
    assert lines[:3] == [" k  |   v    |   i", "----+--------+-------", "  1 | row 1  | 1 day"]
    assert lines[-1] == "(25 rows, showing 20)"
    assert len(lines) == 2 + 20 + 1
    assert repr(conn.sql("SELECT NULL::int AS x")).splitlines()[2].strip() == "NULL"
    assert repr(conn.sql("CREATE TABLE u (a int)")) == "CREATE TABLE"
    page = r._repr_html_()
    assert page.startswith("<table>") and "<th>v</th>" in page and "<td>row 1</td>" in page


def test_errors_are_piestream_errors_with_sqlstate(conn: piestream.Connection) -> None:
    with pytest.raises(UndefinedTable) as e:
        conn.sql("SELECT * FROM missing")
    assert e.value.sqlstate == "42P01"
    conn.sql("CREATE TABLE t (k int PRIMARY KEY)")
    with pytest.raises(PiestreamError):
        conn.sql("INSERT INTO t VALUES (NULL)")
    assert conn.sql("SELECT 1 AS one").rows == [(1,)]  # the connection still works


def test_insert_without_a_column_list_fills_the_first_columns(conn: piestream.Connection) -> None:
    """PostgreSQL's rule: N values fill the first N columns, the rest take their DEFAULT (NULL);
    a list of named columns must match the values exactly, with PostgreSQL's messages."""
    conn.sql("CREATE TABLE t (k int PRIMARY KEY, v varchar, w int)")
    conn.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    conn.sql("INSERT INTO t VALUES (3)")
    conn.sql("INSERT INTO t SELECT 4, 'd'")
    conn.sql("INSERT INTO t VALUES ($1, $2)", [5, "e"])  # bare parameters: the column-wise path
    conn.sql("INSERT INTO t VALUES (6, '7', 8)")
    assert conn.sql("SELECT k, v, w FROM t ORDER BY k").rows == [
        (1, "a", None),
        (2, "b", None),
        (3, None, None),
        (4, "d", None),
        (5, "e", None),
        (6, "7", 8),
    ]
    for q, msg in [
        ("INSERT INTO t VALUES (9, 'x', 1, 2)", "more expressions than target columns"),
        ("INSERT INTO t (k, v) VALUES (9)", "more target columns than expressions"),
        ("INSERT INTO t (k) VALUES (9, 'x')", "more expressions than target columns"),
    ]:
        with pytest.raises(PiestreamError, match=msg) as e:
            conn.sql(q)
        assert e.value.sqlstate == "42601"
    assert conn.sql("SELECT count(*) FROM t").rows == [(6,)]


def test_connections_to_one_data_dir_share_the_database(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with piestream.connect(path, runner="local", barrier_interval=0.2) as a:
        b = piestream.connect(path)  # e.g. a notebook cell run again
        assert b.database is a.database
        a.sql("CREATE TABLE t (x int)")
        b.sql("INSERT INTO t VALUES (7)")
        assert a.sql("SELECT x FROM t").rows == [(7,)]
        b.close()
        b.close()  # idempotent
        assert b.closed and not a.closed
        with pytest.raises(RuntimeError):
            b.sql("SELECT 1")
        assert a.sql("SELECT count(*) FROM t").scalar() == 1  # still open for `a`
    assert a.database._closed
    # reopening recovers the committed data
    with piestream.connect(path, runner="local") as c:
        assert c.sql("SELECT x FROM t").rows == [(7,)]
        assert "open" in repr(c)


def test_unknown_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="barrier_intervall"):
        piestream.connect(tmp_path, barrier_intervall=1)
