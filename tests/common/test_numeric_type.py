"""The NUMERIC column's Arrow extension type (`common.numeric.NumericType`): Python values keep
their display scale everywhere `to_pylist` reaches, structural operations keep the type, and every
Arrow compute kernel that would compare or group the raw (unscaled, scale) pairs refuses it, so a
consumer that does not know the layout fails loudly instead of ordering 1.50 after 2."""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na


def col(*texts: str | None) -> pa.Array:
    return nm.to_arrow([None if t is None else nm.parse(t) for t in texts])


def test_to_pylist_keeps_the_display_scale_and_the_specials() -> None:
    a = col("1.5", "1.50", None, "NaN", "-Infinity", "0.000")
    assert isinstance(a.type, nm.NumericType)
    assert [None if v is None else str(v) for v in a.to_pylist()] == [
        "1.5",
        "1.50",
        None,
        "NaN",
        "-Infinity",
        "0.000",
    ]
    assert str(a[1].as_py()) == "1.50"
    assert a[2].as_py() is None
    assert [str(v) for v in a.slice(3, 2).to_pylist()] == ["NaN", "-Infinity"]


def test_to_pylist_inside_lists_structs_tables_and_chunks() -> None:
    a = col("1.50", "2", "0.125", None)
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 4]), a)
    assert [[None if v is None else str(v) for v in xs] for xs in lists.to_pylist()] == [
        ["1.50", "2"],
        ["0.125", None],
    ]
    rows = pa.StructArray.from_arrays([a], ["x"]).to_pylist()
    assert [None if r["x"] is None else str(r["x"]) for r in rows] == ["1.50", "2", "0.125", None]
    assert str(pa.table({"x": a}).to_pylist()[0]["x"]) == "1.50"
    assert [str(v) for v in pa.chunked_array([a.slice(0, 1), a.slice(2, 1)]).to_pylist()] == ["1.50", "0.125"]


def test_structural_operations_keep_the_type() -> None:
    a = col("1.50", "2", None, "NaN")
    for out in (
        a.take(pa.array([3, 0])),
        a.filter(pa.array([True, False, True, True])),
        pa.concat_arrays([a, a]),
        pc.drop_null(a),
        pa.nulls(2, nm.NUMERIC_VALUE_ARROW),
    ):
        assert out.type == nm.NUMERIC_VALUE_ARROW
    assert [str(v) for v in a.take(pa.array([3, 0])).to_pylist()] == ["NaN", "1.50"]


def test_ipc_round_trip_and_pickle_keep_the_type() -> None:
    a = col("1.50", None, "Infinity")
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, pa.schema([("x", a.type)])) as w:
        w.write_batch(pa.record_batch([a], ["x"]))
    back = pa.ipc.open_stream(sink.getvalue()).read_all().column(0)
    assert back.type == nm.NUMERIC_VALUE_ARROW
    assert [None if v is None else str(v) for v in back.to_pylist()] == ["1.50", None, "Infinity"]
    assert pickle.loads(pickle.dumps(nm.NUMERIC_VALUE_ARROW)) == nm.NUMERIC_VALUE_ARROW


_UNAWARE: dict[str, Callable[[pa.Array], object]] = {
    "equal": lambda a: pc.equal(a, a),
    "sort_indices": lambda a: pc.sort_indices(a),
    "table sort_by": lambda a: pa.table({"k": a}).sort_by("k"),
    "group_by key": lambda a: pa.table({"k": a, "v": [1] * len(a)}).group_by("k").aggregate([("v", "sum")]),
    "join key": lambda a: pa.table({"k": a}).join(pa.table({"k": a}), "k"),
    "unique": lambda a: pc.unique(a),
    "is_in": lambda a: pc.is_in(a, value_set=a),
    "min_max": lambda a: pc.min_max(a),
    "cast to text": lambda a: a.cast(pa.string()),
    "if_else": lambda a: pc.if_else(pa.array([True] * len(a)), a, a),
    "build from Decimals": lambda a: pa.array([Decimal("1.5")], nm.NUMERIC_VALUE_ARROW),
}


@pytest.mark.parametrize("name", sorted(_UNAWARE))
def test_layout_unaware_arrow_kernels_refuse_the_column(name: str) -> None:
    """Over a bare struct, `Table.sort_by` would order (150, 2) = 1.50 after (2, 0) = 2; over the
    extension type it and every kernel below raise instead."""
    a = col("1.50", "2", "1.5")
    with pytest.raises((pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid)):
        _UNAWARE[name](a)


def test_the_kernels_take_the_storage_or_the_extension_and_nothing_else() -> None:
    a = col("1.50", None, "-Infinity")
    for form in (a, a.storage, pa.chunked_array([a])):
        num = na.unpack(form)
        assert num.scale.tolist() == [2, 0, nm.NEG_INF_SCALE]
    assert na.pack(na.unpack(a)).type == nm.NUMERIC_VALUE_ARROW
    assert [None if v is None else str(v) for v in nm.from_arrow(a.storage)] == ["1.50", None, "-Infinity"]
    with pytest.raises(TypeError, match="not a NUMERIC column"):
        na.unpack(pa.array([Decimal("1.5")], pa.decimal128(38, 10)))
