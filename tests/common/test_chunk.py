"""DataChunk / StreamChunk operations and the pretty form, both ways."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.errors import InvalidInput, NumericOutOfRange
from piestream.common.interval import Interval
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INT,
    INTERVAL,
    NUMERIC,
    TIMESTAMP,
    VARCHAR,
    list_of,
    struct_of,
)

PRETTY = """
 I T
 + 1 foo
 - 2 .
 U- 3 bar
 U+ 3 "baz qux"
 + 4 x D
"""


def test_from_pretty_parses_ops_nulls_quotes_and_invisible_rows() -> None:
    c = StreamChunk.from_pretty(PRETTY)
    assert c.capacity == 5 and c.cardinality == 4
    assert c.to_records() == [
        (Op.INSERT, (1, "foo")),
        (Op.DELETE, (2, None)),
        (Op.UPDATE_DELETE, (3, "bar")),
        (Op.UPDATE_INSERT, (3, "baz qux")),
    ]
    assert c.columns[0].type == pa.int64() and c.columns[1].type == pa.string()


def test_pretty_round_trip_keeps_invisible_rows() -> None:
    c = StreamChunk.from_pretty(PRETTY)
    again = StreamChunk.from_pretty(c.to_pretty())
    assert again == c
    assert np.array_equal(again.visibility, c.visibility)  # type: ignore[arg-type]
    assert "D" in c.to_pretty().splitlines()[-1]


def test_pretty_with_rich_types_round_trips() -> None:
    types = [NUMERIC, TIMESTAMP, INTERVAL, list_of(INT), struct_of(("a", INT), ("b", VARCHAR)), BOOLEAN]
    rows = [
        (
            Op.INSERT,
            (
                Decimal("1.5"),
                dt.datetime(2021, 4, 1, 12, 0, 1),
                Interval(1, 2, 3_000_000),
                [1, None],
                {"a": 1, "b": "x y"},
                True,
            ),
        ),
        (Op.DELETE, (None, None, None, None, None, None)),
    ]
    c = StreamChunk.from_rows(rows, types)
    assert StreamChunk.from_pretty(c.to_pretty(types), types) == c
    assert StreamChunk.from_pretty(c.to_pretty()).to_records(types) == c.to_records(types)


def test_pretty_rejects_bad_lines() -> None:
    with pytest.raises(InvalidInput):
        StreamChunk.from_pretty(" I I\n + 1")
    with pytest.raises(InvalidInput):
        StreamChunk.from_pretty(" I\n * 1")
    with pytest.raises(InvalidInput):
        StreamChunk.from_pretty(" I\n + notanumber")


def test_compact_project_split_concat() -> None:
    c = StreamChunk.from_pretty(PRETTY)
    assert c.compact().capacity == 4 and c.compact().visibility is None
    assert c.project([1]).to_records()[0] == (Op.INSERT, ("foo",))
    parts = c.split(2)
    # the update pair is never separated by a split
    assert [p.cardinality for p in parts] == [2, 2]
    assert StreamChunk.concat(parts) == c
    d = DataChunk.from_rows([(1, "a"), (2, "b"), (3, "c")], [BIGINT, VARCHAR])
    assert DataChunk.concat(d.split(2)) == d
    assert d.with_visibility(np.array([True, False, True])).to_rows() == [(1, "a"), (3, "c")]


def test_build_from_arrow_and_validate_types() -> None:
    batch = pa.record_batch([pa.array([1, 2]), pa.array([0.5, None])], names=["a", "b"])
    d = DataChunk.from_arrow(batch)
    assert d.to_rows([BIGINT, DOUBLE]) == [(1, 0.5), (2, None)]
    with pytest.raises(NumericOutOfRange, match="integer"):
        DataChunk.from_rows([(2**40,)], [INT])
    with pytest.raises(InvalidInput):
        DataChunk.from_rows([("x",)], [BIGINT])


def test_split_update_pair_at_boundary() -> None:
    c = StreamChunk.from_pretty(" I\n + 1\n U- 2\n U+ 2\n + 3")
    parts = c.split(2)
    assert [p.cardinality for p in parts] == [1, 2, 1]
    assert all(p.ops[-1] != Op.UPDATE_DELETE for p in parts)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(Op)),
            st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
            st.one_of(st.none(), st.text(max_size=8), st.sampled_from([".", "D", '"', "a b", "\\x"])),
        ),
        max_size=20,
    )
)
def test_pretty_round_trip_property(rows) -> None:  # type: ignore[no-untyped-def]
    c = StreamChunk.from_rows([(op, (a, b)) for op, a, b in rows], [BIGINT, VARCHAR])
    assert StreamChunk.from_pretty(c.to_pretty()) == c
