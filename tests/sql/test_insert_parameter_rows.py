"""`INSERT ... VALUES ($1, ...), ...` of bare parameters runs a column at a time (no tree per
entry). Differential: the same statement and Bind values through that path (`parse_one`, as a
Parse message) and through the bound tree (`parse`) give the same rows, or the same error."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from session_results import rows

from piestream.common.errors import PiestreamError
from piestream.frontend.parser import ast, parse, parse_one
from piestream.server.pgwire.params import bind_values, infer_types
from piestream.server.session import Session

INT2, INT4, INT8, NUMERIC, FLOAT8, TEXT, VARCHAR, UNKNOWN = 21, 23, 20, 1700, 701, 25, 1043, 0

COLUMNS = (
    "k INT, b BIGINT, n NUMERIC(6,2), m NUMERIC, v VARCHAR, ts TIMESTAMP, ok BOOLEAN, f DOUBLE PRECISION"
)

# (name, target columns, rows of (text, oid) per entry)
CASES: list[tuple[str, list[str], list[list[tuple[str | None, int]]]]] = [
    (
        "mixed_oids",
        ["k", "b", "n", "m", "v", "ts", "ok", "f"],
        [
            [
                ("1", INT2),
                ("5", INT8),
                ("1.005", UNKNOWN),
                ("2.50", NUMERIC),
                ("x", UNKNOWN),
                ("2024-01-01 10:00", UNKNOWN),
                ("t", UNKNOWN),
                ("1.5", FLOAT8),
            ],
            [
                ("100000", INT4),
                ("7", INT2),
                ("2.5", NUMERIC),
                ("3", INT4),
                ("y", TEXT),
                (None, UNKNOWN),
                ("false", UNKNOWN),
                ("2", INT4),
            ],
            [
                ("7.5", NUMERIC),
                (None, INT8),
                ("3", INT4),
                ("1e3", UNKNOWN),
                ("42", INT4),
                ("2024-02-29", UNKNOWN),
                (None, UNKNOWN),
                ("0.1", NUMERIC),
            ],
            [
                ("12", UNKNOWN),
                ("-9000000000", INT8),
                ("1.125", FLOAT8),
                (None, NUMERIC),
                (None, VARCHAR),
                ("2024-01-01 10:00:00.5", UNKNOWN),
                ("yes", UNKNOWN),
                ("-0", UNKNOWN),
            ],
        ],
    ),
    ("some_columns", ["v", "k"], [[("a", UNKNOWN), ("1", INT4)], [("b", UNKNOWN), ("2", INT8)]]),
    ("int_out_of_range", ["k"], [[("1", INT4)], [("9999999999", INT8)]]),
    ("bad_text", ["k", "v"], [[("1", UNKNOWN), ("a", UNKNOWN)], [("one", UNKNOWN), ("b", UNKNOWN)]]),
    ("numeric_typmod_overflow", ["n"], [[("1.5", UNKNOWN)], [("12345.678", UNKNOWN)]]),
    ("text_into_int", ["k"], [[("1", TEXT)], [("2", TEXT)]]),
    ("too_many_expressions", ["k"], [[("1", INT4), ("2", INT4)], [("3", INT4), ("4", INT4)]]),
    ("too_few_expressions", ["k", "v"], [[("1", INT4)], [("3", INT4)]]),
]


def _insert(
    s: Session, table: str, targets: list[str], entries: list[list[tuple[str | None, int]]], fast: bool
) -> Any:
    width = len(entries[0])
    tuples = [
        "(" + ",".join(f"${r * width + j + 1}" for j in range(width)) + ")" for r in range(len(entries))
    ]
    sql = f"INSERT INTO {table} ({', '.join(targets)}) VALUES " + ",".join(tuples)
    stmt = parse_one(sql) if fast else parse(sql)[0]
    assert isinstance(stmt, ast.Insert) and (stmt.param_rows is not None) == fast
    flat = [e for row in entries for e in row]
    oids = [oid for _, oid in flat]
    raw = [None if text is None else text.encode() for text, _ in flat]
    try:
        types = infer_types(stmt, len(flat), s.catalog().get_relation)
        values = bind_values(raw, [0], oids, types)
        tag = s.execute_statement(stmt, values).tag
    except PiestreamError as e:
        return ("error", e.sqlstate, str(e))
    return tag, rows(s, f"SELECT * FROM {table}")


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_parameter_rows_equal_the_bound_tree(s: Session, name: str) -> None:
    _, targets, entries = next(c for c in CASES if c[0] == name)
    s.execute(f"CREATE TABLE fast ({COLUMNS}); CREATE TABLE slow ({COLUMNS})")
    got = _insert(s, "fast", targets, entries, fast=True)
    want = _insert(s, "slow", targets, entries, fast=False)
    assert got == want
    if name in ("mixed_oids", "some_columns"):
        assert got[0] == f"INSERT 0 {len(entries)}" and len(got[1]) == len(entries)
    else:
        assert got[0] == "error"


def test_parameters_in_any_order_repeated_and_binary(s: Session) -> None:
    s.execute("CREATE TABLE t (a INT, b BIGINT, c VARCHAR)")
    stmt = parse_one("INSERT INTO t (c, b, a) VALUES ($3, $1, $1), ($2, $4, $4)")
    assert isinstance(stmt, ast.Insert) and stmt.param_rows is not None
    types = infer_types(stmt, 4, s.catalog().get_relation)
    raw = [struct.pack("!q", 7), b"two", b"one", struct.pack("!q", -8)]
    values = bind_values(raw, [1, 0, 0, 1], [INT8, UNKNOWN, UNKNOWN, INT8], types)
    assert s.execute_statement(stmt, values).tag == "INSERT 0 2"
    assert rows(s, "SELECT a, b, c FROM t") == [(-8, -8, "two"), (7, 7, "one")]
    with pytest.raises(PiestreamError, match=r"there is no parameter \$4") as e:
        s.execute_statement(stmt, values[:3])
    assert e.value.sqlstate == "42601"


def test_inside_a_transaction_block(s: Session) -> None:
    s.execute("CREATE TABLE t (a INT PRIMARY KEY, c VARCHAR)")
    stmt = parse_one("INSERT INTO t VALUES ($1, $2), ($3, $4)")
    values = bind_values([b"1", b"a", b"2", None], [0], [INT4, UNKNOWN, INT4, UNKNOWN], [None] * 4)
    s.execute("BEGIN")
    s.execute_statement(stmt, values)
    assert rows(s, "SELECT * FROM t") == [(1, "a"), (2, None)]
    s.execute("ROLLBACK")
    assert rows(s, "SELECT * FROM t") == []
    bad = bind_values([b"1", b"a", None, b"b"], [0], [INT4, UNKNOWN, INT4, UNKNOWN], [None] * 4)
    with pytest.raises(PiestreamError) as e:
        s.execute_statement(stmt, bad)
    assert e.value.sqlstate == "23502"  # NULL primary key
    assert rows(s, "SELECT * FROM t") == []
