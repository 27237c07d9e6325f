"""psycopg 3 against the server: simple and extended protocol, parameters, errors, transactions."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import psycopg
import pytest
from psycopg import sql


@pytest.fixture(scope="module")
def conn(dsn: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR, price NUMERIC, qty BIGINT, ok BOOLEAN, "
        "day DATE, at TIMESTAMP, atz TIMESTAMPTZ, score DOUBLE PRECISION, small SMALLINT, raw BYTEA)"
    )
    yield c
    c.close()


def test_startup_reports_parameters(conn: psycopg.Connection) -> None:
    assert conn.info.server_version == 131400
    assert conn.info.parameter_status("server_encoding") == "UTF8"
    assert conn.info.parameter_status("client_encoding") == "UTF8"
    assert conn.info.parameter_status("DateStyle") == "ISO, MDY"
    assert conn.info.parameter_status("TimeZone") == "UTC"
    assert conn.info.parameter_status("integer_datetimes") == "on"
    assert conn.info.parameter_status("standard_conforming_strings") == "on"
    assert conn.info.parameter_status("IntervalStyle") == "postgres"
    assert conn.info.backend_pid > 0


def test_simple_protocol_types_and_tags(conn: psycopg.Connection) -> None:
    cur = conn.cursor()
    cur.execute(
        "INSERT INTO items VALUES (1, 'apple', 1.25, 10, true, '2024-01-02', '2024-01-02 03:04:05', "
        "'2024-01-02 03:04:05+00', 0.5, 3, '\\x0102'), "
        "(2, 'pear', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    assert cur.statusmessage == "INSERT 0 2"
    assert cur.rowcount == 2
    cur.execute("SELECT * FROM items ORDER BY id")
    assert cur.statusmessage == "SELECT 2"
    oids = [d.type_code for d in cur.description]
    assert oids == [23, 1043, 1700, 20, 16, 1082, 1114, 1184, 701, 21, 17]
    first, second = cur.fetchall()
    assert first == (
        1,
        "apple",
        Decimal("1.25"),
        10,
        True,
        dt.date(2024, 1, 2),
        dt.datetime(2024, 1, 2, 3, 4, 5),
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        0.5,
        3,
        b"\x01\x02",
    )
    assert second[1] == "pear" and all(v is None for v in second[2:])
    cur.execute("UPDATE items SET qty = 11 WHERE id = 1")
    assert cur.statusmessage == "UPDATE 1"


def test_extended_protocol_parameters_of_several_types(conn: psycopg.Connection) -> None:
    cur = conn.cursor()
    cur.execute(
        "INSERT INTO items (id, name, price, qty, ok, day, at, atz, score, small, raw) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            10,
            "kiwi",
            Decimal("-12.5"),
            2**40,
            False,
            dt.date(1999, 12, 31),
            dt.datetime(2020, 2, 29, 23, 59, 59, 123456),
            dt.datetime(2020, 1, 1, 12, 0, tzinfo=dt.UTC),
            -1.5e10,
            -7,
            b"\x00\xff",
        ),
    )
    assert cur.rowcount == 1
    cur.execute(
        "SELECT name, price, qty, ok, day, at, atz, score, small, raw FROM items WHERE id = %s", (10,)
    )
    assert cur.fetchone() == (
        "kiwi",
        Decimal("-12.5"),
        2**40,
        False,
        dt.date(1999, 12, 31),
        dt.datetime(2020, 2, 29, 23, 59, 59, 123456),
        dt.datetime(2020, 1, 1, 12, 0, tzinfo=dt.UTC),
        -1.5e10,
        -7,
        b"\x00\xff",
    )
    # text parameters typed from context: a string compared with an INT column, a date column
    cur.execute("SELECT id FROM items WHERE name = %s AND day = %s", ("kiwi", "1999-12-31"))
    assert cur.fetchall() == [(10,)]
    cur.execute("SELECT %s::int + 1, %s || 'x', %s IS NULL", (41, "a", None))
    assert cur.fetchone() == (42, "ax", True)


def test_binary_results(conn: psycopg.Connection) -> None:
    cur = conn.cursor(binary=True)
    cur.execute("SELECT id, name, price, qty, ok, day, at, atz, score, small, raw FROM items WHERE id = 10")
    assert cur.fetchone() == (
        10,
        "kiwi",
        Decimal("-12.5"),
        2**40,
        False,
        dt.date(1999, 12, 31),
        dt.datetime(2020, 2, 29, 23, 59, 59, 123456),
        dt.datetime(2020, 1, 1, 12, 0, tzinfo=dt.UTC),
        -1.5e10,
        -7,
        b"\x00\xff",
    )


def test_prepared_statements_are_reused(conn: psycopg.Connection) -> None:
    cur = conn.cursor()
    for i in range(8):  # psycopg prepares server-side after a few executions
        cur.execute("SELECT count(*) FROM items WHERE id > %s", (i,), prepare=True)
        assert cur.fetchone() is not None
    cur.execute("SELECT name FROM items WHERE id = %s", (1,), prepare=True)
    assert cur.fetchone() == ("apple",)


def test_errors_carry_sqlstate_and_position(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable) as e:
        conn.execute("SELECT * FROM nope")
    assert e.value.sqlstate == "42P01"
    assert e.value.diag.message_primary == 'relation "nope" does not exist'
    assert e.value.diag.statement_position == "15"
    with pytest.raises(psycopg.errors.SyntaxError) as e2:
        conn.execute("SELEC 1")
    assert e2.value.diag.statement_position == "1"
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1 / 0")
    with pytest.raises(psycopg.errors.UndefinedTable):  # also through the extended protocol
        conn.execute("SELECT * FROM nope WHERE x = %s", (1,))
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection recovered


def test_copy_from_a_server_file_is_not_supported(conn: psycopg.Connection) -> None:
    with (
        pytest.raises(psycopg.errors.FeatureNotSupported) as e,
        conn.cursor().copy("COPY items FROM '/etc/x'"),
    ):
        pass
    assert "COPY FROM a file" in str(e.value)


def test_transactions_are_accepted_as_no_ops(dsn: str) -> None:
    with psycopg.connect(dsn) as c:  # not autocommit: psycopg sends BEGIN
        c.execute("CREATE TABLE tx (k INT PRIMARY KEY)")
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        c.execute("INSERT INTO tx VALUES (1)")
        c.commit()
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT * FROM nope")
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("SELECT 1")
        c.rollback()
        with c.transaction(), c.transaction():  # nested: SAVEPOINT / RELEASE
            c.execute("INSERT INTO tx VALUES (2)")
        assert c.execute("SELECT count(*) FROM tx").fetchone() == (2,)


def test_multiple_statements_notices_and_empty_query(conn: psycopg.Connection) -> None:
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS items (x INT); SELECT 1 AS one; SELECT 2 AS two")
    assert cur.statusmessage == "CREATE TABLE"  # PostgreSQL tags a skipped IF NOT EXISTS so too
    assert cur.nextset() and cur.fetchall() == [(1,)]
    assert cur.nextset() and cur.fetchall() == [(2,)]
    assert any("already exists" in n for n in notices)
    cur.execute("")
    assert cur.statusmessage is None or cur.statusmessage == ""
    cur.execute("-- just a comment")


def test_set_and_show_report_parameter_status(conn: psycopg.Connection) -> None:
    conn.execute("SET application_name = 'piestream-tests'")
    assert conn.info.parameter_status("application_name") == "piestream-tests"
    assert conn.execute("SHOW application_name").fetchone() == ("piestream-tests",)


def test_statement_timeout_and_catalog_functions(conn: psycopg.Connection) -> None:
    row = conn.execute("SELECT version(), current_database(), current_schema(), current_user").fetchone()
    assert row is not None
    assert row[0].startswith("PostgreSQL 13.14.0") and row[1:] == ("dev", "public", "root")
    query = sql.SQL("SELECT {} FROM pg_catalog.pg_class WHERE relname = %s").format(sql.Identifier("relkind"))
    assert conn.execute(query, ("items",)).fetchone() == ("r",)


def test_numeric_display_scale_in_text_and_binary(conn: psycopg.Connection) -> None:
    """Computed NUMERIC values carry PostgreSQL's display scale in text and binary results
    (numeric_send's dscale), while RowDescription says typmod -1 as PostgreSQL does."""
    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        cur.execute("SELECT 1940::bigint * 0.908, round(41912.964, 4), 1.20 * 2, 2703 / 7.0")
        want = ["1761.520", "41912.9640", "2.40", "386.1428571428571429"]  # select_div_scale
        assert [str(v) for v in cur.fetchone() or ()] == want
        assert cur.description is not None
        assert [(d.precision, d.scale) for d in cur.description] == [(None, None)] * 4, binary


def test_numeric_typmod_scale_in_text_binary_and_description(conn: psycopg.Connection) -> None:
    """A numeric(p, s) column's values arrive with s fraction digits, in text and binary results
    alike (psycopg builds Decimal('2.50') from either), and RowDescription carries the typmod."""
    conn.execute("CREATE TABLE amounts (id INT, a NUMERIC(6,2))")
    conn.execute("INSERT INTO amounts VALUES (1, 2.5), (2, 1.005), (3, -7)")
    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        cur.execute("SELECT a FROM amounts ORDER BY id")
        rows = [str(r[0]) for r in cur.fetchall()]
        assert rows == ["2.50", "1.01", "-7.00"], binary
        assert cur.description is not None
        assert (cur.description[0].precision, cur.description[0].scale) == (6, 2)
    text = conn.execute("SELECT a::text FROM amounts ORDER BY id").fetchall()
    assert [r[0] for r in text] == ["2.50", "1.01", "-7.00"]
    # an aggregate's RowDescription says typmod -1 (PostgreSQL's exprTypmod of an Aggref), each
    # value still shows the scale it was stored with
    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        cur.execute("SELECT max(a), min(a) FROM amounts")
        assert [str(v) for v in cur.fetchone() or ()] == ["2.50", "-7.00"], binary
        assert cur.description is not None
        assert [(d.precision, d.scale) for d in cur.description] == [(None, None)] * 2, binary


def test_numeric_special_values_round_trip_in_text_and_binary_parameters(conn: psycopg.Connection) -> None:
    """NaN and +-Infinity are NUMERIC values, as in PostgreSQL: a parameter holding one comes back
    whichever format psycopg sends it in (binary numeric_send uses sign codes 0xC000, 0xD000,
    0xF000) and whichever format the result is read in."""
    for value in (Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")):
        for fmt in ("%s", "%b", "%t"):
            for binary in (False, True):
                row = conn.cursor(binary=binary).execute(f"SELECT {fmt}::numeric", [value]).fetchone()
                assert row is not None and str(row[0]) == str(value), (value, fmt, binary)
    assert str(conn.execute("SELECT %b::numeric", [Decimal("1.50")]).fetchone()[0]) == "1.50"  # type: ignore[index]
    # 28 digits (a 96-bit unscaled value: what piestream keeps, README) round-trip; 30
    # arrive whole and are 22003, not rounded by Python's default 28-digit decimal context
    wide = Decimal("123456789012345678.0123456789")
    assert conn.execute("SELECT %b::numeric", [-wide]).fetchone() == (-wide,)
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        conn.execute("SELECT %b::numeric", [Decimal("12345678901234567890.0123456789")])


def test_batch_insert_of_parameters_types_nulls_errors_and_rollback(conn: psycopg.Connection) -> None:
    """A multi-row VALUES of parameters runs a column at a time: psycopg types each int by its
    size (int2 / int4 / int8 in one column), Decimals round to numeric(p, s); NULLs, strings,
    timestamps and booleans land as the same values cast one at a time do."""
    conn.execute("CREATE TABLE batchp (k INT, b BIGINT, n NUMERIC(6,2), v VARCHAR, ts TIMESTAMP, ok BOOLEAN)")
    ts = dt.datetime(2024, 2, 29, 10, 0, 0, 500000)
    rows = [
        (1, 2**40, Decimal("1.005"), "a", ts, True),
        (40000, -5, Decimal("-2.5"), None, None, False),
        (-70000, None, None, "it's", ts, None),
        (None, 7, Decimal("9999.994"), "", ts, True),
    ]
    flat = [v for r in rows for v in r]
    sql = "INSERT INTO batchp VALUES " + ",".join(["(%s,%s,%s,%s,%s,%s)"] * len(rows))
    cur = conn.cursor()
    cur.execute(sql, flat)
    assert cur.rowcount == len(rows)
    cast = "SELECT %s::int, %s::bigint, %s::numeric(6,2), %s::varchar, %s::timestamp, %s::boolean"
    one_by_one = [conn.execute(cast, r).fetchone() for r in rows]
    got = conn.execute("SELECT * FROM batchp ORDER BY k NULLS LAST").fetchall()
    assert got == [one_by_one[i] for i in (2, 0, 1, 3)]
    assert [str(r[2]) for r in got] == ["None", "1.01", "-2.50", "9999.99"]
    # a value out of its column's range fails the whole statement
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        cur.execute(sql, [*flat[:-6], 2**31, 1, Decimal(1), "x", ts, True])
    assert conn.execute("SELECT count(*) FROM batchp").fetchone() == (len(rows),)
    # inside a transaction block the batch is seen by its own transaction; ROLLBACK drops it
    with psycopg.connect(conn.info.dsn) as tx:
        tx.execute(sql, flat)
        assert tx.execute("SELECT count(*) FROM batchp").fetchone() == (2 * len(rows),)
        tx.rollback()
    assert conn.execute("SELECT count(*) FROM batchp").fetchone() == (len(rows),)


def test_insert_with_65535_parameters(conn: psycopg.Connection) -> None:
    """psycopg sends `$1,$2,...` without spaces (the query's own separators): every count
    PostgreSQL accepts works, up to 65535 (the wire's unsigned 16-bit count)."""
    conn.execute("CREATE TABLE manyp (a INT, b VARCHAR, c BIGINT)")
    cur = conn.cursor()
    for rows in (1334, 21845):  # 4,002 and 65,535 parameters
        cur.execute(
            "INSERT INTO manyp VALUES " + ",".join(["(%s,%s,%s)"] * rows),
            [v for i in range(rows) for v in (i, f"s{i}", -i)],
        )
        assert cur.rowcount == rows
    got = conn.execute("SELECT count(*), sum(a), sum(c), max(b) FROM manyp WHERE a < 1334").fetchone()
    assert got == (2 * 1334, 2 * sum(range(1334)), -2 * sum(range(1334)), "s999")
    assert conn.execute("SELECT count(*) FROM manyp").fetchone() == (1334 + 21845,)
    # a statement that names a parameter beyond the wire's limit is refused cleanly
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT $70000::int")
    assert e.value.sqlstate not in (None, "XX000")
    assert conn.execute("SELECT 1").fetchone() == (1,)
