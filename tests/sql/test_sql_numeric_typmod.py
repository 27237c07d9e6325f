"""NUMERIC(precision, scale) as PostgreSQL applies it: casts and column assignments round half
away from zero to `scale` digits and refuse integer parts that need more than precision - scale
digits (22003 with PostgreSQL's detail); the typmod survives a restart. Expected values are
PostgreSQL 15's."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal

import pytest

from piestream.common.errors import PiestreamError
from piestream.common.text import format_datum
from piestream.server.session import Session


def one(s: Session, sql: str) -> object:
    (res,) = s.execute(sql)
    return res.rows[0][0]


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        ("SELECT 1.555::numeric(10,2)", Decimal("1.56")),
        ("SELECT (-1.555)::numeric(10,2)", Decimal("-1.56")),
        ("SELECT '2.345'::numeric(4,2)", Decimal("2.35")),
        ("SELECT 99.94::numeric(3,1)", Decimal("99.9")),
        ("SELECT 0.5::numeric(1,1)", Decimal("0.5")),
        ("SELECT 12.5::numeric(2)", Decimal("13")),
        ("SELECT 7::decimal(3,0)", Decimal("7")),
        ("SELECT 1.25::double precision::numeric(3,1)", Decimal("1.3")),
        ("SELECT (1.26::numeric(3,1) + 1.26::numeric(3,1))", Decimal("2.6")),
        ("SELECT (ARRAY[1.255, 2])::numeric(4,2)[]", [Decimal("1.26"), Decimal("2")]),
        ("SELECT 1.5::numeric(30,20)", Decimal("1.50000000000000000000")),
    ],
)
def test_casts_round_to_the_scale(s: Session, sql: str, value: object) -> None:
    assert one(s, sql) == value


@pytest.mark.parametrize(
    ("sql", "sqlstate", "message"),
    [
        ("SELECT 99.95::numeric(3,1)", "22003", "numeric field overflow"),
        ("SELECT 1::numeric(2,2)", "22003", "numeric field overflow"),
        ("SELECT 1::numeric(0)", "22023", "NUMERIC precision 0 must be between 1 and 1000"),
        ("SELECT 1::numeric(3,1,1)", "22023", "invalid NUMERIC type modifier"),
        ("SELECT 1::numeric(38,29)", "0A000", "NUMERIC scale 29 is not supported"),  # 28 kept
        ("SELECT 1::numeric(3,5)", "0A000", "NUMERIC scale 5 outside 0..3"),
        ("CREATE TABLE bad (x numeric(38,30))", "0A000", "NUMERIC scale 30 is not supported"),
        (
            "CREATE TABLE src (x numeric(5,2)) WITH (connector = 'datagen')",
            "0A000",
            'column "x" of a connector source cannot be numeric(5,2)',
        ),
    ],
)
def test_refusals(s: Session, sql: str, sqlstate: str, message: str) -> None:
    with pytest.raises(PiestreamError) as info:
        s.execute(sql)
    assert info.value.sqlstate == sqlstate
    assert str(info.value).startswith(message), str(info.value)


def test_overflow_says_what_fits(s: Session) -> None:
    with pytest.raises(PiestreamError) as info:
        s.execute("SELECT 123.45::numeric(4,2)")
    assert (
        info.value.detail
        == "A field with precision 4, scale 2 must round to an absolute value less than 10^2."
    )
    with pytest.raises(PiestreamError) as info:
        s.execute("SELECT 1::numeric(2,2)")
    assert (
        info.value.detail == "A field with precision 2, scale 2 must round to an absolute value less than 1."
    )


def test_columns_round_what_is_assigned_in_tables_and_mvs(s: Session) -> None:
    s.execute(
        "CREATE TABLE t (k int PRIMARY KEY, p numeric(6,2), q numeric(4,1)[], r struct<a numeric(3,1)>)"
    )
    s.execute("CREATE MATERIALIZED VIEW m AS SELECT k, p, p::numeric(3,1) AS p1, p * 3 AS p3 FROM t")
    s.execute("INSERT INTO t VALUES (1, 1.005, ARRAY[2.25, -0.05], ROW(2.25)), (2, '-3.14159', NULL, NULL)")
    s.execute("INSERT INTO t SELECT 3, 2.345, NULL, NULL")
    s.execute("UPDATE t SET p = p / 3 WHERE k = 1")
    with pytest.raises(PiestreamError) as info:
        s.execute("INSERT INTO t VALUES (4, 12345.6, NULL, NULL)")
    assert info.value.sqlstate == "22003"
    s.execute("FLUSH")
    (res,) = s.execute("SELECT k, p, q, r FROM t ORDER BY k")
    assert res.rows == [
        (1, Decimal("0.34"), [Decimal("2.3"), Decimal("-0.1")], {"a": Decimal("2.3")}),
        (2, Decimal("-3.14"), None, None),
        (3, Decimal("2.35"), None, None),
    ]
    (res,) = s.execute("SELECT * FROM m ORDER BY k")
    assert res.rows == [
        (1, Decimal("0.34"), Decimal("0.3"), Decimal("1.02")),
        (2, Decimal("-3.14"), Decimal("-3.1"), Decimal("-9.42")),
        (3, Decimal("2.35"), Decimal("2.4"), Decimal("7.05")),
    ]


def test_the_typmod_survives_a_restart(reopen: Callable[[], AbstractContextManager[Session]]) -> None:
    with reopen() as s:
        s.execute("CREATE TABLE t (k int, p numeric(5,2))")
        s.execute("CREATE MATERIALIZED VIEW m AS SELECT k, p::numeric(3,1) AS p1 FROM t")
        s.execute("INSERT INTO t VALUES (1, 1.005)")
        s.execute("FLUSH")
    with reopen() as s:
        s.execute("INSERT INTO t VALUES (2, 2.555)")
        s.execute("FLUSH")
        (res,) = s.execute("SELECT k, p FROM t ORDER BY k")
        assert res.rows == [(1, Decimal("1.01")), (2, Decimal("2.56"))]
        (res,) = s.execute("SELECT * FROM m ORDER BY k")
        assert res.rows == [(1, Decimal("1.0")), (2, Decimal("2.6"))]


def test_only_values_of_the_column_keep_its_typmod(s: Session) -> None:
    """The typmod labels results whose values are the column's (output shows its scale): a
    computed value, or one mixed with other numerics, is plain numeric (PostgreSQL's typmod -1),
    so no value is ever printed with a scale it does not have."""
    s.execute("CREATE TABLE t (k int, p numeric(6,2))")
    (res,) = s.execute(
        "SELECT p, p + 1, abs(p), round(p), coalesce(p, 1.5), coalesce(p, p), "
        "CASE WHEN k > 0 THEN p ELSE 2.5 END, CASE WHEN k > 0 THEN p ELSE p END, ARRAY[p, 1.5], "
        "p::numeric(4,1), (SELECT max(p) FROM t) FROM t"
    )
    assert [str(t) for _, t in res.columns] == [
        "numeric(6,2)",
        "numeric",
        "numeric",
        "numeric",
        "numeric",
        "numeric(6,2)",
        "numeric",
        "numeric(6,2)",
        "numeric[]",
        "numeric(4,1)",
        "numeric",  # a subquery's typmod is its target's: an Aggref's, -1
    ]


def test_a_cast_without_typmod_relabels_to_minus_one(s: Session) -> None:
    """``p::numeric`` (and ``CAST(p AS numeric)``, ``q::numeric[]``) is typmod -1 in PostgreSQL
    14+ (coerce_type_typmod's RelabelType), while each value keeps the scale it was stored
    with; ``p::numeric(6,2)`` keeps the typmod."""
    s.execute("CREATE TABLE t (p numeric(6,2), q numeric(4,1)[])")
    s.execute("INSERT INTO t VALUES (2.5, ARRAY[1.25, 0])")
    query = "SELECT p::numeric AS a, CAST(p AS numeric) AS b, q::numeric[] AS c, p::numeric(6,2) AS d FROM t"
    s.execute(f"CREATE MATERIALIZED VIEW m AS {query}")
    s.execute("FLUSH")
    for sql in (query, "SELECT * FROM m", "SELECT 2.5::numeric(6,2)::numeric"):
        (res,) = s.execute(sql)
        types = [t for _, t in res.columns]
        texts = [format_datum(v, t) for v, t in zip(res.rows[0], types, strict=True)]
        assert [t.pg_typmod for t in types] == [-1, -1, -1, 393222][: len(types)], sql
        assert texts == ["2.50", "2.50", "{1.3,0.0}", "2.50"][: len(types)], sql


def test_aggregates_and_window_functions_over_the_column_send_typmod_minus_one(s: Session) -> None:
    """PostgreSQL's exprTypmod of an Aggref or WindowFunc is -1 (RowDescription, psycopg's
    precision/scale None), while each value keeps the scale it was stored with: min, max, lag,
    first_value ... over numeric(6, 2) are plain numeric showing 2 fraction digits, in batch and
    in an MV."""
    s.execute("CREATE TABLE t (k int, p numeric(6,2), q numeric(4,1)[])")
    s.execute("INSERT INTO t VALUES (1, 2.5, ARRAY[1, 0.25]), (2, 0, NULL)")
    query = (
        "SELECT max(p) AS a, min(p) AS b, max(q) AS c, max(p) FILTER (WHERE k > 1) AS e, "
        "array_agg(p ORDER BY k) AS f FROM t"
    )
    s.execute(f"CREATE MATERIALIZED VIEW m AS {query}")
    s.execute("FLUSH")
    for sql in (query, "SELECT * FROM m"):
        (res,) = s.execute(sql)
        types = [t for _, t in res.columns]
        assert [(str(t), t.pg_typmod, t.display_scale) for t in types[:2]] == [("numeric", -1, 2)] * 2, sql
        assert (str(types[2]), types[2].pg_typmod, types[2].elem and types[2].elem.display_scale) == (
            "numeric[]",
            -1,
            1,
        ), sql
        assert (types[3].pg_typmod, types[3].display_scale) == (-1, 2), sql
        assert (str(types[4]), types[4].pg_typmod) == ("numeric[]", -1), sql
        texts = [format_datum(v, t) for v, t in zip(res.rows[0], types, strict=True)]
        assert texts == ["2.50", "0.00", "{1.0,0.3}", "0.00", "{2.50,0.00}"], sql
    (res,) = s.execute("SELECT k, (SELECT max(p) FROM t) FROM t ORDER BY k")
    t = res.columns[1][1]
    assert (t.pg_typmod, t.display_scale, format_datum(res.rows[1][1], t)) == (-1, 2, "2.50")
    (res,) = s.execute(
        "SELECT lag(p) OVER (ORDER BY k), lead(p) OVER (ORDER BY k), first_value(p) OVER (ORDER BY k), "
        "last_value(p) OVER (ORDER BY k), nth_value(p, 1) OVER (ORDER BY k), "
        "max(p) OVER (ORDER BY k) FROM t ORDER BY k"
    )
    types = [t for _, t in res.columns]
    assert [(t.pg_typmod, t.display_scale) for t in types] == [(-1, 2)] * 6
    row = [None if v is None else format_datum(v, t) for v, t in zip(res.rows[1], types, strict=True)]
    assert row == ["2.50", None, "2.50", "0.00", "2.50", "2.50"]


def test_a_set_operation_over_different_typmods_sends_typmod_minus_one(s: Session) -> None:
    """PostgreSQL's select_common_typmod: ``numeric(6,2) UNION ALL numeric`` is typmod -1 (the
    inputs' typmods differ), ``numeric(6,2) UNION ALL numeric(6,2)`` keeps 393222; the values
    print as stored either way, in batch and from an MV."""
    s.execute("CREATE TABLE t (p numeric(6,2))")
    s.execute("INSERT INTO t VALUES (2.5)")
    cases = {
        "SELECT p FROM t UNION ALL SELECT p::numeric FROM t": -1,
        "SELECT p::numeric FROM t UNION ALL SELECT p FROM t": -1,
        "SELECT p FROM t UNION ALL SELECT p FROM t": 393222,
        "SELECT p FROM t UNION SELECT p::numeric FROM t": -1,
        "SELECT p FROM t EXCEPT SELECT p::numeric FROM t WHERE false": -1,
    }
    for i, sql in enumerate(cases):
        s.execute(f"CREATE MATERIALIZED VIEW m{i} AS {sql}")
    s.execute("FLUSH")
    for i, (sql, typmod) in enumerate(cases.items()):
        for q in (sql, f"SELECT * FROM m{i}"):
            (res,) = s.execute(q)
            t = res.columns[0][1]
            assert t.pg_typmod == typmod, q
            assert {format_datum(r[0], t) for r in res.rows} == {"2.50"}, q
