"""The shared parser layer: decoders give the same rows on the batch fast path and the per-record
row path, envelopes turn messages into rows and ops, FORMAT ... ENCODE is checked per connector."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from piestream.common.chunk import Op
from piestream.common.errors import FeatureNotSupported
from piestream.common.types import BIGINT, BYTEA, DOUBLE, INT, TIMESTAMP, VARCHAR
from piestream.connectors.formats.decode import (
    AvroDecoder,
    BytesDecoder,
    CsvDecoder,
    JsonDecoder,
    decode_rows,
)
from piestream.connectors.formats.envelope import DebeziumEnvelope, PlainEnvelope, UpsertEnvelope
from piestream.connectors.source import RawMessages, source_parser
from piestream.frontend.parser import parse_one
from piestream.frontend.source_spec import statement_source_spec
from piestream.plan.source import SourceSpec

COLS = (("id", BIGINT), ("name", VARCHAR), ("price", DOUBLE))


def _rows(d) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r.values()) for r in d.table.to_pylist()]


def test_json_fast_path_equals_row_path() -> None:
    msgs = [json.dumps({"id": i, "name": f"n{i}", "price": i / 2, "extra": [i]}).encode() for i in range(50)]
    dec = JsonDecoder(COLS)
    fast = dec.decode(msgs)
    assert fast.rows.tolist() == list(range(50)) and not fast.errors
    slow = decode_rows(len(msgs), lambda i, notes: dec.row(msgs[i], notes), COLS)
    assert _rows(fast) == _rows(slow) == [(i, f"n{i}", i / 2) for i in range(50)]


def test_json_bad_records_are_named_and_fields_nulled_when_lenient() -> None:
    msgs = [b'{"id": 1, "name": "a"}', b"not json", b'{"id": "x", "name": "b"}', b'{"ID": 4}', None]
    strict = JsonDecoder(COLS).decode(msgs)
    assert strict.rows.tolist() == [0, 3]
    assert _rows(strict) == [(1, "a", None), (4, None, None)]  # keys match case-insensitively
    assert [i for i, _ in strict.errors] == [1, 2, 4]
    lenient = JsonDecoder(COLS, lenient=True).decode(msgs)
    assert lenient.rows.tolist() == [0, 2, 3]  # a bad field is NULL in its row ...
    assert _rows(lenient)[1] == (None, "b", None)
    assert [i for i, _ in lenient.errors] == [1, 2, 4]  # ... and reported
    assert 'column "id"' in dict(lenient.errors)[2]


def test_json_timestamps_cast_or_take_postgres_rules() -> None:
    cols = (("t", TIMESTAMP),)
    d = JsonDecoder(cols).decode([b'{"t": "2024-01-02 03:04:05"}', b'{"t": "2024-01-02T03:04:05.5"}'])
    assert [str(r["t"]) for r in d.table.to_pylist()] == ["2024-01-02 03:04:05", "2024-01-02 03:04:05.500000"]
    d = JsonDecoder(cols).decode([b'{"t": "2024-01-02 03:04:05+02"}'])  # a zone: PostgreSQL's input
    assert str(d.table.to_pylist()[0]["t"]) == "2024-01-02 03:04:05"


def test_csv_fast_path_and_quotes() -> None:
    cols = (("id", INT), ("name", VARCHAR))
    d = CsvDecoder(cols).decode([b"1,a", b"2,", b"3,c"])
    assert _rows(d) == [(1, "a"), (2, ""), (3, "c")]
    d = CsvDecoder(cols).decode([b'1,"a,b"', b"x,y", b"1"])
    assert _rows(d) == [(1, "a,b")] and [i for i, _ in d.errors] == [1, 2]
    d = CsvDecoder(cols, header=("name", "id")).decode([b"a,1"])
    assert _rows(d) == [(1, "a")]


def test_bytes_and_avro() -> None:
    d = BytesDecoder((("b", BYTEA),)).decode([b"\x00\x01", None])
    assert _rows(d) == [(b"\x00\x01",), (None,)]
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "r",
            "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}],
        }
    )
    bodies = []
    for i in range(3):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, {"id": i, "name": None if i == 1 else f"n{i}"})
        bodies.append(b"\x00" + (7).to_bytes(4, "big") + buf.getvalue())
    seen = []

    def schema_of(sid):  # type: ignore[no-untyped-def]
        seen.append(sid)
        return schema

    d = AvroDecoder((("id", BIGINT), ("name", VARCHAR)), schema_of, confluent=True).decode([*bodies, b"\x01"])
    assert _rows(d) == [(0, "n0"), (1, None), (2, "n2")] and seen == [7]
    assert [i for i, _ in d.errors] == [3]


def test_envelopes() -> None:
    dec = JsonDecoder(COLS)
    p = PlainEnvelope(dec).parse([None] * 3, [b'{"id": 1}', None, b'{"id": 3}'])
    assert p.ops is None and p.rows.tolist() == [0, 2]
    u = UpsertEnvelope(dec).parse(
        [b'{"id": 1}', b'{"id": 1}', b'{"id": 2}', None],
        [b'{"id": 1, "name": "a"}', None, b'{"id": 2, "name": "b"}', None],
    )
    assert u.ops.tolist() == [Op.INSERT, Op.DELETE, Op.INSERT]
    assert [r["id"] for r in u.table.to_pylist()] == [1, 1, 2] and u.rows.tolist() == [0, 1, 2]
    assert [i for i, _ in u.errors] == [3]  # a tombstone without a key


@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize("slow", [False, True])
def test_debezium(wrap: bool, slow: bool) -> None:
    events = [
        {"op": "c", "before": None, "after": {"id": 1, "name": "a", "price": 1.0}},
        {
            "op": "u",
            "before": {"id": 1, "name": "a", "price": 1.0},
            "after": {"id": 1, "name": "b", "price": 2.0},
        },
        {"op": "d", "before": {"id": 1, "name": "b", "price": 2.0}, "after": None},
        {"op": "r", "before": None, "after": {"id": 2, "name": "c", "price": 3.0}},
        {"op": "u", "before": None, "after": {"id": 2, "name": "d", "price": 3.0}},
    ]
    msgs: list[bytes | None] = [json.dumps({"payload": e} if wrap else e).encode() for e in events]
    msgs.insert(3, None)  # a tombstone after the delete
    if slow:
        msgs.append(b"{broken")
    p = DebeziumEnvelope(COLS).parse([None] * len(msgs), msgs)
    assert p.ops.tolist() == [Op.INSERT, Op.UPDATE_DELETE, Op.UPDATE_INSERT, Op.DELETE, Op.INSERT, Op.INSERT]
    assert [r["name"] for r in p.table.to_pylist()] == ["a", "a", "b", "b", "c", "d"]
    assert p.rows.tolist() == [0, 1, 1, 2, 4, 5]
    assert [i for i, _ in p.errors] == ([6] if slow else [])


def test_raw_messages_fill_include_columns() -> None:
    spec = SourceSpec(
        "s",
        "kafka",
        (("id", BIGINT), ("p", VARCHAR), ("o", VARCHAR), ("h", BYTEA)),
        format="plain",
        encode="json",
        include=(("partition", "p", ""), ("offset", "o", ""), ("header", "h", "x")),
    )
    import pyarrow as pa

    raw = RawMessages(
        values=[b'{"id": 1}', b"oops", b'{"id": 3}'],
        keys=[None] * 3,
        positions=[10, 11, 12],
        meta={"partition": pa.array(["0"] * 3), "offset": pa.array(["10", "11", "12"])},
        headers={"x": pa.array([b"a", None, b"c"], pa.binary())},
    )
    batch, ops, bad = raw.parse(source_parser(spec, lenient=True), "0", container="partition")
    assert batch is not None and ops is None
    assert batch.to_pylist() == [
        {"id": 1, "p": "0", "o": "10", "h": b"a"},
        {"id": 3, "p": "0", "o": "12", "h": b"c"},
    ]
    assert [b.describe().split(":")[0] for b in bad] == ['malformed record in partition "0", offset 11']


def test_format_pairs_are_checked_per_connector() -> None:
    def spec(sql: str) -> SourceSpec:
        st = parse_one(sql)
        return statement_source_spec(st.name, st.columns, st.with_options, st.format_encode, st.includes)

    s = spec("CREATE SOURCE s (a int) WITH (connector = 'file', path = '/x') FORMAT PLAIN ENCODE JSON")
    assert s.format == "plain" and s.append_only
    with pytest.raises(FeatureNotSupported, match="FORMAT UPSERT"):
        spec("CREATE SOURCE s (a int) WITH (connector = 'file', path = '/x') FORMAT UPSERT ENCODE JSON")
    with pytest.raises(FeatureNotSupported, match="INCLUDE"):
        spec(
            "CREATE SOURCE s (a int) INCLUDE offset WITH (connector = 'file', path = '/x') "
            "FORMAT PLAIN ENCODE JSON"
        )


def test_json_objects_equal_json_dumps_of_each_row() -> None:
    import datetime as dt
    import decimal

    import pyarrow as pa

    from piestream.connectors.formats.encode import json_objects, row_json

    t = pa.table(
        {
            "i": pa.array([1, None, -7], pa.int64()),
            "f": pa.array([1.5, 0.1, None], pa.float64()),
            "b": pa.array([True, False, None]),
            "s": pa.array(['a"b\\c', "line\nnext\ttab\r", "é \x01 ctl"]),
            "d": pa.array([dt.date(2024, 1, 2), None, dt.date(1999, 12, 31)]),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, 0, 0, 0), dt.datetime(2024, 1, 1, 0, 0, 1, 120000), None]
            ),
            "tz": pa.array([dt.datetime(2024, 1, 1, 3), None, None], pa.timestamp("us", tz="UTC")),
            "n": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-3")], pa.decimal128(10, 2)),
            "y": pa.array([b"\x00\xff", None, b""], pa.binary()),
            "l": pa.array([[1, 2], None, []], pa.list_(pa.int32())),
        }
    )
    got = [json.loads(v) for v in json_objects(t, t.column_names).to_pylist()]
    want = [json.loads(row_json(r)) for r in t.to_pylist()]
    assert got == want
    sub = json_objects(t, ["s", "i"]).to_pylist()
    assert [json.loads(v) for v in sub] == [{"s": r["s"], "i": r["i"]} for r in t.to_pylist()]


def test_json_objects_fast_paths_equal_json_dumps() -> None:
    """The skipped passes: strings with nothing to escape (also a slice whose neighbours outside
    it need escapes), timestamps of whole seconds (before 1970 too, UTC and not)."""
    import datetime as dt

    import pyarrow as pa

    from piestream.connectors.formats.encode import json_objects, row_json

    t = pa.table(
        {
            "s": pa.array(['x"y', "plain", "/a/0", None, "tab\t"]),
            "ts": pa.array(
                [dt.datetime(1969, 12, 31, 23, 59, 59), dt.datetime(2024, 1, 1), None]
                + [dt.datetime(2024, 5, 6, 7, 8, 9)] * 2,
                pa.timestamp("us"),
            ),
            "tz": pa.array([dt.datetime(2024, 1, 1, 3)] * 4 + [None], pa.timestamp("us", tz="UTC")),
        }
    )
    for part in (t, t.slice(1, 3), t.slice(1, 1)):
        got = [json.loads(v) for v in json_objects(part, part.column_names).to_pylist()]
        assert got == [json.loads(row_json(r)) for r in part.to_pylist()]
    # the texts themselves, not only their JSON values
    assert json_objects(t.slice(1, 1), ["s", "ts", "tz"]).to_pylist() == [
        '{"s":"plain","ts":"2024-01-01 00:00:00","tz":"2024-01-01 03:00:00+00:00"}'
    ]


def test_json_objects_inline_pieces_equal_json_dumps() -> None:
    """Columns without nulls are joined as pieces of the one document join (quotes, dates and
    times of day gathered from tables); with nulls, as literals first. Both equal `row_json`
    over every type, whole-second timestamps over a narrow range (the date table) and a wide
    one (each date cast), before 1970 and with UTC."""
    import datetime as dt
    import decimal

    import pyarrow as pa

    from piestream.connectors.formats.encode import json_literals, json_objects, row_json

    ts = dt.datetime
    full = {
        "i": pa.array([1, -2, 3], pa.int32()),
        "f": pa.array([1.5, -0.25, 1e300]),
        "b": pa.array([True, False, True]),
        "s": pa.array(["plain", 'q"uote', "é"]),
        "d": pa.array([dt.date(2024, 1, 2), dt.date(1969, 12, 31), dt.date(1, 1, 1)]),
        "narrow": pa.array(
            [ts(2024, 1, 1, 23, 59, 59), ts(2024, 1, 2), ts(2024, 1, 1, 0, 0, 1)], pa.timestamp("us")
        ),
        "wide": pa.array(
            [ts(1900, 3, 1, 1, 2, 3), ts(2099, 12, 31), ts(1969, 12, 31, 23, 59, 59)], pa.timestamp("us")
        ),
        "frac": pa.array([ts(2024, 1, 1, 0, 0, 0, 5), ts(2024, 1, 1), ts(1960, 1, 1)], pa.timestamp("us")),
        "tz": pa.array([ts(2024, 1, 1, 3), ts(1950, 6, 1), ts(2024, 1, 1, 3)], pa.timestamp("us", tz="UTC")),
        "n": pa.array(
            [decimal.Decimal("1.50"), decimal.Decimal("-3.00"), decimal.Decimal("0.01")], pa.decimal128(10, 2)
        ),
        "y": pa.array([b"\x00\xff", b"", b"a"], pa.binary()),
    }
    t = pa.table(full)
    nulled = pa.table({k: pa.array([*v.to_pylist()[:2], None], v.type) for k, v in full.items()})
    for table in (t, nulled, pa.concat_tables([t] * 30), t.slice(1, 2)):
        got = [json.loads(v) for v in json_objects(table, table.column_names).to_pylist()]
        assert got == [json.loads(row_json(r)) for r in table.to_pylist()]
        for name in table.column_names:  # a column's literals alone, the same texts
            lits = json_literals(table.column(name).combine_chunks()).to_pylist()
            assert [json.loads(x) for x in lits] == [json.loads(row_json(r))[name] for r in table.to_pylist()]
    assert json_objects(t.slice(0, 1), ["narrow", "wide", "tz", "s", "d"]).to_pylist() == [
        '{"narrow":"2024-01-01 23:59:59","wide":"1900-03-01 01:02:03","tz":"2024-01-01 03:00:00+00:00",'
        '"s":"plain","d":"2024-01-02"}'
    ]
    assert json_objects(nulled.slice(2, 1), ["narrow", "s"]).to_pylist() == ['{"narrow":null,"s":null}']
