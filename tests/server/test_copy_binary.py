"""Binary COPY with real clients: psycopg 3's binary copy (both ways, every type, NULLs, empty
results, the simple and the extended protocol) and ADBC's PostgreSQL driver (fetch_arrow_table of
a SELECT and of an MV)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import adbc_driver_postgresql.dbapi as adbc
import numpy as np
import psycopg
import pyarrow as pa
import pytest
from pgwire_helpers import Raw, cstr, message

from piestream.server.pgwire import PgServer, copy_binary
from piestream.server.pgwire.copy_binary import HEADER, TRAILER

COLUMNS = [
    ("b", "boolean"),
    ("i2", "smallint"),
    ("i4", "integer"),
    ("i8", "bigint"),
    ("f4", "real"),
    ("f8", "double precision"),
    ("n", "numeric"),
    ("s", "varchar"),
    ("by", "bytea"),
    ("d", "date"),
    ("t", "time"),
    ("ts", "timestamp"),
    ("tz", "timestamptz"),
    ("iv", "interval"),
    ("j", "jsonb"),
    ("a", "integer[]"),
]
TYPES = ["bool", "int2", "int4", "int8", "float4", "float8", "numeric", "text", "bytea", "date", "time",
         "timestamp", "timestamptz", "interval", "jsonb", "int4[]"]  # fmt: skip
ROWS = [
    (
        True,
        1,
        2,
        3,
        1.5,
        2.25,
        Decimal("1.50"),
        "héllo\ttab",
        b"\x00\xff",
        dt.date(2024, 1, 2),
        dt.time(1, 2, 3, 4),
        dt.datetime(2024, 1, 2, 3, 4, 5, 6),
        dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.timedelta(days=2, microseconds=7),
        {"a": [1, None]},
        [1, None, 3],
    ),
    tuple([None] * len(COLUMNS)),
    (
        False,
        -32768,
        -(2**31),
        -(2**63),
        -0.0,
        1e300,
        Decimal("-12345678901234.000001"),
        "",
        b"",
        dt.date(1970, 1, 1),
        dt.time(23, 59, 59),
        dt.datetime(1900, 1, 1),
        dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
        dt.timedelta(0),
        [],
        [],
    ),
]


@pytest.fixture(scope="module")
def conn(dsn: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    cols = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    c.execute(f"CREATE TABLE allt (k int PRIMARY KEY, {cols})")
    yield c
    c.close()


def _load(conn: psycopg.Connection, table: str, rows: list[tuple]) -> str:
    cur = conn.cursor()
    with cur.copy(f"COPY {table} FROM STDIN (FORMAT binary)") as cp:
        cp.set_types(["int4", *TYPES])
        for r in rows:
            cp.write_row(r)
    return cur.statusmessage or ""


def _read(conn: psycopg.Connection, sql: str, types: list[str], params: tuple = ()) -> list[tuple]:
    cur = conn.cursor()
    with cur.copy(sql, params or None) as cp:
        cp.set_types(types)
        return list(cp.rows())


def test_every_type_round_trips_with_nulls(conn: psycopg.Connection) -> None:
    rows = [(k, *r) for k, r in enumerate(ROWS)]
    assert _load(conn, "allt", rows) == "COPY 3"
    # what was loaded, read back in text by a plain SELECT
    assert conn.execute("SELECT i8, n::varchar, s, tz, j FROM allt ORDER BY k").fetchall() == [
        (3, "1.50", "héllo\ttab", ROWS[0][12], {"a": [1, None]}),
        (None, None, None, None, None),
        (-(2**63), "-12345678901234.000001", "", ROWS[2][12], []),
    ]
    out = _read(conn, "COPY (SELECT * FROM allt ORDER BY k) TO STDOUT (FORMAT binary)", ["int4", *TYPES])
    assert out == rows
    table_out = _read(conn, "COPY allt TO STDOUT (FORMAT binary)", ["int4", *TYPES])
    assert sorted(table_out, key=lambda r: r[0]) == rows


def test_a_copy_streamed_in_batches_is_the_same_bytes(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """COPY TO is encoded and sent batch by batch: with batches of 2 rows (7 rows of every type,
    NULL rows among them) the stream psycopg receives is byte for byte the one-batch stream,
    and it decodes to the rows."""
    rows = [(k, *ROWS[k % len(ROWS)]) for k in range(7)]
    cols = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    conn.execute(f"CREATE TABLE allt_batches (k int PRIMARY KEY, {cols})")
    assert _load(conn, "allt_batches", rows) == "COPY 7"
    sql = "COPY (SELECT * FROM allt_batches ORDER BY k) TO STDOUT (FORMAT binary)"

    def raw() -> bytes:
        with conn.cursor().copy(sql) as cp:
            return b"".join(bytes(chunk) for chunk in cp)

    whole = raw()
    batches: list[int] = []
    encode_rows = copy_binary._encode_rows

    def counted(table: pa.Table, types: list, *, header: bool) -> memoryview:
        batches.append(table.num_rows)
        return encode_rows(table, types, header=header)

    monkeypatch.setattr(copy_binary, "_encode_rows", counted)
    monkeypatch.setattr(copy_binary, "STREAM_BATCH_ROWS", 2)
    assert raw() == whole
    assert batches == [2, 2, 2, 1]
    assert whole.startswith(HEADER) and whole.endswith(TRAILER)
    assert _read(conn, sql, ["int4", *TYPES]) == rows


def test_columns_empty_result_and_extended_protocol(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE small (k int PRIMARY KEY, v varchar, x double precision)")
    cur = conn.cursor()
    with cur.copy("COPY small (k, v) FROM STDIN (FORMAT binary)") as cp:
        cp.set_types(["int4", "text"])
        for k in range(5):
            cp.write_row((k, f"v{k}" if k % 2 else None))
    assert cur.statusmessage == "COPY 5"
    assert conn.execute("SELECT k, v, x FROM small ORDER BY k").fetchall() == [
        (0, None, None), (1, "v1", None), (2, None, None), (3, "v3", None), (4, None, None)
    ]  # fmt: skip
    assert _read(conn, "COPY (SELECT k FROM small WHERE k > 100) TO STDOUT (FORMAT binary)", ["int4"]) == []
    # a parameter makes psycopg send the COPY as Parse / Bind / Execute
    got = _read(
        conn,
        "COPY (SELECT k, v FROM small WHERE k >= %s ORDER BY k) TO STDOUT (FORMAT binary)",
        ["int4", "text"],
        (3,),
    )
    assert got == [(3, "v3"), (4, None)]
    text = _read(conn, "COPY (SELECT k FROM small WHERE k < %s ORDER BY k) TO STDOUT", ["int4"], (2,))
    assert text == [(0,), (1,)]


def test_copy_from_over_the_extended_protocol(server: PgServer, conn: psycopg.Connection) -> None:
    """COPY FROM STDIN sent as Parse / Bind / Describe / Execute / Sync (what libpq's
    PQexecParams sends), its data after CopyInResponse, then CopyDone + Sync."""
    conn.execute("CREATE TABLE ext_in (k int PRIMARY KEY, v varchar)")
    r = Raw(server.port)
    r.send(
        message(b"P", cstr("") + cstr("COPY ext_in FROM STDIN (FORMAT binary)") + b"\0\0")
        + message(b"B", cstr("") + cstr("") + b"\0\0" * 3)
        + message(b"D", b"P" + cstr(""))
        + message(b"E", cstr("") + b"\0\0\0\0")
        + message(b"S")
    )
    assert [k for k, _ in (r.read() for _ in range(4))] == [b"1", b"2", b"n", b"G"]
    row = b"\x00\x02" + b"\x00\x00\x00\x04" + struct.pack(">i", 7) + b"\x00\x00\x00\x02hi"
    r.send(message(b"d", HEADER + row) + message(b"d", TRAILER) + message(b"c") + message(b"S"))
    assert r.until(b"Z") == [(b"C", b"COPY 1\x00"), (b"Z", b"I")]
    assert conn.execute("SELECT k, v FROM ext_in").fetchall() == [(7, "hi")]


def test_malformed_binary_copy_applies_nothing(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE bad_in (k int PRIMARY KEY, v bigint)")
    cur = conn.cursor()
    with (
        pytest.raises(psycopg.errors.BadCopyFileFormat),
        cur.copy("COPY bad_in FROM STDIN (FORMAT binary)") as cp,
    ):
        cp.write(b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8 + b"\x00\x02\x00\x00\x00\x04\x00\x00\x00\x01\x00\x00")
    with (
        pytest.raises(psycopg.errors.BadCopyFileFormat),
        cur.copy("COPY bad_in FROM STDIN (FORMAT binary)") as cp,
    ):
        cp.write(b"not a copy file at all")
    assert conn.execute("SELECT count(*) FROM bad_in").fetchone() == (0,)


def test_a_million_rows_both_ways(server: PgServer, conn: psycopg.Connection) -> None:
    """A million rows in (a stream built by numpy the way PostgreSQL lays it out) and out
    through ADBC's C decoder."""
    conn.execute("CREATE TABLE big (k bigint PRIMARY KEY, x double precision)")
    n = 1_000_000
    row = np.dtype([("count", ">i2"), ("klen", ">i4"), ("k", ">i8"), ("xlen", ">i4"), ("x", ">f8")])
    rows = np.empty(n, row)
    rows["count"], rows["klen"], rows["xlen"] = 2, 8, 8
    rows["k"] = np.arange(n)
    rows["x"] = np.arange(n) * 0.5
    cur = conn.cursor()
    with cur.copy("COPY big FROM STDIN (FORMAT binary)") as cp:
        cp.write(HEADER + rows.tobytes() + TRAILER)
    assert cur.statusmessage == f"COPY {n}"
    assert conn.execute("SELECT count(*), sum(k), sum(x) FROM big").fetchone() == (
        n,
        n * (n - 1) // 2,
        n * (n - 1) / 4,
    )
    with adbc.connect(f"postgresql://root@127.0.0.1:{server.port}/dev") as ac, ac.cursor() as acur:
        acur.execute("SELECT k, x FROM big")
        t = acur.fetch_arrow_table().sort_by("k")
    assert t.num_rows == n
    assert np.array_equal(t.column("k").to_numpy(), rows["k"])
    assert np.array_equal(t.column("x").to_numpy(), rows["x"])


def test_adbc_reads_a_select_and_an_mv(server: PgServer, conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE ad (k int PRIMARY KEY, grp varchar, x double precision, d date)")
    conn.execute(
        "INSERT INTO ad VALUES (1, 'a', 1.5, '2024-01-01'), (2, 'a', NULL, NULL), (3, 'b', 2.5, '2024-01-03')"
    )
    conn.execute(
        "CREATE MATERIALIZED VIEW ad_mv AS SELECT grp, count(*) AS n, sum(x) AS total FROM ad GROUP BY grp"
    )
    uri = f"postgresql://root@127.0.0.1:{server.port}/dev"
    with adbc.connect(uri) as ac, ac.cursor() as cur:
        cur.execute("SELECT k, grp, x, d FROM ad ORDER BY k")
        t = cur.fetch_arrow_table()
        assert t.column("k").to_pylist() == [1, 2, 3]
        assert t.column("x").to_pylist() == [1.5, None, 2.5]
        assert t.column("d").to_pylist() == [dt.date(2024, 1, 1), None, dt.date(2024, 1, 3)]
        cur.execute("SELECT * FROM ad_mv ORDER BY grp")
        mv = cur.fetch_arrow_table()
        assert mv.to_pylist() == [{"grp": "a", "n": 2, "total": 1.5}, {"grp": "b", "n": 1, "total": 2.5}]
        cur.execute("SELECT k FROM ad WHERE k > 100")
        assert cur.fetch_arrow_table().num_rows == 0


def test_adbc_ingest_create_append_replace(server: PgServer, conn: psycopg.Connection) -> None:
    """ADBC's bulk ingest: CREATE TABLE "public"."t" + binary COPY with no trailer (a last NULL
    field ends in the bytes a trailer is), the column lookup by ``$1::regclass`` for append."""
    import pyarrow as pa

    data = pa.table(
        {"id": pa.array([1, 2, None], pa.int64()), "name": ["x", None, "z"], "v": [0.5, 1.5, None]}
    )
    uri = f"postgresql://root@127.0.0.1:{server.port}/dev"
    with adbc.connect(uri) as ac, ac.cursor() as cur:
        assert cur.adbc_ingest("ingested", data, mode="create") == 3
        ac.commit()
        assert cur.adbc_ingest("ingested", data.slice(0, 2), mode="append") == 2
        ac.commit()
        cur.execute("SELECT id, name, v FROM ingested ORDER BY id NULLS LAST, name NULLS LAST")
        assert cur.fetch_arrow_table().to_pylist() == [
            {"id": 1, "name": "x", "v": 0.5},
            {"id": 1, "name": "x", "v": 0.5},
            {"id": 2, "name": None, "v": 1.5},
            {"id": 2, "name": None, "v": 1.5},
            {"id": None, "name": "z", "v": None},
        ]
        assert cur.adbc_ingest("ingested", data.slice(2, 1), mode="replace") == 1
        ac.commit()
    assert conn.execute("SELECT id, name, v FROM ingested").fetchall() == [(None, "z", None)]
    # the same stream by hand: no trailer, the last field NULL
    conn.execute("CREATE TABLE no_trailer (a int, b int)")
    body = HEADER + struct.pack(">hii", 2, 4, 7) + struct.pack(">i", -1)
    with conn.cursor() as cur, cur.copy("COPY no_trailer FROM STDIN (FORMAT binary)") as cp:
        cp.write(body)
    assert conn.execute("SELECT a, b FROM no_trailer").fetchall() == [(7, None)]
    after = body + TRAILER + struct.pack(">hii", 2, 4, 7) + struct.pack(">i", -1) + TRAILER
    with (
        pytest.raises(psycopg.errors.BadCopyFileFormat, match="after EOF marker"),
        conn.cursor() as cur,
        cur.copy("COPY no_trailer FROM STDIN (FORMAT binary)") as cp,
    ):
        cp.write(after)
