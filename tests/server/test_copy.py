"""COPY over pgwire with real clients: psycopg's cursor.copy() and psql's \\copy load CSV and
text into a table with an MV on it, export tables and queries; a malformed line fails the whole
COPY with its line number and applies nothing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import psycopg
import pytest
from test_psql import psql

from piestream.server.pgwire import PgServer


@pytest.fixture(scope="module")
def conn(dsn: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute("CREATE TABLE cp (k int PRIMARY KEY, name varchar, price double precision, day date)")
    c.execute("CREATE MATERIALIZED VIEW cp_sum AS SELECT count(*) AS n, sum(price) AS total FROM cp")
    yield c
    c.close()


def test_csv_with_header_delimiter_and_null(conn: psycopg.Connection) -> None:
    cur = conn.cursor()
    with cur.copy("COPY cp FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'NA')") as cp:
        cp.write('k;name;price;day\n1;apple;1.5;2024-01-02\n2;"pear; green";NA;2024-01-03\n3;"";2.5;NA\n')
    assert cur.statusmessage == "COPY 3"
    assert conn.execute("SELECT * FROM cp WHERE k <= 3 ORDER BY k").fetchall() == [
        (1, "apple", 1.5, dt.date(2024, 1, 2)),
        (2, "pear; green", None, dt.date(2024, 1, 3)),
        (3, "", 2.5, None),
    ]
    assert conn.execute("SELECT n, total FROM cp_sum").fetchone() == (3, 4.0)


def test_text_format_rows_with_escapes(conn: psycopg.Connection) -> None:
    cur = conn.cursor()
    with cur.copy("COPY cp (k, name) FROM STDIN") as cp:
        cp.write_row((10, "tab\there\\and newline\n"))
        cp.write_row((11, None))
    assert cur.statusmessage == "COPY 2"
    assert conn.execute("SELECT k, name, price FROM cp WHERE k >= 10 ORDER BY k").fetchall() == [
        (10, "tab\there\\and newline\n", None),
        (11, None, None),
    ]


def test_malformed_line_names_its_number_and_applies_nothing(conn: psycopg.Connection) -> None:
    before = conn.execute("SELECT n, total FROM cp_sum").fetchone()
    cur = conn.cursor()
    with (
        pytest.raises(psycopg.errors.InvalidTextRepresentation, match=r"line 3, column price"),
        cur.copy("COPY cp FROM STDIN (FORMAT csv, HEADER)") as cp,
    ):
        cp.write("k,name,price,day\n20,a,1,2024-01-01\n21,b,cheap,2024-01-01\n22,c,3,2024-01-01\n")
    with (
        pytest.raises(psycopg.errors.BadCopyFileFormat, match=r"line 2: expected 4 columns, got 2"),
        cur.copy("COPY cp FROM STDIN (FORMAT csv)") as cp,
    ):
        cp.write("23,a,1,2024-01-01\n24,b\n")
    with pytest.raises(psycopg.errors.NotNullViolation), cur.copy("COPY cp FROM STDIN (FORMAT csv)") as cp:
        cp.write("25,a,1,2024-01-01\n,b,2,2024-01-01\n")
    assert conn.execute("SELECT n, total FROM cp_sum").fetchone() == before
    assert conn.execute("SELECT count(*) FROM cp WHERE k >= 20").fetchone() == (0,)


def test_copy_to_stdout_table_and_query(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE out_t (k int PRIMARY KEY, s varchar, x numeric)")
    conn.execute("INSERT INTO out_t VALUES (1, 'a,b', 1.50), (2, NULL, NULL), (3, 'q\"t', -2)")
    cur = conn.cursor()
    with cur.copy("COPY (SELECT * FROM out_t ORDER BY k) TO STDOUT WITH (FORMAT csv, HEADER)") as cp:
        text = b"".join(bytes(b) for b in cp).decode()
    assert text == 'k,s,x\n1,"a,b",1.50\n2,,\n3,"q""t",-2\n'  # 1.50 keeps its display scale
    with cur.copy("COPY out_t (k, s) TO STDOUT") as cp:
        rows = sorted(cp.rows())
    assert rows == [("1", "a,b"), ("2", None), ("3", 'q"t')]


def test_psql_backslash_copy_in_and_out(server: PgServer, conn: psycopg.Connection, tmp_path: Path) -> None:
    conn.execute("CREATE TABLE ps (id int PRIMARY KEY, label varchar)")
    src = tmp_path / "in.csv"
    src.write_text("id,label\n" + "".join(f"{i},label {i}\n" for i in range(1000)))
    res = psql(server, "-c", f"\\copy ps FROM '{src}' WITH (FORMAT csv, HEADER)")
    assert "COPY 1000" in res.stdout
    assert conn.execute("SELECT count(*), max(label) FROM ps").fetchone() == (1000, "label 999")
    dst = tmp_path / "out.csv"
    psql(server, "-c", f"\\copy (SELECT * FROM ps WHERE id < 3 ORDER BY id) TO '{dst}' CSV HEADER")
    assert dst.read_text() == "id,label\n0,label 0\n1,label 1\n2,label 2\n"
