"""The pgoutput decoder, message by message, on bytes a real PostgreSQL 15 produced; and the
column-wise conversion of its text values to Arrow."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal

import pyarrow as pa
import pytest
from pg_server import PgServer

from piestream.common import numeric as nm
from piestream.common.types import DataType, TypeKind, list_of
from piestream.connectors.cdc import pgoutput as po

_n = itertools.count()


def _changes(pg: PgServer, setup: list[str], dml: list[str]) -> list[po.Message]:
    """The decoded pgoutput messages of `dml` (run after `setup` and a fresh slot)."""
    k = next(_n)
    slot, pub = f"t_slot_{k}", f"t_pub_{k}"
    for s in setup:
        pg.sql(s)
    pg.sql(f"CREATE PUBLICATION {pub} FOR ALL TABLES")
    pg.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        for s in dml:
            pg.sql(s)
        rows = pg.sql(
            "SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', %s, 'messages', 'true')",
            (slot, pub),
        )
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", (slot,))
        pg.sql(f"DROP PUBLICATION {pub}")
    return [po.decode(bytes(r[0])) for r in rows]  # type: ignore[arg-type]


def test_insert_update_delete_with_default_identity(pg: PgServer) -> None:
    msgs = _changes(
        pg,
        ["CREATE TABLE d1 (id int PRIMARY KEY, name text, n numeric)"],
        [
            "INSERT INTO d1 VALUES (1, 'a', 1.50), (2, NULL, NULL)",
            "UPDATE d1 SET name = 'b' WHERE id = 1",
            "UPDATE d1 SET id = 3 WHERE id = 2",
            "DELETE FROM d1 WHERE id = 1",
        ],
    )
    kinds = [type(m).__name__ for m in msgs]
    assert kinds == [
        "Begin", "Relation", "Insert", "Insert", "Commit",
        "Begin", "Update", "Commit",  # a Relation is sent once per decoding session
        "Begin", "Update", "Commit",
        "Begin", "Delete", "Commit",
    ]  # fmt: skip
    begin, rel, ins1, ins2, commit = msgs[:5]
    assert isinstance(begin, po.Begin) and isinstance(commit, po.Commit)
    assert begin.final_lsn == commit.commit_lsn < commit.end_lsn
    assert begin.commit_ts_us == commit.commit_ts_us
    now_us = dt.datetime.now(dt.UTC).timestamp() * 1e6
    assert abs(commit.commit_ts_us - now_us) < 600e6  # the epoch shift: a commit of right now
    assert isinstance(rel, po.Relation)
    assert (rel.namespace, rel.name, rel.replica_identity) == ("public", "d1", "d")
    assert [(c.name, c.type_oid, c.is_key) for c in rel.columns] == [
        ("id", 23, True), ("name", 25, False), ("n", 1700, False),
    ]  # fmt: skip
    assert ins1 == po.Insert(rel.oid, ("1", "a", "1.50")) and ins2 == po.Insert(rel.oid, ("2", None, None))
    upd = msgs[6]
    assert upd == po.Update(rel.oid, None, None, ("1", "b", "1.50"))  # the key did not change
    upd_key = msgs[9]
    assert upd_key == po.Update(rel.oid, ("2", None, None), "K", ("3", None, None))
    dele = msgs[12]
    assert dele == po.Delete(rel.oid, ("1", None, None), "K")  # only the key's columns are sent


def test_full_identity_toast_and_truncate(pg: PgServer) -> None:
    big = "x" * 20000 + "y"  # compressed below 2 kB would stay inline: make it incompressible
    msgs = _changes(
        pg,
        [
            "CREATE TABLE f1 (id int PRIMARY KEY, big text, v int)",
            "ALTER TABLE f1 ALTER COLUMN big SET STORAGE EXTERNAL",
            "CREATE TABLE t2 (id int PRIMARY KEY, big text, v int)",
            "ALTER TABLE t2 ALTER COLUMN big SET STORAGE EXTERNAL",
            "ALTER TABLE f1 REPLICA IDENTITY FULL",
            f"INSERT INTO f1 VALUES (1, '{big}', 1)",
            f"INSERT INTO t2 VALUES (1, '{big}', 1)",
        ],
        [
            "UPDATE t2 SET v = 2",  # DEFAULT identity: the TOASTed value is not sent
            "UPDATE f1 SET v = 2",  # FULL: the old row is sent whole
            "DELETE FROM f1",
            "TRUNCATE t2",
            "SELECT pg_logical_emit_message(true, 'piestream', 'hello')",
        ],
    )
    upd_default = next(m for m in msgs if isinstance(m, po.Update) and m.old is None)
    assert upd_default.new == ("1", po.UNCHANGED, "2")
    upd_full = next(m for m in msgs if isinstance(m, po.Update) and m.old is not None)
    assert upd_full.old_kind == "O" and upd_full.old == ("1", big, "1")
    assert upd_full.new == ("1", po.UNCHANGED, "2")  # the new tuple still omits it
    dele = next(m for m in msgs if isinstance(m, po.Delete))
    assert dele.old_kind == "O" and dele.old == ("1", big, "2")
    rels = {m.oid: m for m in msgs if isinstance(m, po.Relation)}
    assert rels[upd_full.oid].replica_identity == "f"
    trunc = next(m for m in msgs if isinstance(m, po.Truncate))
    assert [rels[o].name for o in trunc.oids] == ["t2"] and not trunc.cascade
    msg = next(m for m in msgs if isinstance(m, po.LogicalMessage))
    assert (msg.transactional, msg.prefix, msg.content) == (True, "piestream", b"hello")


def test_type_message_for_user_types(pg: PgServer) -> None:
    msgs = _changes(
        pg,
        ["CREATE TYPE mood AS ENUM ('sad', 'ok')", "CREATE TABLE e1 (id int PRIMARY KEY, m mood)"],
        ["INSERT INTO e1 VALUES (1, 'ok')"],
    )
    ty = next(m for m in msgs if isinstance(m, po.TypeMsg))
    rel = next(m for m in msgs if isinstance(m, po.Relation))
    assert (ty.namespace, ty.name) == ("public", "mood") and rel.columns[1].type_oid == ty.oid
    assert not po.compatible(ty.oid, DataType(TypeKind.VARCHAR))  # refused at CREATE


def test_malformed_messages_are_protocol_errors() -> None:
    with pytest.raises(po.PgOutputError, match="unknown pgoutput message type"):
        po.decode(b"Z")
    with pytest.raises(po.PgOutputError, match="truncated"):
        po.decode(b"B\x00\x01")
    with pytest.raises(po.PgOutputError, match="empty"):
        po.decode(b"")


def test_text_values_to_arrow_per_column(pg: PgServer) -> None:
    """Every followed type: the server's own text output converts to the right Arrow values."""
    cols = (
        "i2 smallint, i4 int, i8 bigint, n numeric, r real, d double precision, t text, "
        "vc varchar(5), b bool, dt date, tm time, ts timestamp, tz timestamptz, iv interval, "
        "by bytea, j jsonb, u uuid, arr int[], tarr text[]"
    )
    msgs = _changes(
        pg,
        [f"CREATE TABLE ty (id int PRIMARY KEY, {cols})", "SET TIME ZONE 'UTC'"],
        [
            "INSERT INTO ty VALUES (1, -3, 2147483647, 9007199254740993, 12345678901234567890.125, "
            "1.5, 0.1, 'héllo', 'ab', true, '2024-02-29', '13:14:15.5', '2024-01-02 03:04:05.123456', "
            "'2024-01-02 03:04:05+02', '1 year 2 mons 3 days 04:05:06', '\\x00ff', '{\"a\": [1, 2]}', "
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,NULL,3}', '{\"x y\",z}')",
            "INSERT INTO ty (id) VALUES (2)",
        ],
    )
    rel = next(m for m in msgs if isinstance(m, po.Relation))
    rows = [m.new for m in msgs if isinstance(m, po.Insert)]
    buf = po.RowBuffer(len(rel.columns))
    for r in rows:
        buf.append([v for v in r if v is not po.UNCHANGED])  # type: ignore[misc]
    types = {c.name: c.type_oid for c in rel.columns}
    want_types = {
        "i2": DataType(TypeKind.SMALLINT), "i4": DataType(TypeKind.INT), "i8": DataType(TypeKind.BIGINT),
        "n": DataType(TypeKind.NUMERIC), "r": DataType(TypeKind.REAL), "d": DataType(TypeKind.DOUBLE),
        "t": DataType(TypeKind.VARCHAR), "vc": DataType(TypeKind.VARCHAR), "b": DataType(TypeKind.BOOLEAN),
        "dt": DataType(TypeKind.DATE), "tm": DataType(TypeKind.TIME), "ts": DataType(TypeKind.TIMESTAMP),
        "tz": DataType(TypeKind.TIMESTAMPTZ), "iv": DataType(TypeKind.INTERVAL),
        "by": DataType(TypeKind.BYTEA), "j": DataType(TypeKind.JSONB), "u": DataType(TypeKind.VARCHAR),
        "arr": list_of(DataType(TypeKind.INT)), "tarr": list_of(DataType(TypeKind.VARCHAR)),
    }  # fmt: skip
    got = {}
    for i, c in enumerate(rel.columns):
        if c.name == "id":
            continue
        t = want_types[c.name]
        assert po.compatible(types[c.name], t), c.name
        arr = po.to_arrow(buf.columns[i], t)
        assert arr[1].as_py() is None, c.name  # the NULL row
        got[c.name] = nm.from_arrow(arr)[0] if nm.is_numeric_array(arr) else arr[0].as_py()
    assert got["i2"] == -3 and got["i4"] == 2147483647 and got["i8"] == 9007199254740993
    assert got["n"] == Decimal("12345678901234567890.125")  # exact
    assert got["r"] == 1.5 and got["d"] == 0.1 and got["t"] == "héllo" and got["vc"] == "ab"
    assert got["b"] is True and got["dt"] == dt.date(2024, 2, 29) and got["tm"] == dt.time(13, 14, 15, 500000)
    assert got["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert got["tz"] == dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=dt.UTC)
    iv = po.to_arrow(buf.columns[14], want_types["iv"])
    assert iv.type == pa.month_day_nano_interval()
    mdn = iv[0].as_py()
    assert (mdn.months, mdn.days, mdn.nanoseconds) == (14, 3, (4 * 3600 + 5 * 60 + 6) * 10**9)
    assert got["by"] == b"\x00\xff" and got["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert got["j"] == '{"a": [1, 2]}'
    assert got["arr"] == [1, None, 3] and got["tarr"] == ["x y", "z"]
    assert not po.compatible(types["i4"], DataType(TypeKind.BIGINT))  # types must match exactly


def test_numeric_column_wise_equals_postgres_input_rules() -> None:
    """The column-wise NUMERIC path gives exactly what the per-value input function gives (the
    display scale too), and leaves what it cannot take (NaN, > 28 digits) to it."""
    from piestream.expr.functions.cast import from_text

    t = DataType(TypeKind.NUMERIC)
    texts = ["1.50", "-12", "0.001", None, "123456789012345678.000123", "-0.5", "7" * 28, "0"]
    fast = po._numeric_column(pa.array(texts, pa.string()))
    assert fast is not None
    want = nm.from_arrow(from_text(pa.array(texts, pa.string()), t))
    got = nm.from_arrow(fast)
    assert got == want and [str(v) for v in got] == [str(v) for v in want]  # scales too
    assert po._numeric_column(pa.array(["1", "NaN"])) is None
    assert po._numeric_column(pa.array(["1" * 29])) is None
    assert nm.from_arrow(po.to_arrow(["NaN", "2.0"], t)) == nm.from_arrow(
        from_text(pa.array(["NaN", "2.0"]), t)
    )
