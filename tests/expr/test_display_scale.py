"""NUMERIC display scales the binder works out (expr/display_scale.py) and their durable text.

Expected scales and texts are PostgreSQL 15's (numeric.c: add/sub the larger scale, mul the sum,
round/trunc the requested one, an integer 0, a literal its written digits)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from piestream.common.text import format_datum
from piestream.common.types import (
    BIGINT,
    INT,
    NUMERIC,
    NUMERIC_SCALE,
    VARCHAR,
    DataType,
    TypeKind,
    list_of,
    numeric_of,
    parse_type,
    struct_of,
    type_text,
    with_dscale,
)
from piestream.expr.bind import bind_call, cast, common_type, literal
from piestream.expr.expr import InputRef


def col(i: int, t: DataType) -> InputRef:
    return InputRef(i, t)


@pytest.mark.parametrize(
    ("name", "args", "dscale"),
    [
        ("*", (col(0, BIGINT), literal(Decimal("0.908"))), 3),  # Nexmark q1: 1761.520
        ("*", (literal(Decimal("1.10")), literal(Decimal("0.908"))), 5),
        ("+", (literal(Decimal("1.5")), literal(Decimal("2.25"))), 2),
        ("-", (col(0, INT), literal(Decimal("0.50"))), 2),
        ("%", (literal(10), literal(Decimal("3.00"))), 2),
        ("-", (literal(Decimal("1.50")),), 2),
        ("abs", (literal(Decimal("-1.500")),), 3),
        ("round", (col(0, NUMERIC), literal(4)), 4),  # any input: round sets the scale
        ("round", (col(0, NUMERIC), literal(-2)), 0),
        ("trunc", (literal(Decimal("1.999")), literal(1)), 1),
        ("round", (literal(Decimal("2.5")),), 0),
        ("ceil", (literal(Decimal("2.5")),), 0),
        ("floor", (col(0, NUMERIC),), 0),
        ("*", (col(0, numeric_of(10, 2)), literal(2)), 2),  # a typmod's scale is its values'
        ("*", (literal(Decimal("0.000001")), literal(Decimal("0.000001"))), NUMERIC_SCALE),  # capped
        ("*", (col(0, NUMERIC), literal(Decimal("0.908"))), None),  # a plain column: per value
        ("/", (literal(2703), literal(Decimal("7.0"))), None),  # select_div_scale: per value
        ("round", (col(0, NUMERIC), col(1, INT)), None),
        ("sqrt", (literal(Decimal("2.0")),), None),
    ],
)
def test_call_display_scales(name: str, args: tuple, dscale: int | None) -> None:
    e = bind_call(name, args)
    assert e.return_type.kind is TypeKind.NUMERIC
    assert e.return_type.dscale == dscale
    assert e.return_type.pg_typmod == -1  # PostgreSQL's typmod of an expression


def test_literals_and_casts() -> None:
    assert literal(Decimal("1.50")).return_type.dscale == 2
    assert literal(Decimal("1e3")).return_type.dscale == 0
    assert literal(10**20).return_type.dscale == 0  # an integer too big for bigint is numeric
    assert cast(col(0, BIGINT), NUMERIC).return_type.dscale == 0
    assert cast(col(0, VARCHAR), NUMERIC).return_type.dscale is None  # '1.50' or '2': per value
    assert cast(literal("1.50"), NUMERIC).return_type.dscale == 2  # a quoted literal's digits
    assert cast(literal("1.5e-3"), NUMERIC).return_type.dscale == 4
    assert cast(col(0, numeric_of(6, 2)), NUMERIC).return_type.display_scale == 2


def test_common_type_keeps_a_scale_only_when_all_inputs_have_it() -> None:
    d2, d3 = with_dscale(NUMERIC, 2), with_dscale(NUMERIC, 3)
    assert common_type([d2, d2]).dscale == 2
    assert common_type([d2, d3]).dscale is None
    assert common_type([d2, NUMERIC]).dscale is None
    assert common_type([with_dscale(NUMERIC, 0), INT]).dscale == 0
    assert common_type([d2, INT]).dscale is None
    assert common_type([d2, None]).dscale is None  # an untyped '1.5' keeps its own digits


@pytest.mark.parametrize(
    ("value", "t", "text"),
    [
        (Decimal("1761.52"), with_dscale(NUMERIC, 3), "1761.520"),
        (Decimal("41912.964"), with_dscale(NUMERIC, 4), "41912.9640"),
        (Decimal("0"), with_dscale(NUMERIC, 2), "0.00"),
        (Decimal("-0"), with_dscale(NUMERIC, 1), "0.0"),
        (Decimal("3"), with_dscale(NUMERIC, 0), "3"),
        (Decimal("1.2345"), with_dscale(NUMERIC, 2), "1.2345"),  # digits are never hidden
        (Decimal("1761.520"), NUMERIC, "1761.520"),  # no type scale: the value's own
    ],
)
def test_text_output(value: Decimal, t: DataType, text: str) -> None:
    assert format_datum(value, t) == text


def test_dscale_is_not_identity_nor_shown_in_messages() -> None:
    t = with_dscale(NUMERIC, 3)
    assert t == NUMERIC and hash(t) == hash(NUMERIC) and str(t) == "numeric"
    assert with_dscale(INT, 3) is INT  # only plain NUMERIC carries one
    assert with_dscale(numeric_of(6, 2), 3).display_scale == 2


def _types() -> st.SearchStrategy[DataType]:
    scalar = st.one_of(
        st.sampled_from([INT, BIGINT, VARCHAR, NUMERIC, numeric_of(6, 2)]),
        st.integers(0, NUMERIC_SCALE).map(lambda d: with_dscale(NUMERIC, d)),
    )
    return st.recursive(
        scalar,
        lambda inner: st.one_of(
            inner.map(list_of),
            st.lists(inner, min_size=1, max_size=3).map(
                lambda ts: struct_of(*[(f"f{i}", t) for i, t in enumerate(ts)])
            ),
        ),
        max_leaves=6,
    )


def _scales(t: DataType) -> list[object]:
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return ["[", *_scales(t.elem)]
    if t.kind is TypeKind.STRUCT:
        return ["<", *[s for f in t.fields for s in _scales(f.data_type)], ">"]
    return [t.typmod, t.dscale]


@given(_types())
def test_type_text_round_trips(t: DataType) -> None:
    """Catalog entries and stored plans spell types with `type_text`: reading it back gives the
    same type with the same typmods and display scales everywhere inside it."""
    back = parse_type(type_text(t))
    assert back == t and str(back) == str(t) and _scales(back) == _scales(t)


def test_text_written_before_display_scales_reads_as_none() -> None:
    assert parse_type("numeric").dscale is None
    assert parse_type("struct<a numeric, b numeric(6,2)[]>") == struct_of(
        ("a", NUMERIC), ("b", list_of(NUMERIC))
    )
    assert parse_type("numeric dscale 3").dscale == 3


def test_catalog_columns_and_plan_types_keep_the_display_scale() -> None:
    from piestream.frontend.catalog import ColumnCatalog
    from piestream.plan.serde import from_json, to_json

    t = struct_of(("p", with_dscale(NUMERIC, 3)), ("q", list_of(with_dscale(NUMERIC, 4))))
    c = ColumnCatalog.from_json(ColumnCatalog("c", t).to_json())
    assert _scales(c.data_type) == _scales(t)
    assert _scales(from_json(to_json(t))) == _scales(t)
    old = {"name": "c", "type": "numeric", "hidden": False}  # a format-2 catalog column
    assert ColumnCatalog.from_json(old).data_type.dscale is None
