"""NUMERIC's binary wire form (numeric_send / numeric_recv), checked against psycopg's own binary
dumper and loader (the client's code, no server needed): display scales kept per value, the
special values' sign codes 0xC000 / 0xD000 / 0xF000, and stored values still shown normalized
with a numeric(p, s)'s scale."""

from __future__ import annotations

from decimal import Decimal

import pytest
from psycopg.types.numeric import DecimalBinaryDumper, NumericBinaryLoader

from piestream.common.errors import InvalidInput
from piestream.server.pgwire.codec import _dec_numeric, _enc_numeric, numeric_recv, numeric_send_value

VALUES = [
    "1.50",
    "1.5",
    "0.00",
    "0",
    "-2.000",
    "123456789012345678901234.5678",
    "0.0000000000000000000000000001",
    "-99999999999999999999999999999999999999",
    "10000",
    "0.0001",
    "NaN",
    "Infinity",
    "-Infinity",
]


@pytest.mark.parametrize("text", VALUES)
def test_send_is_what_psycopg_reads_and_dumps(text: str) -> None:
    v = Decimal(text)
    raw = numeric_send_value(v)
    back = NumericBinaryLoader(1700).load(raw)
    assert str(back) == str(v)
    assert raw == bytes(DecimalBinaryDumper(Decimal).dump(v))
    assert str(numeric_recv(raw)) == str(v)


def test_special_sign_codes() -> None:
    assert numeric_send_value(Decimal("NaN"))[4:6] == b"\xc0\x00"
    assert numeric_send_value(Decimal("Infinity"))[4:6] == b"\xd0\x00"
    assert numeric_send_value(Decimal("-Infinity"))[4:6] == b"\xf0\x00"


def test_values_are_sent_with_their_scale_and_a_typmod_pads_older_ones() -> None:
    """Each value carries its display scale (numeric_send's dscale); a numeric(p, s) column's
    scale pads a value stored before per-value scales (normalized), never hides digits."""
    loader = NumericBinaryLoader(1700)
    assert str(loader.load(_enc_numeric(Decimal("2.5"), 2))) == "2.50"
    assert str(loader.load(_enc_numeric(Decimal("2.5000000000")))) == "2.5000000000"
    assert str(loader.load(_enc_numeric(Decimal("2.5000000000"), 2))) == "2.5000000000"
    assert str(loader.load(_enc_numeric(Decimal("-0E-10")))) == "0E-10"  # no negative zero, scale kept


def test_parameters_take_the_special_values_and_refuse_bad_bytes() -> None:
    for name in ("NaN", "Infinity", "-Infinity"):  # numeric_send's sign codes 0xC000, 0xD000, 0xF000
        assert str(_dec_numeric(numeric_send_value(Decimal(name)))) == name
    assert str(_dec_numeric(numeric_send_value(Decimal("1.50")))) == "1.50"
    for raw in (
        b"\x00\x01",
        b"\x00\x01\x00\x00\x00\x00\x00\x00",
        b"\x00\x01\x00\x00\x00\x00\x00\x00\x27\x10",
    ):
        with pytest.raises(InvalidInput):
            numeric_recv(raw)
