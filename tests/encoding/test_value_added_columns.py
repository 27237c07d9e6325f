"""Values stored before ALTER TABLE ADD COLUMN hold fewer datums: both codecs read the added
columns' missing values for them (no rewrite), and still refuse bytes that are not a row."""

from __future__ import annotations

import pyarrow as pa
import pytest

from piestream.common.errors import DataCorruption
from piestream.common.order import ASC
from piestream.common.types import INT, VARCHAR
from piestream.encoding import value
from piestream.encoding.ragged import Ragged
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.row_serde import RowSerde

TYPES = [INT, VARCHAR, INT, VARCHAR]


def _values(rows: list[tuple[object, ...]]) -> pa.Array:
    return pa.array([value.encode_row(list(r), TYPES[: len(r)]) for r in rows], pa.binary())


def test_short_values_read_the_missing_datums_in_both_codecs() -> None:
    rows = [(1, "a"), (2, None, 5), (3, "c", None, "z"), (4, "d")]
    vals = _values(rows)
    missing = (7, "dflt")
    cols = value.decode_values(vals, TYPES, required=2, missing=missing)
    want = [(1, "a", 7, "dflt"), (2, None, 5, "dflt"), (3, "c", None, "z"), (4, "d", 7, "dflt")]
    assert list(zip(*(c.to_pylist() for c in cols), strict=True)) == want
    scalar = [value.decode_row(v.as_py(), TYPES, required=2, missing=missing) for v in vals]
    assert scalar == want
    # every value old: the whole column is the missing datum
    old = value.decode_values(_values([(1, "a"), (2, "b")]), TYPES, required=2, missing=missing)
    assert old[2].to_pylist() == [7, 7] and old[3].to_pylist() == ["dflt", "dflt"]


def test_without_required_a_short_value_is_corruption() -> None:
    with pytest.raises(DataCorruption):
        value.decode_values(_values([(1, "a")]), TYPES)
    with pytest.raises(DataCorruption):
        value.decode_row(_values([(1, "a")])[0].as_py(), TYPES)
    # a value shorter than the required columns is corruption too
    with pytest.raises(DataCorruption):
        value.decode_values(_values([(1,)]), TYPES, required=2)


def test_table_desc_keeps_the_layout_across_its_json() -> None:
    desc = TableDesc(
        1, (ColumnDesc("k", INT), ColumnDesc("v", VARCHAR)), pk=(0,), pk_orders=(ASC,), dist_key=(0,)
    )
    assert "required" not in desc.to_json()  # a table never altered is stored as before
    wider = desc.with_added_column(ColumnDesc("n", INT, missing=7)).with_added_column(
        ColumnDesc("s", VARCHAR)
    )
    assert wider.value_required == 2 and wider.value_missing == (7, None)
    back = TableDesc.from_json(wider.to_json())
    assert back == wider and back.columns[2].missing == 7
    serde, old = RowSerde(back), RowSerde(desc)
    keys = [old.table_key_of_row((1, "a")), serde.table_key_of_row((2, "b", 3, "x"))]
    vals = [old.value_of_row((1, "a")), serde.value_of_row((2, "b", 3, "x"))]
    cols = serde.decode(
        Ragged.from_arrow(pa.array(keys, pa.binary())), Ragged.from_arrow(pa.array(vals, pa.binary()))
    )
    assert [c.to_pylist() for c in cols] == [[1, 2], ["a", "b"], [7, 3], [None, "x"]]
    assert serde.decode_row(keys[0], vals[0]) == (1, "a", 7, None)
